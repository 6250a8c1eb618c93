"""gpuq.sim.traces: the generic CSV / JSONL format, mapping files, the public-trace importers, NodePools."""

from __future__ import annotations

import csv
import json
import lzma
from datetime import datetime
from pathlib import Path

import pytest

from gpuq.api.loader import load
from gpuq.sim.traces import FORMATS, BadRow, TraceError, TraceJob, TraceRead, detect_format, read_trace
from gpuq.sim.traces.mapping import QueueRef, derived_name, load_mapping
from gpuq.sim.traces.nodes import node_pools
from gpuq.sim.traces.philly import split_gang

TRACES = (Path(__file__).resolve().parents[2] / "data/traces")
PHILLY = TRACES / "philly" / "philly_jobs_sia.csv.xz"
OPENB = TRACES / "openb" / "openb_pod_list_default.csv"
DLRM = TRACES / "alibaba-dlrm-v2025" / "disaggregated_DLRM_trace.csv.xz"
HEADER = "name,namespace,queue,submit_s,duration_s,priority,pods,gpus,cpu,memory,gpu_model,checkpoint_s,status"  # noqa: E501
GOOD = "ok,team-a,a,5,60,,,1,,,,,"
GiB = 2**30
MiB = 2**20


def good_job(name: str, line: int) -> TraceJob:
    """The job of the ``GOOD`` row: team-a / a, submitted at 5 s, running 60 s on one GPU."""
    return TraceJob(name, "team-a", "a", 5.0, 60.0, gpu_milli=1000, source_line=line)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- generic CSV and JSONL ------------------------------------------------------------------


def test_generic_csv_reads_every_column_and_sorts_by_submit_time(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.csv",
        f"{HEADER},comment\n"
        "train-a,team-a,a,10,3600,high,4,8,16,64Gi,H100-80GB,600,completed,ignored\n"
        "nb-b,team-b,b,0,60.5,100,,0.5,500m,4Gi,,,FAILED,\n"
        "tie-c,team-b,b,10,1,-5,1,0,,,,,succeeded,\n",
    )
    got = read_trace(path)
    assert got == TraceRead(
        jobs=(
            TraceJob(
                "nb-b", "team-b", "b", 0.0, 60.5, 1, 500, 500, 4 * GiB, "100", failed=True, source_line=3
            ),
            TraceJob(
                "train-a", "team-a", "a", 10.0, 3600.0, 4, 8000, 16000, 64 * GiB, "high", "H100-80GB", 600.0,
                source_line=2,
            ),
            TraceJob("tie-c", "team-b", "b", 10.0, 1.0, 1, 0, priority="-5", source_line=4),
        ),
        rows=3,
        source=str(path),
    )  # fmt: skip


