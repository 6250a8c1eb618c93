"""``gpuq validate DIR`` says what ``gpuq validate FILE`` says of each of its files, plus what only
the files together show (a reference one file makes to another, a name two files define)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app

runner = CliRunner()

FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
"""
CLUSTER_QUEUE = """\
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
"""
LOCAL_QUEUE = """\
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: team}
"""
QUEUES = FLAVOR + CLUSTER_QUEUE + LOCAL_QUEUE  # 19 lines


def job(name: str, gpus: int, *, elastic: bool = False) -> str:
    """A Job on LocalQueue ``q``; its ``apiVersion`` is its first line, after the ``---``."""
    annotations = "  annotations: {kueue.x-k8s.io/elastic-job: 'true'}\n" if elastic else ""
    return f"""\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: default
{annotations}  labels: {{kueue.x-k8s.io/queue-name: q}}
spec:
  template:
    spec:
      containers:
      - name: c
        image: busybox
        resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}
"""


BAD_FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: bad_name}\n"
NO_OBJECTS = (
    "warning: no Kubernetes objects (the file is empty, or holds only comments, '---' or null documents)"
)
HUGE = (
    "Job/huge: spec.podSets[0]: pod set 'main' needs 100000 nvidia.com/gpu (1 pods) but cluster queue team "
    "can never hold more than 4 in any flavor"
)
LOST = "Job/{0}: metadata.labels[kueue.x-k8s.io/queue-name]: LocalQueue 'q' not found in namespace 'default'"
ELASTIC = (
    "Job/{0}: metadata.annotations: warning: elastic job: admitted as its first workload slice; scaling it "
    "without requeue (a new slice replacing this one, pkg/workloadslicing) is not modelled yet"
)


@dataclass(frozen=True)
class Case:
    """Files of one directory; ``resolved``: what a file alone reports and the directory does not (a
    reference another file satisfies); ``cross_file``: what only the directory reports."""

    files: dict[str, str]
    exit_code: int
    resolved: set[str] = field(default_factory=set)
    cross_file: set[str] = field(default_factory=set)


CASES = {
    "a job no queue can ever hold is still reported beside another file's broken object": Case(
        {"a.yaml": QUEUES + job("huge", 100_000), "b.yaml": BAD_FLAVOR},
        exit_code=1,
    ),
    "empty, comment-only and null-only files are warnings and the directory stays valid": Case(
        {
            "queues.yaml": QUEUES,
            "empty.yaml": "",
            "comments.yml": "# nothing here yet\n",
            "separators.yaml": "---\n# a comment\n---\n",
            "nulls.yaml": "null\n---\n~\n",
            "null.json": "null\n",
        },
        exit_code=0,
    ),
    "a job whose queue another file defines: the reference resolves and its capacity is checked": Case(
        {"queues.yaml": QUEUES, "jobs.yaml": job("small", 1) + job("huge", 100_000)},
        exit_code=1,
        resolved={f"jobs.yaml:7: {LOST.format('small')}", f"jobs.yaml:21: {LOST.format('huge')}"},
        cross_file={f"jobs.yaml:16: {HUGE}"},
    ),
    "a queue missing from every file is reported once per job that names it": Case(
        {"queues.yaml": FLAVOR + CLUSTER_QUEUE, "a.yaml": job("a", 1), "b.yaml": job("b", 1)},
        exit_code=1,
    ),
    "a ClusterQueue defined in two files is a duplicate on each, and each file's findings remain": Case(
        {"a.yaml": QUEUES + job("huge", 100_000), "b.yaml": CLUSTER_QUEUE.removeprefix("---\n")},
        exit_code=1,
        resolved={
            "b.yaml:9: ClusterQueue/team: spec.resourceGroups[0].flavors[0].name: ResourceFlavor 'gpu' not "
            "found (Kueue: Can't admit new workloads)"
        },
        cross_file={
            "a.yaml:5: ClusterQueue/team: duplicate ClusterQueue: also defined at {dir}/b.yaml:1",
            "b.yaml:1: ClusterQueue/team: duplicate ClusterQueue: also defined at {dir}/a.yaml:5",
        },
    ),
    "each file's elastic jobs keep their warning": Case(
        {"a.yaml": QUEUES + job("one", 1, elastic=True), "b.yaml": job("two", 1, elastic=True)},
        exit_code=0,
        resolved={f"b.yaml:8: {LOST.format('two')}"},
    ),
    "a file that is not YAML beside files with errors and warnings": Case(
        {
            "bad.yaml": "kind: [unclosed\n",
            "empty.yaml": "",
            "a.yaml": QUEUES + job("huge", 100_000),
            "b.yaml": BAD_FLAVOR,
        },
        exit_code=1,
    ),
}


def findings(path: Path, root: Path) -> tuple[int, list[str]]:
    """``gpuq validate -f path``: its exit code and its diagnostic lines, paths relative to ``root``."""
    result = runner.invoke(app, ["validate", "-f", str(path)])
    prefix = f"{root}/"
    lines = [line.removeprefix(prefix) for line in result.stderr.splitlines() if line.startswith(prefix)]
    return result.exit_code, [line.replace(str(root), "{dir}") for line in lines]


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_directory_reports_what_its_files_report_plus_the_cross_file_findings(
    tmp_path: Path, case: Case
) -> None:
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    one_by_one: set[str] = set()
    for name in case.files:
        one_by_one |= set(findings(tmp_path / name, tmp_path)[1])
    assert case.resolved <= one_by_one
    exit_code, together = findings(tmp_path, tmp_path)
    assert sorted(together) == sorted((one_by_one - case.resolved) | case.cross_file)
    assert exit_code == case.exit_code


@pytest.mark.parametrize(
    ("text", "reported"),
    [
        ("", f"empty.yaml:1: {NO_OBJECTS}"),
        ("# only a comment\n---\n---\n~\n", f"empty.yaml:1: {NO_OBJECTS}"),
        (FLAVOR, None),
    ],
    ids=["an empty file", "comments, separators and a null document", "a file with an object"],
)
def test_a_file_without_kubernetes_objects_is_a_warning_that_names_it(
    tmp_path: Path, text: str, reported: str | None
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    exit_code, lines = findings(path, tmp_path)
    assert (exit_code, lines) == (0, [reported] if reported else [])
