"""Names a workload source's own controller would refuse are refused at load, with file, line and field.

A 253-character Job name used to be accepted (it is a DNS subdomain), admitted, shown Running,
and its pods failed to start for ever ("File name too long"); Kubernetes refuses it at create,
because the Job controller copies the name into its pods' ``batch.kubernetes.io/job-name``
label, whose value is at most 63 characters. Each kind has its controller's bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_sources import cluster_spec, job, jobset, pytorchjob, raycluster, rayjob, rjob, source, template

from gpuq.api.loader import load
from gpuq.api.names import source_document_problems, source_name_problem

QUEUE = {"kueue.x-k8s.io/queue-name": "q"}
CONFIG = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 100}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: cq}
"""


def named(document: dict[str, Any], name: str) -> dict[str, Any]:
    document["metadata"] = {"name": name, "namespace": "default", "labels": dict(QUEUE)}
    return document


def pod(name: str) -> dict[str, Any]:
    return named(source("v1", "Pod", template()["spec"]), name)


def load_one(tmp_path: Path, document: dict[str, Any]) -> Any:
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG + "---\n" + yaml.safe_dump(document, sort_keys=False))
    return load([str(path)])


LONGEST_OK = [
    ("Job", lambda n: named(job(), n), 63),
    ("JobSet", lambda n: named(jobset(rjob("workers", 2)), n), 63 - len("-workers-0")),
    (
        "PyTorchJob",
        lambda n: named(pytorchjob({"Master": {"template": template(container="pytorch")}}), n),
        63,
    ),
    ("RayJob", lambda n: named(rayjob(cluster_spec(), shutdownAfterJobFinishes=True), n), 47),
    ("RayCluster", lambda n: named(raycluster(cluster_spec()), n), 53),
    ("Pod", pod, 255 - len("_main-0")),
]


@pytest.mark.parametrize(("kind", "make", "longest"), LONGEST_OK, ids=[c[0] for c in LONGEST_OK])
def test_each_kind_takes_names_up_to_its_controllers_bound_and_no_longer(
    tmp_path: Path, kind: str, make: Any, longest: int
) -> None:
    fits = load_one(tmp_path, make("a" * longest))
    assert fits.errors == (), "\n".join(map(str, fits.errors))
    assert len(fits.workloads) == 1
    too_long = "a" * (longest + 1)
    refused = load_one(tmp_path, make(too_long))
    assert refused.config is None and refused.workloads == ()
    (error,) = [d for d in refused.errors if d.field == "metadata.name"]
    assert (error.kind, error.name, error.path) == (kind, too_long, str(tmp_path / "job.yaml"))
    assert error.line == CONFIG.count("\n") + 2, "the line of the source's document in the file"
    assert f"invalid {kind} name" in error.message
    assert str(error).startswith(f"{tmp_path / 'job.yaml'}:{error.line}: {kind}/{too_long}: metadata.name: ")


def test_the_253_character_job_of_the_report_is_refused_saying_why(tmp_path: Path) -> None:
    result = load_one(tmp_path, named(job(), "j" * 253))
    (error,) = result.errors
    assert "must be no more than 63 characters" in error.message
    assert "batch.kubernetes.io/job-name" in error.message
    assert "... (253)" in error.message, "a long name is shown shortened, with its length"


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("PyTorchJob", "1-starts-with-a-digit", "RFC 1035 label"),
        ("RayJob", "Upper", "RFC 1035 label"),
        ("RayCluster", "a.b", "RFC 1035 label"),
        ("JobSet", "9lives", "RFC 1035 label"),
        ("Pod", "a" * 254, "no more than 253"),
    ],
)
def test_kinds_whose_names_become_service_or_host_names_want_dns_1035_labels(
    kind: str, name: str, expected: str
) -> None:
    problem = source_name_problem(kind, name, ("workers",))
    assert problem is not None and expected in problem
    assert source_name_problem("Job", "9lives.v2") is None, "a Job's name is a subdomain of at most 63"


def test_an_indexed_job_needs_room_for_its_largest_index() -> None:
    """Kubernetes' ValidateJob: an Indexed Job's pods are host names ``<name>-<index>``."""
    document = job("a" * 60, completionMode="Indexed", completions=1000)
    ((field, message),) = source_document_problems(document)
    assert field == ("metadata", "name") and f"{'a' * 60}-999" in message
    assert list(source_document_problems(job("a" * 59, completionMode="Indexed", completions=1000))) == []
    assert list(source_document_problems(job("a" * 63, completions=1000))) == [], "not Indexed: no index"


def test_a_jobset_needs_room_for_its_largest_job_and_pod_names() -> None:
    """JobSet's ValidateCreate: Jobs ``<jobset>-<job>-<replicas-1>``, Indexed pods ``...-<i>-abcde``."""
    name = "a" * 50
    fits = jobset(rjob("workers", 100), name=name)  # aaa...-workers-99: 61
    assert list(source_document_problems(fits)) == []
    assert source_name_problem("JobSet", name, ("workers",)) is None
    many = jobset(rjob("w", 1), rjob("workers", 100_000), name=name)  # aaa...-workers-99999: 64
    ((field, message),) = source_document_problems(many)
    assert field == ("spec", "replicatedJobs", 1, "name") and "would name a Job" in message
    indexed = jobset(rjob("workers", 2, completionMode="Indexed", completions=100), name=name)
    ((field, message),) = source_document_problems(indexed)
    assert field == ("spec", "replicatedJobs", 0, "name") and f"{name}-workers-1-99-abcde" in message


DOCUMENT_RULES = [
    pytest.param(
        lambda: named(job(completionMode="Indexed", completions=1000), "a" * 60),
        "metadata.name",
        "-999",
        id="an indexed job's largest pod host name",
    ),
    pytest.param(
        lambda: named(jobset(rjob("w" * 40, 100)), "j" * 20),
        "spec.replicatedJobs[0].name",
        "the JobSet controller would name a Job",
        id="a jobset's largest job name",
    ),
]


@pytest.mark.parametrize(("make", "field", "expected"), DOCUMENT_RULES)
def test_the_rules_that_read_the_whole_source_are_refused_at_load_naming_the_field(
    tmp_path: Path, make: Any, field: str, expected: str
) -> None:
    result = load_one(tmp_path, make())
    (error,) = result.errors
    assert (error.field, error.path) == (field, str(tmp_path / "job.yaml")) and expected in error.message
    assert error.line > CONFIG.count("\n"), "the line in the source's document"
