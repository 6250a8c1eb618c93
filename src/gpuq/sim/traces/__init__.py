"""Workload traces: the generic CSV / JSONL format and importers of public GPU-cluster traces.

:func:`read_trace` reads any of :data:`FORMATS` into a :class:`TraceRead`;
:mod:`gpuq.sim.traces.nodes` turns the traces' machine lists into NodePools.
"""

from gpuq.sim.traces.detect import detect_format
from gpuq.sim.traces.model import BadRow, TraceError, TraceJob, TraceRead
from gpuq.sim.traces.read import FORMATS, read_trace

__all__ = ["FORMATS", "BadRow", "TraceError", "TraceJob", "TraceRead", "detect_format", "read_trace"]
