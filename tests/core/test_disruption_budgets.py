"""PodDisruptionBudgets over a cycle's preemptions (the rule the simulator and the live loop share)."""

from __future__ import annotations

import pytest

from gpuq.core.decisions import CycleResult, Preempt
from gpuq.core.disruption_budgets import Protected, vet_preemptions


def replica(healthy: int, required: int, ready: bool = True, unhealthy_may_go: bool = False) -> Protected:
    return Protected("serving/chat", "chat-pdb", healthy, required, ready, unhealthy_may_go)


def cycle(*pairs: tuple[str, str]) -> CycleResult:
    preempted = tuple(Preempt(victim, "inference", by, "InClusterQueue") for victim, by in pairs)
    return CycleResult(preempted=preempted)


@pytest.mark.parametrize(
    ("victims", "pairs", "kept", "waiting"),
    [
        # 3 healthy, 2 required: one disruption allowed.
        ({"r1": replica(3, 2)}, [("r1", "train")], ["r1"], []),
        # Two victims of one preemptor: the second breaks the budget, so neither goes.
        ({"r1": replica(3, 2), "r2": replica(3, 2)}, [("r1", "train"), ("r2", "train")], [], ["train"]),
        # Two preemptors: the first uses the one disruption, the second waits.
        ({"r1": replica(3, 2), "r2": replica(3, 2)}, [("r1", "a"), ("r2", "b")], ["r1"], ["b"]),
        # A replica not ready yet goes when the service is at its budget anyway...
        ({"r1": replica(2, 2, ready=False)}, [("r1", "train")], ["r1"], []),
        # ...or the budget lets unhealthy pods go; otherwise it is protected too.
        ({"r1": replica(1, 2, ready=False, unhealthy_may_go=True)}, [("r1", "train")], ["r1"], []),
        ({"r1": replica(1, 2, ready=False)}, [("r1", "train")], [], ["train"]),
        # Workloads no budget protects are never held back.
        ({}, [("job", "train")], ["job"], []),
    ],
)
def test_a_preemptor_keeps_its_evictions_only_within_every_budget(
    victims: dict[str, Protected], pairs: list[tuple[str, str]], kept: list[str], waiting: list[str]
) -> None:
    vetted = vet_preemptions(cycle(*pairs), victims.get, lambda by: f"cq-of-{by}")
    assert [p.workload for p in vetted.preempted] == kept
    assert [(p.workload, p.cluster_queue) for p in vetted.pending] == [(w, f"cq-of-{w}") for w in waiting]
    for pending in vetted.pending:
        assert pending.message.startswith("PodDisruptionBudget chat-pdb of serving/chat allows no more")
