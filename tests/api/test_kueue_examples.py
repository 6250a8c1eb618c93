"""Kueue v0.19.2's own documentation examples load unchanged: each file alone and with the setup file
its page pairs it with (``kueue_examples.py``), through the loader and the admission cycles as
``gpuq admit`` runs them. Jobs build the Workload pod sets Kueue builds; files holding no scheduling
object are reported "not scheduled by gpuq"."""

from __future__ import annotations

import pytest
from kueue_examples import CONFIG, EXAMPLES, IGNORED, JOBS, Example, PodSet, evaluate


def _param(example: Example) -> object:
    return pytest.param(example, id=example.file)


def _same(built: tuple[PodSet, ...], expected: tuple[PodSet, ...]) -> bool:
    """Pod sets equal, a name of None (a hash Kueue computes) matching any name."""
    return len(built) == len(expected) and all(
        (want[0] is None or got[0] == want[0]) and got[1:] == want[1:]
        for got, want in zip(built, expected, strict=True)
    )


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_a_kueue_example_loads_and_is_admitted_as_kueue_would(example: Example) -> None:
    outcome = evaluate(example)
    assert outcome.errors == (), outcome.errors
    if example.what == IGNORED:
        assert outcome.kinds == () and outcome.ignored is not None
        assert outcome.ignored.startswith("not scheduled by gpuq, ignored: ")
        return
    assert outcome.ignored is None
    if example.what == CONFIG:
        assert outcome.alone_errors == () and outcome.workloads == ()
        return
    assert example.what == JOBS
    assert len(outcome.workloads) == len(example.workloads), outcome.workloads
    assert all(_same(b, e) for b, e in zip(outcome.workloads, example.workloads, strict=True)), (
        outcome.workloads
    )
    decided = set(outcome.admitted) | set(outcome.pending)
    assert len(decided) == len(outcome.workloads), (outcome.admitted, outcome.pending)
    if example.all_reserve_quota:  # admitted, or holding quota while its admission checks are pending
        assert len(outcome.admitted) == len(outcome.workloads), outcome.pending
