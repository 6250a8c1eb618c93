"""Kueue v0.19.2's DRA and shared-quota examples load unchanged and take Kueue's quota; the
Configuration settings that decide what a workload charges (resources, integrations) are honoured."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.api.loader import LoadResult, load_texts
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles

EXAMPLES = Path(__file__).parents[1] / "data" / "kueue-v0.19.2" / "site" / "static" / "examples"
GI = 1024**3
CONFIG = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"

MAPPING = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
resources:
  deviceClassMappings:
  - name: example.com/gpu
    deviceClassNames: [gpu.example.com]
"""
# setup_dra.md's counter and capacity Configurations
COUNTER = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
resources:
  deviceClassMappings:
  - name: gpu.memory
    deviceClassNames: [gpu.example.com]
    sources:
    - counter:
        name: memory
        driver: gpu.example.com
        deviceSelector:
          cel:
            expression: "device.driver == 'gpu.example.com'"
"""
CAPACITY = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
featureGates:
  KueueDRAIntegrationConsumableCapacity: true
resources:
  deviceClassMappings:
  - name: gpu.memory
    deviceClassNames: [gpu.example.com]
    sources:
    - capacity:
        name: "gpu.example.com/memory"
        driver: gpu.example.com
        deviceSelector:
          cel:
            expression: "device.driver == 'gpu.example.com'"
"""
# a driver's ResourceSlice: two partitions (10Gi and 20Gi of memory) and a shareable 80Gi device
SLICE = """apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: node-1-gpu}
spec:
  driver: gpu.example.com
  pool: {name: node-1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0-part-0
    consumesCounters:
    - counterSet: gpu-0
      counters: {memory: {value: 10Gi}}
  - name: gpu-0-part-1
    consumesCounters:
    - counterSet: gpu-0
      counters: {memory: {value: 20Gi}}
  - name: gpu-1
    capacity:
      gpu.example.com/memory:
        value: 80Gi
        requestPolicy: {validRange: {min: 1Gi, step: 3Gi}}
"""
DEVICE_CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  extendedResourceName: example.com/gpu
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
"""


def example(name: str, jobs: int = 1) -> str:
    """An example's text; a job's ``generateName`` becomes ``jobs`` named copies."""
    text = (EXAMPLES / name).read_text()
    if "generateName: " not in text:
        return text
    head, _, rest = text.partition("generateName: ")
    prefix, _, tail = rest.partition("\n")
    body = "---\n" if not head.rstrip().endswith("---") and head.strip() else ""
    job_start = head.rfind("apiVersion: batch/v1")
    before, job_head = head[:job_start], head[job_start:]
    copies = [f"{job_head}name: {prefix}{i}\n{tail}" for i in range(jobs)]
    return before + body + "\n---\n".join(copies)


def load(*texts: str) -> LoadResult:
    return load_texts([(f"doc-{i}.yaml", t) for i, t in enumerate(texts)])


def charged(result: LoadResult) -> list[dict[str, int]]:
    return [dict(ps.charged) for wl in result.workloads for ps in wl.pod_sets]


def admitted(result: LoadResult) -> tuple[set[str], dict[str, str]]:
    assert result.config is not None, "\n".join(map(str, result.diagnostics))
    scheduler = Scheduler(result.config)
    for wl in result.workloads:
        scheduler.submit(wl)
    run = run_cycles(scheduler)
    return set(run.admitted), {k: p.message for k, p in run.pending.items()}


BASE = {"cpu": 1000, "memory": 200 * 1024**2}
CASES = [
    (
        "a template's device request charges count 1 of the mapped name",
        ["dra/sample-dra-queues.yaml", "dra/sample-dra-rct-job.yaml"],
        [MAPPING],
        {**BASE, "example.com/gpu": 1},
    ),
    (
        "a counter source charges the largest matching consumesCounters value",
        ["dra/sample-dra-counter-queues.yaml", "dra/sample-dra-counter-job.yaml"],
        [COUNTER, SLICE],
        {**BASE, "gpu.memory": 20 * GI},
    ),
    (
        "a capacity source charges capacity.requests rounded up to the device's step",
        ["dra/sample-dra-capacity-queues.yaml", "dra/sample-dra-capacity-job.yaml"],
        [CAPACITY, SLICE],
        {**BASE, "gpu.memory": 4 * GI},
    ),
    (
        "an extended resource backed by a DeviceClass is charged once under its name",
        ["dra/sample-dra-queues.yaml", "dra/sample-dra-extended-resource-job.yaml"],
        [DEVICE_CLASS],
        {**BASE, "example.com/gpu": 1},
    ),
]


@pytest.mark.parametrize(("files", "extra", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_dra_example_admits_against_the_quota_its_mapping_gives(
    files: list[str], extra: list[str], expected: dict[str, int]
) -> None:
    result = load(*(example(f) for f in files), *extra)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    assert charged(result) == [expected]
    names, pending = admitted(result)
    assert len(names) == 1 and pending == {}


PENDING = [
    (
        "a device class no mapping names",
        ["apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"],
        True,
        "spec.podSets[0].template.spec.resourceClaims[0].resourceClaimTemplateName: Not found: "
        '"DeviceClass gpu.example.com is not mapped in DRA configuration for podset main"',
    ),
    (
        "a template that does not exist",
        [MAPPING],
        False,
        "spec.podSets[0].template.spec.resourceClaims[0]: Internal error: failed to get claim spec for "
        "ResourceClaimTemplate single-gpu in podset main: "
        'resourceclaimtemplates.resource.k8s.io "single-gpu" '
        "not found",
    ),
    (
        "the DRA gate turned off",
        [
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            "featureGates: {KueueDRAIntegration: false}\n"
        ],
        True,
        "Workload uses DRA resources but the KueueDRAIntegration feature gate is not enabled",
    ),
    (
        "a counter source without ResourceSlices",
        [COUNTER],
        True,
        "insufficient matching devices for counter driver: 0 device(s) match but 1 requested",
    ),
]


@pytest.mark.parametrize(
    ("extra", "with_template", "message"), [c[1:] for c in PENDING], ids=[c[0] for c in PENDING]
)
def test_a_claim_kueue_cannot_resolve_leaves_the_workload_pending_with_kueues_message(
    extra: list[str], with_template: bool, message: str
) -> None:
    job = example("dra/sample-dra-rct-job.yaml")
    if not with_template:
        job = job[job.index("apiVersion: batch/v1") :]
    result = load(example("dra/sample-dra-queues.yaml"), job, *extra)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    (warning,) = [d for d in result.warnings if d.kind == "Job"]
    assert message in warning.message
    strict = load_texts([("q.yaml", example("dra/sample-dra-queues.yaml")), ("job.yaml", job)], strict=True)
    assert any(d.path == "job.yaml" and d.kind == "Job" and d.severity == "error" for d in strict.diagnostics)
    names, pending = admitted(result)
    assert names == set() and message in next(iter(pending.values()))


def test_validate_names_file_line_object_and_field_of_an_unresolvable_claim() -> None:
    job = example("dra/sample-dra-rct-job.yaml")
    job = job[job.index("apiVersion: batch/v1") :]
    result = load_texts(
        [("queues.yaml", example("dra/sample-dra-queues.yaml")), ("job.yaml", job)], strict=True
    )
    (error,) = result.errors
    assert (error.path, error.kind, error.name) == ("job.yaml", "Job", "sample-dra-rct-job-0")
    assert error.field == "spec.template.spec.resourceClaims[0]"
    assert job.splitlines()[error.line - 1].strip() == "- name: gpu"


SHARED_QUOTA = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
resources:
  transformations:
  - input: cpu
    strategy: Retain
    outputs:
      cpu_credits: 1
"""


