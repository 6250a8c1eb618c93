"""The forecast's default settings, apart from the forecast itself so that the CLI's option
defaults (``gpuq serve --eta-exact-starts``, ``gpuq forecast-accuracy``) cost no engine import."""

from __future__ import annotations

DEFAULT_HORIZON_S = 30 * 86400.0
DEFAULT_EXACT_STARTS = 500
PARALLEL_MIN = 500  # workloads from which the two runs are worth a process each (a fork costs ms)
