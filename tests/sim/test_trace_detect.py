"""A trace's format comes from its columns, whatever the file is called: tiny slices of the bundled
traces, under names that say nothing, read as their format does; columns no format has are an error
that lists every format's columns and suggests ``--trace-format`` with the closest."""

from __future__ import annotations

import gzip
import json
import lzma
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.sim.traces import TraceError, detect_format, read_trace
from gpuq.sim.traces.detect import SIGNATURES
from gpuq.sim.traces.generic import REQUIRED

TRACES = Path(__file__).resolve().parents[2] / "data/traces"
runner = CliRunner()
DLRM = "alibaba-dlrm-v2025/disaggregated_DLRM_trace.csv.xz"  # its first timed row is the 7281st
GENERIC = "name,namespace,queue,submit_s,duration_s,gpus\ntrain-a,team-a,a,10,3600,8\nnb,team-b,b,0,60,0.5\n"
JSONL = (
    '{"name": "train-a", "namespace": "team-a", "queue": "a", "submit_s": 10, "duration_s": 5, "gpus": 1}\n'
)


def bundled(relative: str, rows: int, start: int = 1) -> str:
    """The header and ``rows`` data rows from the ``start``-th of a bundled trace (xz read through)."""
    path = TRACES / relative
    text = lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text()
    lines = text.splitlines(keepends=True)
    return "".join([lines[0], *lines[start : start + rows]])


def write(path: Path, text: str) -> Path:
    """``text`` at ``path``, xz- or gzip-compressed by its suffix."""
    if path.suffix == ".xz":
        with lzma.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    elif path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Known:
    text: str
    name: str  # a name that implies nothing, or the wrong format
    format: str


KNOWN = {
    "a slice of Philly under a plain name": Known(
        bundled("philly/philly_jobs_sia.csv.xz", 5), "week.csv", "philly"
    ),
    "a slice of Philly, xz-compressed": Known(
        bundled("philly/philly_jobs_sia.csv.xz", 5), "jobs.csv.xz", "philly"
    ),
    "a slice of openb, gzip-compressed": Known(
        bundled("openb/openb_pod_list_default.csv", 5), "pods.csv.gz", "openb"
    ),
    "a slice of openb named like DLRM": Known(
        bundled("openb/openb_pod_list_gpuspec33.csv", 5), "disaggregated_DLRM_x.csv", "openb"
    ),
    "a slice of DLRM under a plain name": Known(bundled(DLRM, 5, start=7281), "instances.csv", "dlrm"),
    "a generic CSV named like Philly": Known(GENERIC, "philly_jobs_mine.csv", "csv"),
    "a generic CSV, gzip-compressed": Known(GENERIC, "jobs.gz", "csv"),
    "JSONL under a .csv name": Known(JSONL, "jobs.csv", "jsonl"),
    "an empty .jsonl file keeps its name's format": Known("", "jobs.jsonl", "jsonl"),
}


@pytest.mark.parametrize("case", list(KNOWN.values()), ids=list(KNOWN))
def test_a_known_format_is_read_from_its_columns(tmp_path: Path, case: Known) -> None:
    path = write(tmp_path / case.name, case.text)
    assert detect_format(path) == case.format
    assert read_trace(path) == read_trace(path, format=case.format)
    detected = runner.invoke(app, ["trace", "read", str(path), "-o", "json"])
    chosen = runner.invoke(app, ["trace", "read", str(path), "-o", "json", "--trace-format", case.format])
    assert detected.exit_code == 0, detected.output
    assert json.loads(detected.stdout) == json.loads(chosen.stdout)
    assert json.loads(detected.stdout)["jobs"] > 0 or not case.text


@dataclass(frozen=True)
class Unknown:
    text: str
    closest: str
    missing: str  # what the message says the closest format misses


UNKNOWN = {
    "misspelled generic columns are closest to csv": Unknown(
        "Name,namespace,queue,submit_time,duration_s,gpus\nx,a,a,1,1,1\n",
        "csv",
        "name (not 'Name'?), submit_s",
    ),
    "Philly without its GPU count is closest to philly": Unknown(
        "timestamp,duration,cluster\n2017-10-09 07:01:55,66.0,11cb48\n", "philly", "num_gpus"
    ),
    "an openb list without times is closest to openb, with why": Unknown(
        bundled("openb/openb_pod_list_multigpu20.csv", 2),
        "openb",
        "pod_phase, creation_time, deletion_time, scheduled_time (the multigpu* lists have no times",
    ),
    "DLRM without its roles is closest to dlrm": Unknown(
        bundled(DLRM, 2).replace("instance_sn,role,", "a,b,"),
        "dlrm",
        "instance_sn, role",
    ),
    "Helios's GPU counts are no workload trace": Unknown(
        bundled("helios/venus_cluster_gpu_number.csv", 2), "csv", "name, submit_s, duration_s, gpus"
    ),
}


@pytest.mark.parametrize("case", list(UNKNOWN.values()), ids=list(UNKNOWN))
def test_columns_no_format_has_list_every_format_and_suggest_the_closest(
    tmp_path: Path, case: Unknown
) -> None:
    path = write(tmp_path / "trace.csv", case.text)
    with pytest.raises(TraceError) as raised:
        read_trace(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: its columns (")
    assert f"closest: {case.closest}, missing column(s) {case.missing}" in message
    for signature in SIGNATURES:
        assert f"{signature.format}: {', '.join(signature.columns)}, " in message
    assert "jsonl: one JSON object per line" in message
    assert message.endswith(f"pass --trace-format {case.closest}")
    result = runner.invoke(app, ["trace", "read", str(path)])
    assert (result.exit_code, result.stdout) == (1, "")
    assert " ".join(result.stderr.split()) == " ".join(f"error: {message}".split())


def test_the_csv_signature_is_the_generic_readers_required_columns() -> None:
    csv_signature = SIGNATURES[0]
    assert (csv_signature.format, {*csv_signature.columns, *csv_signature.grouping}) == ("csv", set(REQUIRED))
