"""gpuq.api.topology_requests: TAS annotations and topologyRequest, checked and converted; GPU shares."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpuq.api.loader import LoadResult, load
from gpuq.core.model import TopologyMode, TopologyRequest

BLOCK = "cloud.google.com/gce-topology-block"
RACK = "cloud.google.com/gce-topology-subblock"
HOST = "kubernetes.io/hostname"

CONFIG = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: gpus}}
spec:
  levels:
  - nodeLabel: {BLOCK}
  - nodeLabel: {RACK}
  - nodeLabel: {HOST}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: h100}}
spec: {{topologyName: gpus}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, gpuq.dev/gpu-milli]
    flavors:
    - name: h100
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: 64}}
      - {{name: gpuq.dev/gpu-milli, nominalQuota: 64000}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq, namespace: default}}
spec: {{clusterQueue: cq}}
"""


def pod_set(name: str, count: int, annotations: dict[str, str] | None = None, request: str = "") -> str:
    """One pod set of a Workload, with template annotations and an explicit topologyRequest body."""
    lines = [f"  - name: {name}", f"    count: {count}"]
    if request:
        lines.append(f"    topologyRequest: {request}")
    lines.append("    template:")
    if annotations:
        lines.append("      metadata:")
        lines.append("        annotations:")
        lines += [f"          {key}: {value}" for key, value in annotations.items()]
    lines += [
        "      spec:",
        "        containers:",
        "        - name: c",
        "          resources: {requests: {nvidia.com/gpu: 1}}",
    ]
    return "\n".join(lines) + "\n"


def workload(*pod_sets: str) -> str:
    head = "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: train}\n"
    return head + "spec:\n  queueName: lq\n  podSets:\n" + "".join(pod_sets)


def load_text(tmp_path: Path, text: str) -> tuple[str, LoadResult]:
    file = tmp_path / "config.yaml"
    file.write_text(text)
    return str(file), load([str(file)])


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def req(**annotations: str) -> dict[str, str]:
    """Annotations by short name: ``required="..."`` -> ``kueue.x-k8s.io/podset-required-topology``."""
    names = {
        "required": "podset-required-topology",
        "preferred": "podset-preferred-topology",
        "unconstrained": "podset-unconstrained-topology",
        "slice": "podset-slice-required-topology",
        "size": "podset-slice-size",
        "group": "podset-group-name",
    }
    return {f"kueue.x-k8s.io/{names[k]}": v for k, v in annotations.items()}


A = "spec.podSets[0].template.metadata.annotations"
T = "spec.podSets[0].topologyRequest"