def test_generic_jsonl_reads_numbers_and_strings_and_skips_blank_lines(tmp_path: Path) -> None:
    lines = [
        {"name": "train-a", "namespace": "team-a", "queue": "a", "submit_s": 10, "duration_s": "3600",
         "pods": 4, "gpus": 8, "cpu": 16, "memory": "64Gi", "priority": "high", "checkpoint_s": 600.0,
         "tags": ["not", "read"]},
        {"name": "nb-b", "namespace": "team-b", "queue": "b", "submit_s": 0, "duration_s": 60.5, "gpus": 0.5,
         "cpu": "500m", "memory": None, "priority": 100, "status": "failed"},
    ]  # fmt: skip
    path = write(tmp_path, "jobs.jsonl", json.dumps(lines[0]) + "\n\n  \n" + json.dumps(lines[1]) + "\n")
    got = read_trace(path)
    assert got.jobs == (
        TraceJob("nb-b", "team-b", "b", 0.0, 60.5, 1, 500, 500, None, "100", failed=True, source_line=4),
        TraceJob("train-a", "team-a", "a", 10.0, 3600.0, 4, 8000, 16000, 64 * GiB, "high", checkpoint_s=600.0,
                 source_line=1),
    )  # fmt: skip
    assert (got.rows, got.bad_rows) == (2, ())


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,team-a,a,abc,60,,,1,,,,,", "submit_s 'abc': not a number of seconds"),
        ("x,team-a,a,-1,60,,,1,,,,,", "submit_s '-1': must be 0 or more"),
        ("x,team-a,a,nan,60,,,1,,,,,", "submit_s 'nan': not a finite number of seconds"),
        ("x,team-a,a,5,0,,,1,,,,,", "duration_s '0': must be greater than 0"),
        ("x,team-a,a,5,,,,1,,,,,", "missing duration_s"),
        ("x,team-a,a,5,400000000,,,1,,,,,", "duration_s '400000000': more than 10 years: check the unit"),
        ("x,team-a,a,5,60,,0,1,,,,,", "pods '0': must be at least 1"),
        ("x,team-a,a,5,60,,100001,1,,,,,", "pods '100001': more than 100,000: check the column"),
        ("x,team-a,a,5,60,,1.5,1,,,,,", "pods '1.5': not a whole number"),
        ("x,team-a,a,5,60,,,65,,,,,", "gpus '65': more than 64 GPUs per pod"),
        ("x,team-a,a,5,60,,,1.5,,,,,", "gpus '1.5': from 1 GPU up only whole GPUs (fractions only below 1)"),
        ("x,team-a,a,5,60,,,-0.5,,,,,", "gpus '-0.5': must be 0 or more"),
        ("x,team-a,a,5,60,,,0.0005,,,,,", "gpus '0.0005': finer than a thousandth of a GPU"),
        ("x,team-a,a,5,60,,,two,,,,,", "gpus 'two': not a number of GPUs"),
        ("x,team-a,a,5,60,,,,,,,,", "missing gpus"),
        (",team-a,a,5,60,,,1,,,,,", "missing name"),
        ("Bad_Name,team-a,a,5,60,,,1,,,,,",
         "name 'Bad_Name': must be a lowercase RFC 1123 subdomain (lowercase letters, digits, '-' and '.')"),
        ("x,Team A,a,5,60,,,1,,,,,",
         "namespace 'Team A': must be a lowercase RFC 1123 label (lowercase letters, digits and '-')"),
        ("x,team-a,,5,60,,,1,,,,,", "missing queue"),
        ("x,team-a,a,5,60,,,1,lots,,,,",
         "cpu 'lots': is not a quantity (expected e.g. 500m, 10Gi, 1e3, 1.5)"),
        ("x,team-a,a,5,60,,,1,,-1Gi,,,", "memory '-1Gi': must be 0 or more"),
        ("x,team-a,a,5,60,,,1,,100Ti,,,", "memory '100Ti': more than any node holds: check the unit"),
        ("x,team-a,a,5,60,High Prio,,1,,,,,",
         "priority 'High Prio': neither an integer nor a priority class name "
         "(must be a lowercase RFC 1123 subdomain (lowercase letters, digits, '-' and '.'))"),
        ("x,team-a,a,5,60,9999999999,,1,,,,,",
         "priority '9999999999': outside the int32 range of Kueue priorities"),
        ("x,team-a,a,5,60,,,1,,,,0,", "checkpoint_s '0': must be greater than 0"),
        ("x,team-a,a,5,60,,,1,,,,,crashed",
         "status 'crashed': must be completed, succeeded, failed or empty"),
        ("x,team-a,a,5,60,,,1,,,,", "12 fields where the header has 13"),
        ("ok,team-a,a,7,60,,,1,,,,,", "name 'ok': duplicate in namespace 'team-a' (first at line 2)"),
    ],
    ids=[
        "unparsable submit time",
        "negative submit time",
        "not-a-number submit time",
        "zero duration",
        "empty duration",
        "duration over ten years",
        "zero pods",
        "absurd pod count",
        "fractional pod count",
        "more than 64 gpus per pod",
        "fraction above one gpu",
        "negative gpus",
        "gpu share finer than a thousandth",
        "gpus in words",
        "empty gpus",
        "missing name",
        "name that is not a kubernetes name",
        "namespace that is not a dns label",
        "missing queue",
        "cpu that is not a quantity",
        "negative memory",
        "absurd memory",
        "priority that is neither a name nor an integer",
        "priority outside int32",
        "zero checkpoint interval",
        "unknown status",
        "row with a missing field",
        "duplicate name in a namespace",
    ],
)
def test_generic_bad_row_names_line_column_and_value(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "jobs.csv", f"{HEADER}\n{GOOD}\n\n{row}\n")
    got = read_trace(path)
    assert got.bad_rows == (BadRow(str(path), 4, message),)
    assert (got.jobs, got.rows) == ((good_job("ok", 2),), 2)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes (column 2)"),
        ("[1, 2]", "not a JSON object (got list)"),
        ('{"name": "x", "namespace": "team-a", "queue": "a", "submit_s": 1, "duration_s": 2, "gpus": true}',
         "gpus True: must be a number or a string"),
        ('{"name": "x", "namespace": "team-a", "queue": "a", "submit_s": 1, "duration_s": 2}',
         "missing gpus"),
    ],
    ids=["broken json", "an array", "a boolean value", "a missing key"],
)
def test_jsonl_bad_line_is_a_bad_row_at_its_physical_line(tmp_path: Path, line: str, message: str) -> None:
    good = '{"name": "ok", "namespace": "team-a", "queue": "a", "submit_s": 5, "duration_s": 60, "gpus": 1}'
    path = write(tmp_path, "jobs.jsonl", f"{good}\n\n{line}\n")
    got = read_trace(path)
    assert (got.jobs, got.bad_rows) == ((good_job("ok", 1),), (BadRow(str(path), 3, message),))


