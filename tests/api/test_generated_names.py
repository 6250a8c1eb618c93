"""``metadata.generateName``: the loader names such documents as an API server would, deterministically
(Kubernetes' SimpleNameGenerator: prefix cut to 58, five characters of ``util/rand``'s alphabet)."""

from __future__ import annotations

import re

import pytest

from gpuq.api import generated_names
from gpuq.api.loader import load_texts

SETUP = """
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
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 9}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: cq}
"""


def job(metadata: str) -> str:
    return f"""---
apiVersion: batch/v1
kind: Job
metadata:
  {metadata}
  labels: {{kueue.x-k8s.io/queue-name: q}}
spec:
  template:
    spec:
      containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: 1}}}}}}]
      restartPolicy: Never
"""


def source_names(text: str, seed: int = 0, path: str = "jobs.yaml") -> list[str]:
    result = load_texts([("setup.yaml", SETUP), (path, text)], name_seed=seed)
    assert not result.errors, result.errors
    return [m.name for m in result.manifests if m.kind == "Job"]


SUFFIX = re.compile(rf"^[{generated_names.ALPHABET}]{{5}}$")


@pytest.mark.parametrize(
    ("case", "metadata", "prefix"),
    [
        ("a short prefix is kept whole", "generateName: sample-job-", "sample-job-"),
        ("a prefix past 58 characters is cut to 58", f"generateName: {'a' * 70}-", "a" * 58),
        ("a name written wins over generateName", "name: fixed\n  generateName: ignored-", None),
    ],
)
def test_generated_name_is_prefix_plus_five_characters(case: str, metadata: str, prefix: str | None) -> None:
    (name,) = source_names(job(metadata))
    if prefix is None:
        assert name == "fixed"
        return
    assert name.startswith(prefix) and len(name) == len(prefix) + 5
    assert SUFFIX.match(name[len(prefix) :]), name


def test_same_input_same_names_and_two_documents_differ() -> None:
    text = job("generateName: sample-job-") * 2
    first = source_names(text)
    assert first == source_names(text)
    assert len(set(first)) == 2
    assert source_names(text, seed=1) != first
    assert source_names(text, path="other.yaml") != first


def test_a_generated_name_taken_by_a_written_one_is_drawn_again() -> None:
    (generated,) = source_names(job("generateName: sample-job-"))
    names = source_names(job("generateName: sample-job-") + job(f"name: {generated}"))
    assert names[1] == generated and names[0] != generated and names[0].startswith("sample-job-")


def test_plan_names_resolves_collisions_by_scope_only() -> None:
    documents = [
        ("f", 1, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "x-"}}),
        ("f", 1, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "x-"}}),
        (
            "f",
            1,
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "x-", "namespace": "b"}},
        ),
    ]
    planned = generated_names.plan_names(documents)
    assert planned[0] != planned[1]  # same file and line (a List's items): the second is hashed again
    assert planned[2] == planned[0]  # another namespace: no collision


def test_random_names_follow_the_api_servers_shape() -> None:
    name = generated_names.random_name("p" * 60)
    assert name[:58] == "p" * 58 and SUFFIX.match(name[58:])
