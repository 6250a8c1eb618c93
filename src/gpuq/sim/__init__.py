"""Shell 1: the discrete-event simulator (``gpuq simulate``)."""