def test_quoted_field_over_two_lines_keeps_later_line_numbers_physical(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", f'{HEADER},note\n{GOOD},"two\nlines"\nx,team-a,a,5,0,,,1,,,,,,\n')
    assert read_trace(path).bad_rows == (BadRow(str(path), 4, "duration_s '0': must be greater than 0"),)


def test_missing_required_columns_is_a_trace_error_naming_file_and_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "name,namespace,queue,duration_s\nx,a,a,1\n")
    with pytest.raises(TraceError, match=rf"^{path}: missing column\(s\) submit_s, gpus$"):
        read_trace(path, format="csv")
    with pytest.raises(TraceError, match=rf"^{path}: .* closest: csv, missing column\(s\) submit_s, gpus\. "):
        read_trace(path)  # no format: the columns choose it (tests/sim/test_trace_detect.py)


def test_strict_raises_at_the_first_bad_row_with_its_location(tmp_path: Path) -> None:
    rows = "x,team-a,a,5,-3,,,1,,,,,\nx,team-a,a,5,0,,,1,,,,,\n"
    path = write(tmp_path, "jobs.csv", f"{HEADER}\n{GOOD}\n{rows}")
    with pytest.raises(TraceError) as raised:
        read_trace(path, strict=True)
    assert str(raised.value) == f"{path}:3: duration_s '-3': must be greater than 0"


def test_limit_reads_only_the_first_data_rows(tmp_path: Path) -> None:
    rows = "x,team-a,a,1,-3,,,1,,,,,\ny,team-a,a,1,2,,,1,,,,,\n"
    path = write(tmp_path, "jobs.csv", f"{HEADER}\n{GOOD}\n{rows}")
    got = read_trace(path, limit=2)
    assert (len(got.jobs), len(got.bad_rows), got.rows) == (1, 1, 2)
    with pytest.raises(TraceError, match="limit must be 0 or more"):
        read_trace(path, limit=-1)


# --- mapping files ----------------------------------------------------------------------------

MAPPING = """\
field: team
default: {namespace: research, queue: research}
groups:
  "6214e9": {namespace: team-vision, queue: vision}
  "re:^vc[0-9a-f]+$": {namespace: team-other, queue: other}
  "re:^vc.*$": {namespace: never, queue: never}
  vc11: {namespace: exact-wins, queue: exact}
"""


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("6214e9", QueueRef("team-vision", "vision")),
        ("vc0e4a51", QueueRef("team-other", "other")),
        ("vc11", QueueRef("exact-wins", "exact")),
        ("vcZZ", QueueRef("never", "never")),
        ("somebody", QueueRef("research", "research")),
    ],
    ids=[
        "an exact key",
        "the first matching pattern in file order",
        "an exact key before any pattern",
        "a later pattern when the first does not match",
        "the default for an unmapped group",
    ],
)
def test_mapping_lookup(tmp_path: Path, group: str, expected: QueueRef) -> None:
    assert load_mapping(write(tmp_path, "map.yaml", MAPPING)).lookup(group) == expected


