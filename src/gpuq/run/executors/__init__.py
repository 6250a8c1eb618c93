"""Executors: the adapters that run pods for the control loop (local processes; Ray later)."""

from gpuq.run.executors.base import Executor, ExecutorError, PodExit, PodLaunch
from gpuq.run.executors.local import LocalExecutor

__all__ = ["Executor", "ExecutorError", "LocalExecutor", "PodExit", "PodLaunch"]
