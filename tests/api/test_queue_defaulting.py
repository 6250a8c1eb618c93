"""gpuq.api.queue_defaulting: the queue of a Job written without a queue-name label, as Kueue decides it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import LoadResult, load
from gpuq.api.queue_defaulting import QueueDefaults, apply_default_local_queue
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LABEL_FIELD = f"metadata.labels[{QUEUE_LABEL}]"
NO_QUEUE = "workload has no queue name (label kueue.x-k8s.io/queue-name)"

CLUSTER: list[dict[str, Any]] = [
    {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "gpu"}},
    {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": "team"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
                    ],
                }
            ],
        },
    },
    {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "ml"},
        "spec": {"clusterQueue": "team"},
    },
]


def local_queue(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": "team"},
    }


def configuration(**settings: Any) -> dict[str, Any]:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **settings}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def job(
    namespace: str = "ml", labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def load_objects(tmp_path: Path, *objects: dict[str, Any]) -> tuple[LoadResult, str]:
    file = tmp_path / "objects.yaml"
    text = yaml.safe_dump_all([*CLUSTER, *objects], sort_keys=False)
    file.write_text(text)
    return load([str(file)]), text


def pending_message(result: LoadResult) -> str | None:
    """The engine's message for the one job (None when it is admitted)."""
    assert result.config is not None
    scheduler = Scheduler(result.config)
    for workload in result.workloads:
        scheduler.submit(workload)
    run = run_cycles(scheduler)
    (key,) = [w.key for w in result.workloads]
    return run.pending[key].message if key in run.pending else None


UNMANAGED = (
    "Job {ns}/train has no kueue.x-k8s.io/queue-name label: Kueue does not manage it ({why}); "
    "on a real cluster it runs outside quota"
)
MANAGED_WITHOUT_QUEUE = (
    "Job ml/train has no kueue.x-k8s.io/queue-name label and namespace ml has no LocalQueue named default: "
    "Kueue manages it (manageJobsWithoutQueueName is true) but its Workload has no queue and stays pending"
)

# id, extra objects, the job, the queue it gets, the warning (None: no warning)
CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], str, str | None]] = [
    (
        "a job without a queue label is not managed by Kueue by default",
        [],
        job(labels={"app": "x"}),
        "",
        UNMANAGED.format(ns="ml", why="manageJobsWithoutQueueName is false"),
    ),
    (
        "a job without labels at all is not managed either",
        [configuration(manageJobsWithoutQueueName=False)],
        job(),
        "",
        UNMANAGED.format(ns="ml", why="manageJobsWithoutQueueName is false"),
    ),
    (
        "local queue defaulting gives an unlabelled job its namespace's default queue",
        [local_queue("default", "ml")],
        job(labels={"app": "x"}),
        "default",
        None,
    ),
    (
        "local queue defaulting applies whatever manageJobsWithoutQueueName says",
        [local_queue("default", "ml"), configuration(manageJobsWithoutQueueName=True)],
        job(),
        "default",
        None,
    ),
    (
        "a default queue of another namespace does not apply",
        [local_queue("default", "other")],
        job(),
        "",
        UNMANAGED.format(ns="ml", why="manageJobsWithoutQueueName is false"),
    ),
    (
        "the LocalQueueDefaulting feature gate turned off leaves the job unmanaged",
        [local_queue("default", "ml"), configuration(featureGates={"LocalQueueDefaulting": False})],
        job(),
        "",
        UNMANAGED.format(ns="ml", why="manageJobsWithoutQueueName is false"),
    ),
    (
        "manageJobsWithoutQueueName without a default queue makes a workload without a queue",
        [configuration(manageJobsWithoutQueueName=True)],
        job(),
        "",
        MANAGED_WITHOUT_QUEUE,
    ),
    (
        "a namespace Kueue's default managedJobsNamespaceSelector leaves out is not managed",
        [configuration(manageJobsWithoutQueueName=True)],
        job(namespace="kube-system"),
        "",
        UNMANAGED.format(
            ns="kube-system", why="namespace kube-system is not selected by managedJobsNamespaceSelector"
        ),
    ),
    (
        "a namespace a custom managedJobsNamespaceSelector does not select is not managed",
        [
            configuration(
                manageJobsWithoutQueueName=True, managedJobsNamespaceSelector={"matchLabels": {"kueue": "on"}}
            ),
            namespace("ml", kueue="off"),
        ],
        job(),
        "",
        UNMANAGED.format(ns="ml", why="namespace ml is not selected by managedJobsNamespaceSelector"),
    ),
    (
        "a labelled job keeps its queue even when a default queue exists",
        [local_queue("default", "ml")],
        job(labels={QUEUE_LABEL: "q"}),
        "q",
        None,
    ),
    (
        "the deprecated queue-name annotation names the queue",
        [local_queue("default", "ml")],
        job(annotations={QUEUE_LABEL: "q"}),
        "q",
        None,
    ),
]


