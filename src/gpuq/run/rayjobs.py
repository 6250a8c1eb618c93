"""RayJob and RayCluster pods: the launcher gpuq runs in them, and its command line.

KubeRay turns a RayCluster into a head pod running ``ray start --head --block``
and worker pods running ``ray start --address=<head> --block``, and a RayJob
into such a cluster plus its entrypoint, submitted once the cluster is ready.
gpuq does the same on one machine with the local executor. The image is only
recorded; Ray comes from the interpreter gpuq runs under.

What runs is decided by :func:`gpuq.run.jobs.job_run` (pure), with this module's
command line (:func:`launcher_command`, :func:`ray_env`):

1. The pod sets and counts are the Kueue workload's: ``head``, one per worker
   group, then ``submitter`` for a RayJob in K8sJobMode.
2. The head runs ``python -m gpuq.run.rayjobs head``; a worker or the submitter
   runs its container's ``command`` when the template gives one, else the
   launcher's ``worker`` / ``submit`` role. ``--num-cpus`` and ``--memory`` come
   from the Ray container's requests (else its limits), then ``rayStartParams``
   (the keys gpuq owns, like ``port`` or ``num-gpus``, are dropped).
3. A RayJob's entrypoint runs in the submitter when there is one, else in the
   head's launcher; that pod set is the workload's ``completion_pod_set``. A
   RayCluster has none: it runs until deleted, its pods restarting per backoff.
4. Every pod gets ``GPUQ_RAY_CLUSTER_DIR`` (``<workdir>/ray/<namespace>/<name>``)
   and Ray token authentication with the cluster's own token file.

The launcher (:func:`main`), in the pod, as ``head``:

1. forget the previous head's address, make the cluster's token if missing;
2. start ``ray start --head --block`` with free ports (GCS, dashboard API,
   agent), the dashboard off, ``--num-gpus`` = the devices in
   ``CUDA_VISIBLE_DEVICES`` and a temp dir of the pod's own;
3. once the GCS answers, publish ``head.json`` (address and launcher pid);
4. without an entrypoint, wait for the Ray node; ``ray start --block`` never
   ends on its own, so any end is a failure (exit 0 becomes 1);
5. with one, wait for the expected nodes (or a timeout), run the entrypoint
   with ``RAY_ADDRESS``, stop the node and exit with the entrypoint's code.
   With entrypoint resources (a RayJob's ``entrypointNumCpus``,
   ``entrypointNumGpus``, ``entrypointResources``), the entrypoint runs where
   ``ray job submit`` would run it: in an actor that reserves them, on a node of
   the cluster that has them (Ray's ``JobSupervisor``,
   ``python/ray/dashboard/modules/job/job_manager.py``), its output streamed back
   to the pod's log; with GPUs it sees the ones Ray gave that actor.

As ``worker``: wait for a live ``head.json`` whose GCS answers, then step 2
with ``--address`` instead of ``--head`` and step 4, leaving (exit 1) as soon as
the head it joined is gone. As ``submit``: wait for the head, then step 5
without a node of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LAUNCHER_MODULE = "gpuq.run.rayjobs"
HEAD = "head"
SUBMITTER = "submitter"
HEAD_FILE = "head.json"
TOKEN_FILE = "auth_token"
CLUSTER_DIR_ENV = "GPUQ_RAY_CLUSTER_DIR"
HEAD_WAIT_S = 180.0  # how long a worker or the submitter waits for the head's GCS
NODES_WAIT_S = 180.0  # how long the entrypoint waits for every worker to join
GCS_UP_S = 120.0  # how long the head waits for its own GCS to answer
STOP_GRACE_S = 3.0  # SIGTERM to SIGKILL when the head stops after the entrypoint (Ray drains for 30 s)
_POLL_S = 0.25
# AF_UNIX paths hold 107 bytes; Ray's deepest socket is <temp>/session_<date>_<pid>/sockets/plasma_store.
_TEMP_DIR_MAX = 40


# ------------------------------------------------------------------------------- the command line
def cluster_directory(workdir: Path | None, namespace: str, name: str) -> Path:
    """Where a Ray cluster keeps its head address, token and the pods' Ray temp dirs."""
    base = workdir if workdir is not None else Path(tempfile.gettempdir()) / "gpuq"
    return Path(base) / "ray" / namespace / name


