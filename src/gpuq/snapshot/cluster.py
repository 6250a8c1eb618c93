"""The cluster at one instant, as a forecast sees it: what holds quota (where, since when), what
waits (in order), the configuration, the nodes and the nodes still being provisioned.

Plain frozen data, built by the live plane (:mod:`gpuq.run.snapshot`), from a snapshot file
(:func:`gpuq.snapshot.manifests.snapshot_of`) or by a replay, and read by the forecast
(:mod:`gpuq.forecast.forecast`), which runs the simulator forward from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import PodBinding
from gpuq.snapshot.runtimes import Profile


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    """A workload holding quota: ``workload.admission`` set; ``started_at`` None while its pods are
    not running yet; ``bindings`` where its pods are (empty: not bound, or the nodes are unknown)."""

    workload: Workload
    profile: Profile
    started_at: float | None
    bindings: tuple[PodBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    workload: Workload
    profile: Profile


@dataclass(frozen=True, slots=True)
class NodeArrival:
    """Nodes being provisioned (listed in the snapshot's nodes) and when they are expected ready."""

    nodes: tuple[str, ...]
    ready_at: float


@dataclass(frozen=True)
class Snapshot:
    """The cluster at ``now`` (seconds since the epoch, or any clock the workloads' times share)."""

    now: float
    config: ClusterConfig
    nodes: tuple[Node, ...] = ()
    running: tuple[RunningWorkload, ...] = ()
    pending: tuple[PendingWorkload, ...] = ()
    down: tuple[str, ...] = ()  # nodes out of service, not coming back on their own
    provisioning: tuple[NodeArrival, ...] = ()
    recent: tuple[PendingWorkload, ...] = ()  # workloads submitted lately (expected arrivals)
    policy: str = "binpack"
    startup_s: float = 0.0
