"""maximumExecutionTimeSeconds live: the same lifecycle timer on the wall clock stops the pods and
deactivates the workload (Kueue's ``reconcileMaxExecutionTime``); a run within it succeeds."""

from __future__ import annotations

import pytest

from .test_loop import job, plane, run_until, state, submit

__all__ = ["plane"]


@pytest.mark.parametrize(
    ("script", "limit", "ends"),
    [
        pytest.param("import time; time.sleep(60)", "1", "Inactive", id="past its limit: deactivated"),
        pytest.param("print('done')", "60", "Succeeded", id="within its limit: succeeds"),
    ],
)
def test_a_live_workload_is_deactivated_at_its_maximum_execution_time(  # type: ignore[no-untyped-def]
    plane, script: str, limit: str, ends: str
) -> None:
    store, loop, _ = plane
    doc = job("capped", "team-a", script, grace=1)
    doc["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = limit
    submit(store, doc)
    run_until(
        loop, lambda: state(store, "team-a", "capped") in ("Succeeded", "Failed", "Inactive"), timeout=30
    )
    assert state(store, "team-a", "capped") == ends
    if ends == "Inactive":
        record = store.get_workload("team-a", "capped")
        assert record is not None and "maximum execution time" in record.message
