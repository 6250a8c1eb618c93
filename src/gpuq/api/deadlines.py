"""When a workload must be finished: the ``gpuq.dev/deadline`` annotations, read at the manifest edge.

``gpuq.dev/deadline`` is an RFC 3339 time (``2026-11-30T18:00:00Z``); ``gpuq.dev/deadline-after``
a duration after the workload's creation (``4h``, ``1h30m``). Both on one object: the earlier
wins. A source (Job, PyTorchJob...) passes its ``gpuq.dev/`` annotations on to its Workload. The
deadline is reported (met, missed, not yet finished), never used to order or admit: Kueue has no
such field.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuq.api.kueue import parse_duration, parse_timestamp
from gpuq.api.names import Findings

DEADLINE = "gpuq.dev/deadline"
DEADLINE_AFTER = "gpuq.dev/deadline-after"


def deadline_of(annotations: Mapping[str, str], created_s: float) -> float | None:
    """The deadline in seconds since the epoch (the clock of ``created_s``); None when none is
    declared or a declared one does not parse (:func:`deadline_problems` reports it)."""
    candidates = []
    if (at := _timestamp(annotations.get(DEADLINE))) is not None:
        candidates.append(at)
    if (after := _duration(annotations.get(DEADLINE_AFTER))) is not None:
        candidates.append(created_s + after)
    return min(candidates) if candidates else None


def deadline_problems(annotations: Mapping[str, str]) -> Findings:
    """A deadline annotation that is not a time (or a positive duration), with its field path."""
    path = ("metadata", "annotations")
    if (text := annotations.get(DEADLINE)) is not None and _timestamp(text) is None:
        yield (*path, DEADLINE), f"{text!r} is not an RFC 3339 time (e.g. 2026-11-30T18:00:00Z)"
    if (text := annotations.get(DEADLINE_AFTER)) is not None and _duration(text) is None:
        yield (*path, DEADLINE_AFTER), f"{text!r} is not a positive duration (e.g. 4h, 1h30m, 90m)"


def _timestamp(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError:
        return None
    return seconds if seconds > 0 else None