@pytest.mark.parametrize(
    ("extra", "source", "queue", "warning"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_queue_of_a_job(
    tmp_path: Path, extra: list[dict[str, Any]], source: dict[str, Any], queue: str, warning: str | None
) -> None:
    result, text = load_objects(tmp_path, *extra, source)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    (workload,) = result.workloads
    assert workload.queue_name == queue
    found = [d for d in result.warnings if d.kind == "Job"]
    if warning is None:
        assert found == [], "\n".join(map(str, found))
        return
    (diagnostic,) = found
    assert (diagnostic.name, diagnostic.field, diagnostic.message) == ("train", LABEL_FIELD, warning)
    assert "spec.queueName" not in str(diagnostic)
    lines = text.splitlines()
    job_start = max(i for i, line in enumerate(lines) if line == "kind: Job")
    written = "  labels:" if source["metadata"].get("labels") is not None else "metadata:"
    assert diagnostic.line == 1 + next(i for i in range(job_start, len(lines)) if lines[i] == written)


@pytest.mark.parametrize(
    ("extra", "source", "queue"),
    [c[1:4] for c in CASES if c[3] == ""],
    ids=[c[0] for c in CASES if c[3] == ""],
)
def test_a_job_left_without_a_queue_stays_pending_with_the_engine_message(
    tmp_path: Path, extra: list[dict[str, Any]], source: dict[str, Any], queue: str
) -> None:
    result, _ = load_objects(tmp_path, *extra, source)
    assert pending_message(result) == NO_QUEUE


def test_a_job_given_the_default_queue_is_admitted(tmp_path: Path) -> None:
    result, _ = load_objects(tmp_path, local_queue("default", "ml"), job())
    assert pending_message(result) is None


@pytest.mark.parametrize(
    ("source", "field"),
    [
        (job(labels={QUEUE_LABEL: "nope"}), LABEL_FIELD),
        (job(annotations={QUEUE_LABEL: "nope"}), f"metadata.annotations[{QUEUE_LABEL}]"),
    ],
    ids=["a label naming a missing queue", "the deprecated annotation naming a missing queue"],
)
def test_a_missing_local_queue_of_a_job_names_the_field_the_user_wrote(
    tmp_path: Path, source: dict[str, Any], field: str
) -> None:
    result, text = load_objects(tmp_path, source)
    (diagnostic,) = [d for d in result.warnings if d.kind == "Job"]
    assert (diagnostic.field, diagnostic.stays_pending) == (field, True)
    assert diagnostic.message.startswith("LocalQueue 'nope' not found in namespace 'ml'")
    assert text.splitlines()[diagnostic.line - 1].strip() == f"{QUEUE_LABEL}: nope"
    assert pending_message(result) == "LocalQueue nope doesn't exist in namespace ml"


DEFAULTS = QueueDefaults(default_queue_namespaces=frozenset({"ml"}))

# id, document, the labels after defaulting
DOCUMENTS: list[tuple[str, dict[str, Any], dict[str, str] | None]] = [
    ("an unlabelled job gets the default queue label", job(), {QUEUE_LABEL: "default"}),
    ("other labels are kept", job(labels={"app": "x"}), {"app": "x", QUEUE_LABEL: "default"}),
    ("a labelled job is left as it is", job(labels={QUEUE_LABEL: "q"}), {QUEUE_LABEL: "q"}),
    ("a job naming its queue in the annotation is left as it is", job(annotations={QUEUE_LABEL: "q"}), None),
    ("a namespace without a default queue changes nothing", job(namespace="other"), None),
]


@pytest.mark.parametrize(("document", "labels"), [d[1:] for d in DOCUMENTS], ids=[d[0] for d in DOCUMENTS])
def test_apply_default_local_queue_mutates_a_copy_as_kueue_s_webhook(
    document: dict[str, Any], labels: dict[str, str] | None
) -> None:
    before = yaml.safe_dump(document)
    defaulted = apply_default_local_queue(document, DEFAULTS)
    assert yaml.safe_dump(document) == before
    assert defaulted["metadata"].get("labels") == labels
