"""gpuq: GPU workload orchestrator with Kueue-exact admission."""

__version__ = "0.1.0"