def test_generic_csv_with_mapping_takes_queues_from_the_group_column(tmp_path: Path) -> None:
    mapping = write(tmp_path, "map.yaml", 'field: team\ngroups: {"6214e9": {namespace: vision, queue: v}}\n')
    path = write(tmp_path, "jobs.csv", "name,team,submit_s,duration_s,gpus\na,6214e9,0,1,1\nb,other,0,1,1\n")
    got = read_trace(path, mapping=mapping)
    assert got.jobs == (TraceJob("a", "vision", "v", 0.0, 1.0, gpu_milli=1000, source_line=2),)
    assert got.bad_rows == (BadRow(str(path), 3, f"team 'other': not in {mapping} and no default there"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("groups: {}\nqueues: {}\n", "unknown key(s) queues (known: field, default, groups)"),
        ("groups:\n  a: {namespace: ns}\n", "groups.a: missing queue"),
        ("groups:\n  a: {namespace: ns, queue: Q_1}\n",
         "groups.a.queue: invalid name 'Q_1': must be a lowercase"),
        ("groups:\n  a: {namespace: ns, queue: q, cohort: c}\n", "groups.a: unknown key(s) cohort"),
        ('groups:\n  "re:(": {namespace: ns, queue: q}\n', "groups: key 're:(': invalid regular expression"),
        ("groups:\n  1.50: {namespace: ns, queue: q}\n", "groups: key 1.5 is not text: quote it"),
        ("groups:\n  0123: {namespace: ns, queue: q}\n", "groups: key 83 is not text: quote it"),
        ("default: research\n", "default: must be {namespace: ..., queue: ...}"),
        ("- a\n- b\n", "a mapping file is a YAML object"),
        ("field: [a]\n", "field: must be a column name"),
    ],
    ids=[
        "an unknown top-level key",
        "a group without a queue",
        "a queue that is not a dns label",
        "an unknown key in a group",
        "a bad regular expression",
        "an unquoted group yaml reads as a float",
        "an unquoted group yaml reads as an octal integer",
        "a default that is not an object",
        "a list instead of an object",
        "a field that is not a name",
    ],
)
def test_invalid_mapping_file_is_a_trace_error_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, "map.yaml", text)
    with pytest.raises(TraceError) as raised:
        load_mapping(path)
    assert str(raised.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize(
    ("group", "expected"),
    [("app_0", "app-0"), ("6214e9", "vc-6214e9"), ("LS", "ls"), ("__", None), ("x" * 70, "x" * 63)],
    ids=["underscores become dashes", "a leading digit gets the prefix", "lowercased", "nothing left", "cut"],
)
def test_derived_name(group: str, expected: str | None) -> None:
    assert derived_name(group, "vc-") == expected


# --- read_trace -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("philly_jobs_sia.csv.xz", "philly"),
        ("openb_pod_list_gpuspec33.csv", "openb"),
        ("disaggregated_DLRM_trace.csv.xz", "dlrm"),
        ("jobs.jsonl.xz", "jsonl"),
        ("jobs.csv", "csv"),
        ("jobs.txt", "csv"),
    ],
    ids=["philly", "openb", "dlrm", "compressed jsonl", "csv", "anything else is csv"],
)
def test_detect_format(name: str, expected: str) -> None:
    assert detect_format(Path("/some/dir") / name) == expected


def test_unknown_format_and_missing_file_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as raised:
        read_trace(tmp_path / "x.csv", format="parquet")
    assert str(raised.value) == "unknown trace format 'parquet'; known: csv, jsonl, philly, openb, dlrm"
    with pytest.raises(TraceError, match=rf"^{tmp_path / 'nope.csv'}: no such file$"):
        read_trace(tmp_path / "nope.csv")
    assert FORMATS == ("csv", "jsonl", "philly", "openb", "dlrm")


