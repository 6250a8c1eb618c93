"""Workload sources become the Workloads Kueue's job integrations would build."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuq.api.sources import SourceError, is_source, to_workload, workload_name

QUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}


def pod_spec(image: str = "img", container: str = "c", **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": container, "image": image}], **extra}


def template(image: str = "img", container: str = "c", **extra: Any) -> dict[str, Any]:
    return {"spec": pod_spec(image, container, **extra)}


def pt_template(image: str = "img", **extra: Any) -> dict[str, Any]:
    """A template the training operator accepts in a PyTorchJob: its container is named ``pytorch``."""
    return template(image, "pytorch", **extra)


def source(api_version: str, kind: str, spec: Any, name: str = "w", **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, **metadata}, "spec": spec}


def job(name: str = "w", **spec: Any) -> dict[str, Any]:
    return source("batch/v1", "Job", {"template": template(), **spec}, name)


def jobset(*replicated: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return source("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": list(replicated)}, **metadata)


def rjob(name: str, replicas: int | None = None, **job_spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "template": {"spec": {"template": template(name), **job_spec}}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def pytorchjob(replica_specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return source("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": replica_specs, **spec})


def worker_group(name: str, replicas: int | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"groupName": name, "template": template(name), **extra}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def cluster_spec(*workers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"headGroupSpec": {"template": template("ray:2.9")}, "workerGroupSpecs": list(workers), **extra}


def rayjob(cluster: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return source("ray.io/v1", "RayJob", {"rayClusterSpec": cluster, **spec})


def raycluster(cluster: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return source("ray.io/v1", "RayCluster", cluster, **metadata)


def ps(name: str, count: int, tmpl: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "count": count, "template": tmpl, **extra}


SUBMITTER_RESOURCES = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}
DEFAULT_SUBMITTER = {
    "spec": {
        "containers": [{"name": "ray-job-submitter", "image": "ray:2.9", "resources": SUBMITTER_RESOURCES}],
        "restartPolicy": "Never",
    }
}


def _with_annotations(doc: dict[str, Any], **annotations: str) -> dict[str, Any]:
    doc["metadata"]["annotations"] = annotations
    return doc


def _with_labels(doc: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    doc["metadata"]["labels"] = labels
    return doc


def _head_with_requests(requests: dict[str, str]) -> dict[str, Any]:
    spec = cluster_spec()
    spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": requests}
    return spec


POD_SET_CASES = [
    pytest.param(job(), [ps("main", 1, template())], id="a job without parallelism runs one pod"),
    pytest.param(
        job(parallelism=5, completions=3),
        [ps("main", 3, template())],
        id="a job's count is its parallelism capped by its completions",
    ),
    pytest.param(
        job(parallelism=4, completions=10),
        [ps("main", 4, template())],
        id="more completions than parallelism",
    ),
    pytest.param(
        _with_annotations(job(parallelism=4), **{"kueue.x-k8s.io/job-min-parallelism": "2"}),
        [ps("main", 4, template(), minCount=2)],
        id="the min-parallelism annotation gives the job a minCount for partial admission",
    ),
    pytest.param(
        job(
            template={
                "metadata": {"labels": {"job-name": "x", "batch.kubernetes.io/job-name": "x", "team": "a"}},
                "spec": pod_spec(),
            }
        ),
        [ps("main", 1, {"metadata": {"labels": {"team": "a"}}, "spec": pod_spec()})],
        id="labels the job controller manages are dropped from the pod template",
    ),
    pytest.param(
        jobset(rjob("leader"), rjob("workers", replicas=3, parallelism=4, completions=2)),
        [ps("leader", 1, template("leader")), ps("workers", 6, template("workers"))],
        id="a jobset has one pod set per replicated job of replicas times the job's pods",
    ),
    pytest.param(
        pytorchjob(
            {
                "Worker": {"replicas": 3, "template": pt_template("w")},
                "Master": {"template": pt_template("m")},
            }
        ),
        [ps("master", 1, pt_template("m")), ps("worker", 3, pt_template("w"))],
        id="a pytorchjob lists master before worker whatever the manifest order",
    ),
    pytest.param(
        pytorchjob({"Worker": {"replicas": 2, "template": pt_template("w")}}),
        [ps("worker", 2, pt_template("w"))],
        id="a pytorchjob without a master has only the worker pod set",
    ),
    pytest.param(
        rayjob(cluster_spec(worker_group("GPU-Workers", 2, numOfHosts=4), worker_group("cpu"))),
        [
            ps("head", 1, template("ray:2.9")),
            ps("gpu-workers", 8, template("GPU-Workers")),
            ps("cpu", 1, template("cpu")),
            ps("submitter", 1, DEFAULT_SUBMITTER),
        ],
        id="a rayjob has head, lowercased worker groups times hosts, and the default submitter",
    ),
    pytest.param(
        rayjob(cluster_spec(), submitterPodTemplate=template("submit")),
        [ps("head", 1, template("ray:2.9")), ps("submitter", 1, template("submit"))],
        id="a rayjob's own submitter template replaces the default one",
    ),
    pytest.param(
        rayjob(cluster_spec(worker_group("w", 0)), submissionMode="HTTPMode"),
        [ps("head", 1, template("ray:2.9")), ps("w", 0, template("w"))],
        id="a rayjob submitted over HTTP has no submitter pod set",
    ),
    pytest.param(
        rayjob(cluster_spec(), submissionMode="SidecarMode"),
        [
            ps(
                "head",
                1,
                {
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "ray:2.9"},
                            {"name": "ray-job-submitter", "resources": SUBMITTER_RESOURCES},
                        ]
                    }
                },
            )
        ],
        id="a sidecar-mode rayjob adds the submitter container to the head",
    ),
    pytest.param(
        _with_annotations(
            rayjob(_head_with_requests({"cpu": "100m", "memory": "1Gi"})), **{"ray.io/ft-enabled": "True"}
        ),
        [
            ps(
                "head",
                1,
                {
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "ray:2.9",
                                "resources": {"requests": {"cpu": "200m", "memory": "1Gi"}},
                            }
                        ]
                    }
                },
            ),
            ps("submitter", 1, DEFAULT_SUBMITTER),
        ],
        id="gcs fault tolerance raises the head's requests to the redis cleanup job's",
    ),
    pytest.param(
        raycluster(cluster_spec(worker_group("Small", 3))),
        [ps("head", 1, template("ray:2.9")), ps("small", 3, template("Small"))],
        id="a raycluster has head and worker groups and no submitter",
    ),
    pytest.param(
        raycluster(cluster_spec(enableInTreeAutoscaling=True)),
        [
            ps(
                "head",
                1,
                {
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "ray:2.9"},
                            {
                                "name": "autoscaler",
                                "resources": {
                                    "requests": {"cpu": "500m", "memory": "512Mi"},
                                    "limits": {"cpu": "500m", "memory": "512Mi"},
                                },
                            },
                        ]
                    }
                },
            )
        ],
        id="an unmanaged autoscaling raycluster accounts for the autoscaler sidecar",
    ),
    pytest.param(
        source("v1", "Pod", pod_spec(priorityClassName="high")),
        [ps("main", 1, {"spec": pod_spec(priorityClassName="high")})],
        id="a pod is one pod set of one pod",
    ),
]


@pytest.mark.parametrize(("doc", "want"), POD_SET_CASES)
def test_pod_sets(doc: dict[str, Any], want: list[dict[str, Any]]) -> None:
    assert to_workload(doc)["spec"]["podSets"] == want


JOB_UID = "2f3e1a3c-0000-4000-8000-000000000001"


def _full_job() -> dict[str, Any]:
    doc = job("train", parallelism=2, template=template(priorityClassName="batch-low"))
    doc["metadata"].update(
        namespace="ml",
        uid=JOB_UID,
        creationTimestamp="2024-05-01T10:00:00Z",
        labels={**QUEUE, "kueue.x-k8s.io/max-exec-time-seconds": "3600", "team": "a"},
        annotations={"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600", "other": "x"},
    )
    return doc


def test_a_job_becomes_the_whole_workload_kueue_builds() -> None:
    assert to_workload(_full_job()) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name("train", JOB_UID, "Job", "batch"),
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/job-uid": JOB_UID},
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "annotations": {
                "provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600",
                "gpuq.dev/source": "Job/train",
            },
        },
        "spec": {
            "queueName": "team-a",
            "podSets": [ps("main", 2, template(priorityClassName="batch-low"))],
            "priorityClassName": "batch-low",
            "priorityClassSource": "scheduling.k8s.io/priorityclass",
            "maximumExecutionTimeSeconds": 3600,
        },
    }


NAME_CASES = [
    # sha1("Job\nbatch\ntrain\n") = e5b0e36f..., computed with `printf 'Job\nbatch\ntrain\n' | sha1sum`
    pytest.param(job("train"), "job-train-e5b0e", id="a job without a uid hashes kind, group and name"),
    # sha1("Job\nbatch\ntrain\nabc-123") = c3a13c87...
    pytest.param(
        job("train") | {"metadata": {"name": "train", "uid": "abc-123"}},
        "job-train-c3a13",
        id="the owner's uid is part of the hash",
    ),
    # sha1("RayJob\nray.io\nr1\n") = 6bc6b636...
    pytest.param(
        rayjob(cluster_spec()) | {"metadata": {"name": "r1"}}, "rayjob-r1-6bc6b", id="a rayjob's group"
    ),
    # sha1("Pod\n\np1\n") = 2e2d3f81...
    pytest.param(source("v1", "Pod", pod_spec(), name="p1"), "pod-p1-2e2d3", id="a pod has the empty group"),
]


@pytest.mark.parametrize(("doc", "want"), NAME_CASES)
def test_workload_names_match_kueues_hash(doc: dict[str, Any], want: str) -> None:
    assert to_workload(doc)["metadata"]["name"] == want


def test_a_long_owner_name_is_cut_to_fit_253_characters() -> None:
    name = to_workload(job("a" * 300))["metadata"]["name"]
    assert (len(name), name[:248]) == (253, "job-" + "a" * 243 + "-")


PRIORITY_CASES = [
    pytest.param(
        _with_labels(
            job(template=template(priorityClassName="pc")), {"kueue.x-k8s.io/priority-class": "wpc"}
        ),
        ("wpc", "kueue.x-k8s.io/workloadpriorityclass"),
        id="the workload priority class label wins over the pod's priority class",
    ),
    pytest.param(job(), ("", ""), id="no priority class anywhere leaves both fields empty"),
    pytest.param(
        jobset(
            rjob("a"), rjob("b") | {"template": {"spec": {"template": template(priorityClassName="b-pc")}}}
        ),
        ("b-pc", "scheduling.k8s.io/priorityclass"),
        id="a jobset takes the first pod set template that names a priority class",
    ),
    pytest.param(
        pytorchjob(
            {"Master": {"template": pt_template(priorityClassName="m-pc")}},
            runPolicy={"schedulingPolicy": {"priorityClass": "run-pc"}},
        ),
        ("run-pc", "scheduling.k8s.io/priorityclass"),
        id="a pytorchjob's scheduling policy priority class comes before its templates",
    ),
    pytest.param(
        pytorchjob(
            {
                "Worker": {"template": pt_template(priorityClassName="w-pc")},
                "Master": {"template": pt_template()},
            }
        ),
        ("w-pc", "scheduling.k8s.io/priorityclass"),
        id="a pytorchjob without a scheduling policy uses the first replica type that names one",
    ),
]


@pytest.mark.parametrize(("doc", "want"), PRIORITY_CASES)
def test_priority(doc: dict[str, Any], want: tuple[str, str]) -> None:
    spec = to_workload(doc)["spec"]
    assert (spec["priorityClassName"], spec["priorityClassSource"]) == want


QUEUE_CASES = [
    pytest.param(_with_labels(job(), QUEUE), "team-a", id="the queue-name label names the queue"),
    pytest.param(
        _with_annotations(job(), **QUEUE), "team-a", id="the deprecated queue-name annotation still works"
    ),
    pytest.param(job(suspend=False), "", id="a job without a queue name is converted with an empty queue"),
]


@pytest.mark.parametrize(("doc", "want"), QUEUE_CASES)
def test_queue_name(doc: dict[str, Any], want: str) -> None:
    assert to_workload(doc)["spec"]["queueName"] == want


def test_label_keys_to_copy_carries_chosen_labels() -> None:
    doc = _with_labels(job(), {"team": "a", "cost-center": "7", **QUEUE})
    assert to_workload(doc, label_keys_to_copy=["team", "missing"])["metadata"]["labels"] == {"team": "a"}


def test_the_source_document_is_not_modified() -> None:
    doc = _with_annotations(rayjob(_head_with_requests({"cpu": "1"})), **{"ray.io/ft-enabled": "true"})
    before = copy.deepcopy(doc)
    workload = to_workload(doc)
    workload["spec"]["podSets"][0]["template"]["spec"]["containers"].append({"name": "extra"})
    assert doc == before


def _managed(doc: dict[str, Any]) -> dict[str, Any]:
    return _with_labels(doc, dict(QUEUE))


ERROR_CASES = [
    pytest.param(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {}},
        "metadata.name",
        id="a source without a name is refused",
    ),
    pytest.param(source("batch/v1", "Job", ["x"]), "spec", id="a spec that is not a mapping is refused"),
    pytest.param(job(parallelism=-1), "spec.parallelism", id="a negative parallelism is refused"),
    pytest.param(job(completions=True), "spec.completions", id="a boolean completions is refused"),
    pytest.param(
        source("batch/v1", "Job", {}), "spec.template", id="a job without a pod template is refused"
    ),
    pytest.param(job(template={"metadata": {}}), "spec.template.spec", id="a template without a pod spec"),
    pytest.param(
        _with_annotations(job(parallelism=3), **{"kueue.x-k8s.io/job-min-parallelism": "two"}),
        "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]",
        id="a min-parallelism that is not an integer is refused as Kueue's webhook does",
    ),
    pytest.param(
        _with_annotations(job(parallelism=3), **{"kueue.x-k8s.io/job-min-parallelism": "3"}),
        "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]",
        id="a min-parallelism not below the pod count is refused",
    ),
    pytest.param(
        jobset(rjob("a", replicas="2")), "spec.replicatedJobs[0].replicas", id="a string replicas is refused"
    ),
    pytest.param(jobset(rjob("a"), rjob("a")), "spec.replicatedJobs", id="duplicate replicated job names"),
    pytest.param(jobset(), "spec.replicatedJobs", id="a jobset without replicated jobs is refused"),
    pytest.param(
        jobset(rjob("Big_Job")), "spec.replicatedJobs[0].name", id="a pod set name that is not a DNS label"
    ),
    pytest.param(
        pytorchjob({"Chief": {"template": pt_template()}}),
        "spec.pytorchReplicaSpecs[Chief]",
        id="an unknown pytorch replica type is refused rather than left unaccounted",
    ),
    pytest.param(
        pytorchjob({"Worker": {"replicas": -2, "template": pt_template()}}),
        "spec.pytorchReplicaSpecs[Worker].replicas",
        id="negative pytorch replicas are refused",
    ),
    pytest.param(
        rayjob(cluster_spec({"template": template()})),
        "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
        id="a worker group without a groupName is refused",
    ),
    pytest.param(
        raycluster(cluster_spec(worker_group("head"))),
        "spec.workerGroupSpecs[0].groupName",
        id="a worker group may not be called head",
    ),
    pytest.param(
        rayjob(cluster_spec(*[worker_group(f"g{i}") for i in range(7)])),
        "spec.rayClusterSpec.workerGroupSpecs",
        id="a rayjob whose pod sets exceed the workload's eight is refused",
    ),
    pytest.param(
        source("ray.io/v1", "RayJob", {"clusterSelector": {"ray.io/cluster": "shared"}}),
        "spec.clusterSelector",
        id="a rayjob on an existing cluster has no workload",
    ),
    pytest.param(
        source("ray.io/v1", "RayJob", {}),
        "spec.rayClusterSpec",
        id="a rayjob without a cluster spec is refused",
    ),
    pytest.param(
        _managed(rayjob(cluster_spec())),
        "spec.shutdownAfterJobFinishes",
        id="a managed rayjob must shut its cluster down when done",
    ),
    pytest.param(
        rayjob(cluster_spec(), submissionMode="Batch"), "spec.submissionMode", id="an unknown submission mode"
    ),
    pytest.param(
        rayjob({"headGroupSpec": {"template": {"spec": {}}}}),
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers",
        id="the default submitter needs a head container to copy the image from",
    ),
    pytest.param(
        _managed(raycluster(cluster_spec(enableInTreeAutoscaling=True))),
        "spec.enableInTreeAutoscaling",
        id="a managed raycluster may not autoscale",
    ),
    pytest.param(
        _with_labels(source("v1", "Pod", pod_spec()), {"kueue.x-k8s.io/pod-group-name": "g"}),
        "metadata.labels[kueue.x-k8s.io/pod-group-name]",
        id="pod groups are refused",
    ),
    pytest.param(
        _with_annotations(
            job(parallelism=3),
            **{"kueue.x-k8s.io/elastic-job": "true", "kueue.x-k8s.io/job-min-parallelism": "1"},
        ),
        "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]",
        id="an elastic job cannot use partial admission (Kueue's Job webhook)",
    ),
    pytest.param(source("apps/v1", "Deployment", {}), "kind", id="a kind that is not a workload source"),
]


@pytest.mark.parametrize(("doc", "field"), ERROR_CASES)
def test_errors_name_the_source_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SourceError) as raised:
        to_workload(doc)
    assert (raised.value.field, str(raised.value).startswith(f"{field}: ")) == (field, True)


@pytest.mark.parametrize(
    ("api_version", "kind", "want"),
    [
        pytest.param("batch/v1", "Job", True, id="batch jobs are sources"),
        pytest.param("jobset.x-k8s.io/v1alpha2", "JobSet", True, id="jobsets are sources"),
        pytest.param("kubeflow.org/v1", "PyTorchJob", True, id="pytorchjobs are sources"),
        pytest.param("ray.io/v1", "RayJob", True, id="rayjobs are sources"),
        pytest.param("ray.io/v1", "RayCluster", True, id="rayclusters are sources"),
        pytest.param("v1", "Pod", True, id="pods are sources"),
        pytest.param("kueue.x-k8s.io/v1beta1", "ClusterQueue", False, id="kueue's own kinds are not sources"),
        pytest.param("batch/v1beta1", "Job", False, id="the api version must match too"),
    ],
)
def test_is_source(api_version: str, kind: str, want: bool) -> None:
    assert is_source(api_version, kind) is want


@pytest.mark.parametrize(
    ("value", "elastic"),
    [("true", True), ("True", False), ("false", False)],
    ids=[
        "true makes an elastic job",
        "only the exact value counts (workloadslicing.Enabled)",
        "false is ignored",
    ],
)
def test_an_elastic_job_is_its_first_workload_slice(value: str, elastic: bool) -> None:
    doc = _with_annotations(job(parallelism=3, completions=100), **{"kueue.x-k8s.io/elastic-job": value})
    workload = to_workload(doc)
    plain = to_workload(job(parallelism=3, completions=100))
    assert workload["spec"] == plain["spec"] and workload["spec"]["podSets"][0]["count"] == 3
    annotations = workload["metadata"]["annotations"]
    expected = (
        {
            "kueue.x-k8s.io/elastic-job": "true",
            "kueue.x-k8s.io/workload-slice-name": workload["metadata"]["name"],
        }
        if elastic
        else {}
    )
    assert {k: v for k, v in annotations.items() if k.startswith("kueue.x-k8s.io/")} == expected


CLUSTER_SELECTOR = """apiVersion: ray.io/v1
kind: RayJob
metadata: {{name: on-shared, namespace: default{labels}}}
spec: {{entrypoint: python x.py, clusterSelector: {{ray.io/cluster: shared}}}}
"""


@pytest.mark.parametrize(
    ("labels", "error"),
    [("", None), (", labels: {kueue.x-k8s.io/queue-name: q}", "spec.clusterSelector")],
    ids=["without a queue Kueue leaves it alone: not scheduled", "with a queue Kueue's webhook refuses it"],
)
def test_a_rayjob_on_an_existing_cluster(labels: str, error: str | None) -> None:
    from gpuq.api.loader import load_texts

    result = load_texts([("rj.yaml", CLUSTER_SELECTOR.format(labels=labels))])
    assert [d.field for d in result.errors] == ([error] if error else [])
    if error is None:
        assert result.workloads == () and result.ignored_summary == "not scheduled by gpuq, ignored: 1 RayJob"
