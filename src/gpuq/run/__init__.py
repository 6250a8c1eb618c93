"""Shell 2: the live control plane (``gpuq serve``): store, control loop, executors."""