def launcher_command(
    role: str, directory: Path, *options: str, ray_args: Sequence[str] = ()
) -> tuple[str, ...]:
    """``python -m gpuq.run.rayjobs ROLE --dir DIR [OPTIONS] [-- RAY START ARGS]`` with this interpreter."""
    tail = ("--", *ray_args) if ray_args else ()
    return (sys.executable, "-m", LAUNCHER_MODULE, role, "--dir", str(directory), *options, *tail)


def ray_env(directory: Path) -> dict[str, str]:
    """The variables every pod of the cluster shares: its directory and its token (Ray's token auth)."""
    return {
        CLUSTER_DIR_ENV: str(directory),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(directory / TOKEN_FILE),
    }


# ------------------------------------------------------------------------------------- the launcher
@dataclass(frozen=True)
class _Options:
    role: str
    directory: Path
    entrypoint: str | None
    nodes: int
    runtime_env: str | None
    entrypoint_num_cpus: float
    entrypoint_num_gpus: float
    entrypoint_resources: dict[str, float]
    head_wait_s: float
    nodes_wait_s: float
    ray_args: tuple[str, ...]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one role in a pod (see the module docstring) and return the pod's exit code."""
    options = _parse(list(sys.argv[1:] if argv is None else argv))
    if options.role == HEAD:
        return _run_head(options)
    head = _wait_for_head(options.directory, options.head_wait_s)
    if head is None:
        _say(f"no Ray head answered within {options.head_wait_s:g}s (looked in {options.directory})")
        return 1
    address, head_pid = head
    if options.role == "worker":
        return _run_worker(options, address, head_pid)
    return _run_entrypoint(options, address)


def _parse(argv: list[str]) -> _Options:
    """``ROLE --dir DIR [--entrypoint CMD --nodes N --runtime-env JSON] [-- RAY START ARGS]``."""
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog=f"python -m {LAUNCHER_MODULE}")
    parser.add_argument("role", choices=(HEAD, "worker", "submit"))
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--entrypoint")
    parser.add_argument("--nodes", type=int, default=1, help="Ray nodes to wait for before the entrypoint")
    parser.add_argument("--runtime-env", help="the job's runtime environment, JSON")
    parser.add_argument("--entrypoint-num-cpus", type=float, default=0.0)
    parser.add_argument("--entrypoint-num-gpus", type=float, default=0.0)
    parser.add_argument("--entrypoint-resources", type=json.loads, default={}, help="JSON object")
    parser.add_argument("--head-wait", type=float, default=HEAD_WAIT_S)
    parser.add_argument("--nodes-wait", type=float, default=NODES_WAIT_S)
    parsed = parser.parse_args(argv[:split])
    if parsed.role == "submit" and not parsed.entrypoint:
        parser.error("submit needs --entrypoint")
    return _Options(
        parsed.role,
        parsed.dir,
        parsed.entrypoint,
        parsed.nodes,
        parsed.runtime_env,
        parsed.entrypoint_num_cpus,
        parsed.entrypoint_num_gpus,
        dict(parsed.entrypoint_resources),
        parsed.head_wait,
        parsed.nodes_wait,
        tuple(argv[split + 1 :]),
    )


def _run_head(options: _Options) -> int:
    """Steps 1-5 of the head (module docstring)."""
    directory = options.directory
    directory.mkdir(parents=True, exist_ok=True)
    (directory / HEAD_FILE).unlink(missing_ok=True)
    _ensure_token(directory / TOKEN_FILE)
    port = _free_port()
    address = f"127.0.0.1:{port}"
    role = ["--head", f"--port={port}", "--include-dashboard=false", f"--dashboard-port={_free_port()}"]
    if importlib.util.find_spec("grpc") is not None:  # Ray's client server would take port 10001
        role.append(f"--ray-client-server-port={_free_port()}")
    node = _start_node(options, role)
    if (
        not _wait_until(lambda: node.poll() is not None or _answers(address), GCS_UP_S)
        or node.poll() is not None
    ):
        _say(f"the head's GCS did not answer at {address} within {GCS_UP_S:g}s")
        _stop(node)
        return 1
    _publish(directory / HEAD_FILE, {"address": address, "pid": os.getpid()})
    if options.entrypoint is None:
        return _node_ended(node.wait())
    code = _run_entrypoint(options, address)
    _stop(node)
    return code


