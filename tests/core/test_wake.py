"""Which heads an event makes the scheduler examine, and which of them it works out anew.

Kueue (pkg/cache/queue/inadmissible_workloads.go, requeueWorkloadsCohort) returns the parked
workloads of the cohort tree where capacity changed, and only those; equivalence hashing
(pkg/cache/queue/cluster_queue.go, handleInadmissibleHash) parks the equal shapes behind a head
that found no room, so each shape is tried once. A StrictFIFO head stays at the top of its queue
and is tried in every cycle; its nomination is reused (costs a lookup) until quota it could take
changes. ``examined``: the heads the cycles tried; ``evaluated``: nominations worked out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from builders import cluster_queue, config, scheduler_with, workload
from gpuq.core.admission import Scheduler
from gpuq.core.model import QueueingStrategy, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import Placer

GPU = "nvidia.com/gpu"


def pending(name: str, pods: int, cq: str, created: float) -> Workload:
    return workload(name).queue(cq).created(created).request(pods, gpu=1).build()


def running(name: str, pods: int, cq: str) -> Workload:
    return workload(name).queue(cq).priority(5).request(pods, gpu=1).admitted(cq, {"gpu": "f"}).build()


CONFIG = config(
    cluster_queue("a").cohort("c1").flavor("f", gpu=4).build(),
    cluster_queue("b").cohort("c1").flavor("f", gpu=4).build(),
    cluster_queue("s").strategy(QueueingStrategy.STRICT_FIFO).flavor("f", gpu=4).build(),
    cluster_queue("x").cohort("c2").flavor("f", gpu=4).build(),
)


def congested(equal_shapes: int, nodes: bool) -> Scheduler:
    """Every queue full. Parked in ``a``: ``equal_shapes`` workloads of 2 pods (w1...) and one of 3
    (v1); blocked in StrictFIFO ``s``: s1 (2 pods), then s2 and s3 (1 pod each)."""
    workloads = [
        running("ra", 4, "a"),
        running("rb1", 1, "b"),
        running("rb2", 3, "b"),
        running("rs", 4, "s"),
        running("rx", 4, "x"),
        *(pending(f"w{i}", 2, "a", i) for i in range(1, equal_shapes + 1)),
        pending("v1", 3, "a", equal_shapes + 1),
        pending("s1", 2, "s", 1),
        pending("s2", 1, "s", 2),
        pending("s3", 1, "s", 3),
    ]
    if not nodes:
        return scheduler_with(CONFIG, workloads)
    hosts = [Node(f"h{i}", {GPU: 8, "pods": 110}) for i in range(4)]
    scheduler = Scheduler(CONFIG, Placer(hosts, flavors=CONFIG.flavors, topologies=CONFIG.topologies))
    for w in workloads:
        scheduler.submit(w)
    return scheduler


@dataclass(frozen=True)
class Pass:
    """What one scheduling pass (cycles until nothing changes) after an event looked at."""

    examined: frozenset[str]
    evaluated: int
    admitted: frozenset[str] = field(default_factory=frozenset)


def settle(scheduler: Scheduler) -> Pass:
    examined: set[str] = set()
    admitted: set[str] = set()
    before = scheduler.state.evaluations
    for _ in range(100):
        result, entries = scheduler.plan_cycle()
        if not entries:
            break
        examined.update(e.key.split("/")[-1] for e in entries)
        admitted.update(a.workload.split("/")[-1] for a in result.admitted)
        active = scheduler.active_count()
        scheduler.apply(result, entries)
        if not result.changed and scheduler.active_count() == active:
            break
    return Pass(frozenset(examined), scheduler.state.evaluations - before, frozenset(admitted))


def finish(name: str) -> object:
    return lambda s: s.finish(f"default/{name}")


def arrive(name: str, cq: str) -> object:
    return lambda s: s.submit(pending(name, 1, cq, 100))


CASES = [
    (
        "a finish in a ClusterQueue of another cohort re-examines no parked workload of this one",
        finish("rx"),
        Pass(frozenset({"s1"}), 0),
    ),
    (
        "a finish in the cohort that frees too little retries each parked shape once",
        finish("rb1"),
        Pass(frozenset({"w1", "v1", "s1"}), 2),
    ),
    (
        "a finish in the cohort admits what fits; the next of that shape and the others are tried once",
        finish("rb2"),
        Pass(frozenset({"w1", "w2", "v1", "s1"}), 3, frozenset({"w1"})),
    ),
    (
        "an arrival elsewhere costs its own nomination; the blocked StrictFIFO head is reused",
        arrive("n1", "x"),
        Pass(frozenset({"n1", "s1"}), 1),
    ),
    (
        "a finish in the StrictFIFO queue walks it in order from its head",
        finish("rs"),
        Pass(frozenset({"s1", "s2", "s3"}), 3, frozenset({"s1", "s2", "s3"})),
    ),
]


@pytest.mark.parametrize("nodes", [False, True], ids=["quota only", "with nodes"])
@pytest.mark.parametrize("equal_shapes", [3, 30])
@pytest.mark.parametrize(("name", "event", "want"), CASES, ids=[c[0] for c in CASES])
def test_an_event_examines_only_the_heads_it_can_serve(
    name: str, event: object, want: Pass, equal_shapes: int, nodes: bool
) -> None:
    scheduler = congested(equal_shapes, nodes)
    first = settle(scheduler)
    assert first.admitted == frozenset()
    assert scheduler.queues["a"].inadmissible_count == equal_shapes + 1  # all parked, by shape
    assert callable(event)
    event(scheduler)
    assert settle(scheduler) == want


def test_a_quiet_strict_head_is_not_worked_out_again() -> None:
    """Cycles with nothing changed keep trying the StrictFIFO head, at the cost of a lookup."""
    scheduler = congested(3, nodes=True)
    settle(scheduler)
    for _ in range(5):
        assert settle(scheduler) == Pass(frozenset({"s1"}), 0)


def waiting_for_nodes() -> tuple[Scheduler, list[str]]:
    """One 8-GPU node held by ``r``; admitted on quota, waiting for it in this order: b1, b2, b3
    (8 GPUs each), then s1 (4 GPUs). The list names every placement computed from now on."""
    cfg = config(cluster_queue("q").flavor("f", gpu=64).build())
    placer = Placer([Node("h0", {GPU: 8, "pods": 110})], flavors=cfg.flavors, topologies=cfg.topologies)
    scheduler = Scheduler(cfg, placer)
    scheduler.submit(workload("r").queue("q").request(1, gpu=8).admitted("q", {"gpu": "f"}).build())
    for i, (name, gpus) in enumerate([("b1", 8), ("b2", 8), ("b3", 8), ("s1", 4)]):
        scheduler.submit(workload(name).queue("q").created(i).request(1, gpu=gpus).build())
    settle(scheduler)
    assert list(scheduler.unplaced) == ["default/b1", "default/b2", "default/b3", "default/s1"]
    computed: list[str] = []
    place = placer.place

    def counted(workload: Workload, *args: object, **kwargs: object) -> object:
        computed.append(workload.name)
        return place(workload, *args, **kwargs)  # type: ignore[arg-type]

    placer.place = counted  # type: ignore[method-assign]
    return scheduler, computed


def test_freed_nodes_retry_each_waiting_shape_until_one_of_it_fails() -> None:
    """Kueue admits on quota and the pods wait; a release binds the waiting ones in the order they
    began to wait, and once one of a shape does not fit its equals are not tried (b3 after b2)."""
    scheduler, computed = waiting_for_nodes()
    scheduler.finish("default/r")
    assert computed == ["b1", "b2", "s1"]
    assert list(scheduler.unplaced) == ["default/b2", "default/b3", "default/s1"]
    assert scheduler.take_placed_waiting() == ["default/b1"]
    assert scheduler.take_placed_waiting() == []
