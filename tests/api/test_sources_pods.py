"""Pod-based kinds become the Workloads Kueue's pod, statefulset, deployment, leaderworkerset,
appwrapper integrations build; Argo and Tekton runs the pods' Workloads; a CronJob its next Job."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import load_texts
from gpuq.api.sources import workload_name
from gpuq.api.sources_derived import derive_all, live_refusal
from gpuq.api.sources_pods import Derived, role_hash

EXAMPLES = Path(__file__).parents[1] / "data" / "kueue-v0.19.2" / "site" / "static" / "examples"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def example(path: str, *names: str) -> list[dict[str, Any]]:
    """The documents of a Kueue example; ``names`` set a name where the example has ``generateName``."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / path).read_text()) if d]
    for doc, name in zip(docs, names, strict=False):
        doc["metadata"].pop("generateName", None)
        doc["metadata"]["name"] = name
    return docs


def shape(derived: Derived) -> list[tuple[str, str, list[tuple[str, int]]]]:
    """(name, queue, [(pod set, count)]) of each Workload."""
    return [
        (
            w["metadata"]["name"],
            w["spec"]["queueName"],
            [(p["name"], p["count"]) for p in w["spec"]["podSets"]],
        )
        for w in derived.workloads
    ]


def pod(name: str, group: str = "g", total: object = "2", cpu: str = "1", **extra: Any) -> dict[str, Any]:
    annotations = {} if total is None else {TOTAL: total}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": "q", GROUP: group},
            "annotations": annotations,
            **extra,
        },
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
    }


CPU3 = {"containers": [{"name": "sleep", "image": "busybox", "resources": {"requests": {"cpu": 3}}}]}
LWS_UID = ""


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        pytest.param(
            example("pods-kueue/kueue-pod-group.yaml", "sample-leader", "sample-worker"),
            [("sample-group", "user-queue", [(role_hash(CPU3 | {"restartPolicy": "Never"}), 2)])],
            id="the two identical pods of Kueue's pod-group example are one Workload of one role",
        ),
        pytest.param(
            [pod("a"), pod("b", cpu="2")],
            sorted(
                [
                    (
                        "g",
                        "q",
                        sorted([(role_hash(pod("a")["spec"]), 1), (role_hash(pod("b", cpu="2")["spec"]), 1)]),
                    )
                ]
            ),
            id="pods of different shapes are one pod set each, sorted by role hash",
        ),
        pytest.param(
            example("serving-workloads/sample-leaderworkerset.yaml"),
            [
                (
                    workload_name(
                        "nginx-leaderworkerset-0", "", "LeaderWorkerSet", "leaderworkerset.x-k8s.io"
                    ),
                    "user-queue",
                    [("leader", 1), ("worker", 2)],
                ),
                (
                    workload_name(
                        "nginx-leaderworkerset-1", "", "LeaderWorkerSet", "leaderworkerset.x-k8s.io"
                    ),
                    "user-queue",
                    [("leader", 1), ("worker", 2)],
                ),
            ],
            id="a LeaderWorkerSet is one Workload per group: leader 1 and worker size-1",
        ),
        pytest.param(
            example("appwrapper/leaderworkerset-sample.yaml"),
            [
                (
                    workload_name("sample-appwrapper-lws", "", "AppWrapper", "workload.codeflare.dev"),
                    "user-queue",
                    [("sample-appwrapper-lws-0", 2), ("sample-appwrapper-lws-1", 3)],
                )
            ],
            id="an AppWrapper's declared pod sets are named <appwrapper>-<index>",
        ),
        pytest.param(
            example("appwrapper/pytorch-sample.yaml"),
            [
                (
                    workload_name(
                        "sample-appwrapper-pytorch-job", "", "AppWrapper", "workload.codeflare.dev"
                    ),
                    "user-queue",
                    [("sample-appwrapper-pytorch-job-0", 1), ("sample-appwrapper-pytorch-job-1", 1)],
                )
            ],
            id="an AppWrapper without pod sets gets the ones AppWrapper infers for a PyTorchJob",
        ),
        pytest.param(
            example("appwrapper/deployment-sample.yaml"),
            [
                (
                    workload_name("sample-appwrapper-deployment", "", "AppWrapper", "workload.codeflare.dev"),
                    "user-queue",
                    [("sample-appwrapper-deployment-0", 3)],
                )
            ],
            id="an AppWrapper wrapping a Deployment is one pod set of its replicas",
        ),
        pytest.param(
            example("jobs/sample-cronjob.yaml"),
            [(workload_name("sample-cronjob-1", "", "Job", "batch"), "user-queue", [("main", 3)])],
            id="a CronJob is the Job it creates next, with the jobTemplate's queue",
        ),
        pytest.param(
            example("pod-based-workloads/workflow-queue-per-template.yaml", "steps"),
            [
                (workload_name("steps-hello1", "", "Pod", ""), "user-queue", [("main", 1)]),
                (workload_name("steps-hello2a", "", "Pod", ""), "user-queue", [("main", 1)]),
                (workload_name("steps-hello2b", "", "Pod", ""), "user-queue-2", [("main", 1)]),
            ],
            id="an Argo Workflow is one pod Workload per step, each with its template's queue",
        ),
        pytest.param(
            example("pod-based-workloads/workflow-single-queue.yaml", "hello"),
            [(workload_name("hello", "", "Pod", ""), "user-queue", [("main", 1)])],
            id="a one-template Workflow is one pod with spec.podMetadata's queue",
        ),
        pytest.param(
            [
                *example("pod-based-workloads/tekton-pipeline-run.yaml", "run"),
                *example("pod-based-workloads/tekton-pipeline.yaml"),
                *example("pod-based-workloads/tekton-sleep-task.yaml"),
                *example("pod-based-workloads/tekton-hello-task.yaml"),
            ],
            [
                (workload_name("run-sleep-pod", "", "Pod", ""), "my-local-queue", [("main", 1)]),
                (workload_name("run-hello-pod", "", "Pod", ""), "my-local-queue", [("main", 1)]),
            ],
            id="a Tekton PipelineRun is one pod per pipeline task, found among the loaded Pipeline and Tasks",
        ),
    ],
)
def test_pod_based_kinds_give_the_workloads_kueue_builds(
    docs: list[dict[str, Any]], expected: list[Any]
) -> None:
    derived = derive_all(docs)
    assert [s for d in derived for s in shape(d)] == expected
    assert not [f for d in derived for f in d.findings if f.severity == "error"]


