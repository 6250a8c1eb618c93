"""Backfill on the live loop's wall clock: the same lifecycle as in the simulator, with real processes.

A StrictFIFO queue of 2 GPUs with ``gpuq.dev/backfill: "true"``: ``big`` (1 GPU, declared 30 s)
runs, ``head`` (2 GPUs) waits for it with a reservation; a 1-GPU job declared to end before that
runs meanwhile, and one that overruns its declaration is evicted at it and waits its turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .test_loop import job, make_plane, run_until, state, submit

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: shared
  annotations: {gpuq.dev/backfill: "true"}
spec:
  namespaceSelector: {}
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared}
"""
SLEEP = "import time; time.sleep({})"


def declared(name: str, seconds: float, runs_s: float, gpus: int = 1) -> dict[str, Any]:
    return job(
        name,
        "team-a",
        SLEEP.format(runs_s),
        gpus=gpus,
        annotations={"gpuq.dev/expected-duration": f"{seconds:g}s"},
    )


@pytest.fixture
def plane(tmp_path: Path):  # type: ignore[no-untyped-def]
    store, loop = make_plane(tmp_path, CONFIG)
    yield store, loop
    loop.close()
    store.close()


def test_a_job_that_ends_before_the_reservation_runs_ahead_of_the_blocked_head(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop = plane
    submit(store, declared("big", 60, 60))
    run_until(loop, lambda: state(store, "team-a", "big") == "Running")
    submit(store, declared("head", 60, 1, gpus=2))
    submit(store, declared("quick", 20, 0.2))
    run_until(loop, lambda: state(store, "team-a", "quick") == "Succeeded")
    assert state(store, "team-a", "head") == "Pending"
    head = store.get_workload("team-a", "head")
    assert head is not None and "reserved (gpuq.dev/backfill)" in head.message


def test_a_backfilled_job_that_overruns_its_declaration_is_evicted_and_waits_its_turn(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop = plane
    submit(store, declared("big", 60, 60))
    run_until(loop, lambda: state(store, "team-a", "big") == "Running")
    submit(store, declared("head", 60, 1, gpus=2))
    submit(store, declared("liar", 1, 60))
    run_until(loop, lambda: state(store, "team-a", "liar") == "Running")
    run_until(loop, lambda: state(store, "team-a", "liar") == "Pending")
    record = store.get_workload("team-a", "liar")
    assert record is not None
    requeued = [c for c in store.conditions(record.id) if c.type == "Requeued"]
    assert requeued[-1].reason == "BackfillLimitExceeded"
    for _ in range(20):  # it is not backfilled again: it waits behind the head
        loop.step()
    assert state(store, "team-a", "liar") == "Pending"