def test_compressed_generic_csv_reads_like_the_plain_one(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv.xz"
    with lzma.open(path, "wt", encoding="utf-8") as handle:
        handle.write(f"{HEADER}\n{GOOD}\n")
    assert read_trace(path).jobs == (good_job("ok", 2),)


def test_byte_order_mark_before_the_header_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(f"{HEADER}\r\n{GOOD}\r\n".encode("utf-8-sig"))
    assert read_trace(path).jobs == (good_job("ok", 2),)


# --- Philly -----------------------------------------------------------------------------------


def test_philly_first_rows_match_the_file() -> None:
    got = read_trace(PHILLY, limit=3)
    origin = datetime(2017, 9, 4, 10, 30, 41)  # the earliest timestamp in the file (README)
    with lzma.open(PHILLY, "rt") as handle:
        rows = list(csv.DictReader(handle))[:3]
    expected = tuple(
        TraceJob(
            name=f"philly-{i + 1:05d}",
            namespace=f"vc-{row['cluster']}",
            queue=f"vc-{row['cluster']}",
            submit_s=(datetime.fromisoformat(row["timestamp"]) - origin).total_seconds(),
            duration_s=float(row["duration"]),
            gpu_milli=1000 * int(row["num_gpus"]),
            source_line=i + 2,
        )
        for i, row in enumerate(rows)
    )
    assert got.jobs == tuple(sorted(expected, key=lambda j: (j.submit_s, j.source_line)))
    assert got.jobs[0] == TraceJob(
        "philly-00003", "vc-6c71a0", "vc-6c71a0", 2150871.0, 860662.0, gpu_milli=1000, source_line=4
    )
    assert got.notes[0] == (
        "submit_s counts from 2017-09-04 10:30:41, the earliest timestamp in the file (no time zone)"
    )


def test_philly_whole_file_reads_with_every_job() -> None:
    got = read_trace(PHILLY)
    assert (got.rows, len(got.jobs), got.bad_rows) == (82_247, 82_247, ())
    gangs = {(j.pods, j.gpu_milli) for j in got.jobs if j.pods > 1}
    assert gangs == {(2, 8000), (2, 6000), (3, 8000), (4, 8000), (8, 8000), (16, 8000)}
    assert len({j.namespace for j in got.jobs}) == 15
    assert "7 jobs of 12 GPUs run as 2 pods x 6 GPUs" in got.notes
    assert "65 rows repeat an earlier row exactly; kept as separate jobs" in got.notes


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [(1, (1, 1)), (8, (1, 8)), (16, (2, 8)), (12, (2, 6)), (13, (2, 7)), (128, (16, 8))],
    ids=["one gpu", "a full node", "two full nodes", "12 as two equal pods", "13 rounded up to 14", "128"],
)
def test_split_gang(gpus: int, expected: tuple[int, int]) -> None:
    assert split_gang(gpus, 8) == expected


def test_philly_bad_rows_rounding_note_and_mapping(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "philly_jobs_x.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:10,60.0,13,780.0,6214e9\n"
        "2017-10-01 00:00:00,60.0,0,0.0,6214e9\n"
        "yesterday,60.0,1,60.0,6214e9\n"
        "2017-10-01 00:00:20,0.0,1,0.0,b436b2\n",
    )
    mapping = write(tmp_path, "map.yaml", 'groups: {"6214e9": {namespace: vision, queue: v}}\n')
    got = read_trace(path, mapping=mapping)
    assert got.jobs == (TraceJob("philly-00001", "vision", "v", 10.0, 60.0, 2, 7000, source_line=2),)
    assert got.bad_rows == (
        BadRow(str(path), 3, "num_gpus '0': must be at least 1"),
        BadRow(str(path), 4, "timestamp 'yesterday': not a YYYY-MM-DD HH:MM:SS time"),
        BadRow(str(path), 5, "duration '0.0': must be greater than 0"),
    )
    assert "1 jobs of 13 GPUs run as 2 pods x 7 GPUs = 14, rounded up by 1" in got.notes


# --- openb ------------------------------------------------------------------------------------


