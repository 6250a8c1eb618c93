"""The simulator carries out core/provisioning's decisions: node autoscaling, compute classes,
spot interruptions (queued provisioning is :mod:`gpuq.sim.provisioning.queued_requests`).

:class:`Provisioner` rides on a :class:`~gpuq.sim.simulator.Simulation` through its
:class:`~gpuq.sim.simulator.ProvisioningHooks`. Every node of a scalable pool exists from the
start (expanded to ``max``); the ones not in service are down, and join or leave through the
simulator's node add/remove paths, so the engine sees them as any node change.

After each scheduling pass (:meth:`Provisioner.after_schedule`):

1. workloads holding quota whose pods no node takes (``Scheduler.unplaced``) become pod groups;
2. a group whose pods or flavor select a ComputeClass gets :func:`~.compute_class.choose` over the
   pools labelled with that class (first satisfiable rule; a stock-out falls down the list);
   any other group gets :func:`~.autoscaler.plan_scale_up` over the pools its pods fit;
3. stock is the cap of ``(machine type, zone, capacity type)`` nodes held at once (NodePool
   ``stock`` and ``spec.provisioning.stock``, stepping over time) minus what is held or coming;
4. the new nodes join after the pool's provisioning delay (boot + driver + image + warm-up).

Nodes that stay empty for ``idleAfter`` are removed (:func:`~.autoscaler.plan_scale_down`, never
below ``min``); pools that write ``spec.disruption`` are also consolidated
(:func:`~.disruption.plan_consolidation`, PodDisruptionBudgets and do-not-disrupt respected).
At each stock step, workloads on a lower compute-class rule migrate back when
``activeMigration.optimizeRulePriority`` is on and the better rule has stock: the new nodes are
ordered first, the old ones are drained when they are ready. Spot nodes are interrupted at a
rate per pool (exponential gaps drawn from ``Random(f"{seed}:{node}:{epoch}")``) or by a trace:
a notice, then the node leaves ``noticePeriod`` later and its workloads lose the work since
their last checkpoint.

Every action is logged as ``(t, kind, subject, detail)`` in :attr:`Provisioner.log`.
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuq.core.lifecycle import WorkloadState
from gpuq.core.model import Workload
from gpuq.core.placement.capacity import NodeCapacity
from gpuq.core.provisioning.autoscaler import PoolSpec, plan_scale_down, plan_scale_up
from gpuq.core.provisioning.compute_class import choose, should_migrate
from gpuq.core.provisioning.disruption import NodeState, PodInfo, plan_consolidation
from gpuq.core.provisioning.options import MachineOption, PodGroup, PodShape, Stock, stock_at
from gpuq.sim.cost import CostTracker
from gpuq.sim.events import Event, EventKind
from gpuq.sim.provisioning.queued_requests import QueuedProvisioning
from gpuq.sim.provisioning.setup import ProvisioningSetup
from gpuq.sim.series import StepSeries
from gpuq.sim.simulator import SimRun, Simulation

CLASS_LABEL = "cloud.google.com/compute-class"
Handler = Callable[[str, int, float, Simulation], None]
"""One kind of wake-up: called with its key (a node, workload, pool or trace index), its token
(a node's epoch or a request's attempt, to ignore stale wake-ups), now and the simulation."""
_BACKGROUND = frozenset({"notice", "interrupt", "trace", "stock"})
_ACTIVE = (WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED, WorkloadState.RUNNING)


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """A pool as the simulator sees it: its spec, node names in index order, one node's labels."""

    spec: PoolSpec
    nodes: tuple[str, ...]
    labels: Mapping[str, str]
    taints: tuple[object, ...]
    gpus_per_node: int
    compute_class: str | None


@dataclass(slots=True)
class Counters:
    scale_ups: int = 0
    nodes_added: int = 0
    scale_downs: int = 0
    consolidated: int = 0
    fallbacks: int = 0
    migrations: int = 0
    not_scaled: int = 0
    spot_notices: int = 0
    spot_interruptions: int = 0
    spot_lost_gpu_s: float = 0.0
    first_node_waits: list[float] = field(default_factory=list)


