"""``gpuq serve`` as a process: two teams through the CLI, SIGTERM, and a ``kill -9`` mid-job.

The server runs with 2 virtual A100s on a SQLite file; the CLI runs as ``python -m
gpuq.cli`` with ``GPUQ_CONTEXT`` pointing into tmp_path, as a user would run it.
Its pods are isolated as by default (docs/serve.md, "Job isolation"): they run this Python
(shown with ``--pod-expose``, as it may live in the server's home) and leave their marks
in ``tmp_path/shared`` (``--pod-bind``), the only directory of tmp_path they may write.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpuq.server.kinds import API_PREFIX
from server.conftest import CONFIG, dump, job

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Serve:
    """One ``gpuq serve`` process on a port, its database, context file and workdir in ``root``."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = f"sqlite:///{root / 'gpuq.db'}"
        self.env = {**os.environ, "GPUQ_CONTEXT": str(root / "context.yaml"), "PYTHONPATH": str(ROOT / "src")}
        self.env.pop("GPUQ_SERVER", None)
        self.env.pop("GPUQ_TOKEN", None)
        self.process: subprocess.Popen[str] | None = None
        self.shared = root / "shared"  # pods of every team may write here
        self.shared.mkdir(exist_ok=True)
        self.shared.chmod(0o777)

    def start(self, *extra: str) -> None:
        args = ["--database", self.database, "--port", str(self.port), "--workdir", str(self.root / "work")]
        args += ["--gpus", "2", "--gpu-model", "A100-80GB", "--lease-seconds", "1"]
        if "--ray-address" not in extra:
            # Pods run this Python: its installation, the virtualenv and the checkout its editable
            # install points at may sit where pods see nothing (the server's home, a private /tmp).
            for shown in dict.fromkeys((sys.base_prefix, sys.prefix, str(ROOT))):
                args += ["--pod-expose", shown]
            args += ["--pod-bind", str(self.shared)]
        args += extra
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpuq.cli", "serve", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for(lambda: self._healthy(), 60, "the server to answer /healthz")  # imports: slow when loaded

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            output = self.process.stdout.read() if self.process.stdout else ""
            raise AssertionError(f"gpuq serve exited {self.process.returncode}: {output}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
        assert self.process is not None
        self.process.send_signal(sig)
        output, _ = self.process.communicate(timeout=20)
        return self.process.returncode, output

    def token(self) -> str:
        return str(yaml.safe_load((self.root / "context.yaml").read_text())["token"])

    def cli(self, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env) | ({"GPUQ_TOKEN": token} if token else {})
        return subprocess.run(
            [sys.executable, "-m", "gpuq.cli", *args], env=env, capture_output=True, text=True, timeout=60
        )

    def status(self) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token()}"}
        loop: dict[str, Any] = httpx.get(f"{self.url}{API_PREFIX}/status", headers=headers).json()["loop"]
        return loop

    def workload(self, namespace: str, name: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token()}"}
        response = httpx.get(
            f"{self.url}{API_PREFIX}/namespaces/{namespace}/workloads/{name}", headers=headers
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[[], Serve]]:
    """Makes servers sharing tmp_path (one database, context file and workdir); kills what is left."""
    made: list[Serve] = []

    def make() -> Serve:
        made.append(Serve(tmp_path))
        return made[-1]

    yield make
    for server in made:
        if server.process is not None and server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.fixture
def serve(servers: Callable[[], Serve]) -> Serve:
    return servers()


def waits_to_be_killed(marks: Path) -> str:
    """A job whose first run writes ``start`` and waits to be killed; a rerun writes ``start``, ``done``."""
    return (
        f"import os, time; first = not os.path.exists('{marks}'); open('{marks}', 'a').write('start\\n'); "
        f"time.sleep(60 if first else 0.2); open('{marks}', 'a').write('done\\n')"
    )