# id, workload text, (field, line needle, message substring)
ERRORS: list[tuple[str, str, tuple[str, str, str]]] = [
    (
        "required and preferred annotations together are an error",
        workload(pod_set("main", 4, req(required=RACK, preferred=BLOCK))),
        (A, "annotations:", "must not set more than one of required, preferred and unconstrained"),
    ),
    (
        "required and unconstrained annotations together are an error",
        workload(pod_set("main", 4, req(required=RACK, unconstrained='"true"'))),
        (A, "annotations:", "must not set more than one"),
    ),
    (
        "required and preferred together in topologyRequest are an error",
        workload(pod_set("main", 4, request=f"{{required: {RACK}, preferred: {BLOCK}}}")),
        (T, "topologyRequest:", "must not set more than one"),
    ),
    (
        "a slice size without a slice level is an error",
        workload(pod_set("main", 4, req(required=BLOCK, size='"2"'))),
        (f"{A}[kueue.x-k8s.io/podset-slice-size]", "podset-slice-size", "may not be set when"),
    ),
    (
        "a slice level without a slice size is an error",
        workload(pod_set("main", 4, req(required=BLOCK, slice=RACK))),
        (f"{A}[kueue.x-k8s.io/podset-slice-size]", "annotations:", "must be set when"),
    ),
    (
        "a slice size below 1 is an error",
        workload(pod_set("main", 4, req(required=BLOCK, slice=RACK, size='"0"'))),
        (f"{A}[kueue.x-k8s.io/podset-slice-size]", "podset-slice-size", "greater than or equal to 1"),
    ),
    (
        "a slice size that is not a number is an error",
        workload(pod_set("main", 4, req(required=BLOCK, slice=RACK, size="two"))),
        (f"{A}[kueue.x-k8s.io/podset-slice-size]", "podset-slice-size", "must be a numeric value"),
    ),
    (
        "a slice size above the pod set count is an error",
        workload(pod_set("main", 4, req(required=BLOCK, slice=RACK, size='"8"'))),
        (
            f"{A}[kueue.x-k8s.io/podset-slice-size]",
            "podset-slice-size",
            "not be greater than pod set count 4",
        ),
    ),
    (
        "a slice size without a slice level in topologyRequest is an error",
        workload(pod_set("main", 4, request=f"{{required: {BLOCK}, podSetSliceSize: 2}}")),
        (f"{T}.podSetSliceSize", "topologyRequest:", "'podSetSliceRequiredTopology' is not specified"),
    ),
    (
        "a slice size below 1 in topologyRequest is an error",
        workload(pod_set("main", 4, request=f"{{podSetSliceRequiredTopology: {RACK}, podSetSliceSize: 0}}")),
        (f"{T}.podSetSliceSize", "topologyRequest:", "greater than or equal to 1"),
    ),
    (
        "an unconstrained annotation that is not a boolean is an error",
        workload(pod_set("main", 4, req(unconstrained="maybe"))),
        (f"{A}[kueue.x-k8s.io/podset-unconstrained-topology]", "unconstrained", "must be a boolean"),
    ),
    (
        "a level that is not a label key is an error",
        workload(pod_set("main", 4, req(required='"rack with spaces"'))),
        (f"{A}[kueue.x-k8s.io/podset-required-topology]", "required-topology", "invalid topology level"),
    ),
    (
        "an annotation value that is not a string is an error",
        workload(pod_set("main", 4, req(slice=RACK, size="2"))),
        (f"{A}[kueue.x-k8s.io/podset-slice-size]", "podset-slice-size", "must be strings"),
    ),
    (
        "a numeric group name is an error",
        workload(
            pod_set("leader", 1, req(required=RACK, group='"7"')),
            pod_set("workers", 4, req(required=RACK, group='"7"')),
        ),
        (f"{A}[kueue.x-k8s.io/podset-group-name]", "podset-group-name", "must not be a number"),
    ),
    (
        "a group name without a required or preferred level is an error",
        workload(
            pod_set("leader", 1, req(group="g")),
            pod_set("workers", 4, req(group="g")),
        ),
        (f"{A}[kueue.x-k8s.io/podset-group-name]", "podset-group-name", "neither a required nor a preferred"),
    ),
    (
        "a group name with a slice is an error",
        workload(
            pod_set("leader", 1, req(required=BLOCK, group="g", slice=RACK, size='"1"')),
            pod_set("workers", 4, req(required=BLOCK, group="g")),
        ),
        (f"{A}[kueue.x-k8s.io/podset-group-name]", "podset-group-name", "may not be set when"),
    ),
    (
        "a group of one pod set is an error",
        workload(pod_set("main", 4, req(required=RACK, group="g"))),
        (f"{A}[kueue.x-k8s.io/podset-group-name]", "podset-group-name", "exactly 2 pod sets, got 1"),
    ),
    (
        "a group where no pod set has one pod is an error",
        workload(
            pod_set("leader", 2, req(required=RACK, group="g")),
            pod_set("workers", 4, req(required=RACK, group="g")),
        ),
        (f"{A}[kueue.x-k8s.io/podset-group-name]", "podset-group-name", "got 2 and 4 replicas"),
    ),
    (
        "a group whose pod sets ask different levels is an error",
        workload(
            pod_set("leader", 1, req(required=RACK, group="g")),
            pod_set("workers", 4, req(required=BLOCK, group="g")),
        ),
        (f"{A}[kueue.x-k8s.io/podset-group-name]", "podset-group-name", "the same required or preferred"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_error(tmp_path: Path, text: str, expected: tuple[str, str, str]) -> None:
    field, needle, message = expected
    path, result = load_text(tmp_path, CONFIG + text)
    found = [d for d in result.errors if d.field == field and message in d.message]
    assert found, "\n".join(map(str, result.diagnostics))
    assert (found[0].path, found[0].line, found[0].kind, found[0].name) == (
        path,
        line_of(CONFIG + text, needle) if needle != "annotations:" else found[0].line,
        "Workload",
        "train",
    )
    if needle == "annotations:":
        assert found[0].line >= line_of(CONFIG + text, "kind: Workload")
    assert result.config is None and result.workloads == ()


# id, pod sets, expected core request of the first pod set
CONVERSIONS: list[tuple[str, str, TopologyRequest | None]] = [
    ("no annotation asks nothing", pod_set("main", 4), None),
    (
        "a required annotation",
        pod_set("main", 4, req(required=RACK)),
        TopologyRequest(TopologyMode.REQUIRED, RACK),
    ),
    (
        "a preferred annotation with a slice",
        pod_set("main", 4, req(preferred=BLOCK, slice=RACK, size='"2"')),
        TopologyRequest(TopologyMode.PREFERRED, BLOCK, RACK, 2),
    ),
    (
        "an unconstrained annotation",
        pod_set("main", 4, req(unconstrained='"true"')),
        TopologyRequest(TopologyMode.UNCONSTRAINED),
    ),
    (
        "an unconstrained annotation set to false asks nothing",
        pod_set("main", 4, req(unconstrained='"false"')),
        None,
    ),
    (
        "an explicit topologyRequest",
        pod_set(
            "main",
            4,
            request=f"{{required: {BLOCK}, podSetSliceRequiredTopology: {HOST}, podSetSliceSize: 4}}",
        ),
        TopologyRequest(TopologyMode.REQUIRED, BLOCK, HOST, 4),
    ),
    (
        "an explicit topologyRequest wins over annotations",
        pod_set("main", 4, req(required=HOST), request=f"{{preferred: {BLOCK}}}"),
        TopologyRequest(TopologyMode.PREFERRED, BLOCK),
    ),
    (
        "a grouped pod set carries its group",
        pod_set("leader", 1, req(required=RACK, group="g"))
        + pod_set("workers", 4, req(required=RACK, group="g")),
        TopologyRequest(TopologyMode.REQUIRED, RACK, group="g"),
    ),
]


@pytest.mark.parametrize(
    ("pod_sets", "expected"), [c[1:] for c in CONVERSIONS], ids=[c[0] for c in CONVERSIONS]
)
def test_conversion(tmp_path: Path, pod_sets: str, expected: TopologyRequest | None) -> None:
    _, result = load_text(tmp_path, CONFIG + workload(pod_sets))
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    assert result.workloads[0].pod_sets[0].topology == expected


def test_config_carries_topology_levels(tmp_path: Path) -> None:
    _, result = load_text(tmp_path, CONFIG)
    assert result.config is not None and result.config.topologies == {"gpus": (BLOCK, RACK, HOST)}


def test_job_template_annotations_reach_the_pod_set(tmp_path: Path) -> None:
    job = textwrap.dedent(
        f"""\
        ---
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: train
          labels: {{kueue.x-k8s.io/queue-name: lq}}
        spec:
          parallelism: 4
          template:
            metadata:
              annotations:
                kueue.x-k8s.io/podset-preferred-topology: {RACK}
            spec:
              containers:
              - name: c
                resources: {{requests: {{nvidia.com/gpu: 1}}}}
        """
    )
    _, result = load_text(tmp_path, CONFIG + job)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    assert result.workloads[0].pod_sets[0].topology == TopologyRequest(TopologyMode.PREFERRED, RACK)


def test_invalid_job_annotation_is_reported_on_the_job(tmp_path: Path) -> None:
    job = f"""\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels: {{kueue.x-k8s.io/queue-name: lq}}
spec:
  parallelism: 4
  template:
    metadata:
      annotations:
        kueue.x-k8s.io/podset-required-topology: {RACK}
        kueue.x-k8s.io/podset-preferred-topology: {BLOCK}
    spec:
      containers:
      - name: c
"""
    path, result = load_text(tmp_path, CONFIG + job)
    (error,) = result.errors
    text = CONFIG + job
    assert (error.path, error.kind, error.name) == (path, "Job", "train")
    assert (error.field, error.line) == ("spec.template.metadata.annotations", line_of(text, "annotations:"))
    assert "must not set more than one" in error.message
    assert result.config is None


def test_job_pod_template_errors_point_at_the_job_lines(tmp_path: Path) -> None:
    job = """\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  template:
    metadata:
      annotations:
        kueue.x-k8s.io/podset-slice-size: "2"
    spec:
      containers:
      - name: c
        resources: {requests: {gpuq.dev/gpu-milli: "1500"}}
"""
    text = CONFIG + job
    _, result = load_text(tmp_path, text)
    annotation = "spec.template.metadata.annotations[kueue.x-k8s.io/podset-slice-size]"
    request = "spec.template.spec.containers[0].resources.requests[gpuq.dev/gpu-milli]"
    assert {(d.line, d.field) for d in result.errors} == {
        (line_of(text, "slice-size"), annotation),
        (line_of(text, 'gpu-milli: "1500"'), request),
    }


WARNINGS: list[tuple[str, str, tuple[str, str, str]]] = [
    (
        "a level no Topology defines is a warning",
        workload(pod_set("main", 4, req(required="example.com/row"))),
        (f"{A}[kueue.x-k8s.io/podset-required-topology]", "example.com/row", "no Topology has level"),
    ),
    (
        "annotations next to an explicit topologyRequest are ignored with a warning",
        workload(pod_set("main", 4, req(required=RACK), request=f"{{required: {BLOCK}}}")),
        (f"{A}[kueue.x-k8s.io/podset-required-topology]", "podset-required-topology", "ignored"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_warning(tmp_path: Path, text: str, expected: tuple[str, str, str]) -> None:
    field, needle, message = expected
    _, result = load_text(tmp_path, CONFIG + text)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    found = [d for d in result.warnings if d.field == field and message in d.message]
    assert found and found[0].line == line_of(CONFIG + text, needle), "\n".join(map(str, result.diagnostics))
    assert result.config is not None


def milli_workload(*requests: str) -> str:
    containers = "".join(
        f"        - name: c{i}\n          resources: {{requests: {{gpuq.dev/gpu-milli: {r}}}}}\n"
        for i, r in enumerate(requests)
    )
    return workload(
        "  - name: main\n    count: 1\n    template:\n      spec:\n        containers:\n" + containers
    )


C0 = "spec.podSets[0].template.spec.containers[0].resources.requests[gpuq.dev/gpu-milli]"

MILLI: list[tuple[str, tuple[str, ...], str | None]] = [
    ("a share of one GPU is placeable", ("500",), None),
    ("a whole GPU in thousandths is placeable", ("1000",), None),
    ("whole GPUs in thousandths are placeable", ("4000",), None),
    ("more than one GPU but not whole GPUs is an error", ("1500",), "multiple of 1000"),
    ("a fraction of a thousandth is an error", ('"0.5"',), "whole number of thousandths"),
    ("containers adding up to an unplaceable share is an error", ("600", "600"), "the pod's total"),
]


@pytest.mark.parametrize(("requests", "message"), [c[1:] for c in MILLI], ids=[c[0] for c in MILLI])
def test_gpu_milli(tmp_path: Path, requests: tuple[str, ...], message: str | None) -> None:
    text = CONFIG + milli_workload(*requests)
    _, result = load_text(tmp_path, text)
    if message is None:
        assert result.errors == (), "\n".join(map(str, result.diagnostics))
        return
    (error,) = result.errors
    assert (error.field, error.line) == (C0, line_of(text, "name: c0") + 1) and message in error.message
    assert result.config is None


# ------------------------------------------------------------- recorded topologyAssignment in status
def admitted_workload(assignment: str, count: int = 2) -> str:
    body = workload(pod_set("main", count, req(required=RACK)))
    return (
        body
        + textwrap.dedent(
            f"""\
        status:
          admission:
            clusterQueue: cq
            podSetAssignments:
            - name: main
              count: {count}
              flavors: {{nvidia.com/gpu: h100}}
              topologyAssignment:
        """
        )
        + textwrap.indent(textwrap.dedent(assignment), "        ")
    )


RECORDED = [
    (
        "v1beta1 domains, hostname only",
        """\
        levels: [kubernetes.io/hostname]
        domains:
        - {values: [node-a], count: 1}
        - {values: [node-b], count: 1}
        """,
        ((HOST,), ((("node-a",), 1), (("node-b",), 1))),
    ),
    (
        "v1beta2 slices, individual roots with affixes and counts",
        """\
        levels: [kubernetes.io/hostname]
        slices:
        - domainCount: 2
          valuesPerLevel:
          - individual: {roots: ["1", "2"], prefix: gke-pool-, suffix: -x}
          podCounts: {individual: [1, 1]}
        """,
        ((HOST,), ((("gke-pool-1-x",), 1), (("gke-pool-2-x",), 1))),
    ),
    (
        "v1beta2 slice with universal values and counts",
        f"""\
        levels: [{BLOCK}, {RACK}]
        slices:
        - domainCount: 1
          valuesPerLevel:
          - universal: b1
          - universal: b1-r2
          podCounts: {{universal: 2}}
        """,
        ((BLOCK, RACK), ((("b1", "b1-r2"), 2),)),
    ),
]


@pytest.mark.parametrize(("case", "assignment", "expected"), RECORDED, ids=[c[0] for c in RECORDED])
def test_recorded_assignments_decode(
    tmp_path: Path, case: str, assignment: str, expected: tuple[tuple[str, ...], tuple[object, ...]]
) -> None:
    _, result = load_text(tmp_path, CONFIG + admitted_workload(assignment))
    assert result.errors == (), result.errors
    (wl,) = result.workloads
    assert wl.admission is not None
    recorded = wl.admission.pod_set_assignments[0].topology
    assert recorded is not None and (recorded.levels, recorded.domains) == expected


BAD_RECORDED = [
    (
        "pods do not add up",
        "levels: [kubernetes.io/hostname]\ndomains:\n- {values: [a], count: 1}\n",
        "assigns 1 pod(s) but the pod set was admitted with 2",
    ),
    (
        "a value per level",
        "levels: [kubernetes.io/hostname]\ndomains:\n- {values: [b, a], count: 2}\n",
        "must have one value per level (1), got 2",
    ),
    (
        "roots shorter than domainCount",
        "levels: [kubernetes.io/hostname]\nslices:\n- domainCount: 2\n  valuesPerLevel:\n"
        "  - individual: {roots: [a]}\n  podCounts: {universal: 1}\n",
        "must have domainCount (2) items",
    ),
    (
        "no pod counts",
        "levels: [kubernetes.io/hostname]\nslices:\n- domainCount: 1\n  valuesPerLevel:\n"
        "  - universal: a\n  podCounts: {}\n",
        "must set universal, or individual with domainCount (1) counts",
    ),
]


@pytest.mark.parametrize(("case", "assignment", "message"), BAD_RECORDED, ids=[c[0] for c in BAD_RECORDED])
def test_bad_recorded_assignments_are_errors(
    tmp_path: Path, case: str, assignment: str, message: str
) -> None:
    path, result = load_text(tmp_path, CONFIG + admitted_workload(assignment))
    assert result.config is None
    assert any(message in d.message and d.path == path for d in result.errors), result.diagnostics
