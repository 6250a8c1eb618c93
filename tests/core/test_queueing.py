"""Queueing (Kueue: pkg/cache/queue/): heads, strategies, inadmissible sets and inactive queues."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import Case, case, cluster_queue, cohort, config, outcome_of, run_case, scheduler_with, workload
from gpuq.core.cycles import run_cycles
from gpuq.core.model import (
    ClusterConfig,
    LabelSelector,
    LocalQueue,
    PreemptionPolicy,
    QueueingStrategy,
    StopPolicy,
    Workload,
)

STRICT = QueueingStrategy.STRICT_FIFO
BEST_EFFORT = QueueingStrategy.BEST_EFFORT_FIFO
NO_CANDIDATES = "and no workload can be preempted to free it"
NOT_TRIED = "waiting in ClusterQueue behind workloads ahead of it"


def gpus(
    name: str, n: int, prio: int = 0, created: float = 0.0, cq: str = "a", ns: str = "default"
) -> Workload:
    return workload(name, ns).queue(cq).priority(prio).created(created).request(n, gpu=1).build()


def running(name: str, n: int, prio: int = 5, cq: str = "a") -> Workload:
    return workload(name).queue(cq).priority(prio).request(n, gpu=1).admitted(cq, {"gpu": "f"}).build()


def single(strategy: QueueingStrategy = BEST_EFFORT) -> ClusterConfig:
    return config(cluster_queue("a").flavor("f", gpu=4).strategy(strategy).build())


ML_ONLY = LabelSelector(match_labels={"team": "ml"})


def namespaced(strategy: QueueingStrategy) -> ClusterConfig:
    cfg = config(
        cluster_queue("a").flavor("f", gpu=4).strategy(strategy).namespaces(ML_ONLY).build(),
        local_queues=(LocalQueue("ml", "a", "a"), LocalQueue("other", "a", "a")),
    )
    return replace(cfg, namespace_labels={"ml": {"team": "ml"}, "other": {"team": "web"}})


CASES: list[Case] = [
    case(
        "StrictFIFO head blocks a smaller workload behind it",
        single(STRICT),
        running("r", 3),
        gpus("big", 2, created=1),
        gpus("small", 1, created=2),
        pending={"big": NO_CANDIDATES, "small": NOT_TRIED},
        cycles=None,
    ),
    case(
        "BestEffortFIFO lets a later workload past a head that does not fit",
        single(BEST_EFFORT),
        running("r", 3),
        gpus("big", 2, created=1),
        gpus("small", 1, created=2),
        admitted={"small": "f"},
        pending={"big": NO_CANDIDATES},
        cycles=None,
    ),
    case(
        "a higher-priority workload is the head regardless of age",
        single(),
        gpus("old", 4, prio=0, created=1),
        gpus("urgent", 4, prio=1, created=2),
        admitted={"urgent": "f"},
    ),
    case(
        "at equal priority the older workload is the head",
        single(),
        gpus("newer", 4, created=2),
        gpus("older", 4, created=1),
        admitted={"older": "f"},
    ),
    case(
        "the namespaceSelector keeps out workloads from namespaces it does not match",
        namespaced(BEST_EFFORT),
        gpus("web", 1, ns="other"),
        pending={"other/web": "Workload namespace doesn't match ClusterQueue selector"},
    ),
    case(
        "StrictFIFO: a namespace mismatch does not block the workloads behind it",
        namespaced(STRICT),
        gpus("web", 1, created=1, ns="other"),
        gpus("train", 1, created=2, ns="ml"),
        admitted={"ml/train": "f"},
        pending={"other/web": "Workload namespace doesn't match ClusterQueue selector"},
        cycles=None,
    ),
    case(
        "a nil namespaceSelector matches no namespace",
        config(cluster_queue("a").flavor("f", gpu=4).namespaces(None).build()),
        gpus("w", 1),
        pending={"w": "Workload namespace doesn't match ClusterQueue selector"},
    ),
    case(
        "a stopped ClusterQueue admits nothing",
        config(cluster_queue("a").flavor("f", gpu=4).stop(StopPolicy.HOLD).build()),
        gpus("w", 1),
        pending={"w": "ClusterQueue a is stopped (Hold)"},
        cycles=None,
    ),
    case(
        "a stopped LocalQueue does not queue its workloads",
        config(
            cluster_queue("a").flavor("f", gpu=4).build(),
            local_queues=(LocalQueue("default", "a", "a", StopPolicy.HOLD_AND_DRAIN),),
        ),
        gpus("w", 1),
        pending={"w": "LocalQueue a is stopped (HoldAndDrain)"},
        cycles=None,
    ),
    case(
        "an inactive workload is not queued",
        single(),
        workload("w").queue("a").request(1, gpu=1).inactive().build(),
        pending={"w": "workload is inactive"},
        cycles=None,
    ),
    case(
        "a LocalQueue pointing to a missing ClusterQueue leaves its workloads unqueued",
        config(
            cluster_queue("a").flavor("f", gpu=4).build(),
            local_queues=(LocalQueue("default", "lq", "ghost"),),
        ),
        workload("w").queue("lq").request(1, gpu=1).build(),
        pending={"w": "ClusterQueue ghost doesn't exist"},
        cycles=None,
    ),
    case(
        "a ClusterQueue whose flavor does not exist is inactive",
        replace(single(), flavors={}),
        gpus("w", 1),
        pending={
            "w": "ClusterQueue a is inactive: Can't admit new workloads: "
            "references missing ResourceFlavor(s): f."
        },
        cycles=None,
    ),
    case(
        "a ClusterQueue requiring an inactive admission check is inactive",
        config(cluster_queue("a").flavor("f", gpu=4).checks("prov").build(), inactive_checks=("prov",)),
        gpus("w", 1),
        pending={"w": "references inactive AdmissionCheck(s): prov."},
        cycles=None,
    ),
    case(
        "a cohort tree with a cycle is unusable: its ClusterQueues are inactive",
        config(
            cluster_queue("a").cohort("c1").flavor("f", gpu=4).build(),
            cohorts=(cohort("c1").parent("c2").build(), cohort("c2").parent("c1").build()),
        ),
        gpus("w", 1),
        pending={"w": "ClusterQueue a is inactive: its cohort tree has a cycle"},
        cycles=None,
    ),
    case(
        "a workload whose requeueAt is in the future waits for its backoff",
        single(),
        workload("w").queue("a").request(1, gpu=1).requeue_at(100).build(),
        pending={"w": "waiting for requeue backoff until 100"},
    ),
    case(
        "workloads shaped like a head that found no fit are set aside without being evaluated",
        single(BEST_EFFORT),
        running("r", 3),
        gpus("first", 2, created=1),
        gpus("twin", 2, created=2),
        gpus("small", 1, created=3),
        admitted={"small": "f"},
        pending={"first": NO_CANDIDATES, "twin": "same shape as default/first, which waits"},
        cycles=None,
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_queueing(c: Case) -> None:
    assert run_case(c) == c.want


STICKY_CASES = [
    pytest.param(
        BEST_EFFORT, {"in": "f"}, id="BestEffortFIFO keeps a preemptor at the head until it is admitted"
    ),
    pytest.param(STRICT, {"later-urgent": "f"}, id="StrictFIFO does not keep a preemptor at the head"),
]


@pytest.mark.parametrize(("strategy", "want"), STICKY_CASES)
def test_sticky_preemptor(strategy: QueueingStrategy, want: dict[str, str]) -> None:
    cfg = config(
        cluster_queue("a")
        .flavor("f", gpu=4)
        .strategy(strategy)
        .preemption(PreemptionPolicy.LOWER_PRIORITY)
        .build()
    )
    low = running("low", 4, prio=-1)
    preemptor = gpus("in", 4, prio=1, created=1)
    urgent = gpus("later-urgent", 4, prio=2, created=2)
    scheduler = scheduler_with(cfg, (low, preemptor))
    result, entries = scheduler.plan_cycle()
    scheduler.apply(result, entries)
    assert [p.workload for p in result.preempted] == ["default/low"]
    scheduler.evict("default/low")
    scheduler.submit(urgent)
    result, _ = scheduler.plan_cycle()
    specs = {w.key: w for w in (low, preemptor, urgent)}
    assert outcome_of(specs, result.admitted, (), ()).admitted == want


def test_inadmissible_workloads_return_when_a_workload_of_the_cohort_finishes() -> None:
    cfg = config(
        cluster_queue("a").cohort("c").flavor("f", gpu=2).build(),
        cluster_queue("b").cohort("c").flavor("f", gpu=2).build(),
    )
    scheduler = scheduler_with(cfg, (running("r", 4, cq="b"), gpus("w", 2)))
    first = run_cycles(scheduler)
    assert (first.admitted, set(first.pending)) == ({}, {"default/w"})
    assert scheduler.plan_cycle()[1] == []  # parked: not retried while nothing changes
    scheduler.finish("default/r")
    second = run_cycles(scheduler)
    assert {k: a.cluster_queue for k, a in second.admitted.items()} == {"default/w": "a"}


def test_requeueing_many_keeps_queue_order_and_a_bounded_heap() -> None:
    """Bulk requeues rebuild the heap; stale entries never pile up; the order is Kueue's."""
    from gpuq.core.queues import ClusterQueueQueue, RequeueReason

    queue = ClusterQueueQueue("a", QueueingStrategy.BEST_EFFORT_FIFO)
    workloads = [gpus(f"w{i:03d}", 1, prio=i % 3) for i in range(300)]
    for w in workloads:
        queue.push(w)
    for _ in range(50):  # every head fails, then capacity "changes": all come back
        while (head := queue.head()) is not None:
            queue.requeue(head, RequeueReason.NO_FIT)
        assert queue.requeue_inadmissible() == 300
        assert len(queue._heap) <= 4 * 300 + 1024
    expected = sorted(workloads, key=lambda w: (-w.priority, w.creation_time, w.uid or w.key))
    order = []
    while (head := queue.head()) is not None:
        order.append(head.key)
        queue.delete(head.key)
    assert order == [w.key for w in expected]


