"""Scenario ``spec.initialState``: a cluster's Workloads at one instant as the simulation's time 0.

The cluster is one node of 8 GPUs behind one ClusterQueue of 8 GPUs, so every start and end
below can be computed by hand. Times are seconds from the state's instant ``AT`` (time 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.sim.scenario import ScenarioError, load_workloads, plan_scenario, prepare

AT = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
runner = CliRunner()

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: other}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: box}
spec: {machineType: box, count: 1, cpu: "64", memory: 512Gi, gpu: {model: A100-80GB, count: 8}}
"""
HEADER = "name,namespace,queue,submit_s,duration_s,priority,pods,gpus,cpu,memory,gpu_model\n"


def ts(offset_s: float) -> str:
    """RFC 3339 time ``offset_s`` seconds from ``AT``."""
    return (AT + timedelta(seconds=offset_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(
    name: str,
    gpus: int = 8,
    *,
    created: float = -1000,
    reserved: float | None = None,
    ready: float | None = None,
    expected: str | None = None,
    max_s: int | None = None,
    queue: str = "q",
    cluster_queue: str = "team-a",
    flavor: str = "gpu",
) -> dict[str, Any]:
    """A Kueue Workload as ``kubectl get workloads -o yaml`` prints it: admitted when ``reserved``
    is given (its QuotaReserved time), running since ``ready`` (PodsReady) when given."""
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "creationTimestamp": ts(created)}
    if expected is not None:
        meta["annotations"] = {"gpuq.dev/expected-duration": expected}
    pod = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}],
    }
    if max_s is not None:
        spec["maximumExecutionTimeSeconds"] = max_s
    status: dict[str, Any] = {"conditions": []}
    if reserved is not None:
        status["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"nvidia.com/gpu": flavor},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                }
            ],
        }
        for kind in ("QuotaReserved", "Admitted"):
            status["conditions"].append(
                {"type": kind, "status": "True", "reason": kind, "lastTransitionTime": ts(reserved)}
            )
    if ready is not None:
        status["conditions"].append(
            {"type": "PodsReady", "status": "True", "reason": "PodsReady", "lastTransitionTime": ts(ready)}
        )
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def finished(name: str) -> dict[str, Any]:
    """A Workload that ran 8 GPUs from -900 to -700 and finished."""
    done = workload(name, reserved=-900, ready=-900, expected="1000s")
    condition = {"type": "Finished", "status": "True", "reason": "Succeeded", "lastTransitionTime": ts(-700)}
    done["status"]["conditions"].append(condition)
    return done


