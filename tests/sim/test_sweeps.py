"""Sweeps in parallel: ``gpuq simulate --jobs N`` and ``--ray-address`` write what ``--jobs 1`` writes.

The variants' runs are independent; the command writes their outcomes in variant order, so the
outputs are the same bytes however (and wherever) the variants ran.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.sim import sweeps
from gpuq.sim.scenario import load_workloads, plan_scenario

ROOT = Path(__file__).resolve().parents[2]
HOLIDAY = str(ROOT / "examples" / "symbol-retail")
CAPACITY = str(ROOT / "examples" / "symbol-retail" / "capacity" / "capacity.scenario")
OUTPUTS = ("metrics.json", "workloads.csv", "report.html")
GPUQ = [sys.executable, "-m", "gpuq.cli", "simulate"]
runner = CliRunner()


def source_env() -> dict[str, str]:
    """This checkout's sources first on the path, absolute: for the command and for Ray's workers."""
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def simulate(arguments: list[str], out: Path) -> dict[str, bytes]:
    """The command run from the repository root; the bytes of what it wrote."""
    done = subprocess.run(
        [*GPUQ, *arguments, "--out-dir", str(out), "-q"],
        cwd=ROOT,
        env=source_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {name: (out / name).read_bytes() for name in OUTPUTS}


SAME_BYTES = [
    pytest.param(["-f", HOLIDAY, "--compare"], id="the holiday rush, both variants"),
    pytest.param(
        ["-f", CAPACITY, "--compare"],
        id="provisioning, spot and cost attribution, four variants on two workers",
    ),
]


@pytest.mark.parametrize("arguments", SAME_BYTES)
def test_variants_in_worker_processes_write_the_same_bytes_as_one_after_another(
    tmp_path: Path, arguments: list[str]
) -> None:
    serial = simulate([*arguments, "--jobs", "1"], tmp_path / "serial")
    parallel = simulate([*arguments, "--jobs", "2"], tmp_path / "parallel")
    for name in OUTPUTS:
        assert serial[name] == parallel[name], f"{name} differs between --jobs 1 and --jobs 2"


def test_workers_report_each_variants_progress_and_return_what_the_process_computes() -> None:
    plan = plan_scenario([HOLIDAY], compare=True)
    workloads = load_workloads(plan)
    here = list(
        sweeps.run_in_process([sweeps.VariantJob(plan, i, workloads=workloads) for i in (0, 1)], None)
    )
    reports: list[tuple[int, str, float]] = []
    away = list(
        sweeps.run_in_workers(
            [sweeps.VariantJob(plan, i) for i in (0, 1)], 2, lambda *report: reports.append(report)
        )
    )
    assert [(o.name, o.metrics, o.csv) for o in away] == [(o.name, o.metrics, o.csv) for o in here]
    for index in (0, 1):
        mine = [(kind, value) for i, kind, value in reports if i == index]
        assert mine[0] == ("total", sweeps.PROGRESS_STEPS), mine
        assert {kind for kind, _ in mine[1:]} == {"at", "share"}, mine
        clock = [value for kind, value in mine[1:] if kind == "at"]
        share = [value for kind, value in mine[1:] if kind == "share"]
        assert clock and clock == sorted(clock)  # the simulated time, in order
        assert share == sorted(share) and share[-1] <= sweeps.PROGRESS_STEPS  # the drain counts


def test_a_variant_that_cannot_be_prepared_fails_alike_in_a_worker_and_in_the_process(tmp_path: Path) -> None:
    copy = tmp_path / "example"
    shutil.copytree(HOLIDAY, copy)
    scenario = copy / "scenario.yaml"
    document = yaml.safe_load(scenario.read_text())
    document["spec"]["variants"].append({"name": "broken", "config": ["nope.yaml"]})
    scenario.write_text(yaml.safe_dump(document, sort_keys=False))
    errors = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out-{jobs}"
        result = runner.invoke(
            app, ["simulate", "-f", str(copy), "--compare", "--jobs", jobs, "--out-dir", str(out)]
        )
        assert result.exit_code == 1, result.output
        assert not out.exists()
        errors.append(
            [line for line in result.output.splitlines() if "nope.yaml" in line or "error:" in line]
        )
    assert errors[0] == errors[1]
    assert "error: variant broken: the configuration has errors" in errors[0]


class DiesWhenUnpickled:
    """Unpickled in a worker, ends that process at once, as the kernel's out-of-memory killer would."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return os._exit, (3,)


