"""waitForPodsReady's requeuingStrategy.timestamp (Kueue: pkg/workload/workload.go
``GetQueueOrderTimestamp``, keps/1282-pods-ready-requeue-strategy): under ``Eviction`` (the default)
a workload evicted for PodsReadyTimeout waits in its queue from the eviction's time, under
``Creation`` it keeps its place."""

from __future__ import annotations

import dataclasses

import pytest

from builders import cluster_queue, config, workload
from gpuq.core.admission import Scheduler
from gpuq.core.decisions import CycleResult
from gpuq.core.lifecycle import Effect, Lifecycle, Timer, WakeAt
from gpuq.core.lifecycle import events as ev
from gpuq.core.model import QueueingStrategy, RequeuingTimestamp, SchedulerConfig, WaitForPodsReady
from gpuq.core.queues import ClusterQueueQueue


class Recorder:
    """A shell that applies nothing: it records the effects; every check is Ready at once."""

    def __init__(self) -> None:
        self.seen: list[Effect] = []

    def effect(self, effect: Effect) -> None:
        self.seen.append(effect)

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        return set()

    def vet(self, result: CycleResult, at: float) -> CycleResult:
        return result


ORDER = [
    ("Eviction: evicted at 50, it goes behind a workload created at 10", 50.0, "default/b"),
    ("Creation: it keeps its place ahead of a workload created at 10", None, "default/a"),
]


@pytest.mark.parametrize(("order_at", "head"), [c[1:] for c in ORDER], ids=[c[0] for c in ORDER])
def test_queue_order_timestamp(order_at: float | None, head: str) -> None:
    queue = ClusterQueueQueue("cq", QueueingStrategy.BEST_EFFORT_FIFO)
    a = workload("a").queue("cq").created(0).request(1, gpu=1).build()
    queue.push(dataclasses.replace(a, queue_order_time=order_at))
    queue.push(workload("b").queue("cq").created(10).request(1, gpu=1).build())
    found = queue.head()
    assert found is not None and found.key == head


TIMESTAMPS = [
    (
        "the Eviction timestamp orders the requeued workload by its eviction",
        RequeuingTimestamp.EVICTION,
        30.0,
    ),
    ("the Creation timestamp leaves its creation time", RequeuingTimestamp.CREATION, None),
]


@pytest.mark.parametrize(
    ("timestamp", "order_at"), [c[1:] for c in TIMESTAMPS], ids=[c[0] for c in TIMESTAMPS]
)
def test_a_pods_ready_eviction_sets_the_queue_order_time(
    timestamp: RequeuingTimestamp, order_at: float | None
) -> None:
    wait = WaitForPodsReady(enable=True, timeout_s=30, requeuing_timestamp=timestamp)
    cfg = config(cluster_queue("cq").flavor("gpu", gpu=4).build())
    cfg = dataclasses.replace(cfg, scheduler=SchedulerConfig(wait_for_pods_ready=wait))
    hooks = Recorder()
    life = Lifecycle(Scheduler(cfg), hooks)
    life.submit(workload("a").queue("cq").request(1, gpu=1).build(), 0)
    life.settle(0)
    wake = next(e for e in hooks.seen if isinstance(e, WakeAt) and e.timer == Timer.PODS_READY)
    life.handle(ev.TimerFired("default/a", Timer.PODS_READY, wake.token, 30))
    requeued = life.scheduler.workload_of("default/a")
    assert requeued is not None and requeued.queue_order_time == order_at
    life.handle(ev.TimerFired("default/a", Timer.REQUEUE, wake.token + 1, 90))
    life.settle(90)
    admitted = life.scheduler.admitted_workload("default/a")
    assert admitted is not None and admitted.queue_order_time is None  # admission clears it