@pytest.mark.parametrize(
    ("config", "expected"),
    [("", 6), (SHARED_QUOTA, 4)],
    ids=["without the transformation six 3-cpu jobs fit two 9-cpu flavors", "with it 14 credits admit four"],
)
def test_the_shared_quota_example_admits_what_kueue_admits(config: str, expected: int) -> None:
    texts = [example("admin/shared-quota-setup.yaml"), example("admin/shared-quota-sample-job.yaml", jobs=7)]
    result = load(*texts, *([config] if config else []))
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    names, _ = admitted(result)
    assert len(names) == expected


TRANSFORMS = [
    (
        "Retain keeps the input beside its outputs",
        "strategy: Retain\n    outputs: {credits: 2}",
        {"cpu": 3000, "credits": 6},
    ),
    ("Replace drops the input", "strategy: Replace\n    outputs: {credits: 2}", {"credits": 6}),
    ("Replace without outputs ignores the input", "strategy: Replace", {}),
    (
        "multiplyBy scales the outputs by another request",
        "multiplyBy: memory\n    outputs: {credits: 1}",
        None,
    ),
]


@pytest.mark.parametrize(("rule", "expected"), [c[1:] for c in TRANSFORMS], ids=[c[0] for c in TRANSFORMS])
def test_transformations_change_what_a_pod_charges_not_what_it_asks_of_a_node(
    rule: str, expected: dict[str, int] | None
) -> None:
    config = f"{SHARED_QUOTA.split('  transformations:')[0]}  transformations:\n  - input: cpu\n    {rule}\n"
    job = example("admin/shared-quota-sample-job.yaml").replace(
        'cpu: "3"', 'cpu: "3"\n            memory: "2"'
    )
    result = load(example("admin/shared-quota-setup.yaml"), job, config)
    (pod_set,) = result.workloads[0].pod_sets
    assert dict(pod_set.requests) == {"cpu": 3000, "memory": 2}
    want = expected if expected is not None else {"cpu": 3000, "memory": 2, "credits": 6}
    assert dict(pod_set.charged) == {**want, **({"memory": 2} if expected is not None else {})}


