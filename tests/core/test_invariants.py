"""Properties that hold for any configuration and any workloads (hypothesis).

After cycles run to the end, with evictions completed between cycles:

1. no quota node is over its limits: ``available`` is never negative, so no
   queue holds more than nominal + borrowingLimit or lends past lendingLimit;
2. the incrementally kept usage of every node equals the usage recomputed from
   scratch from the workloads holding quota;
3. every workload is exactly one of: holding quota, pending;
4. a single ``plan_cycle`` leaves the quota tree as it found it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import cluster_queue, config, scheduler_with, workload
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles
from gpuq.core.model import ClusterConfig, FungibilityPolicy, PreemptionPolicy, Workload
from gpuq.core.quota import QuotaTree, available

POLICIES = [PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.ANY]
FLAVORS = ["f1", "f2"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterConfig, list[Workload]]:
    queues = []
    for i in range(draw(st.integers(1, 4))):
        builder = cluster_queue(f"q{i}").cohort("c") if draw(st.booleans()) else cluster_queue(f"q{i}")
        in_cohort = builder.build().cohort is not None
        for flavor in draw(st.permutations(FLAVORS))[: draw(st.integers(1, 2))]:
            nominal = draw(st.integers(0, 6))
            borrowing = draw(st.none() | st.integers(0, 4)) if in_cohort else None
            lending = draw(st.none() | st.integers(0, nominal)) if in_cohort else None
            builder = builder.flavor(flavor, gpu=(nominal, borrowing, lending))
        builder = builder.preemption(
            within=draw(st.sampled_from(POLICIES)), reclaim=draw(st.sampled_from(POLICIES))
        )
        borrow = draw(st.sampled_from(list(FungibilityPolicy)))
        builder = builder.fungibility(when_can_borrow=borrow)
        queues.append(builder.build())
    workloads = [
        workload(f"w{j}")
        .queue(f"q{draw(st.integers(0, len(queues) - 1))}")
        .priority(draw(st.integers(0, 2)))
        .created(j)
        .pod_set(
            "main",
            count=draw(st.integers(1, 3)),
            min_count=draw(st.none() | st.just(1)),
            gpu=draw(st.integers(1, 3)),
        )
        .build()
        for j in range(draw(st.integers(1, 10)))
    ]
    return config(*queues), workloads


def _recomputed(scheduler: Scheduler) -> dict[str, dict[tuple[str, str], int]]:
    """Usage of every node rebuilt from scratch from the workloads holding quota."""
    tree = QuotaTree(scheduler.config)
    for admitted in scheduler.state.admitted.values():
        tree.add(admitted.cluster_queue, admitted.usage)
    nodes = {**tree.cluster_queues, **tree.cohorts}
    return {name: {fr: v for fr, v in node.usage.items() if v} for name, node in nodes.items()}


def _kept(scheduler: Scheduler) -> dict[str, dict[tuple[str, str], int]]:
    tree = scheduler.state.tree
    nodes = {**tree.cluster_queues, **tree.cohorts}
    return {name: {fr: v for fr, v in node.usage.items() if v} for name, node in nodes.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_admission_never_breaks_quota_and_keeps_exact_books(
    scenario: tuple[ClusterConfig, list[Workload]],
) -> None:
    cfg, workloads = scenario
    scheduler = scheduler_with(cfg, workloads)
    run = run_cycles(scheduler, max_cycles=60)
    for node in scheduler.state.tree.cluster_queues.values():
        for fr in node.quotas:
            assert available(node, fr) >= 0, (node.name, fr)
    assert _kept(scheduler) == _recomputed(scheduler)
    holding = set(scheduler.state.admitted)
    assert holding.isdisjoint(run.pending)
    assert holding | set(run.pending) == {w.key for w in workloads}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 5))
def test_a_planned_cycle_changes_nothing(scenario: tuple[ClusterConfig, list[Workload]], warmup: int) -> None:
    cfg, workloads = scenario
    scheduler = scheduler_with(cfg, workloads)
    run_cycles(scheduler, max_cycles=warmup)
    before = _kept(scheduler)
    scheduler.plan_cycle(0.0)
    assert _kept(scheduler) == before