def test_a_worker_that_dies_is_a_sweep_error_naming_jobs() -> None:
    plan = plan_scenario([HOLIDAY], compare=True)
    doomed = sweeps.VariantJob(plan, 0, workloads=DiesWhenUnpickled())  # type: ignore[arg-type]
    with pytest.raises(sweeps.SweepError, match=r"^--jobs 2: a worker process died"):
        list(sweeps.run_in_workers([doomed, sweeps.VariantJob(plan, 1)], 2, None))


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


OPTION_ERRORS = [
    ("jobs below one", ["--jobs", "0"], "error: --jobs must be at least 1 (got 0)"),
    (
        "a Ray address that is no address",
        ["--ray-address", "nowhere"],
        "error: --ray-address 'nowhere': expected HOST:PORT, ray://HOST:PORT or auto",
    ),
    (
        "a Ray address nothing answers at",
        ["--ray-address", "127.0.0.1:{port}"],
        "error: --ray-address 127.0.0.1:{port}: no Ray cluster answers there",
    ),
]


@pytest.mark.parametrize(("title", "options", "message"), OPTION_ERRORS, ids=[e[0] for e in OPTION_ERRORS])
def test_bad_jobs_and_ray_addresses_are_one_line_errors_naming_the_option(
    tmp_path: Path, title: str, options: list[str], message: str
) -> None:
    port = free_port()
    given = [o.format(port=port) for o in options]
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "-f", HOLIDAY, "--compare", *given, "--out-dir", str(out)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message.format(port=port)), result.output
    assert not out.exists()


def test_ray_is_imported_only_for_ray_address(tmp_path: Path) -> None:
    """Start-up stays fast: a sweep on local workers never loads Ray in the command's process."""
    probe = (
        "import sys\nfrom typer.testing import CliRunner\nfrom gpuq.cli import app\n"
        f"done = CliRunner().invoke(app, ['simulate', '-f', {HOLIDAY!r}, '--compare', '--jobs', '2', "
        f"'--out-dir', {str(tmp_path)!r}, '-q'])\n"
        "print(done.exit_code, 'ray' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=source_env(), capture_output=True, text=True, timeout=300
    )
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout + done.stderr


DEFAULT_JOBS = [
    ("one worker per variant while CPUs last", 4, 10_000, 8, 4),
    ("no more workers than CPUs", 4, 10_000, 2, 2),
    ("a single variant runs here", 1, 100_000, 8, 1),
    ("a small sweep runs here: a worker's start costs more than it saves", 2, 154, 8, 1),
    ("a sweep of many small variants is not small", 3, 2_000, 8, 3),
]


@pytest.mark.parametrize(
    ("title", "variants", "workloads", "cpus", "expected"), DEFAULT_JOBS, ids=[c[0] for c in DEFAULT_JOBS]
)
def test_default_jobs(title: str, variants: int, workloads: int, cpus: int, expected: int) -> None:
    assert sweeps.default_jobs(variants, workloads, cpus) == expected


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local Ray instance (2 CPUs) that a separate ``gpuq`` process joins by its address; its
    workers import this checkout's sources."""
    ray = pytest.importorskip("ray")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = source_env()["PYTHONPATH"]
    try:
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def test_variants_as_ray_tasks_write_the_same_bytes_as_a_local_run(tmp_path: Path, ray_cluster: str) -> None:
    local = simulate(["-f", HOLIDAY, "--compare", "--jobs", "1"], tmp_path / "local")
    on_ray = simulate(["-f", HOLIDAY, "--compare", "--ray-address", ray_cluster], tmp_path / "ray")
    for name in OUTPUTS:
        assert local[name] == on_ray[name], f"{name} differs between a local run and Ray"