@pytest.mark.parametrize(
    ("docs", "field", "message", "pending"),
    [
        pytest.param(
            [pod("a")],
            f"metadata.labels[{GROUP}]",
            "'g' group has fewer runnable pods than expected (1 of 2)",
            True,
            id="an incomplete pod group stays pending with Kueue's message",
        ),
        pytest.param(
            [pod("a"), pod("b", total="3")],
            f"metadata.annotations[{TOTAL}]",
            "pods 'a' and 'b' has different 'kueue.x-k8s.io/pod-group-total-count' values: 2!=3",
            True,
            id="pods of a group disagreeing on the total count stay pending",
        ),
        pytest.param(
            [pod("a", total=None)],
            f"metadata.annotations[{TOTAL}]",
            f"both the '{TOTAL}' annotation and the '{GROUP}' label should be set",
            False,
            id="a group pod without a total count is refused as Kueue's webhook refuses it",
        ),
        pytest.param(
            [pod("a", total="0")],
            f"metadata.annotations[{TOTAL}]",
            f"incorrect annotation value '{TOTAL}=0': group total count should be greater than zero",
            False,
            id="a total count of zero is refused",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "workload.codeflare.dev/v1beta2",
                    "kind": "AppWrapper",
                    "metadata": {"name": "aw"},
                    "spec": {
                        "components": [
                            {
                                "template": {"apiVersion": "v1", "kind": "Pod", "spec": {}},
                                "podSets": [{"path": "template.spec.nowhere"}],
                            }
                        ]
                    },
                }
            ],
            "spec.components[0].podSets[0].path",
            "'template.spec.nowhere' does not lead to a pod template (stops at '.nowhere')",
            False,
            id="an AppWrapper path that leads nowhere names the path",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "metadata": {"name": "c"},
                    "spec": {"schedule": "61 * * * *", "jobTemplate": {"spec": {"template": {"spec": {}}}}},
                }
            ],
            "spec.schedule",
            "minute: '61' is outside 0-59",
            False,
            id="a bad cron schedule names the field",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "metadata": {"name": "l"},
                    "spec": {"leaderWorkerTemplate": {"size": 2}},
                }
            ],
            "spec.leaderWorkerTemplate.workerTemplate",
            "expected a mapping, got missing",
            False,
            id="a LeaderWorkerSet without a worker template is refused",
        ),
    ],
)
def test_refusals_and_pending_groups_name_the_field(
    docs: list[dict[str, Any]], field: str, message: str, pending: bool
) -> None:
    findings = [f for d in derive_all(docs) for f in d.findings]
    assert [(f.field, f.message, f.severity, f.stays_pending) for f in findings] == [
        (field, message, "error", pending)
    ]


