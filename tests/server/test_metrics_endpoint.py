"""``/metrics`` served by the API process: Kueue and DCGM names, token rules, and GPUIdle events.

A :class:`Live` plane is the API over a SQLite store with a control loop the test steps by
hand (real processes on two virtual A100s), a fake telemetry function and a fake clock.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import GPUTelemetry, discover, local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store
from gpuq.server.app import create_app
from gpuq.server.auth import add_user, ensure_admin
from gpuq.server.runner import GpuMonitor, LoopRunner, due_idle_spells, queue_usage
from server.conftest import CONFIG, Plane, TestClient, dump, job

SLEEP = "import time; time.sleep(60)"


@dataclass
class Live:
    """A plane whose loop the test steps; ``util`` is each GPU's utilisation, ``now`` the clock."""

    plane: Plane
    loop: ControlLoop
    monitor: GpuMonitor
    util: dict[int, int | None] = field(default_factory=lambda: {0: 50, 1: 50})
    now: list[float] = field(default_factory=lambda: [1000.0])

    def readings(self) -> list[GPUTelemetry]:
        return [
            GPUTelemetry(i, f"GPU-{i}", utilization_pct=u, temperature_c=40 + i) for i, u in self.util.items()
        ]

    def submit(self, name: str, namespace: str, gpus: int, script: str = SLEEP) -> None:
        token = self.plane.team_a if namespace == "team-a" else self.plane.team_b
        response = self.plane.apply(dump(job(name, namespace, script, gpus=gpus)), token)
        assert response.status_code == 200, response.text

    def run_until(self, done: Callable[[], bool], timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.loop.step()
            if done():
                return
            time.sleep(0.02)
        raise AssertionError("timed out")

    def state(self, namespace: str, name: str) -> str:
        record = self.plane.store.get_workload(namespace, name)
        assert record is not None
        return record.state

    def scrape(self, token: str | None = None) -> str:
        headers = {"Authorization": f"Bearer {token or self.plane.admin}"}
        response = self.plane.client.get("/metrics", headers=headers)
        assert response.status_code == 200, response.text
        return response.text


def make_live(tmp_path: Path, *, metrics_open: bool = False) -> Live:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    admin = ensure_admin(store)
    assert admin is not None
    team_a = add_user(store, "alice", namespaces=["team-a"])
    team_b = add_user(store, "bob", namespaces=["team-b"])
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    work = tmp_path / "work"
    loop = ControlLoop(store, LocalExecutor(work), [node], workdir=work, restart_backoff_s=0)
    holder: list[Live] = []
    monitor = GpuMonitor(
        lambda: holder[0].readings(),
        hostname="box",
        model_name="NVIDIA A100-SXM4-80GB",
        idle_threshold_s=30 * 60,
        clock=lambda: holder[0].now[0],
    )
    status = {"identity": "test", "leader": True, "steps": 1, "lastStepAt": time.time()}
    app = create_app(
        store,
        loop_status=lambda: status,
        nodes=[node],
        workdir=work,
        queue_usage=lambda: queue_usage(loop),
        metrics=lambda: monitor.scrape(loop),
        metrics_open=metrics_open,
    )
    plane = Plane(store, TestClient(app), admin, team_a, team_b, work)
    assert plane.apply(CONFIG, admin).status_code == 200
    holder.append(Live(plane, loop, monitor))
    return holder[0]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    made = make_live(tmp_path)
    yield made
    made.loop.close()
    made.plane.store.close()


def test_metrics_need_a_token_of_any_user_unless_open(live: Live, tmp_path: Path) -> None:
    client = live.plane.client
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    member = client.get("/metrics", headers={"Authorization": f"Bearer {live.plane.team_b}"})
    assert member.status_code == 200 and member.headers["content-type"].startswith(
        "text/plain; version=0.0.4"
    )
    opened = make_live(tmp_path / "open", metrics_open=True)
    try:
        assert opened.plane.client.get("/metrics").status_code == 200
    finally:
        opened.loop.close()
        opened.plane.store.close()


def running_and_pending(live: Live) -> None:
    """a (2 GPUs) runs; b (1) is admitted by quota and waits for a GPU, as Kueue admits before the
    scheduler binds; c (2) would take the queue past its nominal 4 and waits for quota."""
    live.submit("a", "team-a", 2)
    live.run_until(lambda: live.state("team-a", "a") == "Running")
    live.submit("b", "team-b", 1)
    live.submit("c", "team-b", 2)
    live.run_until(lambda: live.state("team-b", "b") == "Admitted" and live.loop.scheduler is not None)
    for _ in range(3):
        live.loop.step()


def test_queue_metrics_use_kueue_names_and_labels(live: Live) -> None:
    running_and_pending(live)
    text = live.scrape()
    assert 'kueue_admitted_workloads_total{cluster_queue="shared"} 2.0' in text
    assert 'kueue_admitted_active_workloads{cluster_queue="shared"} 2.0' in text
    assert 'kueue_pending_workloads{cluster_queue="shared",status="inadmissible"} 1.0' in text
    gpu = 'cluster_queue="shared",cohort="",flavor="gpu",resource="nvidia.com/gpu"'
    assert f"kueue_cluster_queue_nominal_quota{{{gpu}}} 4.0" in text
    assert f"kueue_cluster_queue_resource_usage{{{gpu}}} 3.0" in text
    assert 'kueue_admission_wait_time_seconds_count{cluster_queue="shared"} 2.0' in text


def test_gpu_metrics_use_dcgm_names_from_the_telemetry_function(live: Live) -> None:
    live.util = {0: 87, 1: None}  # GPU 1's utilisation unreadable: no sample, not a zero
    live.loop.step()
    text = live.scrape()
    labels = 'Hostname="box",UUID="GPU-0",gpu="0",modelName="NVIDIA A100-SXM4-80GB"'
    assert f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 87.0" in text
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="box",UUID="GPU-1"' not in text
    assert (
        'DCGM_FI_DEV_GPU_TEMP{Hostname="box",UUID="GPU-1",gpu="1",modelName="NVIDIA A100-SXM4-80GB"} 41.0'
        in text
    )
    assert "kueue_pending_workloads" in text  # the loop has loaded the configuration


def test_a_follower_reports_gpus_but_no_queue_state(live: Live) -> None:
    text = live.monitor.scrape(None).decode()
    assert "kueue_pending_workloads" not in text and "DCGM_FI_DEV_GPU_UTIL" in text


def gpu_idle_events(live: Live, token: str | None = None) -> list[dict[str, str]]:
    items = live.plane.get("/events", token or live.plane.admin).json()["items"]
    return [i for i in items if i["reason"] == "GPUIdle"]


def test_one_gpu_idle_event_per_idle_spell(live: Live) -> None:
    live.util = {0: 0, 1: 50}
    checks = [(0, 0), (20 * 60, 0), (31 * 60, 1), (45 * 60, 1)]  # (minutes since idle, events so far)
    for at, expected in checks:
        live.now[0] = 1000.0 + at
        live.monitor.check_idle(live.plane.store)
        assert len(gpu_idle_events(live)) == expected, at
    live.util[0] = 60  # the GPU works: the spell ends
    live.now[0] += 60
    live.monitor.check_idle(live.plane.store)
    live.util[0] = 0  # idle again: a new spell, reported once more after the threshold
    for minutes, expected in ((1, 1), (29, 1), (32, 2), (50, 2)):
        live.now[0] = 1000.0 + 46 * 60 + minutes * 60
        live.monitor.check_idle(live.plane.store)
        assert len(gpu_idle_events(live)) == expected, minutes
    first = gpu_idle_events(live)[0]
    assert (first["type"], first["kind"], first["namespace"], first["name"]) == ("Warning", "Node", "", "box")
    assert "GPU 0 (GPU-0) on box has been idle" in first["message"] and "no pod holds it" in first["message"]
    assert gpu_idle_events(live, live.plane.team_a) == []  # node events are for admins


def test_an_idle_gpu_held_by_a_pod_is_reported_on_its_workload(live: Live) -> None:
    live.submit("a", "team-a", 1)
    live.run_until(lambda: live.state("team-a", "a") == "Running")
    (pod,) = live.plane.store.running_pods()
    held = int(pod.devices[0])
    live.util = {held: 0, 1 - held: 70}
    for minutes in (0, 31):
        live.now[0] = 1000.0 + minutes * 60
        live.monitor.check_idle(live.plane.store)
    (event,) = gpu_idle_events(live, live.plane.team_a)
    assert (event["kind"], event["namespace"], event["name"]) == ("Workload", "team-a", "a")
    assert "held by workload team-a/a" in event["message"]
    assert gpu_idle_events(live, live.plane.team_b) == []


def test_an_idle_event_the_store_refused_is_recorded_at_the_next_check(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    live.util = {0: 0, 1: 50}
    live.monitor.check_idle(live.plane.store)
    live.now[0] += 31 * 60
    with monkeypatch.context() as patch:
        patch.setattr(live.plane.store, "add_event", lambda *_: (_ for _ in ()).throw(OSError("disk full")))
        with pytest.raises(OSError, match="disk full"):
            live.monitor.check_idle(live.plane.store)
    live.now[0] += 10
    assert len(live.monitor.check_idle(live.plane.store)) == 1
    assert live.monitor.check_idle(live.plane.store) == []
    assert len(gpu_idle_events(live)) == 1


@pytest.mark.parametrize(
    ("since", "reported", "now", "due"),
    [
        pytest.param({"u": 0.0}, {}, 100.0, [("u", 0.0)], id="a spell past the threshold is due"),
        pytest.param({"u": 50.0}, {}, 100.0, [], id="a spell under the threshold is not"),
        pytest.param({"u": 0.0}, {"u": 0.0}, 500.0, [], id="a reported spell is not due again"),
        pytest.param(
            {"u": 200.0}, {"u": 0.0}, 400.0, [("u", 200.0)], id="a new spell of the same GPU is due"
        ),
        pytest.param(
            {"b": 0.0, "a": 10.0}, {}, 200.0, [("a", 10.0), ("b", 0.0)], id="spells are returned by GPU UUID"
        ),
    ],
)
def test_due_idle_spells(
    since: dict[str, float], reported: dict[str, float], now: float, due: list[tuple[str, float]]
) -> None:
    assert due_idle_spells(since, reported, now, threshold_s=100.0) == due


def test_serve_reports_real_gpus_through_nvml_and_virtual_ones_never(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuq.commands.serve import _gpu_monitor
    from run.fake_nvml import FakeEvents, FakeGPU

    gpus = [FakeGPU("NVIDIA H100 80GB HBM3", f"GPU-{i}", 81559, utilization=(40 * i, 5)) for i in range(2)]
    monkeypatch.setitem(sys.modules, "pynvml", FakeEvents(gpus, pending=[(1, 79)]))
    node = local_node(discover().devices, name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    monitor, xids = _gpu_monitor(node, virtual=False, idle_minutes=30)
    assert xids is not None
    text = monitor.scrape(None).decode()
    labels = 'Hostname="box",UUID="GPU-1",gpu="1",modelName="NVIDIA H100 80GB HBM3"'
    assert (
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 40.0" in text
        and f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 79.0" in text
    )
    assert 'gpuq_gpu_idle_seconds{Hostname="box",UUID="GPU-0"' in text  # 0 %: idle since this scrape
    xids.close()
    virtual_node = local_node(
        virtual_devices(2, "H100-80GB"), name="box", cpu_milli=1000, memory_bytes=1 << 30
    )
    virtual, none = _gpu_monitor(virtual_node, virtual=True, idle_minutes=30)
    assert none is None and "DCGM_FI_DEV_GPU_UTIL{" not in virtual.scrape(None).decode()


def test_the_runner_serves_metrics_and_records_idle_events_while_leading(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gpuq.db'}"
    store = Store(url)
    store.migrate()
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    work = tmp_path / "work"
    idle = [GPUTelemetry(0, "GPU-0", utilization_pct=0), GPUTelemetry(1, "GPU-1", utilization_pct=90)]
    monitor = GpuMonitor(lambda: idle, hostname="box", idle_threshold_s=0.0, check_interval_s=0.0)
    runner = LoopRunner(
        url,
        "test",
        lambda s: ControlLoop(s, LocalExecutor(work), [node], workdir=work),
        interval_s=0.02,
        gpus=monitor,
    )
    assert b"kueue_pending_workloads" not in runner.metrics()  # not leading yet: GPUs only
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while runner.status()["steps"] < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.status()["leader"] and runner.status()["steps"] >= 10
        assert b'kueue_cluster_queue_nominal_quota{cluster_queue="shared"' in runner.metrics()
        assert runner.queue_usage() == {"shared": ("", [("gpu", "nvidia.com/gpu", 0, 4)])}
    finally:
        runner.stop()
    events = [e for e in store.events() if e.reason == "GPUIdle"]
    assert [(e.kind, e.name) for e in events] == [("Node", "box")]  # one spell, many checks, one event
    assert runner.queue_usage() is None  # stopped: no loop
    store.close()