def test_openb_first_rows_match_the_file() -> None:
    got = read_trace(OPENB, limit=3)
    assert got.jobs == (
        TraceJob("openb-pod-0000", "ls", "ls", 0.0, 12537496.0, 1, 1000, 12000, 16 * GiB, source_line=2),
        TraceJob("openb-pod-0001", "ls", "ls", 427061.0, 12475899.0, 1, 460, 6000, 12 * GiB, source_line=3),
        TraceJob(
            "openb-pod-0002", "ls", "ls", 1558381.0, 11344579.0, 1, 1000, 12000, 24 * GiB, source_line=4
        ),

    )


def test_openb_default_list_skips_pending_and_marks_failed() -> None:
    got = read_trace(OPENB)
    assert (got.rows, len(got.jobs), got.bad_rows) == (8152, 8152 - 897, ())
    assert sum(j.failed for j in got.jobs) == 1870
    by_name = {j.name: j for j in got.jobs}
    assert "openb-pod-0061" not in by_name  # Pending
    assert by_name["openb-pod-0033"] == TraceJob(
        "openb-pod-0033", "be", "be", 9965463.0, 182.0, 1, 1000, 3152, 5600 * MiB, failed=True, source_line=35
    )
    assert "897 Pending pods were never scheduled, so their run time is unknown: skipped" in got.notes
    with OPENB.open() as handle:
        scheduled = [r for r in csv.DictReader(handle) if r["pod_phase"] != "Pending"]
    expected_milli = sum(int(r["num_gpu"]) * int(r["gpu_milli"]) for r in scheduled)
    assert sum(j.gpu_milli for j in got.jobs) == expected_milli


def test_openb_gpu_spec_becomes_the_first_model() -> None:
    got = read_trace(TRACES / "openb" / "openb_pod_list_gpuspec33.csv", limit=25)
    models = {j.name: j.gpu_model for j in got.jobs if j.gpu_model}
    assert models["openb-pod-0009"] == "V100M16"  # V100M16|V100M32
    assert models["openb-pod-0021"] == "G2"  # G2|P100|T4|V100M16|V100M32


def test_openb_lists_without_times_are_refused() -> None:
    path = TRACES / "openb" / "openb_pod_list_multigpu20.csv"
    with pytest.raises(TraceError, match=r"missing column.* pod_phase, creation_time, .*static packing"):
        read_trace(path)


def test_openb_bad_rows_and_a_cpu_only_pod(tmp_path: Path) -> None:
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    path = write(
        tmp_path,
        "openb_pod_list_x.csv",
        f"{header}scheduled_time\n"
        "p-0,1000,1024,2,500,,LS,Running,0,10,0\n"
        "p-1,1000,1024,0,0,,BE,Succeeded,5,9,7\n"
        "p-2,1000,1024,1,1000,,BE,Failed,5,7,7\n"
        "p-3,1000,1024,1,1000,,BE,Lost,5,9,7\n",
    )
    got = read_trace(path)
    assert got.jobs == (TraceJob("p-1", "be", "be", 5.0, 2.0, 1, 0, 1000, 2**30, source_line=3),)
    several = "a share of each of 2 GPUs cannot be expressed"
    several += " (a pod holds either part of one GPU or whole GPUs)"
    assert got.bad_rows == (
        BadRow(str(path), 2, f"gpu_milli '500': {several}"),
        BadRow(str(path), 4, "deletion_time '7': not after scheduled_time 7"),
        BadRow(str(path), 5, "pod_phase 'Lost': must be one of Running, Succeeded, Failed, Pending"),
    )


# --- DLRM -------------------------------------------------------------------------------------


def test_dlrm_rows_with_and_without_times() -> None:
    got = read_trace(DLRM)
    by_name = {j.name: j for j in got.jobs}
    end = 2_677_541.0  # the last time in the file (README: window 75 ... 2,677,541 s)
    assert by_name["instance-0"] == TraceJob(
        "instance-0", "app-0", "app-0", 0.0, end, 1, 1000, 12000, 120 * GiB, source_line=2
    )
    assert by_name["instance-7280"] == TraceJob(  # created and scheduled in the trace, alive at its end
        "instance-7280", "app-22", "app-22", 475.00000000000006, end - 623.0, 1, 0, 64000, 320 * GiB,
        source_line=7282,
    )  # fmt: skip
    assert by_name["instance-7281"].duration_s == 91730.0 - 683.0
    assert by_name["instance-2454"] == TraceJob(  # existed before the trace, deleted at 85 s
        "instance-2454", "app-87", "app-87", 0.0, 85.0, 1, 0, 64000, 320 * GiB, source_line=2456
    )
    assert (got.rows, len(got.jobs), len(got.bad_rows)) == (23_871, 23_871 - 16, 16)
    assert got.bad_rows[0] == BadRow(
        str(DLRM), 17765, "deletion_time '1799786.0': not after the start at 1799786 s"
    )
    assert got.notes[:2] == (
        "7280 instances existed before the trace: submitted at 0",
        "8878 instances were alive at the trace end: they run until 2677541 s (the last time seen)",
    )


