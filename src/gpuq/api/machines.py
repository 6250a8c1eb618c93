"""Typed models of the machines gpuq reads: its own NodePool and GPUModel, and Kubernetes ``v1`` Node.

* ``gpuq.dev/v1alpha1`` **NodePool** describes identical nodes: machine type,
  node count with autoscaling bounds, CPU, memory, GPUs and how they are
  shared, labels, taints, capacity type, zone, topology placement and price
  (docs/manifests/nodepool.md). :mod:`gpuq.api.node_pools` expands a pool into
  core nodes.
* ``gpuq.dev/v1alpha1`` **GPUModel** adds a model to (or replaces one in) the
  built-in GPU catalogue (:mod:`gpuq.core.gpus`).
* ``v1`` **Node** reads ``kubectl get nodes -o yaml`` as it is printed: fields
  gpuq does not use are accepted without warnings.

Importing this module registers the three kinds with :data:`gpuq.api.kueue.KINDS`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from gpuq.api import kueue
from gpuq.api.kueue import Duration, Loose, Object, Quantity, Strict, Taint

GPUQ_GROUP = "gpuq.dev"
GPUQ_VERSION = "v1alpha1"
TOPOLOGY_BLOCK_LABEL = "cloud.google.com/gce-topology-block"
TOPOLOGY_RACK_LABEL = "cloud.google.com/gce-topology-subblock"
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
POOL_LABEL = "gpuq.dev/node-pool"
CAPACITY_TYPE_LABEL = "gpuq.dev/capacity-type"
NVLINK_LABEL = "gpuq.dev/nvlink-domain"
SPOT_LABEL = "cloud.google.com/gke-spot"
PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_PODS = 110
SharingStrategy = Literal["none", "mig-single", "mig-mixed", "time-slicing", "fractional"]
CapacityType = Literal["reserved", "on-demand", "spot", "flex-start", "calendar"]
MigLayout = str | list[str | list[str]]
"""``all-1g.10gb`` (every GPU), ``[3g.40gb, 4g.40gb]`` (every GPU), or one entry per GPU."""


def _as_text(value: object) -> object:
    """Numbers written without quotes (``computeCapability: 9.0``) read as their text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


Text = Annotated[str, BeforeValidator(_as_text)]


# --- NodePool ---------------------------------------------------------------------------------


class GPUSharingSpec(Strict):
    """How the device plugin exposes the GPUs: whole, MIG slices, time-sliced replicas, or shares."""

    strategy: SharingStrategy = "none"
    mig_layout: MigLayout | None = None
    replicas: int | None = None
    rename_by_default: bool = False


class NodeGPUSpec(Strict):
    """The GPUs of each node: a catalogue model (name, alias or GFD product) and how many."""

    model: str
    count: int
    memory: Quantity | None = None
    sharing: GPUSharingSpec = Field(default_factory=GPUSharingSpec)


class PoolTopology(Strict):
    """Where the pool's nodes sit: one block, and one rack or several.

    With ``racks``, node ``i`` goes to ``racks[i // nodesPerRack]``;
    ``nodesPerRack`` defaults to ``ceil(max / len(racks))`` (an even spread).
    """

    block: str | None = None
    rack: str | None = None
    racks: list[str] | None = None
    nodes_per_rack: int | None = None


class TopologyLabels(Strict):
    """The node label that carries each topology level (GKE's by default)."""

    block: str = TOPOLOGY_BLOCK_LABEL
    rack: str = TOPOLOGY_RACK_LABEL
    host: str = HOSTNAME_LABEL


class PoolAutoscaling(Strict):
    """Node count bounds of an autoscaled pool (``min`` 0 scales to zero)."""

    min: int | None = None
    max: int | None = None


class ProvisioningDelays(Strict):
    """How long a new node takes, in parts (durations such as ``90s``, ``5m``); they add up."""

    boot: Duration = 0.0
    driver_install: Duration = 0.0
    image_pull: Duration = 0.0
    model_warmup: Duration = 0.0

    def total_s(self) -> float:
        return self.boot + self.driver_install + self.image_pull + self.model_warmup


class ScaleDownSpec(Strict):
    """Remove nodes empty for ``idleAfter`` (never below the pool's min)."""

    enabled: bool = True
    idle_after: Duration = 600.0


class DisruptionBudgetSpec(Strict):
    """Karpenter's ``disruption.budgets[]``: ``nodes`` a count (``"2"``) or a percentage (``"10%"``)."""

    nodes: str | int = "10%"
    reasons: list[Literal["Empty", "Underutilized", "Drifted"]] = Field(default_factory=list)
    schedule: str | None = None
    duration: Duration | None = None


