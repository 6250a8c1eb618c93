"""Pods as Ray actors: the executor behind ``gpuq serve`` on a Ray cluster (design note 0003).

Each pod gets one actor, created with the pod's resources (``num_gpus``,
``num_cpus``, ``memory`` and custom resources from ``PodLaunch.resources``).
The actor's body, :class:`PodRunner`, is a :class:`LocalExecutor` holding that
single pod, so a pod on Ray is the same process group as a local pod: a clean
environment plus ``pod.env`` plus the device variables, output appended to
``log_path`` after a header line, SIGTERM then SIGKILL after the grace, and
whatever is left of the group killed when its leader exits.

GPUs. gpuq's placement decides which devices a pod gets, and the pod sees
exactly those (``CUDA_VISIBLE_DEVICES`` from ``pod.devices``, as locally);
placement models MIG, topology and sharing, which Ray does not. Ray's own GPU
accounting (``num_gpus``) only reserves the *count* on the node, so Ray never
co-schedules more GPU actors than the node has; the ids Ray assigned
(``ray.get_gpu_ids()``, Ray's ``CUDA_VISIBLE_DEVICES`` for the actor) can
differ from placement's and are deliberately not passed on. The log gets a
line with both before the start line, so a difference is visible. Ray's and
gpuq's views agree only while gpuq is the cluster's sole GPU user.

Nothing here blocks the control loop for long:

1. ``start`` refuses, before any actor exists, an empty command, a bad device
   id, resources no alive node has in all, and (when the whole cluster is this
   host) a command not found on ``PATH``; it then waits at most
   ``start_timeout_s`` for Ray to place the actor. A pending actor is killed
   (Ray cancels its creation, nothing was spawned) and reported as
   ``ExecutorError``.
2. ``poll`` keeps one ``PodRunner.poll`` call in flight per pod and collects
   those that finished within a few milliseconds (``ray.wait``); each exit is
   returned once and its actor is killed. SIGKILL deadlines are enforced by the
   actor when it is polled, so, as locally, within one loop interval.
3. ``terminate`` only submits ``PodRunner.terminate``; calls to one actor run
   in submission order, so a later poll sees its effect.
4. An actor that dies (worker crash, node lost) is reported as an exit with
   code ``-9`` and a log line. Its pod's process group is killed from here when
   the actor ran on this host (a pod's session outlives its parent), and, on
   every node, by the pod's *tether*: a small process the actor starts beside
   the pod (not its child: Ray SIGKILLs a dead worker's children, which would
   orphan the pod's own processes) that SIGKILLs the pod's process group as
   soon as the actor's worker is gone, then exits; it also exits when the pod
   does. A process of the pod that left its group (``setsid``) is not caught.

Nodes (:mod:`gpuq.run.executors.ray_nodes`). Every alive Ray node is a gpuq
node (:meth:`RayExecutor.nodes`), named by its ``gpuq.dev/node`` label or its
address. A pod whose ``PodLaunch.node`` is set runs on exactly that node: its
actor is created with ``NodeAffinitySchedulingStrategy(node_id, soft=False)``
(Ray's ``python/ray/util/scheduling_strategies.py``), and a node Ray does not
know or has dead is refused with ``ExecutorError`` before any actor exists.
:meth:`RayExecutor.node_changes` reports nodes that died or joined, from
``ray.nodes()`` (read at most once a second) and from actors that died with
their node. Once the loop asks it, the ``-9`` exits of a dead node's pods are
held back until that node has been reported lost, so that the loop evicts the
workload (``NodeLost``) before it hears of them: they end the eviction and
count as no pod failure.

Actors are not detached: when the control plane dies, Ray kills them, and the
restarted loop kills the pods' groups by their recorded pids.

A local instance (``address`` None or ``"local"``) is this process's: a clean ``close`` shuts it
down. A server killed with ``kill -9`` cannot, and part of its instance outlives it (Ray's
fate-sharing takes the GCS, the raylet and the workers with the driver, but the raylet's dashboard
and runtime-env agents are left to init for ever). So the executor records its instance in
``<workdir>/ray-local-session.json`` (the driver's pid and start time, the session directory, the
pids and start times of the processes Ray started), removed by ``close``; the next executor of the
same workdir that starts a local instance first reaps a record whose driver is dead: it SIGKILLs
the recorded processes still alive (same pid, same start time) and every process that holds a file
of that session directory open (each Ray process keeps its logs there), then removes the record.
A record whose driver still runs (another live server) is left alone. ``start``
returns a pid only for pods on this host, so that a pid from another node is
never signalled here. On a multi-node cluster gpuq must be installed on every
node (actors import this module) and ``workdir`` and the log paths must be
usable there (a shared filesystem).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Ray's C++ core installs absl's failure-signal handler, which on SIGTERM dumps a stack trace and arms a
# 3-second alarm that aborts the process: `gpuq serve` handles SIGTERM itself and may take longer than
# that to stop its pods cleanly. Set before Ray is imported (it reads the variable at import).
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gpuq.core.nodes import Node
from gpuq.run.executors.base import ExecutorError, NodeChanges, PodExit, PodLaunch
from gpuq.run.executors.local import LocalExecutor
from gpuq.run.executors.ray_nodes import NODE_LABEL, RayNode, gpuq_nodes, ray_nodes
from gpuq.run.gpus import device_env
from gpuq.run.proctrack import boot_id

DEFAULT_START_TIMEOUT_S = 5.0  # a worker starts in about a second; longer means no node has room
_POLL_WAIT_S = 0.01  # how long one poll waits for answers already on their way
_SPAWN_TIMEOUT_S = 10.0  # a placed actor's Popen: only a wedged node takes this long
_CLOSE_MARGIN_S = 2.0  # over the grace, for the actors' own close (which kills after grace + 1 s)
_OBJECT_STORE_BYTES = 128 << 20  # a local instance: pods pass nothing through the object store
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# PodLaunch.resources keys that are actor options; any other key is a Ray custom resource.
_RESOURCE_NAMES = {"num_gpus": "GPU", "num_cpus": "CPU", "memory": "memory"}
_NODES_EVERY_S = 1.0  # how often node_changes reads ray.nodes() (a GCS call)
_NODE_DIED = "its node has died"  # in the message of an actor that died with its node (ActorDiedError)
# The pod's tether (module docstring, step 4): `python -I -c TETHER WORKER_PID WORKER_START POD_GROUP`.
# It forks away from the actor's worker (whose children Ray kills), then waits for the worker to go.
_TETHER = r"""
import os, signal, sys, time
worker, start, group = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if os.fork():
    os._exit(0)
