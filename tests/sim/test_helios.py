"""gpuq.sim.traces.helios: Helios VC quotas as Kueue queues, and the per-minute VC timelines."""

from __future__ import annotations

import csv
import lzma
from pathlib import Path

import pytest

from gpuq.api.loader import load
from gpuq.core.quantity import format_amount
from gpuq.sim.traces import TraceError
from gpuq.sim.traces.helios import HeliosTimeline, VcMinute, VcQuota, helios_queues, helios_timeline

HELIOS = (Path(__file__).resolve().parents[2] / "data/traces/helios")
VENUS = HELIOS / "venus_cluster_gpu_number.csv"
EARTH = HELIOS / "earth_cluster_gpu_number.csv"
SEQUENCES = HELIOS / "earth_vc_sequence_2020-05"
GPU = "nvidia.com/gpu"


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def expected_quotas(row: dict[str, str]) -> tuple[VcQuota, ...]:
    """The row's non-zero VCs as the module should name them: ``vc6YE`` -> ``vc-6ye``, sorted by name."""
    quotas = [VcQuota(vc, "vc-" + vc[2:].lower(), int(n)) for vc, n in row.items() if vc.startswith("vc")]
    return tuple(sorted((q for q in quotas if q.gpus), key=lambda q: q.name))


@pytest.mark.parametrize(
    ("path", "date"),
    [(VENUS, "2020-04-01"), (VENUS, "2020-08-15"), (EARTH, "2020-05-15"), (EARTH, "2020-05-09")],
    ids=["venus first day", "venus in august", "earth in may", "earth's one-VC day"],
)
def test_quotas_of_a_date_are_the_non_zero_columns_of_its_row(path: Path, date: str) -> None:
    row = next(r for r in csv_rows(path) if r["date"] == date)
    queues = helios_queues(path, date)
    assert (queues.date, queues.quotas) == (date, expected_quotas(row))
    assert queues.total_gpus == int(row["total"])
    skipped = [vc for vc, n in row.items() if vc.startswith("vc") and n == "0"]
    assert queues.notes == (
        f"date {date} (one of 181 days, 2020-04-01 to 2020-09-28)",
        f"{len(queues.quotas)} ClusterQueues in cohort helios, {row['total']} GPUs",
        f"{len(skipped)} VC(s) with no GPUs that day are left out: {', '.join(skipped)}",
    )


@pytest.mark.parametrize(
    ("path", "vcs", "gpus"), [(VENUS, 16, 1080), (EARTH, 19, 1208)], ids=["venus", "earth"]
)
def test_no_date_means_the_latest_one(path: Path, vcs: int, gpus: int) -> None:
    latest = helios_queues(path)
    assert (latest.date, len(latest.quotas), latest.total_gpus) == ("2020-09-28", vcs, gpus)
    assert latest.manifests == helios_queues(path, "2020-09-28").manifests
    assert latest.notes[0] == "date 2020-09-28 (latest of 181 days, 2020-04-01 to 2020-09-28)"


def test_unknown_date_names_the_first_and_last_dates() -> None:
    with pytest.raises(
        TraceError, match="no quotas for date '2020-10-01'; dates run from 2020-04-01 to 2020-09-28"
    ):
        helios_queues(EARTH, "2020-10-01")