def test_excluded_resource_prefixes_are_not_charged() -> None:
    config = CONFIG + "resources:\n  excludeResourcePrefixes: [memory]\n"
    result = load(
        example("dra/sample-dra-queues.yaml"), example("dra/sample-dra-extended-resource-job.yaml"), config
    )
    assert charged(result) == [{"cpu": 1000, "example.com/gpu": 1}]


FRAMEWORKS = [
    ("a Configuration without frameworks manages only batch/job", "", False),
    ("a listed framework is managed", "integrations:\n  frameworks: [batch/job, pod]\n", True),
    (
        "an external framework of another kind does not manage it",
        "integrations:\n  frameworks: [batch/job]\n  externalFrameworks: [RayJob.v1.ray.io]\n",
        False,
    ),
]


@pytest.mark.parametrize(
    ("integrations", "managed"), [c[1:] for c in FRAMEWORKS], ids=[c[0] for c in FRAMEWORKS]
)
def test_a_job_of_a_framework_kueue_does_not_enable_is_not_admitted(integrations: str, managed: bool) -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n"
        "  labels: {kueue.x-k8s.io/queue-name: user-queue}\n"
        "spec:\n  containers: [{name: c, resources: {requests: {cpu: 1}}}]\n"
    )
    config = f"apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n{integrations}"
    result = load(example("dra/sample-dra-queues.yaml"), pod, config)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    warnings = [d for d in result.warnings if d.field == "integrations.frameworks"]
    assert (len(result.workloads), len(warnings)) == ((1, 0) if managed else (0, 1))
    if not managed:
        assert (warnings[0].kind, warnings[0].name) == ("Pod", "p")
        assert "'pod' is not enabled" in warnings[0].message


POLICY = "  namespaceSelector: {}\n  concurrentAdmissionPolicy:\n    migration: {mode: TryPreferredFlavors}"


def test_concurrent_admission_policy_loads_with_a_warning_naming_it() -> None:
    queues = example("dra/sample-dra-queues.yaml").replace("  namespaceSelector: {}", POLICY)
    result = load(queues)
    assert result.errors == ()
    (warning,) = [d for d in result.warnings if d.field == "spec.concurrentAdmissionPolicy"]
    assert warning.kind == "ClusterQueue" and "does not model" in warning.message


CONFIG_ERRORS = [
    ("an unknown framework", "integrations:\n  frameworks: [batch/jobs]\n", "integrations.frameworks[0]"),
    (
        "two transformations of one input",
        "resources:\n  transformations:\n  - {input: cpu}\n  - {input: cpu}\n",
        "resources.transformations[1].input",
    ),
    (
        "one device class in two mappings",
        "resources:\n  deviceClassMappings:\n"
        "  - {name: a, deviceClassNames: [x]}\n  - {name: b, deviceClassNames: [x]}\n",
        "resources.deviceClassMappings[1].deviceClassNames[0]",
    ),
    (
        "a capacity source with its gate off",
        CAPACITY.split("featureGates:\n  KueueDRAIntegrationConsumableCapacity: true\n")[1],
        "resources.deviceClassMappings[0].sources[0].capacity",
    ),
]


@pytest.mark.parametrize(("body", "field"), [c[1:] for c in CONFIG_ERRORS], ids=[c[0] for c in CONFIG_ERRORS])
def test_kueue_refuses_these_configurations(body: str, field: str) -> None:
    result = load(f"apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n{body}")
    assert [d.field for d in result.errors] == [field]


def test_a_claim_template_is_checked_as_the_api_server_checks_it() -> None:
    template = (
        example("dra/sample-dra-rct-job.yaml")
        .split("---")[0]
        .replace(
            "deviceClassName: gpu.example.com",
            "deviceClassName: gpu.example.com\n          allocationMode: All\n          count: 2",
        )
    )
    result = load(template)
    assert [d.field for d in result.errors] == ["spec.spec.devices.requests[0].exactly.count"]


def test_gpuq_export_k8s_keeps_the_concurrent_admission_policy() -> None:
    from gpuq.commands.export import alert_rules
    from gpuq.k8s.export import build_export, check_export
    from gpuq.k8s.export_common import ExportOptions

    policy = {"migration": {"mode": "TryPreferredFlavors"}}
    queues = example("dra/sample-dra-queues.yaml").replace("  namespaceSelector: {}", POLICY)
    options = ExportOptions(kueue_version="v1beta2")
    exported = build_export(load(queues), options, alert_rules())
    check_export(exported, options)
    (cq,) = [o for objs in exported.cluster_files().values() for o in objs if o["kind"] == "ClusterQueue"]
    assert cq["spec"]["concurrentAdmissionPolicy"] == policy
