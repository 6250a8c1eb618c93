"""``gpuq simulate`` as a user runs it: outputs, comparison, determinism, and the ways inputs fail."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.cli import app

ROOT = Path(__file__).resolve().parents[2]
HOLIDAY = str(ROOT / "examples" / "symbol-retail")
runner = CliRunner()

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
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
spec: {machineType: box, count: 1, cpu: "64", memory: 512Gi, gpu: {model: A100-80GB, count: 8}, price: 16}
"""

TRACE = """\
name,namespace,queue,submit_s,duration_s,priority,pods,gpus,cpu,memory,gpu_model
a1,team-a,q,0,100,,1,8,,,
a2,team-a,q,10,50,high,1,4,,,
a3,team-a,q,20,-5,,1,1,,,
a4,team-a,q,30,10,nosuch,1,1,,,
"""


@pytest.fixture
def trace_setup(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "trace.csv").write_text(TRACE)
    return tmp_path / "cluster.yaml", tmp_path / "trace.csv"


def test_compare_writes_metrics_workloads_and_report_for_every_variant(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-f", HOLIDAY, "--compare", "--out-dir", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["schema"] == "gpuq.dev/v1alpha1/SimulationMetrics"
    assert (metrics["scenario"], metrics["seed"]) == ("holiday-rush", 42)
    fcfs, kueue = metrics["variants"]
    assert (fcfs["name"], kueue["name"]) == ("fcfs", "kueue")
    assert fcfs["workloads"]["submitted"] == kueue["workloads"]["submitted"] > 100
    assert fcfs["workloads"]["preemptions"] == 0  # no Kueue: nothing preempts
    assert {t["name"] for t in kueue["teams"]} == {"recsys", "llm-finetune", "research"}
    assert [c["name"] for c in kueue["cohorts"]] == ["retail"]
    # The critical retraining team waits less under Kueue than under first come, first served.
    recsys = {v["name"]: next(t for t in v["teams"] if t["name"] == "recsys") for v in (fcfs, kueue)}
    assert recsys["kueue"]["wait_s"]["p90"] < recsys["fcfs"]["wait_s"]["p90"]
    rows = list(csv.DictReader((out / "workloads.csv").open()))
    assert {r["variant"] for r in rows} == {"fcfs", "kueue"}
    assert len(rows) == 2 * fcfs["workloads"]["submitted"]
    html = (out / "report.html").read_text()
    for section in ('id="summary"', 'id="utilisation"', 'id="queues"', 'id="waits"', 'id="cohorts"'):
        assert section in html


def shortened(example: str, horizon: str) -> Callable[[Path], list[str]]:
    """The example copied under ``tmp_path`` with ``spec.settings.horizon`` set: the same command on
    the first ``horizon`` of simulated time, for the examples a full run makes too slow for CI."""

    def arguments(tmp_path: Path) -> list[str]:
        copy = tmp_path / "example"
        shutil.copytree(ROOT / "examples" / example, copy)
        scenario = copy / "scenario.yaml"
        document = yaml.safe_load(scenario.read_text())
        document["spec"].setdefault("settings", {})["horizon"] = horizon
        scenario.write_text(yaml.safe_dump(document, sort_keys=False))
        return ["-f", str(copy)]

    return arguments


def given(*arguments: str) -> Callable[[Path], list[str]]:
    return lambda _tmp_path: list(arguments)


def twice_at_once(command: list[str], outs: list[Path] | None = None) -> list[bytes]:
    """Run ``command`` twice at once from the repository root, under hash seeds 1 and 2 (``--out``
    each of ``outs`` when given); their standard outputs. Two CPUs: both runs take one's time."""
    running = [
        subprocess.Popen(
            [*command, *(["--out-dir", str(outs[index])] if outs else [])],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": str(index + 1)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(2)
    ]
    stdouts = []
    for process in running:
        stdout, stderr = process.communicate()
        assert process.returncode == 0, (stdout + stderr).decode()
        stdouts.append(stdout)
    return stdouts


GPUQ = [sys.executable, "-m", "gpuq.cli"]
DETERMINISTIC = ("metrics.json", "workloads.csv", "report.html")

# Every bundled example that runs from the repository. kueue-perf-baseline (15,000 workloads) and
# philly-week (a week of Philly jobs) take 15 s and 27 s in full on one CPU: they run the same
# command on a shortened horizon (spec.settings.horizon of a copy), which still schedules
# thousands of workloads (about 3,900 and 1,200).
EXAMPLES = [
    pytest.param(given("-f", "examples/symbol-retail", "--compare"), id="the holiday rush, every variant"),
    pytest.param(
        given("-f", "examples/symbol-retail/capacity/capacity.scenario", "--compare"),
        id="provisioning, spot and cost attribution: the capacity scenario, every variant",
    ),
    pytest.param(given("-f", "examples/serving", "--compare"), id="serving, every autoscaler variant"),
    pytest.param(
        shortened("kueue-perf-baseline", "10s"), id="Kueue's performance baseline, first 10 s simulated"
    ),
    pytest.param(shortened("philly-week", "12h"), id="the Philly week, first 12 hours simulated"),
]


@pytest.mark.parametrize("arguments", EXAMPLES)
def test_every_example_gives_byte_identical_outputs_whatever_the_hash_seed(
    tmp_path: Path, arguments: Callable[[Path], list[str]]
) -> None:
    outs = [tmp_path / "out-1", tmp_path / "out-2"]
    twice_at_once([*GPUQ, "simulate", *arguments(tmp_path), "-q"], outs)
    first, second = ({name: (out / name).read_bytes() for name in DETERMINISTIC} for out in outs)
    for name in DETERMINISTIC:
        assert first[name] == second[name], f"{name} differs between two runs"
    assert b"decision_s" not in first["metrics.json"]  # wall-clock seconds are printed, not written


def test_admit_on_the_gpu_estate_gives_byte_identical_output_whatever_the_hash_seed() -> None:
    command = [*GPUQ, "admit", "-f", "examples/gpu-estate", "-o", "json", "--now", "1796023000"]
    first, second = twice_at_once(command)
    assert first == second and json.loads(first)["admitted"]


def test_provisioning_wall_clock_seconds_go_to_stderr_not_to_metrics_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    scenario = "examples/symbol-retail/capacity/capacity.scenario"
    args = ["simulate", "-f", str(ROOT / scenario), "--variant", "spot-checkpoints", "--out-dir", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "s of it in provisioning decisions" in result.stderr
    variants = json.loads((out / "metrics.json").read_text())["variants"]
    assert [sorted(v["provisioning"]).count("decision_s") for v in variants] == [0]


def test_another_seed_gives_other_arrivals(tmp_path: Path) -> None:
    waits = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        result = runner.invoke(app, ["simulate", "-f", HOLIDAY, "--seed", seed, "-q", "--out-dir", str(out)])
        assert result.exit_code == 0, result.output
        waits.append((out / "workloads.csv").read_text())
    assert waits[0] != waits[1]


def test_a_trace_against_a_configuration_reports_refused_rows_with_their_lines(
    tmp_path: Path, trace_setup: tuple[Path, Path]
) -> None:
    cluster, trace = trace_setup
    out = tmp_path / "out"
    args = ["simulate", "-f", str(cluster), "--trace", str(trace), "--out-dir", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "trace.csv:4" in result.output and "duration_s" in result.output
    assert "trace.csv:5" in result.output and "WorkloadPriorityClass 'nosuch' not found" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    (variant,) = metrics["variants"]
    assert variant["workloads"]["submitted"] == 2 and variant["workloads"]["bad_rows"] == 2
    # a2 (high) waits for a1's node: 8 GPUs of quota, one 8-GPU node.
    rows = {r["name"]: r for r in csv.DictReader((out / "workloads.csv").open())}
    assert (rows["a2"]["started_s"], rows["a2"]["ended_s"]) == ("100", "150")


def test_strict_makes_refused_rows_fatal(tmp_path: Path, trace_setup: tuple[Path, Path]) -> None:
    cluster, trace = trace_setup
    result = runner.invoke(
        app, ["simulate", "-f", str(cluster), "--trace", str(trace), "--strict", "--out-dir", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "trace.csv:4" in result.output
    assert not (tmp_path / "metrics.json").exists()


SCENARIO = """\
apiVersion: gpuq.dev/v1alpha1
kind: Scenario
metadata: {{name: s}}
spec:
  config: [cluster.yaml]
  workloads: {{trace: {{path: trace.csv}}}}
  {extra}
"""

FAILURES = [
    ("no scenario and no trace", None, [], "no Scenario in the inputs and no --trace"),
    ("compare without variants", "", ["--compare"], "declares no variants"),
    (
        "unknown variant",
        "variants: [{name: a}]",
        ["--variant", "b"],
        "variant 'b' not found in Scenario s (variants: a)",
    ),
    ("duplicate variant", "variants: [{name: a}, {name: a}]", [], "variant 'a' is declared twice"),
    (
        "negative horizon",
        "settings: {horizon: -5}",
        [],
        "spec.settings.horizon: Input should be greater than 0",
    ),
    (
        "unknown node pool",
        "settings: {nodeChanges: [{at: 10, action: remove, pool: nope}]}",
        [],
        "no NodePool or node named nope",
    ),
]


@pytest.mark.parametrize(("title", "extra", "args", "message"), FAILURES, ids=[f[0] for f in FAILURES])
def test_bad_inputs_fail_with_a_clear_error_and_write_nothing(
    tmp_path: Path,
    trace_setup: tuple[Path, Path],
    title: str,
    extra: str | None,
    args: list[str],
    message: str,
) -> None:
    cluster, _trace = trace_setup
    given = str(cluster)
    if extra is not None:
        (tmp_path / "scenario.yaml").write_text(SCENARIO.format(extra=extra))
        given = str(tmp_path / "scenario.yaml")
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-f", given, *args, "--out-dir", str(out)])
    assert result.exit_code == 1, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_a_missing_trace_file_is_named(tmp_path: Path, trace_setup: tuple[Path, Path]) -> None:
    cluster, _trace = trace_setup
    result = runner.invoke(app, ["simulate", "-f", str(cluster), "--trace", str(tmp_path / "nope.csv")])
    assert result.exit_code == 1
    assert "nope.csv" in result.output


def test_workloads_no_node_could_ever_hold_are_refused_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER.replace("nominalQuota: 8", "nominalQuota: 64"))
    (tmp_path / "trace.csv").write_text(
        "name,namespace,queue,submit_s,duration_s,pods,gpus,gpu_model\n"
        "ok,team-a,q,0,10,1,8,\n"
        "huge,team-a,q,0,10,1,16,\n"
        "h100,team-a,q,0,10,1,1,H100-80GB\n"
    )
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "simulate",
            "-f",
            str(tmp_path / "cluster.yaml"),
            "--trace",
            str(tmp_path / "trace.csv"),
            "--out-dir",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert (
        "trace.csv:3: team-a/huge: no node can hold one pod even when empty (Insufficient nvidia.com/gpu)"
        in text
    )
    assert "trace.csv:4: team-a/h100: no node has nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in text
    (variant,) = json.loads((out / "metrics.json").read_text())["variants"]
    assert (variant["workloads"]["submitted"], variant["workloads"]["finished"]) == (1, 1)


def test_a_public_trace_with_a_mapping_file_from_the_command_line(tmp_path: Path) -> None:
    """The first 300 Philly jobs: one VC mapped by name, the rest by the default, all to team-a's queue
    (without the mapping they would land in namespaces vc-<id> that have no LocalQueue)."""
    philly = (Path(__file__).resolve().parents[2] / "data/traces/philly/philly_jobs_sia.csv.xz")
    cluster = CLUSTER.replace("nominalQuota: 8", "nominalQuota: 64").replace("count: 1,", "count: 16,")
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "sample.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        + "".join(line for _, line in zip(range(300), _xz_lines(philly), strict=False))
    )
    (tmp_path / "teams.yaml").write_text(
        "field: cluster\ndefault: {namespace: team-a, queue: q}\n"
        "groups:\n  '6214e9': {namespace: team-a, queue: q}\n"
    )
    out = tmp_path / "out"
    args = ["simulate", "-f", str(tmp_path / "cluster.yaml"), "--trace", str(tmp_path / "sample.csv")]
    result = runner.invoke(
        app,
        [
            *args,
            "--trace-format",
            "philly",
            "--mapping",
            str(tmp_path / "teams.yaml"),
            "--out-dir",
            str(out),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    (variant,) = json.loads((out / "metrics.json").read_text())["variants"]
    assert variant["workloads"]["submitted"] + variant["workloads"]["bad_rows"] == 300
    assert {t["name"] for t in variant["teams"]} == {"team-a"}
    assert variant["workloads"]["inadmissible"] == 0


def _xz_lines(path: Path) -> list[str]:
    import lzma

    with lzma.open(path, "rt") as handle:
        next(handle)
        return [next(handle) for _ in range(300)]


STATE_JOB = """\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team-a
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {{kueue.x-k8s.io/queue-name: {queue}}}
  annotations: {{gpuq.dev/expected-duration: 10m}}
spec:
  template:
    spec:
      containers:
      - name: c
        image: busybox
        resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}
"""

STATE_SCENARIO = """\
apiVersion: gpuq.dev/v1alpha1
kind: Scenario
metadata: {name: s}
spec:
  config: [cluster.yaml]
  initialState: {paths: [state.yaml]}
"""


def test_a_state_workload_kueue_never_admits_is_simulated_pending_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "scenario.yaml").write_text(STATE_SCENARIO)
    (tmp_path / "state.yaml").write_text(
        STATE_JOB.format(name="ok", queue="q", gpus=4)
        + STATE_JOB.format(name="huge", queue="q", gpus=100_000)
        + STATE_JOB.format(name="lost", queue="nope", gpus=1)
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-f", str(tmp_path / "scenario.yaml"), "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "Job/huge: spec.podSets[0]: warning: pod set 'main' needs 100000 nvidia.com/gpu" in text
    assert "LocalQueue 'nope' not found in namespace 'team-a': the workload stays pending" in text
    (variant,) = json.loads((out / "metrics.json").read_text())["variants"]
    counts = variant["workloads"]
    assert (counts["finished"], counts["pending_at_end"], counts["inadmissible"]) == (1, 1, 1)
    rows = {r["name"].rsplit("-", 1)[0]: r for r in csv.DictReader((out / "workloads.csv").open())}
    assert rows["job-huge"]["status"] == "Pending"
    assert rows["job-lost"]["reason"] == "LocalQueue nope doesn't exist in namespace team-a"


def test_simulate_reads_each_configuration_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The variants share what was read: every file of the example is opened once, not once per variant."""
    import builtins
    from collections import Counter

    opened: Counter[str] = Counter()
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "examples" in str(file):
            opened[Path(str(file)).name] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    example = Path(__file__).resolve().parents[2] / "examples" / "symbol-retail"
    args = ["simulate", "-f", str(example), "--compare", "--out-dir", str(tmp_path), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert opened and set(opened.values()) == {1}, opened