def test_manifests_load_cleanly_with_one_cluster_queue_per_vc(tmp_path: Path) -> None:
    queues = helios_queues(EARTH, "2020-07-01", cohort="earth", flavor="a100", namespace_prefix="helios-")
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(queues.to_yaml())
    result = load([str(manifest)])
    assert (result.errors, result.warnings) == ((), ())
    config = result.config
    assert config is not None and set(config.cohorts) == {"earth"} and set(config.flavors) == {"a100"}
    nominal = {
        name: format_amount(GPU, cq.resource_groups[0].flavors[0].resources[GPU].nominal)
        for name, cq in config.cluster_queues.items()
        if cq.cohort == "earth"
    }
    assert nominal == {q.name: str(q.gpus) for q in queues.quotas}
    assert set(config.local_queues) == {(f"helios-{q.name}", q.name) for q in queues.quotas}
    cq = next(m for m in queues.manifests if m["kind"] == "ClusterQueue")
    assert cq["metadata"]["annotations"] == {
        "gpuq.dev/source": "earth_cluster_gpu_number.csv on 2020-07-01: vc3sl, 48 GPUs"
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("date,vcA,vcB,total\n2020-01-01,8,0,16\n", None),
        ("date,vcA,vca,total\n2020-01-01,8,8,16\n", "columns 'vcA' and 'vca' both become 'vc-a'"),
        ("date,vcA,total\n2020-01-01,eight,8\n", ":2: vcA 'eight': not a whole number"),
        ("date,vcA,total\n2020-01-01,8\n", ":2: 2 fields where the header has 3"),
        ("day,vcA,total\n2020-01-01,8,8\n", "missing column(s) date"),
        ("date,vcA,total\n", "no dates (the file has only a header)"),
    ],
    ids=["a total that disagrees", "two VCs one name", "a word", "a short row", "no date column", "no rows"],
)
def test_malformed_quota_files(tmp_path: Path, text: str, message: str | None) -> None:
    path = tmp_path / "x_cluster_gpu_number.csv"
    path.write_text(text)
    if message is None:
        assert helios_queues(path).notes[-1] == "the total column says 16 GPUs but the VCs add up to 8"
        return
    with pytest.raises(TraceError) as raised:
        helios_queues(path)
    assert message in str(raised.value) and str(path) in str(raised.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cohort": "Helios"}, "cohort 'Helios'"),
        ({"flavor": "a_100"}, "flavor 'a_100'"),
        ({"namespace_prefix": "-x"}, "namespace prefix '-x'"),
    ],
    ids=["uppercase cohort", "underscore in flavor", "prefix starting with a dash"],
)
def test_names_that_are_not_dns_labels_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        helios_queues(EARTH, **options)


def test_timeline_of_one_vc_matches_its_file() -> None:
    path = SEQUENCES / "vcgkz.csv.xz"
    with lzma.open(path, "rt", newline="") as handle:
        rows = list(csv.DictReader(handle))
    timeline = helios_timeline(path)
    assert (timeline.vc, timeline.start, len(timeline.minutes)) == ("vcgkz", "2020-05-01 00:00:00", 44_640)
    for index in (0, 1, 44_639):
        row = rows[index]
        assert timeline.minutes[index] == VcMinute(
            index,
            total_gpus=int(row["total_gpu_num"]),
            running_gpus=int(row["running_gpu_num"]),
            pending_gpus=int(row["pending_gpu_num"]),
            running_jobs=int(row["running_job_num"]),
            pending_jobs=int(row["pending_job_num"]),
            running_gpu_jobs=int(row["running_gpujob_num"]),
            pending_gpu_jobs=int(row["pending_gpujob_num"]),
        )
    # the README's May 2020 figures for vcgkz: 8 GPUs, 7.3 running on average, never a pending GPU
    assert {m.total_gpus for m in timeline.minutes} == {8}
    assert (round(timeline.mean_running_gpus, 1), timeline.mean_pending_gpus, timeline.pending_share) == (
        7.3,
        0,
        0,
    )


def test_timeline_means_and_errors(tmp_path: Path) -> None:
    header = "time,total_gpu_num,running_gpu_num,pending_gpu_num,running_job_num,pending_job_num,"
    header += "running_gpujob_num,pending_gpujob_num"
    good = "2020-05-01 00:00:00,8,8,4,2,1,2,1\n2020-05-01 00:02:00,8,4,0,1,0,1,0\n"
    path = tmp_path / "vcX.csv"
    path.write_text(f"{header}\n{good}")
    minutes = (VcMinute(0, 8, 8, 4, 2, 1, 2, 1), VcMinute(2, 8, 4, 0, 1, 0, 1, 0))
    timeline = helios_timeline(path)
    assert timeline == HeliosTimeline("vcX", "2020-05-01 00:00:00", minutes)
    assert (timeline.mean_running_gpus, timeline.mean_pending_gpus, timeline.pending_share) == (6, 2, 0.5)
    for bad, message in [
        ("2020-05-01 00:03:30,8,8,0,1,0,1,0", ":4: time '2020-05-01 00:03:30': not a whole minute after"),
        ("May 1st,8,8,0,1,0,1,0", ":4: time 'May 1st': not YYYY-MM-DD HH:MM:SS"),
        ("2020-05-01 00:03:00,8,-1,0,1,0,1,0", ":4: running_gpu_num '-1': not a whole number"),
    ]:
        path.write_text(f"{header}\n{good}{bad}\n")
        with pytest.raises(TraceError, match=message):
            helios_timeline(path)
