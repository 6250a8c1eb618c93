"""The scheduling cycle, as Kueue runs it (Kueue: ``schedule`` in pkg/scheduler/scheduler.go).

One cycle:

1. Heads: the top of every active ClusterQueue's heap (pkg/cache/queue/manager.go).
2. Nomination: each head gets a flavor assignment and, when it needs
   preemption, its targets, all against the same start-of-cycle state (nominate,
   getInitialAssignments); partial admission shrinks pod sets only when neither fit nor
   preemption works at full size (flavorassigner/podset_reducer.go).
3. Order: non-borrowing before borrowing, then priority, then age (makeClassicalIterator), or
   the fair-sharing tournament when fair sharing is on (pkg/scheduler/fair_sharing_iterator.go).
4. Processing: no-fit and no-candidate entries wait (the latter reserving
   capacity, quotaResourcesToReserve); entries whose targets overlap earlier ones or which no
   longer fit are skipped; preemptors evict and wait; the rest are admitted
   (processEntry). Quota taken earlier in the cycle is never given twice.

:meth:`Scheduler.plan_cycle` computes the decisions and leaves the state as it
found it; :meth:`Scheduler.apply` reserves quota and updates the queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from gpuq.core import backfill, fairshare
from gpuq.core.admission_fairshare import LocalQueueUsage, kueue_units
from gpuq.core.binding import Binder
from gpuq.core.decisions import Admit, CycleResult, Pending, Preempt
from gpuq.core.flavors import Assignment, FlavorAssigner, Mode
from gpuq.core.model import (
    Admission,
    CheckState,
    ClusterConfig,
    ClusterQueue,
    PreemptionPolicy,
    QueueingStrategy,
    StopPolicy,
    Workload,
)
from gpuq.core.nomination import Entry, nominate, preemption_targets_for
from gpuq.core.placement.engine import PlacementFailure, Placer, PodBinding
from gpuq.core.queues import ClusterQueueQueue, QueueCounts, RequeueReason, shape_of
from gpuq.core.quota import FlavorResource, available
from gpuq.core.state import AdmittedWorkload, ClusterState, admission_usage

PRIORITIZE_PREEMPTORS = "PrioritizePreemptorWorkloads"  # alpha gate since v0.19, off by default
HUMAN_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "fair sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


class Scheduler:
    """Admission engine for one configuration: queues, quota cache and the cycle."""

    def __init__(
        self, config: ClusterConfig, placer: Placer | None = None, *, explain_unplaced: bool = True
    ) -> None:
        """``explain_unplaced``: write the kube-scheduler's per-node message for pods no node holds
        (a simulator that never shows it turns this off: it reads every node)."""
        self.config = config
        self.placer = placer  # binds admitted pods to nodes; TAS pod sets must place to be admitted
        self.binder = Binder(placer) if placer is not None else None
        if self.binder is not None:
            self.binder.explain_failures = explain_unplaced
        self.state = ClusterState(config)
        self.inactive = {name: why for name in config.cluster_queues if (why := self._inactive_reason(name))}
        self.active_queues = QueueCounts()  # the workloads of every active queue, kept as they move
        self.fair_usage = LocalQueueUsage.of_config(config)  # Admission Fair Sharing, when configured
        fair = self.fair_usage
        if fair is not None:
            self.state.fair_usage = fair.usage_in
        self.queues = {
            name: ClusterQueueQueue(
                name,
                cq.queueing_strategy,
                None if name in self.inactive else self.active_queues,
                fair.usage if fair is not None and name in fair.cluster_queues else None,
            )
            for name, cq in sorted(config.cluster_queues.items())
        }
        self.workloads: dict[str, Workload] = {}
        self.unqueued: dict[str, Pending] = {}
        self.reserved_checks: dict[str, dict[str, CheckState]] = {}
        self.last_tried: dict[str, list[dict[str, int]]] = {}
        self.why: dict[str, Pending] = {}  # the latest reason each queued workload waits
        self.reservations: dict[str, float] = {}
        """Heads of backfill queues by key: the time each is reserved to start (:mod:`.backfill`)."""
        self._held: dict[str, dict[FlavorResource, int]] = {}  # this cycle's capacity kept for heads
        self._planned: dict[str, tuple[object, ...]] = {}  # per backfill queue: what its last plan read
        self.overran: set[str] = set()
        """Workloads evicted at the runtime they were backfilled with: never backfilled again."""
        self.heads_tried = 0  # heads the cycles nominated, all cycles together (what the cycles cost)

    # ----------------------------------------------------------------- intake
    def submit(self, workload: Workload, placed: Sequence[PodBinding] | None = None) -> None:
        """Queue a pending workload, or account for one that already holds quota.

        ``placed``: where an admitted workload's pods already run; they are kept there
        exactly rather than bound anew (a control plane or forecast rebuilding its view).
        """
        self.workloads[workload.key] = workload
        if workload.admission is not None:
            self._submit_reserved(workload, placed)
            return
        target, problem = self.route(workload)
        if target is None:
            self.unqueued[workload.key] = Pending(workload.key, "Inadmissible", problem)
            return
        self.queues[target].push(workload)

    def _submit_reserved(self, workload: Workload, placed: Sequence[PodBinding] | None = None) -> None:
        """A workload with ``status.admission``: it holds quota unless a check evicted it."""
        assert workload.admission is not None
        cq_name = workload.admission.cluster_queue
        checks = workload.admission_checks
        rejected = sorted(n for n, s in checks.items() if s == CheckState.REJECTED)
        retry = sorted(n for n, s in checks.items() if s == CheckState.RETRY)
        if rejected:
            message = f"admission check {', '.join(rejected)} rejected the workload; it is deactivated"
            self.unqueued[workload.key] = Pending(workload.key, "Deactivated", message, cq_name)
            return
        drained = self._drained(workload, cq_name)
        if retry or drained or cq_name not in self.state.by_queue:
            # Evicted (admission check Retry, stopped queue) or its queue is gone: back to its queue.
            requeued = replace(workload, admission=None, admission_checks={})
            self.workloads[workload.key] = requeued
            self.submit(requeued)
            if drained:
                self.why[workload.key] = Pending(workload.key, "Evicted", drained, cq_name)
            return
        usage = admission_usage(workload.admission)
        reserved = workload.quota_reserved_time or workload.creation_time
        self.state.reserve(AdmittedWorkload(workload, cq_name, usage, reserved))
        self.reserved_checks[workload.key] = dict(checks)
        if self.binder is not None:
            if placed:
                self.binder.placer.restore(workload, placed)
                self.binder.forget(workload.key)
            else:
                self.binder.bind(workload, workload.admission.pod_set_assignments)

    def _drained(self, workload: Workload, cq_name: str) -> str:
        """Why a stopped queue with stopPolicy HoldAndDrain evicts this workload, or ""."""
        cq = self.config.cluster_queues.get(cq_name)
        if cq is not None and cq.stop_policy == StopPolicy.HOLD_AND_DRAIN:
            return f"evicted: ClusterQueue {cq_name} is stopped (HoldAndDrain)"
        lq = self.config.local_queues.get((workload.namespace, workload.queue_name))
        if lq is not None and lq.stop_policy == StopPolicy.HOLD_AND_DRAIN:
            return f"evicted: LocalQueue {lq.name} is stopped (HoldAndDrain)"
        return ""

    def awaiting_checks(self) -> dict[str, Pending]:
        """Workloads holding quota whose admission checks are not all Ready (QuotaReserved only)."""
        waiting = {}
        for key, states in sorted(self.reserved_checks.items()):
            not_ready = sorted(f"{n} ({s})" for n, s in states.items() if s != CheckState.READY)
            if not_ready:
                cq_name = self.state.admitted[key].cluster_queue
                message = (
                    f"Quota reserved in ClusterQueue {cq_name}, waiting for admission checks: "
                    + ", ".join(not_ready)
                )
                waiting[key] = Pending(key, "QuotaReserved", message, cq_name)
        return waiting

    def route(self, workload: Workload) -> tuple[str | None, str]:
        """The ClusterQueue a workload's LocalQueue points to, or why there is none."""
        if not workload.active:
            return None, "workload is inactive (spec.active=false)"
        if workload.admission_gated_by:  # Kueue does not queue it (workload.IsAdmissible)
            return None, f"Admission is gated by: {workload.admission_gated_by}"
        if not workload.queue_name:
            return None, "workload has no queue name (label kueue.x-k8s.io/queue-name)"
        lq = self.config.local_queues.get((workload.namespace, workload.queue_name))
        if lq is None:
            return None, f"LocalQueue {workload.queue_name} doesn't exist in namespace {workload.namespace}"
        if lq.stop_policy != StopPolicy.NONE:
            return None, f"LocalQueue {workload.queue_name} is stopped ({lq.stop_policy})"
        if lq.cluster_queue not in self.config.cluster_queues:
            return None, f"ClusterQueue {lq.cluster_queue} doesn't exist"
        return lq.cluster_queue, ""

    def _inactive_reason(self, name: str) -> str:
        cq = self.config.cluster_queues[name]
        if cq.stop_policy != StopPolicy.NONE:
            return f"ClusterQueue {name} is stopped ({cq.stop_policy})"
        # Kueue's clusterQueue.inactiveReason (pkg/cache/scheduler/clusterqueue.go): the workload reads
        # "ClusterQueue <name> is inactive" (workload_controller.go getQueueBlocker), the queue's
        # Active condition "Can't admit new workloads: <messages>."; both are shown.
        flavors = [f.name for g in cq.resource_groups for f in g.flavors if f.name not in self.config.flavors]
        checks = [(rule.name, self.config.admission_checks.get(rule.name)) for rule in cq.admission_checks]
        missing = [check for check, found in checks if found is None]
        inactive = [check for check, found in checks if found is not None and not found.active]
        messages = [
            *([f"references missing ResourceFlavor(s): {','.join(flavors)}"] if flavors else []),
            *([f"references missing AdmissionCheck(s): {','.join(missing)}"] if missing else []),
            *([f"references inactive AdmissionCheck(s): {','.join(inactive)}"] if inactive else []),
        ]
        if messages:
            return f"ClusterQueue {name} is inactive: Can't admit new workloads: {', '.join(messages)}."
        if self.state.tree.in_cycle(name):
            return f"ClusterQueue {name} is inactive: its cohort tree has a cycle"
        return ""

    # ------------------------------------------------------------------ cycle
    def heads(self, now: float) -> list[Entry]:
        """The queue manager's heads: one head per active ClusterQueue, by name (the order of
        ``queues``); only the queues with an active workload are visited."""
        entries = []
        queues = self.queues
        for name in sorted(self.active_queues.with_heads):
            queue = queues[name]
            head = queue.head()
            if head is not None:
                entries.append(Entry(head, name, is_preemptor=queue.is_preemptor(head.key)))
        return entries

    def plan_cycle(self, now: float = 0.0) -> tuple[CycleResult, list[Entry]]:
        """One scheduling cycle; the state is unchanged when this returns."""
        self.state.now = now
        entries = self.heads(now)
        self.heads_tried += len(entries)
        oracle = self.binder.oracle if self.binder is not None else None
        for entry in entries:
            nominate(self.state, entry, now, self.last_tried.get(entry.key), oracle)
        fair = self.config.scheduler.fair_sharing.enable
        nominated = [e for e in entries if not e.inadmissible]
        if fair:
            ordered: Iterable[Entry] = fairshare.order_entries(self.state, nominated)
        else:
            first = fairshare.gate(self.state, PRIORITIZE_PREEMPTORS)
            ordered = sorted(nominated, key=lambda e: _classical_key(e, first))
        admitted: list[Admit] = []
        preempted: list[Preempt] = []
        pending: list[Pending] = [self._pending(e, e.inadmissible) for e in entries if e.inadmissible]
        cycle_usage: list[tuple[str, dict[FlavorResource, int]]] = []
        victims: dict[str, AdmittedWorkload] = {}
        self._held = {}
        try:
            for entry in ordered:
                self._process(entry, cycle_usage, victims, admitted, preempted, pending)
            if any(self.config.cluster_queues[e.cluster_queue].backfill for e in entries):
                entries = entries + self._backfill(
                    entries, now, cycle_usage, victims, admitted, preempted, pending
                )
        finally:
            for cq_name, usage in reversed(cycle_usage):
                self.state.tree.remove(cq_name, usage)
            if self.binder is not None:
                self.binder.forget_assumed()
        result = CycleResult(tuple(admitted), tuple(preempted), tuple(pending), tuple(e.key for e in entries))
        return result, entries

    def _process(
        self,
        entry: Entry,
        cycle_usage: list[tuple[str, dict[FlavorResource, int]]],
        victims: dict[str, AdmittedWorkload],
        admitted: list[Admit],
        preempted: list[Preempt],
        pending: list[Pending],
    ) -> None:
        """Kueue's processEntry for one entry."""
        assignment = entry.assignment
        assert assignment is not None
        cq = self.config.cluster_queues[entry.cluster_queue]
        if assignment.mode == Mode.NO_FIT:
            entry.requeue = RequeueReason.NO_FIT
            pending.append(_nofit_pending(entry))
            return
        if assignment.mode.is_preempt and not entry.targets:
            # Kueue's reserveCapacityForUnreclaimablePreempt: hold the quota a lower-priority
            # workload of another queue could take first, where it cannot always be reclaimed or
            # (gate PrioritizePreemptorWorkloads) the entry still waits for its evictions.
            held = entry.is_preemptor and fairshare.gate(self.state, PRIORITIZE_PREEMPTORS)
            if cq.preemption.reclaim_within_cohort != PreemptionPolicy.ANY or held:
                reserve = self._reservation(entry)
                self.state.tree.add(entry.cluster_queue, reserve)
                cycle_usage.append((entry.cluster_queue, reserve))
                self._held[entry.key] = reserve
            entry.requeue = RequeueReason.PREEMPTION_NO_CANDIDATES
            pending.append(_nofit_pending(entry))
            return
        if any(t.victim.key in victims for t in entry.targets) and not self._recompute_overlapping(
            entry, cycle_usage, victims, pending
        ):
            return
        assignment = entry.assignment
        assert assignment is not None
        node = self.state.node(entry.cluster_queue)
        root = node.root()
        removal = [v for v in victims.values() if self.state.node(v.cluster_queue).root() is root]
        removal += [t.victim for t in entry.targets]
        if removal:
            with self.state.without_usage(removal):
                fits = all(amount <= available(node, fr) for fr, amount in assignment.usage.items())
        else:
            fits = all(amount <= available(node, fr) for fr, amount in assignment.usage.items())
        if not fits:
            entry.requeue = RequeueReason.FAILED_AFTER_NOMINATION
            entry.clear_scan = True  # Kueue's setSkipped: retry every flavor next time
            pending.append(self._pending(entry, "Workload no longer fits after processing another workload"))
            return
        if (
            not entry.targets
            and self.binder
            and (why := self.binder.assume(entry.workload, assignment.pod_set_assignments()))
        ):
            entry.requeue = RequeueReason.NO_FIT
            entry.topology_blocked = True
            pending.append(self._pending(entry, why))
            return
        for target in entry.targets:
            victims[target.victim.key] = target.victim
        usage = dict(assignment.usage)
        self.state.tree.add(entry.cluster_queue, usage)
        cycle_usage.append((entry.cluster_queue, usage))
        if entry.targets:
            entry.requeue = RequeueReason.PENDING_PREEMPTION
            for target in entry.targets:
                message = (
                    f"Preempted to accommodate a workload ({entry.key}) due to {HUMAN_REASONS[target.reason]}"
                )
                preempted.append(
                    Preempt(target.victim.key, target.victim.cluster_queue, entry.key, target.reason, message)
                )
            names = ", ".join(t.victim.key for t in entry.targets)
            pending.append(
                self._pending(entry, f"Waiting for preempted workloads to be evicted: {names}", "Pending")
            )
            return
        admitted.append(self._admit(entry, cq, assignment))

    def _backfill(
        self,
        entries: list[Entry],
        now: float,
        cycle_usage: list[tuple[str, dict[FlavorResource, int]]],
        victims: dict[str, AdmittedWorkload],
        admitted: list[Admit],
        preempted: list[Preempt],
        pending: list[Pending],
    ) -> list[Entry]:
        """Steps 1 and 2 of :mod:`gpuq.core.backfill` for each blocked head of a backfill queue; the
        entries it admitted (to be applied with the heads)."""
        # A victim's cohort tree is its preemptor's.
        queues = [a.cluster_queue for a in admitted] + [p.cluster_queue for p in preempted]
        touched = {self.state.node(name).root() for name in queues}
        admitted_keys = {a.workload for a in admitted}
        backfilled: list[Entry] = []
        reserved: set[str] = set()
        for head in entries:
            cq = self.config.cluster_queues[head.cluster_queue]
            if not cq.backfill or cq.queueing_strategy != QueueingStrategy.STRICT_FIFO:
                continue
            blocked = head.requeue in (RequeueReason.NO_FIT, RequeueReason.PREEMPTION_NO_CANDIDATES)
            if head.key in admitted_keys or head.inadmissible or not blocked:
                self.reservations.pop(head.key, None)
                continue
            if self.state.node(head.cluster_queue).root() in touched:
                continue  # planned next cycle, with this cycle's admissions counted
            # Nothing it reads changed since this head was last planned (the quota of its cohort
            # tree, the workloads in its queue, the nodes' free state): the same reservation, and
            # no candidate that failed then can pass now, as time only brings ends closer to it.
            nodes = self.binder.placer.index.version if self.binder is not None else 0
            queue = self.queues[head.cluster_queue]
            seen = (head.workload, self.state.version(head.cluster_queue), queue.pushes, nodes)
            if self._planned.get(head.cluster_queue) == seen and head.key in self.reservations:
                reserved.add(head.key)
                continue
            self._planned[head.cluster_queue] = seen
            # The capacity Kueue keeps for a head without preemption candidates is the head's to
            # lend: the reservation protects it instead, so candidates may use it until then.
            held = self._held.get(head.key, {})
            self.state.tree.remove(head.cluster_queue, held)
            try:
                reserved_at = backfill.reservation(self.state, head.workload, head.cluster_queue, now)
                if reserved_at is None:
                    self.reservations.pop(head.key, None)
                    continue
                self.reservations[head.key] = reserved_at
                backfilled += self._backfill_behind(
                    head, now, reserved_at, cycle_usage, victims, admitted, preempted
                )
            finally:
                self.state.tree.add(head.cluster_queue, held)
            reserved.add(head.key)
        if reserved:  # each reserved head's Pending says so, in one pass over the cycle's
            pending[:] = [
                Pending(p.workload, p.reason, f"{p.message}; {backfill.RESERVED}", p.cluster_queue)
                if p.workload in reserved
                else p
                for p in pending
            ]
        return backfilled

    def _backfill_behind(
        self,
        head: Entry,
        now: float,
        reserved_at: float,
        cycle_usage: list[tuple[str, dict[FlavorResource, int]]],
        victims: dict[str, AdmittedWorkload],
        admitted: list[Admit],
        preempted: list[Preempt],
    ) -> list[Entry]:
        """Step 2 of :mod:`gpuq.core.backfill`: the workloads behind ``head`` that end before its
        reservation and fit now, admitted in queue order with their declared runtime as run limit."""
        oracle = self.binder.oracle if self.binder is not None else None
        queued = self.queues[head.cluster_queue].queued_after_head(backfill.CANDIDATES)
        queued = [w for w in queued if w.key not in self.overran]
        chosen: list[Entry] = []
        unfit: set[tuple[object, ...]] = (
            set()
        )  # shapes found not to fit: the same answer (Kueue's equivalence)
        for workload, runtime in backfill.candidates(queued, now, reserved_at):
            shape = shape_of(workload)
            if shape in unfit:
                continue
            entry = Entry(workload, head.cluster_queue)
            nominate(self.state, entry, now, None, oracle)
            assignment = entry.assignment
            if entry.inadmissible or assignment is None or assignment.mode != Mode.FIT or entry.targets:
                if not entry.inadmissible:
                    unfit.add(shape)
                continue
            count = len(admitted)
            self._process(entry, cycle_usage, victims, admitted, preempted, [])
            if len(admitted) > count:
                admitted[-1] = replace(admitted[-1], run_limit_s=runtime)
                chosen.append(entry)
        return chosen

    def _recompute_overlapping(
        self,
        entry: Entry,
        cycle_usage: list[tuple[str, dict[FlavorResource, int]]],
        victims: dict[str, AdmittedWorkload],
        pending: list[Pending],
    ) -> bool:
        """Targets already chosen this cycle; recompute with every victim gone, flavors pinned.

        A fit becomes a deferred fit: its quota is held for the rest of the cycle
        and it waits for the evictions. New targets that do not overlap let the
        entry go on (returns True). Otherwise the entry is skipped.
        """
        assert entry.assignment is not None
        entry.clear_scan = True
        entry.requeue = RequeueReason.FAILED_AFTER_NOMINATION
        first = entry.assignment
        pinned = {ps.name: ps.flavors for ps in first.pod_sets}
        counts = {ps.name: ps.count for ps in first.pod_sets}
        root = self.state.node(entry.cluster_queue).root()  # what-ifs only read the entry's cohort tree
        gone = [v for v in victims.values() if self.state.node(v.cluster_queue).root() is root]
        with self.state.simulate_removal(gone):
            again = FlavorAssigner(self.state, entry.workload, entry.cluster_queue).assign(
                counts, pinned=pinned
            )
            targets = (
                preemption_targets_for(self.state, entry.workload, entry.cluster_queue, again)
                if again.mode.is_preempt
                else []
            )
        if again.mode == Mode.FIT:
            usage = dict(again.usage)
            self.state.tree.add(entry.cluster_queue, usage)
            cycle_usage.append((entry.cluster_queue, usage))
            names = ", ".join(sorted(t.victim.key for t in entry.targets if t.victim.key in victims))
            pending.append(self._pending(entry, f"Waiting for preempted workloads to be evicted: {names}"))
            return False
        if targets and not any(t.victim.key in victims for t in targets):
            entry.assignment, entry.targets = again, targets
            return True
        pending.append(
            self._pending(entry, "Workload has overlapping preemption targets with another workload")
        )
        return False

    def _admit(self, entry: Entry, cq: ClusterQueue, assignment: Assignment) -> Admit:
        pod_sets = assignment.pod_set_assignments()
        assigned_flavors = {f for ps in assignment.pod_sets for f in ps.flavors.values()}
        checks = tuple(
            rule.name
            for rule in cq.admission_checks
            if not rule.on_flavors or assigned_flavors & set(rule.on_flavors)
        )
        message = f"Quota reserved in ClusterQueue {entry.cluster_queue}"
        if checks:
            message += f", waiting for admission checks: {', '.join(checks)}"
        return Admit(entry.key, entry.cluster_queue, pod_sets, assignment.borrowing > 0, checks, message)

    def _reservation(self, entry: Entry) -> dict[FlavorResource, int]:
        """quotaResourcesToReserve: capacity a preemptor without candidates keeps from later entries."""
        assert entry.assignment is not None
        node = self.state.node(entry.cluster_queue)
        reserve: dict[FlavorResource, int] = {}
        for fr, amount in entry.assignment.usage.items():
            quota = node.quotas.get(fr)
            nominal = quota.nominal if quota else 0
            used = node.usage.get(fr, 0)
            if entry.assignment.borrowing > 0:
                if quota is None or quota.borrowing_limit is None:
                    reserve[fr] = amount
                else:
                    reserve[fr] = max(0, min(amount, nominal + quota.borrowing_limit - used))
            else:
                reserve[fr] = max(0, min(amount, nominal - used))
        return reserve

    def _pending(self, entry: Entry, message: str, reason: str = "Pending") -> Pending:
        return Pending(entry.key, reason, message, entry.cluster_queue)

    # ------------------------------------------------------------------ apply
    def apply(self, result: CycleResult, entries: Iterable[Entry], now: float = 0.0) -> None:
        """Reserve quota for admitted workloads and requeue the heads that were not."""
        admitted = {a.workload: a for a in result.admitted}
        self.why.update((p.workload, p) for p in result.pending)
        for entry in entries:
            queue = self.queues[entry.cluster_queue]
            decision = admitted.get(entry.key)
            if decision is None:
                if entry.topology_blocked and self.binder is not None:
                    self.binder.topology_blocked.add(entry.cluster_queue)
                self._remember_scan(entry)
                pending_flavors = entry.assignment is not None and entry.assignment.pending_flavors
                parked = queue.requeue(
                    entry.workload, entry.requeue, pending_flavors and not entry.clear_scan
                )
                no_fit = entry.requeue in (RequeueReason.NO_FIT, RequeueReason.PREEMPTION_NO_CANDIDATES)
                if parked and no_fit and queue.strategy == QueueingStrategy.BEST_EFFORT_FIFO:
                    self._park_equivalent(queue, entry)
                continue
            queue.delete(entry.key)
            self.reservations.pop(entry.key, None)
            self.why.pop(entry.key, None)
            self.last_tried.pop(entry.key, None)
            self.state.nominations.pop(entry.key, None)  # requeued later as a new object: never reused
            usage = admission_usage(_admission(decision))
            workload = replace(
                entry.workload, admission=_admission(decision), quota_reserved_time=now, queue_order_time=None
            )
            self.state.reserve(AdmittedWorkload(workload, entry.cluster_queue, usage, now))
            self.reserved_checks[entry.key] = {name: CheckState.PENDING for name in decision.checks_pending}
            self._charge(workload, entry.cluster_queue, usage, now)
            if self.binder is not None:
                self.binder.bind(workload, decision.pod_sets)

    def _park_equivalent(self, queue: ClusterQueueQueue, entry: Entry) -> None:
        """Equivalence hashing: workloads shaped like a head that found no room wait with it, unevaluated."""
        head_why = self.why.get(entry.key)
        moved = queue.park_equivalent(entry.workload)
        if head_why is None:
            return
        head = entry.key

        def explain() -> str:
            return f"same shape as {head}, which waits: {head_why.message}"

        for key in moved:
            self.why[key] = Pending(key, head_why.reason, cluster_queue=entry.cluster_queue, explain=explain)

    def pending_message(self, key: str) -> str | None:
        """The current message of a queued workload that waits, or None: cheap to call at every state
        change (the text is written when first read, once per decision that changed it)."""
        why = self.why.get(key)
        return why.message if why is not None else None

    def _remember_scan(self, entry: Entry) -> None:
        """Keep where the flavor scan stopped, except after preemption or overlap."""
        if entry.assignment is None or entry.clear_scan or entry.requeue == RequeueReason.PENDING_PREEMPTION:
            self.last_tried.pop(entry.key, None)
        else:
            self.last_tried[entry.key] = entry.assignment.last_tried

    def evict(
        self, key: str, now: float = 0.0, requeue_at: float | None = None, order_at: float | None = None
    ) -> None:
        """Complete an eviction: release quota, requeue the workload and wake its cohort tree.

        ``requeue_at`` is Kueue's ``requeueState.requeueAt``: the workload waits in its
        queue until then (a backoff after a waitForPodsReady timeout, Kueue's UpdateRequeueState).
        ``order_at``: its queue-order timestamp from now on (None: its creation time).
        """
        admitted = self.state.release(key, now)
        self._release_nodes(key)
        self._uncharge(admitted)
        self.reserved_checks.pop(key, None)
        self.last_tried.pop(key, None)
        workload = admitted.workload
        requeued = replace(
            workload, admission=None, admission_checks={}, requeue_at=requeue_at, queue_order_time=order_at
        )
        self.workloads[key] = requeued
        self.queues[admitted.cluster_queue].push(requeued)
        self.wake(admitted.cluster_queue)

    def finish(self, key: str, now: float | None = None) -> None:
        """A workload completed at ``now``: release its quota and wake its cohort tree."""
        admitted = self.state.release(key, now)
        self._release_nodes(key)
        self._uncharge(admitted)
        self.reserved_checks.pop(key, None)
        self.workloads.pop(key, None)
        self.overran.discard(key)
        self.wake(admitted.cluster_queue)

    # ------------------------------------------------- admission fair sharing
    def _charge(self, workload: Workload, cq_name: str, usage: dict[FlavorResource, int], now: float) -> None:
        """Quota reserved in a usage-based ClusterQueue: its LocalQueue pays the entry penalty."""
        fair = self.fair_usage
        if fair is None or cq_name not in fair.cluster_queues:
            return
        fair.reserved((workload.namespace, workload.queue_name), workload.key, _by_resource(usage), now)
        self.queues[cq_name].reorder()

    def _uncharge(self, admitted: AdmittedWorkload) -> None:
        fair = self.fair_usage
        if fair is None or admitted.cluster_queue not in fair.cluster_queues:
            return
        workload = admitted.workload
        fair.released((workload.namespace, workload.queue_name), workload.key)
        self.queues[admitted.cluster_queue].reorder()

    def became_admitted(self, key: str, now: float) -> None:
        """``key`` holds quota with every check Ready: its entry penalty settles into its
        LocalQueue's consumed usage (Kueue's workload controller on the Admitted condition)."""
        fair = self.fair_usage
        admitted = self.state.admitted.get(key)
        if fair is None or admitted is None or admitted.cluster_queue not in fair.cluster_queues:
            return
        workload = admitted.workload
        fair.became_admitted(
            (workload.namespace, workload.queue_name), key, _by_resource(admitted.usage), now
        )
        self.queues[admitted.cluster_queue].reorder()

    def sample_usage(self, now: float) -> None:
        """One Admission Fair Sharing sampling tick at ``now``: every LocalQueue's consumed usage
        decays toward its admitted usage, and the usage-based queues re-sort."""
        fair = self.fair_usage
        if fair is None:
            return
        fair.sample(now)
        for name in sorted(fair.cluster_queues):
            self.queues[name].reorder()

    def samples_due(self) -> bool:
        """Whether sampling still changes anything: a usage-based queue has pending workloads or its
        LocalQueues hold admitted usage. Otherwise consumed usage only halves over time, which the
        next sample after a pause catches up on exactly (the decay over the gap composes)."""
        fair = self.fair_usage
        if fair is None:
            return False
        return fair.holds or any(len(self.queues[name]) for name in fair.cluster_queues)

    @property
    def unplaced(self) -> dict[str, PlacementFailure]:
        """Admitted workloads whose pods no node holds yet (empty without nodes)."""
        return self.binder.unplaced if self.binder is not None else {}

    def take_placed_waiting(self) -> list[str]:
        """The workloads that waited for a node and were bound since the last call (by releases and
        added nodes), in the order they were bound."""
        if self.binder is None:
            return []
        placed, self.binder.placed_waiting = self.binder.placed_waiting, []
        return placed

    def _release_nodes(self, key: str) -> None:
        if self.binder is not None:
            self.binder.release(
                key, self._admitted_workload, lambda cq: self.queues[cq].requeue_inadmissible()
            )

    def nodes_added(self) -> None:
        """Nodes joined or came back: pods waiting for room may bind, topology-blocked heads retry."""
        if self.binder is not None:
            self.binder.capacity_added(
                self._admitted_workload, lambda cq: self.queues[cq].requeue_inadmissible()
            )

    def _admitted_workload(self, key: str) -> Workload | None:
        admitted = self.state.admitted.get(key)
        return admitted.workload if admitted is not None else None

    def wake(self, cq_name: str) -> None:
        """Capacity may have changed in the cohort tree of ``cq_name``: its inadmissible workloads return."""
        for node in self.state.tree.queues_in_tree(self.state.node(cq_name)):
            self.queues[node.name].requeue_inadmissible()

    def pending_count(self) -> int:
        """Workloads in every queue, active or inadmissible (O(inactive queues), usually none)."""
        inactive = sum(len(self.queues[name]) for name in self.inactive)
        return self.active_queues.active + self.active_queues.inadmissible + inactive

    def active_count(self) -> int:
        """Active workloads in the active queues (kept by each move between heap and parking)."""
        return self.active_queues.active

    # ------------------------------------------------- what the lifecycle asks
    def holds(self, key: str) -> bool:
        """Whether ``key`` holds quota now."""
        return key in self.state.admitted

    def cluster_queue_of(self, key: str) -> str | None:
        admitted = self.state.admitted.get(key)
        return admitted.cluster_queue if admitted is not None else None

    def admitted_workload(self, key: str) -> Workload | None:
        """The workload as admitted (with its ``admission``), or None when it holds no quota."""
        return self._admitted_workload(key)

    def workload_of(self, key: str) -> Workload | None:
        """The workload as the scheduler holds it (queued, or admitted)."""
        return self.workloads.get(key)

    def usage_of(self, key: str) -> dict[FlavorResource, int]:
        admitted = self.state.admitted.get(key)
        return dict(admitted.usage) if admitted is not None else {}

    def checks_of(self, key: str) -> dict[str, CheckState]:
        return dict(self.reserved_checks.get(key, {}))

    def set_checks(self, key: str, states: dict[str, CheckState]) -> None:
        """The admission checks of a workload that holds quota are now in ``states``."""
        if key in self.state.admitted:
            self.reserved_checks[key] = dict(states)

    def protection_ended(self, key: str) -> None:
        """``key``'s minimum runtime ended: it may now be preempted, so its cohort tree's parked
        workloads are tried again."""
        admitted = self.state.admitted.get(key)
        if admitted is not None:
            self.state.unprotect(key)
            self.wake(admitted.cluster_queue)

    def requeue_inadmissible(self, cq_name: str) -> None:
        """A requeue backoff in ``cq_name`` ended: its parked workloads may be tried again."""
        queue = self.queues.get(cq_name)
        if queue is not None:
            queue.requeue_inadmissible()

    def run_limit_exceeded(self, key: str) -> None:
        """``key`` ran past the runtime it was backfilled with (the lifecycle evicts it): its
        declared runtime is not to be trusted again, so it waits its turn from now on."""
        self.overran.add(key)

    def withdraw(self, key: str) -> None:
        """Forget a workload that holds no quota (deleted while it waited)."""
        workload = self.workloads.pop(key, None)
        self.why.pop(key, None)
        self.last_tried.pop(key, None)
        self.state.nominations.pop(key, None)
        self.unqueued.pop(key, None)
        self.reservations.pop(key, None)
        self.overran.discard(key)
        target = self.route(workload)[0] if workload is not None else None
        queues = [self.queues[target]] if target is not None else list(self.queues.values())
        for queue in queues:
            queue.delete(key)

    def bindings_of(self, key: str) -> tuple[PodBinding, ...]:
        """Where ``key``'s pods are bound, in placement order (empty without nodes or a placement)."""
        placement = self.placer.placements.get(key) if self.placer is not None else None
        return placement.bindings if placement is not None else ()

    def nodes_of(self, key: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.node for b in self.bindings_of(key)))

    def holders_of(self, node: str) -> list[str]:
        """Workloads with a pod bound on ``node``, by key."""
        if self.placer is None or node not in self.placer.nodes:
            return []
        return sorted({pod.rsplit("/", 1)[0] for pod in self.placer.nodes[node].bound})

    def set_node_down(self, node: str, down: bool) -> None:
        if self.placer is not None:
            self.placer.set_down(node, down)


