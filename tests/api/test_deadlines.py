"""The ``gpuq.dev/deadline`` annotations: read at the manifest edge into the core Workload."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuq.api.loader import load

CONFIG = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team}
spec: {clusterQueue: cq}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: team
  creationTimestamp: "2026-11-30T10:00:00Z"
  labels: {kueue.x-k8s.io/queue-name: q}
  annotations: {annotations}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        resources: {{requests: {{nvidia.com/gpu: "1"}}}}
"""
CREATED = datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp()


def write_job(tmp_path: Path, annotations: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG.replace("{annotations}", annotations).replace("{{", "{").replace("}}", "}"))
    return path


def load_job(tmp_path: Path, annotations: str) -> tuple[float | None, list[str]]:
    result = load([str(write_job(tmp_path, annotations))])
    errors = [f"{d.path}: {d.message}" for d in result.diagnostics if d.severity == "error"]
    return (result.workloads[0].deadline if result.workloads else None), errors


CASES = [
    ("no annotation: no deadline", "{}", None, []),
    ("an RFC 3339 time", '{gpuq.dev/deadline: "2026-11-30T18:00:00Z"}', CREATED + 8 * 3600, []),
    ("a duration after creation", "{gpuq.dev/deadline-after: 4h}", CREATED + 4 * 3600, []),
    (
        "both: the earlier wins",
        '{gpuq.dev/deadline: "2026-11-30T18:00:00Z", gpuq.dev/deadline-after: 90m}',
        CREATED + 5400,
        [],
    ),
]


@pytest.mark.parametrize(("annotations", "deadline"), [c[1:3] for c in CASES], ids=[c[0] for c in CASES])
def test_a_deadline_annotation_becomes_the_workloads_deadline(
    tmp_path: Path, annotations: str, deadline: float | None
) -> None:
    assert load_job(tmp_path, annotations) == (deadline, [])


BAD = [
    ("a time that is not RFC 3339", "{gpuq.dev/deadline: tomorrow}", "gpuq.dev/deadline", "RFC 3339"),
    ("a duration that is not one", "{gpuq.dev/deadline-after: soon}", "gpuq.dev/deadline-after", "duration"),
    ("a duration of zero", '{gpuq.dev/deadline-after: "0"}', "gpuq.dev/deadline-after", "positive"),
]


@pytest.mark.parametrize(("annotations", "field", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_deadline_is_an_error_naming_the_file_object_and_field(
    tmp_path: Path, annotations: str, field: str, expected: str
) -> None:
    result = load([str(write_job(tmp_path, annotations))])
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert len(errors) == 1, errors
    shown = str(errors[0])
    assert "job.yaml" in shown and "train" in shown and field in shown and expected in shown
