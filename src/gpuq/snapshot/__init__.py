"""What the live state looks like to a forecast, free of the simulator.

:mod:`~gpuq.snapshot.cluster` (the frozen snapshot), :mod:`~gpuq.snapshot.runtimes` (runtime
profiles, history and estimates) and :mod:`~gpuq.snapshot.manifests` (what a workload's manifest
declares, and a snapshot from a file). The live plane (``run``), the simulator (``sim``) and the
forecast (``forecast``, the simulator run forward) all import it; it imports only ``api`` and
``core``.
"""
