"""An admitted workload is placed once: what-if, assumed and bound placements are one answer while the
nodes are in the same state, and computed anew otherwise; lazily written pending messages."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles
from gpuq.core.decisions import Pending
from gpuq.core.model import ResourceFlavor, TopologyMode, TopologyRequest, Workload
from gpuq.core.placement.engine import PlacementFailure, Placer, WorkloadPlacement

from .test_admission_placement import config, gang, racks

TAS = ResourceFlavor("tas", topology_name="default")
PLAIN = ResourceFlavor("plain")
RACK = TopologyRequest(TopologyMode.REQUIRED, "rack")


def counting_scheduler(flavor: ResourceFlavor, reuse: bool) -> tuple[Scheduler, list[str]]:
    """A scheduler on two racks of two 8-GPU hosts whose placer lists every placement it computes."""
    cfg = config(flavor, 64)
    placer = Placer(racks(), flavors=cfg.flavors, topologies=cfg.topologies)
    placer._reuse = reuse
    computed: list[str] = []
    plain = placer._place_plain

    def counted(workload: Workload, *args: object) -> WorkloadPlacement | PlacementFailure:
        computed.append(workload.key)
        return plain(workload, *args)  # type: ignore[arg-type]

    placer._place_plain = counted  # type: ignore[method-assign]
    return Scheduler(cfg, placer), computed


def bindings(s: Scheduler) -> dict[str, tuple[object, ...]]:
    assert s.placer is not None
    return {key: p.bindings for key, p in sorted(s.placer.placements.items())}


CASES: list[tuple[str, ResourceFlavor, Callable[[], list[Workload]], int]] = [
    # (name, flavor, workloads, placements computed with reuse)
    (
        "one topology-aware gang: what-if, assume and bind are one placement",
        TAS,
        lambda: [gang("g", 2, 0, RACK)],
        1,
    ),
    ("one gang without topology: assume and bind are one placement", PLAIN, lambda: [gang("g", 2, 0)], 1),
    (
        "three gangs in turn: each placed once, the one that does not fit tried every cycle",
        TAS,
        lambda: [gang(f"g{i}", 2, float(i), RACK) for i in range(3)],
        3,
    ),
]


@pytest.mark.parametrize(
    ("flavor", "workloads", "computed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_reused_placements_bind_exactly_as_computed_ones(
    flavor: ResourceFlavor, workloads: Callable[[], list[Workload]], computed: int
) -> None:
    runs = {}
    for reuse in (False, True):
        s, placed = counting_scheduler(flavor, reuse)
        for w in workloads():
            s.submit(w)
        run = run_cycles(s)
        runs[reuse] = (sorted(run.admitted), bindings(s), len(placed))
    assert runs[True][:2] == runs[False][:2]
    assert runs[True][2] <= computed < runs[False][2]


def test_a_placement_is_computed_anew_when_the_nodes_changed() -> None:
    """A what-if's answer is kept, but another workload bound since: it must not be taken again."""
    cfg = config(PLAIN, 64)
    placer = Placer(racks(), flavors=cfg.flavors, topologies=cfg.topologies)
    first, other = gang("first", 1, 0), gang("other", 1, 1)
    assert placer.check(first) is None
    version = placer.capacity_version
    assert isinstance(placer.place(other), WorkloadPlacement)
    assert placer.capacity_version != version
    placed = placer.place(first)
    fresh = Placer(racks(), flavors=cfg.flavors, topologies=cfg.topologies)
    fresh._reuse = False
    fresh.place(other)
    assert isinstance(placed, WorkloadPlacement) and placed == fresh.place(first)


def test_a_pending_message_is_written_once_when_first_read() -> None:
    written: list[str] = []

    def explain() -> str:
        written.append("x")
        return "couldn't assign flavors to pod set main: no flavor fits"

    lazy = Pending("ns/w", "Pending", cluster_queue="cq", explain=explain)
    assert written == []
    eager = Pending("ns/w", "Pending", "couldn't assign flavors to pod set main: no flavor fits", "cq")
    assert lazy == eager and hash(lazy) == hash(eager) and repr(lazy) == repr(eager)
    assert lazy.message == eager.message and written == ["x"]
    assert pickle.loads(pickle.dumps(lazy)) == eager
    with pytest.raises(AttributeError):
        lazy.reason = "Inadmissible"  # type: ignore[misc]