def _run_worker(options: _Options, address: str, head_pid: int) -> int:
    """A worker node for as long as the head it joined lives: a restarted head (a new port) is rejoined
    through the pod's own restart, not after Ray's 60 s GCS reconnect timeout."""
    node = _start_node(options, [f"--address={address}"])
    while True:
        try:
            return _node_ended(node.wait(timeout=1.0))
        except subprocess.TimeoutExpired:
            pass
        current = _live_head(options.directory, probe=False)
        if current is None or current[1] != head_pid:
            _say("the head this node joined is gone")
            _stop(node)
            return 1


def _start_node(options: _Options, role: list[str]) -> subprocess.Popen[bytes]:
    """``ray start ROLE ... --block`` with this pod's GPUs, its own temp dir and a free agent port."""
    devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    temp = _temp_dir(options.directory, os.environ.get("GPUQ_POD") or options.role)
    command = [
        *_ray_cli(),
        "start",
        *role,
        f"--temp-dir={temp}",
        f"--num-gpus={len(devices)}",
        f"--dashboard-agent-listen-port={_free_port()}",
        "--disable-usage-stats",
        *options.ray_args,
        "--block",
    ]
    _say("starting " + shlex.join(command))
    return subprocess.Popen(command, env=_child_env())


def _run_entrypoint(options: _Options, address: str) -> int:
    """Wait for the cluster's nodes, run the entrypoint in a shell with ``RAY_ADDRESS``; its exit code."""
    assert options.entrypoint is not None
    env = _child_env() | {"RAY_ADDRESS": address}
    if options.runtime_env:
        runtime_env = json.loads(options.runtime_env)
        env |= {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
        # How `ray job submit` hands the job's runtime environment to the driver's ray.init().
        env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"runtime_env": runtime_env, "metadata": {}})
    _wait_for_nodes(address, options.nodes, options.nodes_wait_s)
    _say(f"running the entrypoint against {address}: {options.entrypoint}")
    if options.entrypoint_num_cpus or options.entrypoint_num_gpus or options.entrypoint_resources:
        code = _run_placed(options, address, env)
    else:
        code = subprocess.Popen(["/bin/sh", "-c", options.entrypoint], env=env).wait()
    _say(f"the entrypoint exited with {code}")
    return _exit_code(code)