def waits_for_the_gate(marks: Path, gate: Path) -> str:
    """A job that writes ``start``, waits (up to 60 s) for ``gate`` to exist, then writes ``done``."""
    return (
        f"import os, time; open('{marks}', 'a').write('start\\n'); end = time.time() + 60\n"
        f"while not os.path.exists('{gate}') and time.time() < end: time.sleep(0.05)\n"
        f"open('{marks}', 'a').write('done\\n')"
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left for a non-reaping init counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.xfail(
    strict=False,
    reason="open defect: now and then the jobs applied to a running server on SQLite never appear in its "
    "store (rows acknowledged, then gone; seen about 1 run in 3 on this machine, not yet diagnosed)",
)
def test_two_teams_run_jobs_on_distinct_gpus_through_the_cli(serve: Serve, tmp_path: Path) -> None:
    serve.start()
    assert oct((tmp_path / "context.yaml").stat().st_mode & 0o777) == "0o600"
    taken = serve.cli("serve", "--database", serve.database, "--port", str(serve.port))
    assert taken.returncode == 1 and f"cannot listen on 127.0.0.1:{serve.port}" in taken.stderr
    applied = serve.cli("apply", "-f", write(tmp_path / "config.yaml", CONFIG))
    assert applied.returncode == 0, applied.stderr
    assert "clusterqueue/shared created" in applied.stdout
    tokens = {}
    for team in ("team-a", "team-b"):
        added = serve.cli("users", "add", team, "--namespaces", team, "--database", serve.database)
        assert added.returncode == 0, added.stderr
        tokens[team] = added.stdout.strip()
    # Each job waits (up to 30 s) until both run, so they hold their GPUs at the same time however slow
    # the machine is: otherwise the second could start after the first ended, on the same GPU.
    meet = serve.shared / "meet"
    meet.mkdir(mode=0o777)
    meet.chmod(0o777)
    script = (
        "import os, time; print('saw', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
        f"d = {str(meet)!r}; "
        "open(os.path.join(d, os.environ['GPUQ_WORKLOAD'].replace('/', '_')), 'w').close(); "
        "end = time.time() + 30\n"
        "while len(os.listdir(d)) < 2 and time.time() < end: time.sleep(0.05)"
    )
    for team, name in (("team-a", "a"), ("team-b", "b")):
        result = serve.cli(
            "apply", "-f", write(tmp_path / f"{name}.yaml", dump(job(name, team, script))), token=tokens[team]
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"job/{name} created"
    refused = serve.cli("apply", "-f", str(tmp_path / "b.yaml"), token=tokens["team-a"])
    assert refused.returncode == 1 and "403" in refused.stderr and 'namespace "team-b"' in refused.stderr
    wait_for(
        lambda: (
            serve.workload("team-a", "a")["state"] == serve.workload("team-b", "b")["state"] == "Succeeded"
        ),
        30,
        "both jobs to succeed",
    )
    seen = set()
    for team, name in (("team-a", "a"), ("team-b", "b")):
        logs = serve.cli("logs", name, "-n", team, token=tokens[team])
        assert logs.returncode == 0, logs.stderr
        (line,) = [line for line in logs.stdout.splitlines() if line.startswith("saw ")]
        seen.add(line.split()[1])
    assert seen == {"0", "1"}  # they ran at the same time, each on its own GPU
    described = serve.cli("describe", "workload", "a", "-n", "team-a", token=tokens["team-a"])
    assert "Succeeded" in described.stdout and "PodsReady" in described.stdout
    events = described.stdout.split("Events", 1)[1]  # as kubectl describe: reasons in order
    assert events.index("Admitted") < events.index("Started") < events.index("JobFinished"), events
    code, output = serve.stop()
    assert code == 0, output
    assert "stopped" in output


def test_a_killed_server_is_restarted_and_the_job_succeeds_exactly_once(serve: Serve, tmp_path: Path) -> None:
    """``kill -9`` of the server mid-job: its pod runs on, the restarted server takes it back (the very
    process) and it finishes once. (This test asserted the defect before: the pod killed at recovery, the
    job rerun from the start, a ControlPlaneRestarted eviction.)"""
    serve.start()
    headers = {"Authorization": f"Bearer {serve.token()}"}
    marks, gate = serve.shared / "marks", serve.shared / "gate"
    for text in (CONFIG, dump(job("long", "team-a", waits_for_the_gate(marks, gate)))):
        response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    wait_for(lambda: marks.exists(), 20, "the job to start")
    (pod,) = serve.workload("team-a", "long")["pods"]
    serve.stop(signal.SIGKILL)
    assert alive(pod["pid"]), "the pod outlives a killed server"
    serve.start()
    wait_for(lambda: serve.status()["steps"] > 0, 20, "the new leader to recover")
    assert alive(pod["pid"]), "the restarted server took the pod back"
    (again,) = serve.workload("team-a", "long")["pods"]
    assert (again["pid"], again["attempt"]) == (pod["pid"], 0)
    gate.touch()
    wait_for(lambda: serve.workload("team-a", "long")["state"] == "Succeeded", 30, "the job to succeed")
    workload = serve.workload("team-a", "long")
    assert marks.read_text() == "start\ndone\n"  # one run, finished by the process that started it
    assert [c["type"] for c in workload["conditions"]].count("Finished") == 1
    assert "ControlPlaneRestarted" not in [c["reason"] for c in workload["conditions"]]
    assert serve.stop()[0] == 0


def test_a_stopped_leader_stops_its_pods_and_a_follower_takes_over(
    servers: Callable[[], Serve], tmp_path: Path
) -> None:
    leader, follower = servers(), servers()
    leader.start()
    headers = {"Authorization": f"Bearer {leader.token()}"}
    marks = leader.shared / "marks"
    for text in (CONFIG, dump(job("long", "team-a", waits_to_be_killed(marks)))):
        response = httpx.post(f"{leader.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    follower.start()
    assert not follower.status()["leader"]
    wait_for(lambda: marks.exists(), 20, "the job to start")
    (pod,) = follower.workload("team-a", "long")["pods"]  # every replica serves the API
    assert leader.stop()[0] == 0
    assert not alive(pod["pid"]), "SIGTERM stops the leader's pods"
    wait_for(lambda: follower.status()["leader"], 10, "the follower to lead")
    wait_for(lambda: follower.workload("team-a", "long")["state"] == "Succeeded", 30, "the job to succeed")
    assert marks.read_text() == "start\nstart\ndone\n"


def test_pods_run_on_ray_with_the_gpus_placement_chose(serve: Serve, tmp_path: Path) -> None:
    """``--ray-address local``: the same job through the same API runs as a Ray actor."""
    serve.start("--ray-address", "local")
    headers = {"Authorization": f"Bearer {serve.token()}"}
    script = "import os; print('saw', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)"
    for text in (CONFIG, dump(job("on-ray", "team-a", script))):
        response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    wait_for(lambda: serve.workload("team-a", "on-ray")["state"] == "Succeeded", 60, "the Ray job to succeed")
    logs = serve.cli("logs", "on-ray", "-n", "team-a")
    assert "saw 0" in logs.stdout and "ray actor" in logs.stdout
    # A pod that ignores SIGTERM is killed at the end of its grace period when serve stops, and serve
    # still exits cleanly (Ray's own SIGTERM handler aborted the process three seconds after the signal).
    marks = tmp_path / "slow-stop"
    slow = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open('{marks}', 'w').write('started')\n"
        "time.sleep(120)\n"
    )
    manifest = dump(job("slow-stop", "team-a", slow)).encode()
    response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=manifest, headers=headers)
    assert response.status_code == 200, response.text
    wait_for(lambda: marks.exists(), 60, "the pod that ignores SIGTERM to start")
    (pod,) = serve.workload("team-a", "slow-stop")["pods"]
    code, output = serve.stop()
    assert code == 0, output
    assert not alive(pod["pid"])


def test_on_postgresql_a_killed_leader_is_replaced_and_its_job_finishes_once(
    servers: Callable[[], Serve], postgres_url: str, tmp_path: Path
) -> None:
    """Two replicas on one PostgreSQL database and one workdir: ``kill -9`` the leader; its lease dies with
    its connection, the follower leads within seconds, takes the orphaned pod back and it finishes once.
    (It was killed and the job rerun before.)"""
    leader, follower = servers(), servers()
    leader.database = follower.database = postgres_url
    leader.start()
    headers = {"Authorization": f"Bearer {leader.token()}"}
    marks, gate = leader.shared / "marks", leader.shared / "gate"
    for text in (CONFIG, dump(job("long", "team-a", waits_for_the_gate(marks, gate)))):
        response = httpx.post(f"{leader.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    follower.start()
    wait_for(lambda: marks.exists(), 20, "the job to start")
    assert leader.status()["leader"] and not follower.status()["leader"]
    (pod,) = follower.workload("team-a", "long")["pods"]
    leader.stop(signal.SIGKILL)
    wait_for(lambda: follower.status()["leader"], 15, "the follower to lead")
    wait_for(lambda: follower.status()["steps"] > 0, 15, "the new leader to recover")
    assert alive(pod["pid"]), "the new leader took the pod back"
    gate.touch()
    wait_for(lambda: follower.workload("team-a", "long")["state"] == "Succeeded", 30, "the job to succeed")
    assert not alive(pod["pid"])
    assert marks.read_text() == "start\ndone\n"
    conditions = follower.workload("team-a", "long")["conditions"]
    assert [c["type"] for c in conditions].count("Finished") == 1
    assert "ControlPlaneRestarted" not in [c["reason"] for c in conditions]
    assert follower.stop()[0] == 0


CHECKPOINTED = """
import os, signal, sys, time
path = os.path.join(os.environ['GPUQ_CHECKPOINT_DIR'], 'step')
step = int(open(path).read()) if os.path.exists(path) else 0
def stop(*_):
    open(path, 'w').write(str(step)); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print('resumed at', step, flush=True)
while step < 30:
    step += 1
    time.sleep(0.02)
    if step == 10 and not os.path.exists(path + '.paused'):
        open(path + '.paused', 'w').close(); time.sleep(60)
"""


def test_a_high_priority_job_preempts_through_the_api_and_the_victim_resumes(
    serve: Serve, tmp_path: Path
) -> None:
    """Through the server: the low-priority job holding both GPUs is preempted (SIGTERM, it saves its step),
    requeued, and resumes from its checkpoint after the urgent job finished."""
    config = CONFIG.replace("nominalQuota: 4", "nominalQuota: 2").replace(
        "  namespaceSelector: {}\n",
        "  namespaceSelector: {}\n  preemption: {withinClusterQueue: LowerPriority}\n",
    )
    serve.start()
    headers = {"Authorization": f"Bearer {serve.token()}"}
    low = job("long", "team-a", CHECKPOINTED, gpus=2)
    low["metadata"]["annotations"] = {"gpuq.dev/checkpoint": "true"}
    for text in (config, dump(low)):
        response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    paused = serve.root / "work" / "checkpoints" / "team-a" / "long" / "step.paused"
    wait_for(paused.exists, 20, "the low-priority job to reach its pause")
    urgent = dump(job("urgent", "team-b", "print('urgent')", gpus=2, priority="high"))
    response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=urgent.encode(), headers=headers)
    assert response.status_code == 200, response.text
    wait_for(lambda: serve.workload("team-b", "urgent")["state"] == "Succeeded", 30, "the urgent job")
    wait_for(lambda: serve.workload("team-a", "long")["state"] == "Succeeded", 30, "the resumed job")
    reasons = [c["reason"] for c in serve.workload("team-a", "long")["conditions"]]
    assert "Preempted" in reasons
    logs = serve.cli("logs", "long", "-n", "team-a")
    assert "resumed at 0" in logs.stdout and "resumed at 10" in logs.stdout
    assert serve.stop()[0] == 0


def test_on_postgresql_a_frozen_leader_is_replaced_and_writes_nothing_when_it_wakes(
    servers: Callable[[], Serve], postgres_url: str, tmp_path: Path
) -> None:
    """SIGSTOP the leader (its connections stay open, its process alive): its lease expires, the follower
    leads, takes the frozen leader's running pod back and admits within seconds; SIGCONT: the old leader
    finds its lease gone, writes nothing (its fencing token is stale), stops nothing (the pod is the new
    leader's now) and steps down to follower."""
    from gpuq.run.store import Store

    leader, follower = servers(), servers()
    leader.database = follower.database = postgres_url
    leader.start()
    headers = {"Authorization": f"Bearer {leader.token()}"}
    marks, gate = leader.shared / "marks", leader.shared / "gate"
    for text in (CONFIG, dump(job("long", "team-a", waits_for_the_gate(marks, gate)))):
        response = httpx.post(f"{leader.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    follower.start()
    wait_for(lambda: marks.exists(), 20, "the job to start")
    assert leader.status()["leader"] and not follower.status()["leader"]
    (pod,) = follower.workload("team-a", "long")["pods"]
    assert leader.process is not None
    leader.process.send_signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        fresh = dump(job("fresh", "team-b", "print('admitted by the new leader')"))
        response = httpx.post(f"{follower.url}{API_PREFIX}/apply", content=fresh.encode(), headers=headers)
        assert response.status_code == 200, response.text
        wait_for(lambda: follower.status()["leader"], 10, "the follower to lead while the leader is frozen")
        wait_for(
            lambda: follower.workload("team-b", "fresh")["state"] == "Succeeded",
            10 - (time.monotonic() - frozen_at),
            "the new leader to admit and run a job within 10 s of the freeze",
        )
        assert follower.status()["fencingToken"] == 2, "one takeover, one new tenure"
        assert alive(pod["pid"]) and marks.read_text() == "start\n", "taken back, not rerun"
        gate.touch()
        wait_for(lambda: follower.workload("team-a", "long")["state"] == "Succeeded", 30, "the job")
        assert marks.read_text() == "start\ndone\n"
        store = Store(postgres_url)
        try:
            quiet = _rows(store)
            time.sleep(1.0)
            assert _rows(store) == quiet, "the new leader is quiet: nothing runs or waits"
            leader.process.send_signal(signal.SIGCONT)
            wait_for(lambda: not leader.status()["leader"], 10, "the woken leader to step down")
            time.sleep(2.0)  # several of its renew intervals and steps
            assert _rows(store) == quiet, "the woken leader wrote nothing"
        finally:
            store.close()
        assert not leader.status()["leader"] and follower.status()["leader"]
        assert marks.read_text() == "start\ndone\n"
    finally:
        leader.process.send_signal(signal.SIGCONT)
    code, output = leader.stop()
    assert code == 0, output
    assert "stepping down" in output, output
    assert follower.stop()[0] == 0


def _rows(store: Any) -> tuple[object, ...]:
    """The store's version and every row a leader writes (workloads, pods, conditions, events)."""
    workloads = store.list_workloads()
    return (
        store.resource_version(),
        workloads,
        [store.pods_of(w.id) for w in workloads],
        [store.conditions(w.id) for w in workloads],
        store.events(),
    )