def _by_resource(usage: Mapping[FlavorResource, int]) -> dict[str, float]:
    """Usage summed over flavors, in Kueue's units (``SumTotalRequests``)."""
    totals: dict[str, int] = {}
    for (_, resource), amount in sorted(usage.items()):
        totals[resource] = totals.get(resource, 0) + amount
    return kueue_units(totals)


def _classical_key(entry: Entry, preemptors_first: bool = False) -> tuple[bool, int, int, float, str]:
    """Kueue's classicalIterator (pkg/scheduler/scheduler.go): preemptors waiting for their evictions
    first (gate PrioritizePreemptorWorkloads), then less borrowing, higher priority, earlier
    queue-order timestamp."""
    borrowing = entry.assignment.borrowing if entry.assignment else 0
    later = not (preemptors_first and entry.is_preemptor)
    return (later, borrowing, -entry.workload.priority, entry.workload.order_time, entry.key)


def _nofit_pending(entry: Entry) -> Pending:
    """A head no flavor holds waits; its message is written only if someone reads it (most never are:
    every pass leaves one per such head)."""
    reasons = tuple(entry.assignment.reasons) if entry.assignment else ()
    pod_sets = entry.workload.pod_sets
    pod_set = pod_sets[0].name if len(pod_sets) == 1 else "the workload"

    def explain() -> str:
        return _nofit_message(pod_set, reasons)

    return Pending(entry.key, "Pending", cluster_queue=entry.cluster_queue, explain=explain)


def _nofit_message(pod_set: str, reasons: tuple[str, ...]) -> str:
    detail = "; ".join(dict.fromkeys(reasons)) if reasons else "no flavor fits"
    return f"couldn't assign flavors to pod set {pod_set}: {detail}"


def _admission(decision: Admit) -> Admission:
    return Admission(decision.cluster_queue, decision.pod_sets)