class EntrypointRunner:
    """The actor that runs a RayJob's entrypoint where its resources are (Ray's ``JobSupervisor``):
    a shell running it, its output yielded line by line, then its exit code."""

    def run(self, entrypoint: str, env: dict[str, str]) -> Any:
        import ray

        placed = dict(env)
        if "CUDA_VISIBLE_DEVICES" in os.environ:  # the GPUs Ray reserved for this actor
            placed["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        node = ray.get_runtime_context().get_node_id()
        yield f"[gpuq rayjobs] the entrypoint runs on Ray node {node}\n"
        process = subprocess.Popen(
            ["/bin/sh", "-c", entrypoint],
            env=placed,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:  # noqa: UP028 (not `yield from`: Ray drives generators by send())
            yield line
        yield process.wait()


def _run_placed(options: _Options, address: str, env: dict[str, str]) -> int:
    """Run the entrypoint in an :class:`EntrypointRunner` that reserves its resources; its exit code."""
    import ray

    wanted = {"CPU": options.entrypoint_num_cpus, "GPU": options.entrypoint_num_gpus}
    wanted |= options.entrypoint_resources
    wanted = {name: amount for name, amount in wanted.items() if amount}
    reserve = ", ".join(f"{amount:g} {name}" for name, amount in sorted(wanted.items()))
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        totals = [node.get("Resources", {}) for node in nodes if node.get("Alive")]
        if not any(all(total.get(k, 0.0) >= v for k, v in wanted.items()) for total in totals):
            _say(f"no node of the cluster has {reserve} for the entrypoint (entrypoint resources)")
            return 1
        _say(f"reserving {reserve} for the entrypoint")
        runner: Any = ray.remote(EntrypointRunner)  # Ray's actor handles are untyped
        runner = runner.options(
            num_cpus=options.entrypoint_num_cpus,
            num_gpus=options.entrypoint_num_gpus,
            resources=options.entrypoint_resources or None,
            max_restarts=0,
        )
        actor = runner.remote()
        code: int = 1
        try:
            for ref in actor.run.options(num_returns="streaming").remote(options.entrypoint, env):
                item = ray.get(ref)
                if isinstance(item, int):
                    code = item
                else:
                    print(item, end="", flush=True)
        except ray.exceptions.RayError as error:
            _say(f"the entrypoint's actor failed: {type(error).__name__}: {error}")
            return 1
        return code
    finally:
        ray.shutdown()


def _wait_for_nodes(address: str, expected: int, timeout_s: float) -> None:
    """Return once ``expected`` Ray nodes are alive, or after ``timeout_s`` (the entrypoint runs anyway)."""
    import ray  # only the roles that run an entrypoint need Ray in the launcher

    deadline = time.monotonic() + timeout_s
    alive, problem = 0, ""
    while True:
        try:
            if not ray.is_initialized():
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
            alive = sum(1 for node in nodes if node.get("Alive"))
        except Exception as error:  # the GCS answers before the cluster takes drivers
            problem = f" ({error})"
        if alive >= expected or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    ray.shutdown()
    if alive >= expected:
        _say(f"{alive} of {expected} Ray nodes are up")
    else:
        _say(f"only {alive} of {expected} Ray nodes joined within {timeout_s:g}s{problem}; running anyway")


def _wait_for_head(directory: Path, timeout_s: float) -> tuple[str, int] | None:
    """The cluster's live head (address, launcher pid) once its GCS answers; ``None`` after ``timeout_s``."""
    if _wait_until(lambda: _live_head(directory) is not None, timeout_s):
        return _live_head(directory)
    return None


def _live_head(directory: Path, *, probe: bool = True) -> tuple[str, int] | None:
    """``head.json`` when its launcher is alive and (``probe``) its GCS answers; a stale file is ignored."""
    try:
        head = json.loads((directory / HEAD_FILE).read_text())
        address, pid = str(head["address"]), int(head["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (address, pid) if not probe or _answers(address) else None


def _stop(node: subprocess.Popen[bytes]) -> None:
    """Stop the Ray node: SIGTERM, SIGKILL after ``STOP_GRACE_S`` (its processes share its fate), then
    whatever else is left of this pod's process group."""
    if node.poll() is None:
        node.terminate()
        try:
            node.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
    me = os.getpid()
    if os.getpgrp() != me:
        return  # not a pod's process-group leader (run by hand): leave the group alone
    for pid in _group_members(me):
        if pid != me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid``, from ``/proc`` (empty where there is none)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid):
            members.append(int(entry.name))
    return members


def _node_ended(code: int) -> int:
    """A Ray node's end is a failure: ``ray start --block`` only returns when the node broke."""
    _say(f"the Ray node stopped (ray start exited with {code})")
    return _exit_code(code) or 1


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def _temp_dir(directory: Path, pod: str) -> Path:
    """``<cluster dir>/<pod>``, or, when that is too long for Ray's sockets, a short directory under the
    system's temp dir named by its hash, linked from ``<cluster dir>/<pod>``."""
    wanted = directory / pod
    if len(str(wanted)) <= _TEMP_DIR_MAX:
        wanted.mkdir(parents=True, exist_ok=True)
        return wanted
    digest = hashlib.sha1(str(directory.resolve() / pod).encode()).hexdigest()[:16]
    short = Path(tempfile.gettempdir()) / f"gpuq-ray-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    if short.is_symlink() or short.stat().st_uid != os.getuid():
        raise SystemExit(f"{short} is not this user's directory")
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        wanted.symlink_to(short, target_is_directory=True)
    return short


def _ensure_token(path: Path) -> None:
    """The cluster's Ray auth token, made once (mode 0600) and kept across head restarts."""
    with contextlib.suppress(FileExistsError):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32))


def _publish(path: Path, content: Mapping[str, Any]) -> None:
    """Write ``content`` as JSON atomically (a reader never sees half a file)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(content))
    os.replace(partial, path)


def _ray_cli() -> list[str]:
    """The ``ray`` command beside this interpreter, else ``python -m ray.scripts.scripts``."""
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _child_env() -> dict[str, str]:
    """This pod's environment with this interpreter's directory first on PATH (its ``python``, ``ray``)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH")) if p)
    return env


def _free_port() -> int:
    """A TCP port free on this machine now (the kernel's choice; another process could take it first)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _wait_until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def _say(message: str) -> None:
    print(f"[gpuq rayjobs] {message}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