class PoolDisruption(Strict):
    """Karpenter's NodePool ``spec.disruption`` (and ``expireAfter``), with Karpenter v1's defaults."""

    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = "WhenEmptyOrUnderutilized"
    consolidate_after: Duration = 0.0
    budgets: list[DisruptionBudgetSpec] = Field(default_factory=list)
    expire_after: Duration | Literal["Never"] | None = None


class StockEntry(Strict):
    """From ``from`` (a duration into the run) on, ``available`` nodes of a machine type in a zone.

    ``machineType``, ``zone`` and ``capacityType`` default to the pool's.
    """

    zone: str | None = None
    machine_type: str | None = None
    capacity_type: CapacityType | None = None
    available: int
    from_: Duration = Field(default=0.0, alias="from")


class NodePoolSpec(Strict):
    machine_type: str
    count: int | None = None
    min: int | None = None
    max: int | None = None
    cpu: Quantity
    memory: Quantity
    pods: int = DEFAULT_PODS
    gpu: NodeGPUSpec | None = None
    nvlink_domain: Literal["nvswitch", "nvlink-pairs", "none"] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    capacity_type: CapacityType = "on-demand"
    zone: str | None = None
    topology: PoolTopology | None = None
    topology_labels: TopologyLabels = Field(default_factory=TopologyLabels)
    price: float | None = None
    zones: list[str] = Field(default_factory=list)
    autoscaling: PoolAutoscaling | None = None
    limits: dict[str, Quantity] = Field(default_factory=dict)
    provisioning: ProvisioningDelays | None = None
    scale_down: ScaleDownSpec | None = None
    disruption: PoolDisruption | None = None
    stock: list[StockEntry] = Field(default_factory=list)
    node_names: list[str] = Field(default_factory=list)
    """Names of the pool's first nodes, in index order (an imported pool keeps its real nodes'
    names, so recorded TAS assignments still name them); later nodes are ``<pool>-<index>``."""

    def bounds(self) -> tuple[int | None, int | None]:
        """``(min, max)`` as written, at the top level or under ``autoscaling``."""
        scaling = self.autoscaling or PoolAutoscaling()
        low = self.min if self.min is not None else scaling.min
        high = self.max if self.max is not None else scaling.max
        return low, high

    def sizes(self) -> tuple[int, int, int]:
        """``(count, min, max)`` with defaults filled in.

        ``min`` (or ``autoscaling.min``) defaults to ``count`` when that is given (a fixed-size
        pool), else 0; ``count`` defaults to ``min``; ``max`` defaults to the larger of the two.
        """
        written_low, written_high = self.bounds()
        low = written_low if written_low is not None else (self.count if self.count is not None else 0)
        count = self.count if self.count is not None else low
        high = written_high if written_high is not None else max(count, low)
        return count, low, high

    def known_zones(self) -> list[str]:
        """The zones the pool names (``zone`` first, then ``zones``)."""
        return [*([self.zone] if self.zone else []), *(z for z in self.zones if z != self.zone)]


class NodePool(Object):
    spec: NodePoolSpec


# --- GPUModel ---------------------------------------------------------------------------------


class GPUModelFields(Strict):
    product: str
    memory: Quantity
    compute_capability: Text
    family: str | None = None
    mig_table: str | None = None
    price_per_hour: float | None = None
    aliases: list[str] = Field(default_factory=list)


class GPUModel(Object):
    """A catalogue entry; ``metadata.name`` is the catalogue name (capitals allowed: ``MI300X``)."""

    spec: GPUModelFields


# --- v1 Node ----------------------------------------------------------------------------------


class NodeSpecV1(Strict):
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False
    pod_cidr: Any = Field(default=None, alias="podCIDR")
    pod_cidrs: Any = Field(default=None, alias="podCIDRs")
    provider_id: Any = Field(default=None, alias="providerID")
    external_id: Any = Field(default=None, alias="externalID")
    config_source: Any = None


class NodeStatusV1(Loose):
    """Only allocatable, capacity and conditions are read; the rest passes silently."""

    allocatable: dict[str, Quantity] = Field(default_factory=dict)
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    conditions: list[kueue.Condition] = Field(default_factory=list)


class Node(Object):
    spec: NodeSpecV1 = Field(default_factory=NodeSpecV1)
    status: NodeStatusV1 = Field(default_factory=NodeStatusV1)

    def ready(self) -> bool:
        """False when a ``Ready`` condition says anything but True; a node without one counts as ready."""
        return all(c.status == "True" for c in self.status.conditions if c.type == "Ready")


kueue.VERSIONS[GPUQ_GROUP] = (GPUQ_VERSION,)
kueue.KINDS[(GPUQ_GROUP, "NodePool")] = NodePool
kueue.KINDS[(GPUQ_GROUP, "GPUModel")] = GPUModel
kueue.KINDS[("", "Node")] = Node