class Provisioner:
    """:class:`~gpuq.sim.simulator.ProvisioningHooks` for one run (steps in the module docstring)."""

    def __init__(self, setup: ProvisioningSetup) -> None:
        self.setup = setup
        self.log: list[tuple[float, str, str, str]] = []
        self.counters = Counters()
        self.queued = QueuedProvisioning(self)
        self.cost = CostTracker(setup.idle_alert_s)
        self.decision_s = 0.0  # wall seconds inside core decisions (bench/provisioning.py)
        self.pools: dict[str, PoolFacts] = {}
        self.pool_of: dict[str, str] = {}
        self.free: dict[str, list[tuple[int, str]]] = {}  # pool -> down nodes (index, name), sorted
        self.held: dict[str, int] = {}  # pool -> nodes up or coming
        self.epoch: dict[str, int] = {}
        self.idle_since: dict[str, float] = {}
        self.pods_on: dict[str, int] = {}
        self.requested: dict[str, int] = {}  # workload -> nodes coming for it
        self.upcoming: dict[str, tuple[str, float, dict[str, int]]] = {}
        """Ordered nodes not arrived yet: pool, ready time, and the room left once the pods they were
        ordered for are counted (as the cluster autoscaler counts upcoming nodes)."""
        self.class_rule: dict[str, tuple[str, int]] = {}  # workload -> (class, rule) it got
        self.migrating: dict[str, tuple[str, ...]] = {}  # workload -> nodes to drain when ready
        self.reserved_nodes: set[str] = set()  # nodes of ProvisioningRequests (not auto scaled down)
        self.nodes_series: dict[str, StepSeries] = {}  # pool -> nodes in service
        self.capacity_series: dict[str, StepSeries] = {}  # capacity type -> nodes in service
        self._said: set[str] = set()
        self._consolidation_due: set[str] = set()
        self._sim: Simulation | None = None
        self._handlers: dict[str, Handler] = {
            "arrive": self._on_arrive,  # an ordered node joins
            "served": self._on_served,  # the nodes ordered for a workload are all there
            "idle": self._on_idle,  # a node has been empty for its pool's idleAfter
            "consolidate": self._on_consolidate,  # a pool's consolidateAfter has passed
            "stock": self._on_stock,  # a stock step begins
            "notice": self._on_notice,  # a spot node gets its interruption notice
            "interrupt": self._on_interrupt,  # the notice period is over: the node leaves
            "trace": self._on_trace,  # an interruption of the trace
            **self.queued.handlers(),  # ProvisioningRequests: ready, timeout, reclaim, window
        }
        """What each kind of wake-up (:meth:`push`) calls."""

    # ----------------------------------------------------------------- setup
    def start(self, sim: Simulation) -> None:
        """Index the pools' nodes; nodes down at 0 are the pools' spares; wake at stock steps."""
        self._sim = sim
        assert sim.placer is not None
        by_pool: dict[str, list[str]] = {}
        for name in sorted(sim.placer.nodes):
            node = sim.placer.nodes[name].node
            if node.pool:
                by_pool.setdefault(node.pool, []).append(name)
        for spec in self.setup.pools:
            names = tuple(by_pool.get(spec.name, ()))
            if not names:
                continue
            node = sim.placer.nodes[names[0]].node
            self.pools[spec.name] = PoolFacts(
                spec, names, dict(node.labels), node.taints, node.gpu_count, node.labels.get(CLASS_LABEL)
            )
            self.free[spec.name] = [(i, n) for i, n in enumerate(names) if sim.is_down(n)]
            self.held[spec.name] = len(names) - len(self.free[spec.name])
            for name in names:
                self.pool_of[name] = spec.name
                self.epoch[name] = 0
        sim.recorder.watch = self._watch
        for name in sorted(sim.placer.nodes):
            if not sim.is_down(name):
                self._came_up(name, 0.0, sim.prices.get(name, 0.0))
                self._watch(0.0, name, sim.placer.nodes[name])
        for step in sorted({s.from_s for s in self.setup.stock if s.from_s > 0}):
            self.push(step, "stock", "", 0)
        for index, item in enumerate(self.setup.interruptions):
            self.push(item.at_s, "trace", str(index), 0)

    # ----------------------------------------------------------------- clock
    def push(self, at: float, kind: str, key: str, token: int) -> None:
        """A wake-up of ``kind`` (a key of the handlers' table) on the simulation's event heap;
        spot and stock wake-ups are background ones."""
        assert self._sim is not None, "the provisioner pushes once started"
        self._sim.schedule(at, EventKind.PROVISIONING, key, token, tag=kind, background=kind in _BACKGROUND)

    def busy(self) -> bool:
        """Whether a workload is left; once none is, spot and stock wake-ups no longer keep the
        run alive (a spot node would otherwise be interrupted and replaced for ever) and are
        ignored when due."""
        sim = self._sim
        if sim is None or len(sim.queue) or sim.arrived < len(sim.jobs) or self.requested:
            return True
        return any(r.status in _ACTIVE for r in sim.runs.values())

    def note(self, now: float, kind: str, subject: str, detail: str) -> None:
        self.log.append((now, kind, subject, detail))

    def on_event(self, event: Event, now: float, sim: Simulation) -> None:
        """A wake-up is due (the simulation hands them over in (time, push order))."""
        if event.background and not self.busy():
            return
        self._handlers[event.tag](event.key, event.version, now, sim)

    def after_schedule(self, now: float, sim: Simulation) -> None:
        self.queued.settle(now, sim)
        if self.setup.autoscaling and sim.scheduler.unplaced:
            started = time.perf_counter()
            self._scale_up(now, sim)
            self.decision_s += time.perf_counter() - started

    # ------------------------------------------------------------- stock
    def stock(self, now: float) -> Stock:
        """Nodes obtainable now per key: the stock step in force minus nodes held or coming."""
        current = stock_at(self.setup.stock, now)
        held: dict[tuple[str, str, str], int] = {}
        for name, facts in self.pools.items():
            key = (facts.spec.machine_type, facts.spec.zone, facts.spec.capacity_type)
            held[key] = held.get(key, 0) + self.held[name]
        return Stock({k: max(v - held.get(k, 0), 0) for k, v in current.available.items()})

    # ---------------------------------------------------------- scale up
    def _scale_up(self, now: float, sim: Simulation) -> None:
        """Steps 1-4 of the module docstring for every unplaced workload not already served."""
        for key in sorted(sim.scheduler.unplaced):
            run = sim.runs.get(key)
            if run is None or key in self.requested or self.queued.owns(key):
                continue
            admitted = sim.scheduler.state.admitted.get(key)
            if admitted is None:
                continue
            workload = admitted.workload
            group = _group(workload)
            fitting = self.fitting_pools(workload, sim)
            if self._fit_on_upcoming(key, group, fitting, now):
                continue
            policy = self.setup.classes.get(_class_of(workload, sim) or "")
            if policy is not None:
                self._class_scale_up(key, group, policy.name, [p for p in fitting], now)
                continue
            counts = dict(self.held)
            plan = plan_scale_up([group], [self.pools[p].spec for p in fitting], counts, self.stock(now), now)
            for up in plan.scale_ups:
                self._order(up.pool, up.nodes, key, now, up.reason, group)
            for miss in plan.not_scaled:
                self._not_scaled(key, now, miss.reason)

    def _class_scale_up(self, key: str, group: PodGroup, name: str, fitting: list[str], now: float) -> None:
        policy = self.setup.classes[name]
        options = [self._option(p) for p in self.pools if self.pools[p].compute_class == name]
        decision = choose(policy, group, options, self._headroom_stock(now, options), self.setup.prices)
        choice = decision.choice
        if choice is None or choice.option.pool is None:
            self._not_scaled(key, now, decision.reason)
            return
        if decision.tier:
            self.counters.fallbacks += 1
            self.note(now, "fallback", key, decision.reason)
        self.class_rule[key] = (name, choice.rule_index)
        self._order(choice.option.pool, choice.nodes, key, now, decision.reason, group)

    def _headroom_stock(self, now: float, options: list[MachineOption]) -> Stock:
        """Stock of each option's key capped by its pool's headroom (max, limits)."""
        stock = self.stock(now)
        caps = dict(stock.available)
        for option in options:
            spec = self.pools[option.pool or ""].spec
            room = max(spec.max_nodes - self.held[spec.name], 0)
            have = caps.get(option.stock_key)
            caps[option.stock_key] = room if have is None else min(have, room)
        return Stock(caps)

    def _option(self, pool: str) -> MachineOption:
        facts = self.pools[pool]
        spec = facts.spec
        return MachineOption(
            spec.machine_type,
            spec.zone,
            spec.capacity_type,  # type: ignore[arg-type]
            cores=spec.node_allocatable.get("cpu", 0) // 1000,
            memory_gb=spec.node_allocatable.get("memory", 0) // 2**30,
            gpu_type=facts.labels.get("cloud.google.com/gke-accelerator"),
            gpu_count=facts.gpus_per_node,
            pool=pool,
            allocatable=spec.node_allocatable,
        )

    def _not_scaled(self, key: str, now: float, reason: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.counters.not_scaled += 1
            self.note(now, "not-scaled", key, reason)

    def fitting_pools(self, workload: Workload, sim: Simulation) -> list[str]:
        """Pools whose nodes take one pod of ``workload``: labels from its node selector and flavors,
        taints it tolerates, and an empty node that holds its requests."""
        pod_set = workload.pod_sets[0]
        wanted = dict(pod_set.node_selector)
        tolerations = list(pod_set.tolerations)
        if workload.admission is not None:
            for assignment in workload.admission.pod_set_assignments:
                for flavor_name in set(assignment.flavors.values()):
                    flavor = sim.config.flavors.get(flavor_name)
                    if flavor is not None:
                        wanted.update(flavor.node_labels)
                        tolerations += flavor.tolerations
        shape = PodShape(pod_set.requests)
        out = []
        for name, facts in sorted(self.pools.items()):
            if any(facts.labels.get(k) != v for k, v in wanted.items()):
                continue
            hard = [t for t in facts.taints if getattr(t, "effect", "") in ("NoSchedule", "NoExecute")]
            if not all(any(tol.tolerates(t) for tol in tolerations) for t in hard):  # type: ignore[arg-type]
                continue
            if shape.per_node(facts.spec.node_allocatable) > 0:
                out.append(name)
        return out

    # ------------------------------------------------------------ nodes
    def take_nodes(self, pool: str, count: int) -> list[str]:
        """Reserve ``count`` down nodes of ``pool`` (lowest index first); they count as held."""
        free = self.free[pool]
        taken = [name for _i, name in free[:count]]
        del free[:count]
        self.held[pool] += len(taken)
        return taken

    def _order(
        self, pool: str, count: int, key: str, now: float, reason: str, group: PodGroup | None = None
    ) -> None:
        names = self.take_nodes(pool, count)
        if not names:
            return
        ready = now + self.pools[pool].spec.provisioning_delay_s
        self.counters.scale_ups += 1
        self.requested[key] = self.requested.get(key, 0) + len(names)
        self.note(now, "scale-up", pool, f"{len(names)} node(s) ready at {ready:.0f}s: {reason}")
        left = group.pods if group is not None else 0
        for name in names:
            room = dict(self.pools[pool].spec.node_allocatable)
            if group is not None:
                here = min(group.shape.per_node(room), left)
                left -= here
                _take(room, group.shape.requests, here)
            self.upcoming[name] = (pool, ready, room)
            self.push(ready, "arrive", name, self.epoch[name])
            self.push(ready, "served", key, 0)

    def _fit_on_upcoming(self, key: str, group: PodGroup, fitting: list[str], now: float) -> bool:
        """Place ``group`` on the room left on nodes already coming for others (earliest first), as
        the cluster autoscaler and Karpenter count upcoming nodes; True when every pod found room."""
        pools = set(fitting)
        room = sorted((ready, name) for name, (pool, ready, _) in self.upcoming.items() if pool in pools)
        plan: list[tuple[str, int]] = []
        left = group.pods
        for _, name in room:
            here = min(group.shape.per_node(self.upcoming[name][2]), left)
            if here:
                plan.append((name, here))
                left -= here
            if not left:
                break
        if left or not plan:
            return False
        for name, here in plan:
            _take(self.upcoming[name][2], group.shape.requests, here)
        ready = max(self.upcoming[name][1] for name, _ in plan)
        self.requested[key] = 1
        names = ", ".join(name for name, _ in plan)
        self.note(
            now, "upcoming", key, f"waits for room on node(s) already coming: {names} (ready at {ready:.0f}s)"
        )
        self.push(ready, "served", key, 0)
        return True

    def _on_arrive(self, name: str, token: int, now: float, sim: Simulation) -> None:
        if token != self.epoch[name]:
            return
        self.upcoming.pop(name, None)
        sim.add_node(name, now)
        self.counters.nodes_added += 1

    def _on_served(self, key: str, _token: int, now: float, sim: Simulation) -> None:
        left = self.requested.get(key, 0) - 1
        if left > 0:
            self.requested[key] = left
            return
        self.requested.pop(key, None)
        self._said.discard(key)
        old = self.migrating.pop(key, None)
        for name in old or ():
            if not sim.is_down(name):
                self.note(now, "migrate", name, f"drained: {key} moved to its better rule")
                self._remove(name, now, sim, f"ComputeClass migration: node {name} drained")

    def bring_up(self, names: list[str], now: float, sim: Simulation) -> None:
        """Nodes reserved with :meth:`take_nodes` join now (a ProvisioningRequest's, together)."""
        for name in names:
            sim.add_node(name, now)
            self.counters.nodes_added += 1

    def _remove(self, name: str, now: float, sim: Simulation, reason: str) -> None:
        """Take a node out of service and give it back to its pool's spares."""
        self.epoch[name] += 1
        self.upcoming.pop(name, None)
        sim.remove_node(name, now, reason)
        pool = self.pool_of[name]
        bisect.insort(self.free[pool], (self.pools[pool].nodes.index(name), name))
        self.held[pool] -= 1
        self.reserved_nodes.discard(name)

    def release(self, names: list[str], now: float, sim: Simulation, reason: str) -> None:
        for name in names:
            if sim.is_down(name):  # reserved, never came: back to the spares
                self.epoch[name] += 1
                pool = self.pool_of[name]
                bisect.insort(self.free[pool], (self.pools[pool].nodes.index(name), name))
                self.held[pool] -= 1
                self.reserved_nodes.discard(name)
            else:
                self._remove(name, now, sim, reason)

    # ------------------------------------------------------- node watch
    def _watch(self, now: float, name: str, capacity: NodeCapacity | None) -> None:
        self.cost.node_seen(now, name, capacity)
        if name not in self.pool_of:
            return
        if capacity is None:
            self._went_down(name, now)
            return
        if name not in self.pods_on:
            self._came_up(name, now, self._sim.prices.get(name, 0.0) if self._sim else 0.0)
        pods = len(capacity.bound)
        before = self.pods_on[name]
        self.pods_on[name] = pods
        pool = self.pools[self.pool_of[name]].spec
        if pods == 0 and before > 0:
            self.idle_since[name] = now
            self.push(now + pool.idle_after_s, "idle", name, self.epoch[name])
        elif pods > 0:
            self.idle_since.pop(name, None)
        if (
            0 < pods < before
            and pool.name in self.setup.consolidating
            and pool.name not in self._consolidation_due
        ):
            self._consolidation_due.add(pool.name)
            self.push(now + pool.disruption.consolidate_after_s, "consolidate", pool.name, 0)

    def _came_up(self, name: str, now: float, price: float) -> None:
        self.cost.node_up(now, name, self.pool_of.get(name, ""), price)
        if name not in self.pool_of:
            return
        pool = self.pools[self.pool_of[name]]
        self.pods_on[name] = 0
        self.idle_since[name] = now
        self._series(pool, now, 1)
        self.push(now + pool.spec.idle_after_s, "idle", name, self.epoch[name])
        rate = self.setup.interruption_rates.get(pool.spec.name, 0.0)
        if pool.spec.capacity_type == "spot" and rate > 0:
            draw = random.Random(f"{self.setup.seed}:{name}:{self.epoch[name]}").expovariate(rate / 3600)
            self.push(now + draw, "notice", name, self.epoch[name])

    def _went_down(self, name: str, now: float) -> None:
        self.cost.node_down(now, name)
        pool = self.pools[self.pool_of[name]]
        self.pods_on.pop(name, None)
        self.idle_since.pop(name, None)
        self._series(pool, now, -1)

    def _series(self, pool: PoolFacts, now: float, delta: int) -> None:
        self.nodes_series.setdefault(pool.spec.name, StepSeries()).add(now, delta)
        self.capacity_series.setdefault(pool.spec.capacity_type, StepSeries()).add(now, delta)

    # --------------------------------------------------------- scale down
    def _on_idle(self, name: str, token: int, now: float, sim: Simulation) -> None:
        if token != self.epoch[name] or name not in self.idle_since or name in self.reserved_nodes:
            return
        pool = self.pools[self.pool_of[name]]
        if not self.setup.autoscaling or now - self.idle_since[name] < pool.spec.idle_after_s:
            return
        started = time.perf_counter()
        serving = [n for n in pool.nodes if not sim.is_down(n) and n not in self.reserved_nodes]
        idle = [  # only the idle nodes are candidates; the pool's size bounds how many may go
            NodeState(n, pool.spec.name, idle_since=self.idle_since[n])
            for n in serving
            if n in self.idle_since
        ]
        plan = plan_scale_down(idle, [pool.spec], now, {pool.spec.name: (len(serving), 0)})
        self.decision_s += time.perf_counter() - started
        for down in plan:
            self.counters.scale_downs += 1
            self.note(now, "scale-down", down.node, down.reason)
            self._remove(down.node, now, sim, f"ScaleDown: {down.reason}")

    def _on_consolidate(self, pool_name: str, _token: int, now: float, sim: Simulation) -> None:
        self._consolidation_due.discard(pool_name)
        if not self.setup.consolidation:
            return
        pool = self.pools[pool_name]
        assert sim.placer is not None
        started = time.perf_counter()
        states = [
            self._node_state(n, pool, sim)
            for n in pool.nodes
            if not sim.is_down(n) and n not in self.reserved_nodes
        ]
        plan = plan_consolidation(states, {pool_name: pool.spec.disruption}, self._pdbs(sim), now)
        self.decision_s += time.perf_counter() - started
        room = len(states) - pool.spec.min_nodes
        for item in plan.remove[: max(room, 0)]:
            self.counters.consolidated += 1
            self.note(now, "consolidate", item.node, item.reason)
            self._remove(item.node, now, sim, f"Consolidation: {item.reason}")
        for skipped in plan.skipped:
            if "may not be disrupted" in skipped.reason or "PodDisruptionBudget" in skipped.reason:
                self.note(now, "consolidation-blocked", skipped.node, skipped.reason)

    def _node_state(self, name: str, pool: PoolFacts, sim: Simulation) -> NodeState:
        assert sim.placer is not None
        capacity = sim.placer.nodes[name]
        pods = []
        for pod in sorted(capacity.bound):
            key = pod.rsplit("/", 1)[0]
            run = sim.runs[key]
            pods.append(_pod_info(pod, run, self.setup.do_not_disrupt_priority))
        since = self.idle_since.get(name, 0.0)
        return NodeState(
            name, pool.spec.name, capacity.node.allocatable, tuple(pods), self.idle_since.get(name), since
        )

    def _pdbs(self, sim: Simulation) -> list:  # type: ignore[type-arg]
        """The scenario's PDBs with ``healthy`` counted over running pods now."""
        import dataclasses

        if not self.setup.pdbs:
            return []
        running = [
            _pod_info(f"{key}/{i}", run, None)
            for key, run in sorted(sim.runs.items())
            if run.status == WorkloadState.RUNNING
            for i in range(run.job.workload.pod_sets[0].count)
        ]
        return [
            dataclasses.replace(b, healthy=sum(1 for p in running if b.covers(p))) for b in self.setup.pdbs
        ]

    # --------------------------------------------------------------- stock steps
    def _on_stock(self, _key: str, _token: int, now: float, sim: Simulation) -> None:
        """Stock changed: retry what waits for nodes, and migrate back where a class allows."""
        self._said.clear()
        self.note(
            now,
            "stock",
            "",
            ", ".join(f"{k}={v}" for k, v in sorted(stock_at(self.setup.stock, now).available.items())),
        )
        self.queued.retry_capacity(now, sim)
        self._migrate(now, sim)
        sim.life.mark_dirty()

    def _migrate(self, now: float, sim: Simulation) -> None:
        assert sim.placer is not None
        for key, (class_name, rule) in sorted(self.class_rule.items()):
            run = sim.runs.get(key)
            policy = self.setup.classes[class_name]
            if run is None or run.status != WorkloadState.RUNNING or key in self.migrating or rule == 0:
                continue
            placement = sim.placer.placements.get(key)
            if placement is None:
                continue
            group = _group(run.job.workload)
            options = [self._option(p) for p in self.pools if self.pools[p].compute_class == class_name]
            decision = should_migrate(
                policy, rule, group, options, self._headroom_stock(now, options), self.setup.prices
            )
            if not decision.migrate or decision.target is None or decision.target.option.pool is None:
                continue
            self.counters.migrations += 1
            self.migrating[key] = tuple(dict.fromkeys(b.node for b in placement.bindings))
            self.class_rule[key] = (class_name, decision.target.rule_index)
            self.note(now, "migrate", key, decision.reason)
            self._order(decision.target.option.pool, decision.target.nodes, key, now, decision.reason)

    # -------------------------------------------------------------------- spot
    def _on_notice(self, name: str, token: int, now: float, sim: Simulation) -> None:
        if token != self.epoch[name] or sim.is_down(name):
            return
        self.counters.spot_notices += 1
        self.note(now, "spot-notice", name, f"preemption notice: node leaves in {self.setup.notice_s:.0f}s")
        self.push(now + self.setup.notice_s, "interrupt", name, token)

    def _on_interrupt(self, name: str, token: int, now: float, sim: Simulation) -> None:
        if token != self.epoch[name] or sim.is_down(name):
            return
        assert sim.placer is not None
        holders = sorted({pod.rsplit("/", 1)[0] for pod in sim.placer.nodes[name].bound})
        lost = sum(sim.runs[k].lost_gpu_s for k in holders)
        self._remove(name, now, sim, f"SpotInterruption: node {name} was preempted")
        self.counters.spot_interruptions += 1
        self.counters.spot_lost_gpu_s += sum(sim.runs[k].lost_gpu_s for k in holders) - lost
        self.note(now, "spot-interrupt", name, f"evicted {', '.join(holders) or 'nothing'}")
        pool = self.pools[self.pool_of[name]]
        if self.held[pool.spec.name] < pool.spec.min_nodes:  # a fixed-size pool gets its node back
            stock = self.stock(now).of(self._option(pool.spec.name))
            if stock is None or stock > 0:
                self._order(
                    pool.spec.name,
                    1,
                    f"pool:{pool.spec.name}",
                    now,
                    f"replace {name} (min {pool.spec.min_nodes})",
                )

    def _on_trace(self, index: str, _token: int, now: float, sim: Simulation) -> None:
        item = self.setup.interruptions[int(index)]
        if item.node is not None:
            names = [item.node]
        else:
            facts = self.pools.get(item.pool or "")
            names = [n for n in (facts.nodes if facts else ()) if not sim.is_down(n)][: item.count]
        for name in names:
            if name in self.epoch:
                self._on_notice(name, self.epoch[name], now, sim)

    # ------------------------------------------------------------------ hooks
    def hold_checks(self, run: SimRun, checks: tuple[str, ...], now: float, sim: Simulation) -> set[str]:
        return self.queued.hold(run, checks, now, sim)

    def on_stopped(self, run: SimRun, now: float) -> None:
        self.cost.run_stopped(run, now)
        self.queued.stopped(run.job.key)

    def close(self, end: float, sim: Simulation) -> None:
        for run in sim.runs.values():
            if run.bound_at is not None:
                self.cost.run_stopped(run, end)
        self.cost.close(end)


def _group(workload: Workload) -> PodGroup:
    pod_set = workload.pod_sets[0]
    gang = workload.pod_sets[0].count > 1
    return PodGroup(workload.key, pod_set.count, PodShape(dict(pod_set.requests)), all_or_nothing=gang)


def _class_of(workload: Workload, sim: Simulation) -> str | None:
    """The ComputeClass a workload selects: its node selector, else its assigned flavor's labels."""
    pod_set = workload.pod_sets[0]
    if CLASS_LABEL in pod_set.node_selector:
        return pod_set.node_selector[CLASS_LABEL]
    if workload.admission is not None:
        for assignment in workload.admission.pod_set_assignments:
            for flavor_name in sorted(set(assignment.flavors.values())):
                flavor = sim.config.flavors.get(flavor_name)
                if flavor is not None and CLASS_LABEL in flavor.node_labels:
                    return flavor.node_labels[CLASS_LABEL]
    return None


def _pod_info(pod: str, run: SimRun, dnd_priority: int | None) -> PodInfo:
    from gpuq.sim.metrics import workload_class

    workload = run.job.workload
    labels = {"app": workload_class(workload.name), "queue": workload.queue_name}
    protected = dnd_priority is not None and workload.priority >= dnd_priority
    return PodInfo(pod, workload.namespace, dict(workload.pod_sets[0].requests), labels, protected)


def _take(room: dict[str, int], requests: Mapping[str, int], pods: int) -> None:
    """Count ``pods`` pods of ``requests`` against ``room``."""
    for resource, amount in requests.items():
        room[resource] = room.get(resource, 0) - amount * pods