def test_an_incomplete_group_loads_inactive_so_admit_never_admits_it() -> None:
    (workload,) = derive_all([pod("a")])[0].workloads
    assert workload["spec"]["active"] is False
    assert workload["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"] == "true"


def test_a_group_with_extra_pods_keeps_the_first_total_count() -> None:
    derived = derive_all([pod("a"), pod("b"), pod("c")])
    assert shape(derived[0])[0][2] == [(role_hash(pod("a")["spec"]), 2)]
    assert [f.message for f in derived[2].findings] == [
        "pod group 'g' has more pods than its total count: Kueue deletes this pod"
    ]


def test_tekton_tasks_alone_are_not_scheduled_and_unresolved_runs_warn() -> None:
    task, run = (
        example("pod-based-workloads/tekton-hello-task.yaml")[0],
        example("pod-based-workloads/tekton-pipeline-run.yaml", "r")[0],
    )
    derived = derive_all([task, run])
    assert [d.not_scheduled for d in derived] == [True, False]
    findings = [f for d in derived for f in d.findings]
    assert [(f.severity, f.message) for f in findings] == [
        ("warning", "'kueue-test' is not among the loaded objects: its pods are not scheduled by gpuq"),
    ]


def test_lws_tas_annotations_stay_in_the_pod_templates() -> None:
    (derived,) = derive_all(example("serving-workloads/sample-leaderworkerset-tas.yaml"))
    leader, worker = derived.workloads[0]["spec"]["podSets"]
    for pod_set in (leader, worker):
        assert pod_set["template"]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack",
            "kueue.x-k8s.io/podset-group-name": "lws-group",
        }


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            "serving-workloads/sample-deployment.yaml",
            [workload_name(f"nginx-deployment-{i}", "", "Pod", "") for i in range(3)],
            id="a queue-labelled Deployment is one pod Workload per replica",
        ),
        pytest.param(
            "serving-workloads/sample-statefulset.yaml",
            [workload_name("nginx-statefulset", "", "StatefulSet", "apps")],
            id="a queue-labelled StatefulSet is one pod-group Workload",
        ),
    ],
)
def test_deployments_and_statefulsets_load_as_pod_workloads(path: str, expected: list[str]) -> None:
    result = load_texts([(path, (EXAMPLES / path).read_text())])
    assert [w.name for w in result.workloads] == expected
    assert [sum(p.count for p in w.pod_sets) for w in result.workloads] == (
        [1, 1, 1] if "deployment" in path else [3]
    )


def test_a_deployment_without_a_queue_gives_no_workload() -> None:
    text = (EXAMPLES / "serving-workloads/sample-deployment.yaml").read_text()
    text = text.replace("    kueue.x-k8s.io/queue-name: user-queue\n", "")
    assert load_texts([("d.yaml", text)]).workloads == ()


def test_a_pod_group_across_files_loads_as_one_workload_with_lines() -> None:
    leader, worker = (yaml.safe_dump(p) for p in (pod("a"), pod("b")))
    result = load_texts([("a.yaml", leader), ("b.yaml", worker)])
    assert [(w.name, sum(p.count for p in w.pod_sets)) for w in result.workloads] == [("g", 2)]
    incomplete = load_texts([("a.yaml", leader)])
    assert [str(d) for d in incomplete.warnings if "group" in d.message] == [
        f"a.yaml:7: Pod/a: metadata.labels[{GROUP}]: warning: 'g' group has fewer runnable "
        "pods than expected (1 of 2): the workload stays pending (an error for gpuq validate)"
    ]


@pytest.mark.parametrize(
    ("doc", "refused"),
    [
        pytest.param(pod("a"), True, id="a pod group's pod"),
        pytest.param(
            example("serving-workloads/sample-leaderworkerset.yaml")[0], True, id="a LeaderWorkerSet"
        ),
        pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, False, id="a plain Pod"),
    ],
)
def test_live_control_planes_refuse_the_kinds_they_do_not_run(doc: dict[str, Any], refused: bool) -> None:
    assert (live_refusal(copy.deepcopy(doc)) is not None) is refused
