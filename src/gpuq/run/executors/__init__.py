"""Executors: the adapters that run pods for the control loop (local processes; Ray actors)."""

from gpuq.run.executors.base import Executor, ExecutorError, NodeChanges, NodeWatcher, PodExit, PodLaunch
from gpuq.run.executors.local import LocalExecutor

__all__ = [
    "Executor",
    "ExecutorError",
    "LocalExecutor",
    "NodeChanges",
    "NodeWatcher",
    "PodExit",
    "PodLaunch",
]