def test_dlrm_limit_keeps_the_trace_end_of_the_whole_file() -> None:
    got = read_trace(DLRM, limit=2)
    assert [j.duration_s for j in got.jobs] == [2_677_541.0, 2_677_541.0]


# --- machine lists as NodePools ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "nodes", "gpus"),
    [
        (TRACES / "openb" / "openb_node_list_gpu_node.csv", 1213, 6212),
        (TRACES / "openb" / "openb_node_list_all_node.csv", 1523, 6212),
        (TRACES / "philly" / "cluster_machine_list.csv", 552, 2490),
        (TRACES / "pai-v2020" / "pai_machine_spec.csv", 1897, 6742),
        (TRACES / "alibaba-spot-gpu-v2026" / "node_info_df.csv", 4278, 10412),
    ],
    ids=["openb gpu nodes", "openb all nodes", "philly", "pai", "alibaba spot"],
)
def test_machine_list_becomes_node_pools_that_load_cleanly(
    tmp_path: Path, path: Path, nodes: int, gpus: int
) -> None:
    pools = node_pools(path)
    manifest = write(tmp_path, "pools.yaml", pools.to_yaml())
    result = load([str(manifest)])
    assert (result.errors, result.warnings) == ((), ())
    assert len(result.nodes) == nodes
    assert sum(pool.count * pool.gpus_per_node for pool in result.node_pools) == gpus
    assert pools.notes[0] == f"{len(result.node_pools)} pools of {nodes} machines, {gpus} GPUs"


def test_node_pools_map_known_models_and_define_the_others() -> None:
    pools = node_pools(TRACES / "openb" / "openb_node_list_gpu_node.csv")
    models = {m["metadata"]["name"]: m["spec"] for m in pools.manifests if m["kind"] == "GPUModel"}
    assert models == {
        "G2": {"product": "G2", "memory": "16Gi", "computeCapability": "0.0"},
        "G3": {"product": "G3", "memory": "16Gi", "computeCapability": "0.0"},
    }
    used = {m["spec"]["gpu"]["model"] for m in pools.manifests if m["kind"] == "NodePool"}
    assert used == {"A10", "G2", "G3", "P100", "T4", "V100-16GB", "V100-32GB"}
    g2 = next(m for m in pools.manifests if m["metadata"]["name"] == "openb-g2-8gpu-96cpu-384gi")
    assert g2["spec"] == {
        "machineType": "openb-g2-8gpu-96cpu-384gi", "count": 549, "cpu": "96", "memory": "384Gi",
        "gpu": {"model": "G2", "count": 8},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("machines.csv", "a,b\n", "not a known machine list (names start with: openb_node_list, "),
        ("openb_node_list_x.csv", "sn,cpu_milli,memory_mib,gpu,model\nn-0,96000,1024,8,\n",
         ":2: 8 GPUs of model (none): both or neither expected"),
        ("pai_machine_spec.csv", "machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm,T4,96,lots,2\n",
         ":2: memory: 'lotsGi' is not a quantity"),
        ("node_info_df.csv", "gpu_model,gpu_capacity_num,cpu_num\nA10,one,128\n",
         ":2: 'one' is not a whole number of GPUs or CPUs"),
    ],
    ids=["an unknown file name", "gpus without a model", "memory that is not a number", "gpus in words"],
)
def test_bad_machine_list_is_a_trace_error_naming_the_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError) as raised:
        node_pools(path)
    assert str(raised.value).startswith(f"{path}{'' if message.startswith(':') else ': '}{message}")