os.setsid()
def started(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]
while True:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        os._exit(0)
    except PermissionError:
        pass
    if started(worker) != start:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    time.sleep(0.2)
"""


class PodRunner:
    """The body of a pod's actor: one pod run by a :class:`LocalExecutor` on the actor's node.

    Ray calls its methods one at a time, in the order the executor submitted them.
    Undecorated (``ray.remote`` is applied by the executor) so that it stays typed.
    """

    def __init__(self, workdir: str) -> None:
        self._local = LocalExecutor(Path(workdir))
        self._key: str | None = None
        self._exit_code: int | None = None

    def placement(self) -> tuple[str, list[str], str]:
        """Where Ray put this actor: its node id, the GPU ids Ray assigned to it, its host's boot id."""
        gpus = [str(gpu) for gpu in ray.get_gpu_ids()]
        return ray.get_runtime_context().get_node_id(), gpus, boot_id()

    def start(self, pod: PodLaunch, actor_name: str) -> int | str:
        """Note Ray's placement in the log, then start the pod: its pid, or why it could not start."""
        node_id, gpu_ids, _ = self.placement()
        _append_log(
            pod.log_path,
            f"ray actor {actor_name} on node {node_id[:12]}, Ray GPU ids [{', '.join(gpu_ids)}]; "
            f"the pod's CUDA_VISIBLE_DEVICES is placement's: {','.join(pod.devices) or '(none)'}",
        )
        try:
            pid = self._local.start(pod)
        except ExecutorError as error:
            _append_log(pod.log_path, f"not started: {error}")
            return str(error)
        self._key = pod.key
        _tether(pid)
        return pid

    def poll(self) -> int | None:
        """The pod's exit code once it has exited (every call from then on), else None."""
        for exit_ in self._local.poll():
            self._exit_code = exit_.exit_code
        return self._exit_code

    def terminate(self, grace_s: float) -> None:
        """As :meth:`LocalExecutor.terminate`: idempotent, the earliest SIGKILL deadline wins."""
        if self._key is not None:
            self._local.terminate(self._key, grace_s)

    def close(self, grace_s: float) -> int | None:
        """Stop the pod (SIGTERM, SIGKILL after ``grace_s``) and wait for it: its exit code."""
        self._local.close(grace_s)
        return self.poll()