class _ReferenceQueue:
    """The queue without grouping: every active workload in one ordered set, every parked one in another."""

    def __init__(self) -> None:
        self.active: dict[str, Workload] = {}
        self.parked: dict[str, Workload] = {}
        self.sticky: str | None = None

    def head(self) -> Workload | None:
        def order(w: Workload) -> tuple[int, int, float, str]:
            return (0 if w.key == self.sticky else 1, -w.priority, w.creation_time, w.uid or w.key)

        return min(self.active.values(), key=order, default=None)


@pytest.mark.parametrize("seed", range(12))
def test_grouped_parking_behaves_like_parking_every_workload(seed: int) -> None:
    """Random pushes, admissions, parks (alone and by shape), wakes, deletions and sticky heads: the
    grouped queue's head, counts and members always equal the plain model's."""
    import random

    from gpuq.core.model import PodSet, QueueingStrategy
    from gpuq.core.queues import ClusterQueueQueue, RequeueReason, shape_of

    rng = random.Random(seed)
    queue = ClusterQueueQueue("cq", QueueingStrategy.BEST_EFFORT_FIFO)
    reference = _ReferenceQueue()
    made = 0
    for _ in range(600):
        op = rng.choices(
            ["push", "admit", "park", "alone", "wake", "delete", "sticky"], [6, 3, 3, 1, 2, 1, 1]
        )[0]
        head = reference.head()
        if op == "push" or head is None:
            made += 1
            gpus = rng.choice([1, 2, 8])
            workload = Workload(
                "ns",
                f"w{made}",
                "q",
                (PodSet("main", 1, {"nvidia.com/gpu": gpus}),),
                priority=rng.choice([0, 0, 100]),
                creation_time=float(rng.randrange(50)),
                uid=f"{made:05d}",
            )
            queue.push(workload)
            reference.active[workload.key] = workload
        elif op == "admit":
            queue.delete(head.key)
            del reference.active[head.key]
        elif op in ("park", "alone"):
            assert queue.requeue(head, RequeueReason.NO_FIT)
            reference.parked[head.key] = reference.active.pop(head.key)
            if op == "park":
                queue.park_equivalent(head)
                for key, w in list(reference.active.items()):
                    if shape_of(w) == shape_of(head):
                        reference.parked[key] = reference.active.pop(key)
        elif op == "wake":
            assert queue.requeue_inadmissible() == len(reference.parked)
            reference.active.update(reference.parked)
            reference.parked.clear()
        elif op == "delete":
            key = rng.choice(sorted(reference.active) + sorted(reference.parked))
            queue.delete(key)
            reference.active.pop(key, None)
            reference.parked.pop(key, None)
            if reference.sticky == key:
                reference.sticky = None
        else:
            queue.requeue(head, RequeueReason.PENDING_PREEMPTION)
            reference.sticky = head.key
        expected = reference.head()
        got = queue.head()
        assert (got.key if got else None) == (expected.key if expected else None), op
        assert queue.active_count == len(reference.active)
        assert queue.inadmissible_count == len(reference.parked)
        assert sorted(w.key for w in queue.pending()) == sorted([*reference.active, *reference.parked])


