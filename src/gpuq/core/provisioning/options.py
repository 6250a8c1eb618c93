"""What can be provisioned: machine options, capacity types and stock.

A :class:`MachineOption` is one way to get a node: a machine type in a zone under a capacity
type (on-demand, spot, reserved, flex-start, calendar), optionally from a named node pool or
reservation. :class:`Stock` says how many nodes of each ``(machine type, zone, capacity type)``
can be obtained right now; a key it does not list is unlimited (a cloud that never runs out),
so scenarios model stock-outs by listing what is scarce.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

CapacityType = Literal["on-demand", "spot", "reserved", "flex-start", "calendar"]
CAPACITY_TYPES: tuple[CapacityType, ...] = ("on-demand", "spot", "reserved", "flex-start", "calendar")
GPU = "nvidia.com/gpu"
StockKey = tuple[str, str, str]
"""``(machine type, zone, capacity type)``."""


@dataclass(frozen=True, slots=True)
class MachineOption:
    """One way to get a node. ``allocatable`` holds core units (milli-CPU, bytes, whole GPUs).

    ``gpu_type`` uses GKE's accelerator names (``nvidia-h100-80gb``); ``family`` defaults to the
    machine type's prefix (``a3`` for ``a3-highgpu-8g``).
    """

    machine_type: str
    zone: str
    capacity_type: CapacityType = "on-demand"
    cores: int = 0
    memory_gb: int = 0
    gpu_type: str | None = None
    gpu_count: int = 0
    pool: str | None = None
    reservation: str | None = None
    family: str = ""
    allocatable: Mapping[str, int] = field(default_factory=dict)

    @property
    def machine_family(self) -> str:
        return self.family or self.machine_type.partition("-")[0]

    @property
    def stock_key(self) -> StockKey:
        return (self.machine_type, self.zone, self.capacity_type)

    def label(self) -> str:
        """``a3-highgpu-8g spot in us-central1-a`` (with the pool or reservation when set)."""
        text = f"{self.machine_type} {self.capacity_type} in {self.zone}"
        if self.reservation:
            text += f" (reservation {self.reservation})"
        if self.pool:
            text += f" (pool {self.pool})"
        return text


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod of a group requests, in core units (``cpu`` milli, ``memory`` bytes, GPUs whole)."""

    requests: Mapping[str, int] = field(default_factory=dict)

    def per_node(self, allocatable: Mapping[str, int]) -> int:
        """How many such pods fit on an empty node with ``allocatable`` (0 when one does not)."""
        fits = [allocatable.get(name, 0) // amount for name, amount in self.requests.items() if amount > 0]
        return min(fits) if fits else 0


@dataclass(frozen=True, slots=True)
class PodGroup:
    """Pending pods that need nodes: ``pods`` identical pods; a gang (``all_or_nothing``) needs all."""

    name: str
    pods: int
    shape: PodShape = field(default_factory=PodShape)
    all_or_nothing: bool = False

    def nodes_on(self, option: MachineOption) -> int:
        """Nodes of ``option`` that hold every pod; 0 when one pod does not fit on an empty node."""
        per_node = self.shape.per_node(option_allocatable(option))
        return math.ceil(self.pods / per_node) if per_node else 0


def option_allocatable(option: MachineOption) -> Mapping[str, int]:
    """The option's allocatable, or one built from its cores, memory and GPUs."""
    if option.allocatable:
        return option.allocatable
    return {
        "cpu": option.cores * 1000,
        "memory": option.memory_gb * 2**30,
        GPU: option.gpu_count,
        "pods": 110,
    }


@dataclass(frozen=True, slots=True)
class Stock:
    """Nodes obtainable now per ``(machine type, zone, capacity type)``; unlisted keys are unlimited."""

    available: Mapping[StockKey, int] = field(default_factory=dict)

    def of(self, option: MachineOption) -> int | None:
        """Nodes of ``option`` obtainable now; None when unlimited."""
        return self.available.get(option.stock_key)

    def allows(self, option: MachineOption, nodes: int) -> bool:
        have = self.of(option)
        return have is None or have >= nodes

    def taken(self, option: MachineOption, nodes: int) -> Stock:
        """A copy with ``nodes`` fewer of ``option`` (unlimited keys stay unlimited)."""
        have = self.of(option)
        if have is None:
            return self
        return Stock({**self.available, option.stock_key: max(have - nodes, 0)})


@dataclass(frozen=True, slots=True)
class StockStep:
    """From ``from_s`` on, ``available`` nodes of ``(machine_type, zone, capacity_type)``."""

    machine_type: str
    zone: str
    capacity_type: str
    available: int
    from_s: float = 0.0


def stock_at(steps: tuple[StockStep, ...] | list[StockStep], now: float) -> Stock:
    """The stock in force at ``now``: for each key, the latest step with ``from_s <= now``.

    Steps are ordered by ``(from_s, written order)``; a later step replaces an earlier one.
    """
    current: dict[StockKey, int] = {}
    for step in sorted(steps, key=lambda s: s.from_s):
        if step.from_s <= now:
            current[(step.machine_type, step.zone, step.capacity_type)] = step.available
    return Stock(current)