@dataclass
class _Pod:
    """A started pod: its actor, where the actor runs, and the poll call in flight."""

    key: str
    actor: Any  # a Ray ActorHandle for PodRunner (Ray's handles are untyped)
    pid: int
    node_id: str
    log_path: Path
    polling: Any = None  # the ObjectRef of the PodRunner.poll in flight, if any
    this_host: bool = False  # its node is on this machine (same boot id): its group can be killed here


class RayExecutor:
    """Runs each pod as a Ray actor; see the module docstring for the guarantees.

    Connects to Ray at ``address`` (``None`` or ``"local"``: a new local instance
    with ``num_gpus`` virtual GPUs, ``num_cpus`` (default: all cores) and custom
    ``resources``, so that it runs where there is no GPU). A process connects to
    Ray once: if it already is connected, the executor uses that connection and
    leaves it up; otherwise ``close`` shuts down what the executor connected.
    ``clock`` gives the epoch seconds of ``PodExit.time``. ``node_name``: the gpuq
    name of a new local instance's node (its ``gpuq.dev/node`` label), so that pods
    placed on that node run there. Safe to share between the loop thread and API
    threads (``running``), like the local executor.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        workdir: Path,
        num_gpus: int | None = None,
        resources: dict[str, float] | None = None,
        num_cpus: int | None = None,
        namespace: str = "gpuq",
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        node_name: str | None = None,
    ) -> None:
        self._workdir = Path(workdir)
        self._clock = clock
        self._namespace = namespace
        self._start_timeout_s = start_timeout_s
        self._owns_ray = not ray.is_initialized()
        self._session_record: Path | None = None
        if self._owns_ray:
            local = address in (None, "local")
            if local:
                reap_dead_session(self._workdir)
            labels = {NODE_LABEL: node_name} if node_name else None
            _connect(
                address,
                num_gpus=num_gpus,
                num_cpus=num_cpus,
                resources=resources,
                labels=labels,
                namespace=namespace,
            )
            if local:
                self._session_record = record_session(self._workdir)
        self._node_id = ray.get_runtime_context().get_node_id()
        self._actor_class: Any = ray.remote(PodRunner)
        self._id = uuid.uuid4().hex[:8]
        self._lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}
        self._starting: set[str] = set()
        self._exits: list[PodExit] = []
        self._closed = False
        # Ray's nodes (see the module docstring, "Nodes"): the latest view, the names given so far,
        # the alive ids last reported, ids whose actors died with them, and the exits held back.
        self._view: dict[str, RayNode] = {}
        self._names: dict[str, str] = {}
        self._viewed_at = 0.0
        self._reported: set[str] = set()
        self._dying: dict[str, str] = {}
        self._held: dict[str, list[PodExit]] = {}
        self._watching = False
        self._refresh(force=True)
        self._reported = {node_id for node_id, node in self._view.items() if node.alive}

    # --- the Executor port ----------------------------------------------------------------------

    def start(self, pod: PodLaunch) -> int | None:
        """Start the pod in a new actor: its pid when it runs on this host, else None.

        Raises ``ExecutorError``, with no actor left behind, for a closed executor, a
        key already running, a pod refused by the checks of step 1 of the module
        docstring, an actor Ray did not place within ``start_timeout_s``, or a pod its
        actor could not start (command not found there, bad working directory...).
        """
        with self._lock:
            if self._closed:
                raise ExecutorError(f"{pod.key}: the executor is closed")
            if pod.key in self._pods or pod.key in self._starting:
                raise ExecutorError(f"{pod.key}: already running")
            node_id = self._node_of(pod)
            options = self._actor_options(pod, node_id)
            self._check(pod, options, node_id)
            self._starting.add(pod.key)
        try:
            started = self._create(pod, options)  # waits for Ray: without the lock, for running()
        except ExecutorError:
            with self._lock:
                if node_id is not None and self._lost_while_starting(pod, node_id):
                    return None  # its node died meanwhile: an eviction, not a pod that cannot start
            raise
        finally:
            with self._lock:
                self._starting.discard(pod.key)
        with self._lock:
            if self._closed:
                _kill_actor(started.actor)
                raise ExecutorError(f"{pod.key}: the executor was closed while the pod started")
            self._pods[pod.key] = started
        return started.pid if started.node_id == self._node_id else None

    def poll(self) -> list[PodExit]:
        """Exits since the last poll, in the order they were detected; waits at most a few milliseconds."""
        with self._lock:
            waiting: dict[Any, _Pod] = {}
            for pod in self._pods.values():
                if pod.polling is None:
                    pod.polling = pod.actor.poll.remote()
                waiting[pod.polling] = pod
            if waiting:
                ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=_POLL_WAIT_S)
                for ref in ready:
                    self._collect(waiting[ref], ref)
            exits, self._exits = self._exits, []
            return exits

    def terminate(self, key: str, grace_s: float) -> None:
        """SIGTERM the pod's group now; SIGKILL it once ``grace_s`` has passed (``<= 0``: at once).

        Returns at once. Idempotent: a repeated call sends no second SIGTERM and never
        postpones an earlier deadline. Unknown or already-exited keys are ignored.
        """
        with self._lock:
            pod = self._pods.get(key)
            if pod is not None:
                pod.actor.terminate.remote(grace_s)

    def running(self) -> set[str]:
        """Keys started and not yet reported by ``poll`` (a lost node's pods until their exits are)."""
        with self._lock:
            return set(self._pods) | {exit_.key for held in self._held.values() for exit_ in held}

    # --- nodes ----------------------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        """The alive Ray nodes as gpuq nodes, now (what placement should place on)."""
        with self._lock:
            self._refresh(force=True)
            alive = [n for n in self._view.values() if n.alive and n.node_id not in self._dying]
            return [n.node for n in alive]

    def node_changes(self) -> NodeChanges:
        """Nodes lost (Ray has them dead, or an actor died with its node) and joined since the last
        call; reads ``ray.nodes()`` at most once a second. Releases the held exits of the lost ones
        to the next ``poll`` (see the module docstring, "Nodes")."""
        with self._lock:
            self._watching = True
            self._refresh()
            alive = {i for i, node in self._view.items() if node.alive and i not in self._dying}
            lost: list[tuple[str, str]] = []
            for node_id in sorted(self._reported - alive):
                known = self._view.get(node_id)
                name = known.name if known is not None else self._names.get(node_id, node_id)
                why = self._dying.get(node_id) or (known.death if known is not None else "") or "gone"
                lost.append((name, f"NodeFailures: Ray node {name} ({node_id[:12]}) died: {why}"))
                self._exits.extend(self._held.pop(node_id, []))
            added = sorted(self._view[i].name for i in alive - self._reported)
            self._reported = alive
            return NodeChanges(tuple(lost), tuple(added))

    def close(self, grace_s: float = 1.0) -> None:
        """Terminate every pod, wait up to about ``grace_s`` + 2 s for them, kill the actors, leave Ray.

        Exits found here are still returned by a final ``poll``; ``start`` refuses from
        now on. Ray is shut down only if this executor connected it.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for held in self._held.values():  # a lost node's pods: their exits go to the final poll
                self._exits.extend(held)
            self._held.clear()
            closing = {pod.actor.close.remote(grace_s): pod for pod in self._pods.values()}
        if closing:
            ready, _ = ray.wait(list(closing), num_returns=len(closing), timeout=grace_s + _CLOSE_MARGIN_S)
            with self._lock:
                for ref in ready:
                    self._collect(closing[ref], ref)
                for pod in list(self._pods.values()):
                    self._lose(pod, f"its actor did not stop within {grace_s + _CLOSE_MARGIN_S:g}s")
        if self._owns_ray:
            ray.shutdown()
            if self._session_record is not None:
                self._session_record.unlink(missing_ok=True)  # shut down: nothing left to reap

    # --- steps ------------------------------------------------------------------------------------

    def _actor_options(self, pod: PodLaunch, node_id: str | None) -> dict[str, Any]:
        """Ray actor options for the pod: its resources, a unique name, no restarts, and, for a pod
        placement bound to a node, that node (hard affinity: never elsewhere).

        ``num_cpus`` defaults to 0: gpuq's quota already accounts CPUs, and an actor
        that holds a CPU would cap the pods of a node at its core count.
        """
        resources = pod.resources
        options: dict[str, Any] = {
            "num_cpus": resources.get("num_cpus", 0.0),
            "num_gpus": resources.get("num_gpus", 0.0),
            "name": f"gpuq-pod:{pod.key}:{self._id}:{uuid.uuid4().hex[:6]}",
            "namespace": self._namespace,
            "max_restarts": 0,
        }
        if "memory" in resources:
            options["memory"] = resources["memory"]
        custom = {name: amount for name, amount in resources.items() if name not in _RESOURCE_NAMES}
        if custom:
            options["resources"] = custom
        if node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        return options

    def _node_of(self, pod: PodLaunch) -> str | None:
        """The Ray node id of the pod's gpuq node (None: no node, Ray chooses); ``ExecutorError``
        naming the node when Ray does not know it or has it dead."""
        if not pod.node:
            return None
        self._refresh()
        named = [node for node in self._view.values() if node.name == pod.node]
        alive = [node for node in named if node.alive and node.node_id not in self._dying]
        if alive:
            return alive[0].node_id
        if named:
            dead = named[0]
            why = self._dying.get(dead.node_id) or dead.death or "dead"
            raise ExecutorError(f"{pod.key}: node {pod.node} (Ray node {dead.node_id[:12]}) is dead: {why}")
        known = ", ".join(sorted({n.name for n in self._view.values() if n.alive})) or "none"
        raise ExecutorError(f"{pod.key}: node {pod.node} is not a node of the Ray cluster (alive: {known})")

    def _refresh(self, *, force: bool = False) -> None:
        """Read ``ray.nodes()`` again, unless it was read less than a second ago (and not ``force``)."""
        now = time.monotonic()
        if not force and now - self._viewed_at < _NODES_EVERY_S:
            return
        self._viewed_at = now
        found = ray_nodes(_all_nodes(), known=self._names)
        self._view = {node.node_id: node for node in found}
        self._names.update({node.node_id: node.name for node in found})

    def _check(self, pod: PodLaunch, options: dict[str, Any], node_id: str | None = None) -> None:
        """Step 1: refuse, before creating an actor, what could never start (on its node, if bound)."""
        argv = [*pod.command, *pod.args]
        if not argv or not argv[0]:
            raise ExecutorError(f"{pod.key}: no command to run (command and args are empty)")
        try:
            device_env(pod.devices)
        except ValueError as error:
            raise ExecutorError(f"{pod.key}: {error}") from error
        nodes = _alive_nodes()
        wanted = _wanted(options)
        if node_id is not None:
            totals: dict[str, float] = next(
                (node.get("Resources", {}) for node in nodes if node.get("NodeID") == node_id), {}
            )
            if not _fits(wanted, totals):
                raise ExecutorError(
                    f"{pod.key}: node {pod.node} has not {_describe(wanted)} in all "
                    f"(it has {_describe(totals)})"
                )
        elif not any(_fits(wanted, node.get("Resources", {})) for node in nodes):
            raise ExecutorError(f"{pod.key}: no node of the Ray cluster has {_describe(wanted)} in all")
        program = argv[0]
        this_host_only = [node.get("NodeID") for node in nodes] == [self._node_id]
        if this_host_only and os.sep not in program:
            path = pod.env.get("PATH", os.environ.get("PATH", _DEFAULT_PATH))
            if shutil.which(program, path=path) is None:
                raise ExecutorError(f"{pod.key}: command {program!r} not found on PATH {path}")

    def _create(self, pod: PodLaunch, options: dict[str, Any]) -> _Pod:
        """Create the actor, wait for Ray to place it (bounded), then start the pod in it."""
        try:
            actor = self._actor_class.options(**options).remote(str(self._workdir))
        except RayError as error:  # refused at once (a cancelled creation, a bad option)
            raise ExecutorError(f"{pod.key}: Ray refused to create its actor: {error}") from error
        try:
            node_id, _, boot = ray.get(actor.placement.remote(), timeout=self._start_timeout_s)
        except GetTimeoutError:
            _kill_actor(actor)  # still pending: Ray cancels the creation, nothing was spawned
            raise ExecutorError(
                f"{pod.key}: Ray did not place the pod within {self._start_timeout_s:g}s "
                f"(needs {_describe(_wanted(options))}; free now: {_describe(_available())})"
            ) from None
        except RayError as error:
            _kill_actor(actor)
            raise ExecutorError(f"{pod.key}: its Ray actor failed to start: {error}") from error
        try:
            outcome = ray.get(actor.start.remote(pod, options["name"]), timeout=_SPAWN_TIMEOUT_S)
        except RayError as error:
            _kill_actor(actor)
            raise ExecutorError(f"{pod.key}: its Ray actor failed while starting it: {error}") from error
        if isinstance(outcome, str):
            _kill_actor(actor)
            raise ExecutorError(outcome)
        here = node_id == self._node_id or (bool(boot) and boot == boot_id())
        return _Pod(pod.key, actor, outcome, node_id, Path(pod.log_path), this_host=here)

    def _collect(self, pod: _Pod, ref: Any) -> None:
        """Take in one finished ``PodRunner.poll`` (or ``close``): an exit, nothing yet, or a dead actor."""
        if self._pods.get(pod.key) is not pod:
            return  # already reported (a poll and a close answered for the same pod)
        pod.polling = None
        try:
            code = ray.get(ref)
        except ActorUnavailableError:
            return  # unreachable for now (it is not restarted): asked again at the next poll
        except RayActorError as error:
            if self._died_with_node(pod, str(error)):
                return
            self._lose(pod, f"its Ray actor died ({type(error).__name__})")
            return
        if code is not None:
            self._record_exit(pod, code)

    def _lost_while_starting(self, pod: PodLaunch, node_id: str) -> bool:
        """Whether the pod's node is dead now, its start having failed; if so, and the loop watches
        nodes, the pod is reported as started, then killed with its node (True)."""
        self._refresh(force=True)
        node = self._view.get(node_id)
        if not self._watching or (node is not None and node.alive and node_id not in self._dying):
            return False
        _append_log(pod.log_path, f"{pod.key}: its Ray node {pod.node} died as it started", self._clock)
        self._held.setdefault(node_id, []).append(PodExit(pod.key, -signal.SIGKILL, self._clock()))
        if node_id not in self._reported:  # reported lost already: no report will release it
            self._exits.extend(self._held.pop(node_id, []))
        return True

    def _died_with_node(self, pod: _Pod, message: str) -> bool:
        """Whether the pod's actor died with its node; if so, and the loop watches nodes, its exit is
        held until ``node_changes`` reports the node lost (True)."""
        self._refresh(force=True)
        node = self._view.get(pod.node_id)
        if node is not None and node.alive and _NODE_DIED not in message:
            return False
        if node is not None and node.alive:  # Ray has the actor dead with its node, not yet the node
            self._dying.setdefault(pod.node_id, "its actors died with it")
        if not self._watching:
            return False
        if pod.this_host:  # another raylet of this machine: its pods' groups are reachable from here
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pod.pid, signal.SIGKILL)
        name = node.name if node is not None else pod.node_id[:12]
        why = f"{pod.key}: its Ray node {name} died; reported as killed"
        _append_log(str(pod.log_path), why, self._clock)
        self._pods.pop(pod.key, None)
        self._held.setdefault(pod.node_id, []).append(PodExit(pod.key, -signal.SIGKILL, self._clock()))
        _kill_actor(pod.actor)
        if pod.node_id not in self._reported:  # reported lost already (a late actor): no report will come
            self._exits.extend(self._held.pop(pod.node_id, []))
        return True

    def _lose(self, pod: _Pod, why: str) -> None:
        """Step 4: report a pod whose actor is gone as killed, and kill its group where we can."""
        if pod.this_host:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pod.pid, signal.SIGKILL)
        _append_log(str(pod.log_path), f"{pod.key}: {why}; reported as killed", self._clock)
        self._record_exit(pod, -signal.SIGKILL)

    def _record_exit(self, pod: _Pod, code: int) -> None:
        """Forget a finished pod, queue its ``PodExit`` and kill its actor (its GPUs return to Ray)."""
        self._pods.pop(pod.key, None)
        self._exits.append(PodExit(pod.key, code, self._clock()))
        _kill_actor(pod.actor)


def cluster_nodes(address: str, *, namespace: str = "gpuq") -> list[Node]:
    """The alive nodes of the Ray cluster at ``address`` as gpuq nodes, named as executors name them;
    connects this process to it first if it is not connected to Ray."""
    if not ray.is_initialized():
        _connect(address, num_gpus=None, num_cpus=None, resources=None, namespace=namespace)
    return gpuq_nodes(_all_nodes())


def _connect(
    address: str | None,
    *,
    num_gpus: int | None,
    num_cpus: int | None,
    resources: dict[str, float] | None,
    namespace: str,
    labels: dict[str, str] | None = None,
) -> None:
    """``ray.init``, quietly: a new local instance (``None``, ``"local"``) or the cluster at ``address``."""
    quiet: dict[str, Any] = {
        "namespace": namespace,
        "logging_level": logging.ERROR,
        "log_to_driver": False,  # pods' output goes to their logs; the actors print nothing
        "include_dashboard": False,
    }
    if address in (None, "local"):
        ray.init(
            address="local",  # never join a cluster found through RAY_ADDRESS or `ray start`
            num_cpus=num_cpus if num_cpus is not None else os.cpu_count(),
            num_gpus=num_gpus or 0,
            resources=resources,
            labels=labels,
            object_store_memory=_OBJECT_STORE_BYTES,
            **quiet,
        )
    else:
        ray.init(address=address, **quiet)


SESSION_RECORD = "ray-local-session.json"
_REAP_WAIT_S = 5.0


def record_session(workdir: Path) -> Path | None:
    """Write what a later executor needs to reap this process's local Ray instance if it is never shut
    down: the driver (this process), the session directory, the processes Ray started. None (and no
    record) where Ray does not say (its node object is private API)."""
    node: Any = getattr(ray._private.worker, "_global_node", None)
    session = node.get_session_dir_path() if node is not None else None
    if node is None or not isinstance(session, str) or not session:
        return None
    processes = [(p.pid, _start_time(p.pid)) for _, p in node.live_processes()]
    record = {
        "driver": [os.getpid(), _start_time(os.getpid())],
        "session_dir": session,
        "processes": [[pid, start] for pid, start in processes if start is not None],
    }
    path = workdir / SESSION_RECORD
    with contextlib.suppress(OSError):
        workdir.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)
        return path
    return None


def reap_dead_session(workdir: Path) -> list[int]:
    """Kill what is left of the local Ray instance recorded in ``workdir`` by a process that died
    without shutting it down (``kill -9``), as the module docstring says; the pids killed.

    Nothing is done while the recorded driver runs, nor for a record that does not name a Ray
    session directory (``.../session_*``); this process, its parent and pid 1 are never signalled.
    """
    path = workdir / SESSION_RECORD
    try:
        record = json.loads(path.read_text())
        driver_pid, driver_start = int(record["driver"][0]), record["driver"][1]
        session = str(record["session_dir"])
        recorded = [(int(pid), start) for pid, start in record["processes"]]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return []
    running = _start_time(driver_pid)
    if running is not None and (driver_start is None or running == driver_start):
        return []  # its server still runs: its instance is not a leftover
    if not os.path.isabs(session) or not os.path.basename(session.rstrip("/")).startswith("session_"):
        return []
    victims = {pid for pid, start in recorded if start is not None and _start_time(pid) == start}
    victims |= _holding(session)
    victims -= {1, os.getpid(), os.getppid()}
    for pid in sorted(victims):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _REAP_WAIT_S
    while any(_start_time(pid) is not None for pid in victims) and time.monotonic() < deadline:
        time.sleep(0.05)
    path.unlink(missing_ok=True)
    if victims:
        logging.getLogger("gpuq.ray").warning(
            "killed %d process(es) left by a local Ray instance whose server died (%s)", len(victims), session
        )
    return sorted(victims)


def _start_time(pid: int) -> str | None:
    """The process's start time (``/proc/<pid>/stat`` field 22), to tell it from a later one with its pid;
    None when it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _holding(directory: str) -> set[int]:
    """Processes with a file under ``directory`` open (readable ``/proc/<pid>/fd`` only)."""
    prefix = directory.rstrip("/") + "/"
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            descriptors = list((entry / "fd").iterdir())
        except OSError:
            continue
        for descriptor in descriptors:
            with contextlib.suppress(OSError):
                if os.readlink(descriptor).startswith(prefix):
                    found.add(int(entry.name))
                    break
    return found


def _all_nodes() -> list[dict[str, Any]]:
    """Ray's nodes, dead ones included (``NodeID``, ``Alive``, ``Resources``...); typed here."""
    nodes: Callable[[], list[dict[str, Any]]] = ray.nodes
    return nodes()


def _alive_nodes() -> list[dict[str, Any]]:
    """Ray's alive nodes."""
    return [node for node in _all_nodes() if node.get("Alive")]


def _available() -> dict[str, float]:
    available: Callable[[], dict[str, float]] = ray.available_resources
    return available()


def _wanted(options: dict[str, Any]) -> dict[str, float]:
    """The Ray resources an actor with these options asks for, by Ray's resource names."""
    wanted = {ray_name: float(options.get(option, 0.0)) for option, ray_name in _RESOURCE_NAMES.items()}
    wanted.update(options.get("resources", {}))
    return {name: amount for name, amount in wanted.items() if amount > 0}


def _fits(wanted: dict[str, float], total: dict[str, float]) -> bool:
    return all(total.get(name, 0.0) >= amount for name, amount in wanted.items())


def _describe(resources: dict[str, float]) -> str:
    """``"2 GPU, 1.5 GiB memory"``: Ray resources for a message (byte amounts in GiB, no node markers)."""
    shown = [
        f"{amount / 2**30:.3g} GiB {name}" if name.endswith("memory") else f"{amount:g} {name}"
        for name, amount in sorted(resources.items())
        if not name.startswith("node:")
    ]
    return ", ".join(shown) or "nothing"


def _tether(group: int) -> None:
    """Start the pod's tether (module docstring, step 4) for process group ``group``; best effort."""
    start = _start_time(os.getpid())
    if start is None:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        argv = [sys.executable, "-I", "-c", _TETHER, str(os.getpid()), start, str(group)]
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=10, check=False)


def _kill_actor(actor: Any) -> None:
    """Kill an actor (or cancel its pending creation); one already dead is not an error."""
    with contextlib.suppress(RayError, ValueError):
        ray.kill(actor, no_restart=True)


def _append_log(path: str, text: str, clock: Callable[[], float] = time.time) -> None:
    """One ``--- <time> <text>`` line in a pod's log, as the local executor writes them; best effort."""
    stamp = datetime.fromtimestamp(clock(), UTC).isoformat(timespec="milliseconds")
    with contextlib.suppress(OSError):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with Path(path).open("a") as log:
            log.write(f"--- {stamp} {text}\n")