@pytest.mark.parametrize("seed", range(6))
def test_counts_kept_as_workloads_move_equal_the_counted_members(seed: int) -> None:
    """Two queues sharing totals (as a scheduler's active queues do): after random pushes, parks (alone
    and by shape), wakes, sticky heads, admissions and deletions, each queue's counts and the shared
    totals equal the workloads counted member by member, and the totals name the queues with a head."""
    import random

    from gpuq.core.model import PodSet
    from gpuq.core.queues import ClusterQueueQueue, QueueCounts, RequeueReason

    rng = random.Random(seed)
    totals = QueueCounts()
    queues = [ClusterQueueQueue(name, BEST_EFFORT, totals) for name in ("a", "b")]
    for made in range(800):
        queue = rng.choice(queues)
        head = queue.head()
        ops = ["push", "admit", "park", "alone", "wake", "delete", "sticky"]
        op = rng.choices(ops, [6, 3, 3, 1, 2, 1, 1])[0]
        if op == "push" or head is None:
            pod_set = PodSet("main", 1, {"nvidia.com/gpu": rng.choice([1, 2, 8])})
            priority = rng.choice([0, 100])
            queue.push(Workload("ns", f"w{made}", "q", (pod_set,), priority=priority, uid=f"{made:05d}"))
        elif op == "admit":
            queue.delete(head.key)
        elif op in ("park", "alone"):
            queue.requeue(head, RequeueReason.NO_FIT)
            if op == "park":
                queue.park_equivalent(head)
        elif op == "wake":
            queue.requeue_inadmissible()
        elif op == "delete":
            queue.delete(rng.choice([w.key for w in queue.pending()]))
        else:
            queue.requeue(head, RequeueReason.PENDING_PREEMPTION)
        for each in queues:
            parked = sum(len(g.members) for g in each._parked.values())
            following = sum(len(g.members) for g in each._following.values())
            assert each.counts == QueueCounts(len(each._entries) + following, parked), op
        assert totals == QueueCounts(
            sum(q.counts.active for q in queues),
            sum(q.counts.inadmissible for q in queues),
            {q.name for q in queues if q.head() is not None},
        )