@dataclass
class Setup:
    state: list[dict[str, Any]]
    initial: dict[str, Any] = field(default_factory=dict)  # more of spec.initialState (at: AT unless given)
    trace: str = ""  # rows after the header; none: no workloads source
    variants: list[dict[str, Any]] = field(default_factory=list)

    def write(self, directory: Path) -> Path:
        (directory / "cluster.yaml").write_text(CLUSTER)
        (directory / "state").mkdir()
        (directory / "state" / "workloads.yaml").write_text(yaml.safe_dump_all(self.state, sort_keys=False))
        spec: dict[str, Any] = {
            "config": ["cluster.yaml"],
            "initialState": {"paths": ["state/"], "at": ts(0), **self.initial},
        }
        if self.trace:
            (directory / "trace.csv").write_text(HEADER + self.trace)
            spec["workloads"] = {"trace": {"path": "trace.csv"}}
        if self.variants:
            spec["variants"] = self.variants
        scenario = {
            "apiVersion": "gpuq.dev/v1alpha1",
            "kind": "Scenario",
            "metadata": {"name": "s"},
            "spec": spec,
        }
        (directory / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
        return directory / "scenario.yaml"


def simulate(
    setup: Setup, directory: Path, variant: str | None = None
) -> dict[str, tuple[float | None, float | None]]:
    """Each workload's (first start, end), seconds from ``AT``."""
    plan = plan_scenario([str(setup.write(directory))], variant=variant)
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    result = prepared.simulation().run()
    return {key.split("/", 1)[1]: (run.first_started, run.ended) for key, run in result.runs.items()}


CASES = [
    pytest.param(
        Setup([workload("run", reserved=-600, ready=-600, expected="1000s")]),
        {"run": (-600, 400)},
        id="a running workload finishes after the run time it has left (1000 s declared - 600 s run)",
    ),
    pytest.param(
        Setup(
            [
                workload("run", reserved=-600, ready=-600, expected="1000s"),
                workload("wait", 4, created=-300, expected="300s"),
            ]
        ),
        {"run": (-600, 400), "wait": (400, 700)},
        id="a pending workload behind it starts exactly when it ends (8 of 8 GPUs held until 400)",
    ),
    pytest.param(
        Setup(
            [
                workload("second", created=-100, expected="50s"),
                workload("first", created=-200, expected="100s"),
            ]
        ),
        {"first": (0, 100), "second": (100, 150)},
        id="pending workloads queue at 0 in their creation order, not the file's",
    ),
    pytest.param(
        Setup([workload("run", reserved=-600, ready=-500, expected="1000s")]),
        {"run": (-600, 500)},
        id="it has run since PodsReady (500 s), not since its admission",
    ),
    pytest.param(
        Setup([workload("run", reserved=-600, expected="1000s")]),
        {"run": (-600, 400)},
        id="without PodsReady it has run since its quota reservation",
    ),
    pytest.param(
        Setup([workload("run", reserved=-600, ready=-600, expected="1000s"), finished("done")]),
        {"run": (-600, 400)},
        id="a finished workload in the state is the past and is left out",
    ),
    pytest.param(
        Setup([workload("run", reserved=-600, ready=-600, max_s=900)]),
        {"run": (-600, 300)},
        id="maximumExecutionTimeSeconds is the run time when nothing is annotated",
    ),
    pytest.param(
        Setup(
            [workload("run", reserved=-600, ready=-600), workload("wait")], initial={"assumeDuration": "20m"}
        ),
        {"run": (-600, 600), "wait": (600, 1800)},
        id="assumeDuration is the run time of workloads that declare none",
    ),
    pytest.param(
        Setup([workload("run", reserved=-600, ready=-600)]),
        {"run": (-600, 3000)},
        id="with nothing declared or assumed the run time is 1 h",
    ),
    pytest.param(
        Setup([workload("run", reserved=-600, ready=-600, expected="5m")]),
        {"run": (-600, 0)},
        id="a workload past its run time finishes at 0",
    ),
    pytest.param(
        Setup(
            [workload("run", reserved=-600, ready=-600, expected="1000s")],
            initial={"at": ts(-100)},
        ),
        {"run": (-500, 500)},
        id="at given: times count from it (100 s before the last timestamp)",
    ),
    pytest.param(
        Setup(
            [
                workload("run", reserved=-600, ready=-600, expected="1000s"),
                workload("wait", 4, created=-300, expected="300s"),
            ],
            initial={"at": None},
        ),
        {"run": (-300, 700), "wait": (700, 1000)},
        id="at left out: the latest timestamp in the state (wait's creation, 300 s before AT) is time 0",
    ),
    pytest.param(
        Setup(
            [workload("run", reserved=-600, ready=-600, expected="1000s")],
            initial={"traceOrigin": ts(-1000)},
            trace="old,team-a,q,100,50,,1,8,,,\nrun,team-a,q,400,1000,,1,8,,,\nsame,team-a,q,1000,10,,1,8,,,\n"
            "new,team-a,q,1100,60,,1,8,,,\n",
        ),
        {"run": (-600, 400), "new": (400, 460)},
        id="with traceOrigin rows at or before the instant are history; later ones arrive on its clock",
    ),
    pytest.param(
        Setup(
            [workload("run", reserved=-600, ready=-600, expected="1000s")],
            trace="a,team-a,q,0,60,,1,4,,,\nb,team-a,q,500,60,,1,4,,,\nrun,team-a,q,0,5,,1,1,,,\n",
        ),
        {"run": (-600, 400), "a": (400, 460), "b": (500, 560)},
        id="without traceOrigin the trace begins at the instant; a row naming a state workload is left out",
    ),
    pytest.param(
        Setup(
            [
                workload("run", reserved=-600, ready=-600, expected="1000s"),
                workload("wait", 4, expected="300s"),
            ],
            variants=[{"name": "fcfs", "queueing": "fcfs"}],
        ),
        {"run": (-600, 400), "wait": (400, 700)},
        id="a queueing: fcfs variant keeps residents running, on its one queue",
    ),
]


@pytest.mark.parametrize(("setup", "expected"), CASES)
def test_the_simulation_starts_from_the_state(setup: Setup, expected: dict[str, Any], tmp_path: Path) -> None:
    variant = setup.variants[0]["name"] if setup.variants else None
    assert simulate(setup, tmp_path, variant) == expected


def test_warnings_name_the_workload_and_what_was_assumed(tmp_path: Path) -> None:
    setup = Setup([workload("run", reserved=-4000, ready=-4000), workload("bad", expected="soon")])
    plan = plan_scenario([str(setup.write(tmp_path))])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    found = [(Path(d.path).name, d.name, d.field, d.message) for d in prepared.state_warnings]
    undeclared = (
        "declares no run time (gpuq.dev/expected-duration, spec.maximumExecutionTimeSeconds): "
        "3600s assumed (or set spec.initialState.assumeDuration)"
    )
    assert found == [
        (
            "workloads.yaml",
            "bad",
            "metadata.annotations[gpuq.dev/expected-duration]",
            "ignored gpuq.dev/expected-duration='soon': not a duration (e.g. 30m, 2h, 1h30m, 900)",
        ),
        ("workloads.yaml", "run", "metadata.annotations", undeclared),
        (
            "workloads.yaml",
            "run",
            "status.conditions",
            "has run 4000s, past its 3600s run time: it finishes at time 0 "
            "(set gpuq.dev/expected-duration to the whole run time)",
        ),
        ("workloads.yaml", "bad", "metadata.annotations", undeclared),
    ]


BAD = [
    pytest.param(
        Setup([workload("w")], initial={"paths": ["state/", "missing.yaml"]}),
        ("scenario.yaml", "Scenario", "s", "spec.initialState.paths[1]", "no such file"),
        "- missing.yaml",
        id="a path that does not exist",
    ),
    pytest.param(
        Setup([workload("w", reserved=-10, cluster_queue="nope")]),
        (
            "workloads.yaml",
            "Workload",
            "w",
            "status.admission.clusterQueue",
            "ClusterQueue 'nope' not found (known: team-a)",
        ),
        "clusterQueue: nope",
        id="an admission to an unknown ClusterQueue",
    ),
    pytest.param(
        Setup([workload("w", reserved=-10, flavor="nope")]),
        (
            "workloads.yaml",
            "Workload",
            "w",
            "status.admission.podSetAssignments[0].flavors[nvidia.com/gpu]",
            "ResourceFlavor 'nope' not found (known: gpu, other)",
        ),
        "nvidia.com/gpu: nope",
        id="an admission to an unknown ResourceFlavor",
    ),
    pytest.param(
        Setup([workload("w", reserved=-10, flavor="other")]),
        (
            "workloads.yaml",
            "Workload",
            "w",
            "status.admission.podSetAssignments[0].flavors[nvidia.com/gpu]",
            "ClusterQueue 'team-a' has no quota for nvidia.com/gpu in flavor 'other'",
        ),
        "nvidia.com/gpu: other",
        id="an admission to a flavor its ClusterQueue does not offer",
    ),
    pytest.param(
        Setup([workload("w", created=0)], initial={"at": ts(-60)}),
        (
            "workloads.yaml",
            "Workload",
            "w",
            "metadata.creationTimestamp",
            f"created after the initial state's instant ({ts(-60)}, spec.initialState.at)",
        ),
        "creationTimestamp:",
        id="a workload created after the instant",
    ),
    pytest.param(
        Setup([workload("w")], initial={"at": "yesterday"}),
        (
            "scenario.yaml",
            "Scenario",
            "s",
            "spec.initialState.at",
            "'yesterday' is not an RFC 3339 timestamp (e.g. 2024-05-01T12:00:00Z)",
        ),
        "at: yesterday",
        id="an instant that is not a timestamp",
    ),
]


@pytest.mark.parametrize(("setup", "expected", "marker"), BAD)
def test_bad_initial_states_are_errors_naming_file_object_and_field(
    setup: Setup, expected: tuple[str, ...], marker: str, tmp_path: Path
) -> None:
    scenario = setup.write(tmp_path)
    with pytest.raises(ScenarioError) as raised:
        plan = plan_scenario([str(scenario)])
        prepare(plan, plan.variants[0], load_workloads(plan))
    errors = [d for d in raised.value.diagnostics if d.severity == "error"]
    assert [(Path(d.path).name, d.kind, d.name, d.field, d.message.split(" /")[0]) for d in errors] == [
        expected
    ]
    path = Path(errors[0].path)
    assert errors[0].line == 1 + next(
        i for i, line in enumerate(path.read_text().splitlines()) if marker in line
    )


def test_a_state_workload_naming_an_unknown_local_queue_loads_and_stays_pending(tmp_path: Path) -> None:
    """One bad workload never stops simulate: it is warned about and waits, as Kueue leaves it."""
    scenario = Setup([workload("w", queue="nope")]).write(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-f", str(scenario), "--out-dir", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "LocalQueue 'nope' not found in namespace 'team-a'" in result.output
    rows = {r.split(",")[1]: r for r in (out / "workloads.csv").read_text().splitlines()[1:]}
    assert ",Inadmissible," in rows["w"] or ",Pending," in rows["w"], rows


def test_simulate_refuses_a_bad_state_and_writes_nothing(tmp_path: Path) -> None:
    scenario = Setup([workload("w", reserved=-10, cluster_queue="nope")]).write(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-f", str(scenario), "--out-dir", str(out), "-q"])
    assert result.exit_code == 1
    assert "Workload/w: status.admission.clusterQueue: ClusterQueue 'nope' not found" in result.output
    assert "the initial state does not fit the configuration" in result.output
    assert not out.exists()


def test_a_scenario_needs_workloads_or_an_initial_state(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: gpuq.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\nspec: {config: []}\n"
    )
    with pytest.raises(ScenarioError) as raised:
        plan_scenario([str(tmp_path / "scenario.yaml")])
    assert [d.message for d in raised.value.diagnostics] == [
        "give workloads (a trace or a generator), an initialState, or both"
    ]
