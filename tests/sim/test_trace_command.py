"""``gpuq trace`` as a user runs it: manifests that ``gpuq validate`` accepts, and trace summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app

TRACES = (Path(__file__).resolve().parents[2] / "data/traces")
EARTH = TRACES / "helios" / "earth_cluster_gpu_number.csv"
runner = CliRunner()

HEADER = "name,namespace,queue,submit_s,duration_s,gpus,pods"
TRACE = f"""\
{HEADER}
train-a,team-a,a,10,3600,8,2
notebook,team-b,b,0,1800,0.5,
broken,team-a,a,20,0,1,
eval-a,team-a,a,7200,900,1,
"""


def validate(tmp_path: Path, name: str, text: str) -> str:
    """``gpuq validate`` of ``text`` saved as ``name``: its last line, after asserting it passed."""
    path = tmp_path / name
    path.write_text(text)
    result = runner.invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 0, result.output
    return result.output.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("path", "nodes"),
    [
        (TRACES / "openb" / "openb_node_list_gpu_node.csv", 1213),
        (TRACES / "openb" / "openb_node_list_all_node.csv", 1523),
        (TRACES / "philly" / "cluster_machine_list.csv", 552),
        (TRACES / "pai-v2020" / "pai_machine_spec.csv", 1897),
        (TRACES / "alibaba-spot-gpu-v2026" / "node_info_df.csv", 4278),
    ],
    ids=["openb gpu nodes", "openb all nodes", "philly", "pai", "alibaba spot"],
)
def test_nodes_of_every_machine_list_pass_validate(tmp_path: Path, path: Path, nodes: int) -> None:
    result = runner.invoke(app, ["trace", "nodes", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("note: ") and " machines, " in result.stderr
    assert f"{nodes} node(s)" in validate(tmp_path, "nodes.yaml", result.stdout)


def test_nodes_as_json_is_a_list_that_validate_reads(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["trace", "nodes", str(TRACES / "philly" / "cluster_machine_list.csv"), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["kind"], [item["kind"] for item in document["items"]]) == (
        "List",
        ["GPUModel"] * 2 + ["NodePool"] * 2,
    )
    assert "552 node(s) in 2 NodePool(s)" in validate(tmp_path, "nodes.json", result.stdout)


def test_queues_of_a_date_pass_validate(tmp_path: Path) -> None:
    result = runner.invoke(app, ["trace", "queues", str(EARTH), "--date", "2020-05-15", "--cohort", "earth"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[:2] == [
        "note: date 2020-05-15 (one of 181 days, 2020-04-01 to 2020-09-28)",
        "note: 16 ClusterQueues in cohort earth, 856 GPUs",
    ]
    assert "16 ClusterQueue(s), 16 LocalQueue(s), 1 ResourceFlavor(s), 1 Cohort(s)" in validate(
        tmp_path, "queues.yaml", result.stdout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queues", str(EARTH), "--date", "2019-01-01"], "dates run from 2020-04-01 to 2020-09-28"),
        (["queues", str(EARTH), "--cohort", "Earth"], "cohort 'Earth': must be a lowercase RFC 1123 label"),
        (["nodes", str(EARTH)], "not a known machine list"),
        (["read", "/nonexistent/jobs.csv"], "/nonexistent/jobs.csv: no such file"),
        (["read", str(EARTH), "--trace-format", "helios"], "unknown trace format 'helios'"),
    ],
    ids=["unknown date", "cohort not a DNS label", "not a machine list", "missing trace", "unknown format"],
)
def test_a_trace_error_exits_1_with_its_message(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["trace", *args])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and message in result.stderr


def test_read_summarises_jobs_queues_and_refused_rows(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    result = runner.invoke(app, ["trace", "read", str(trace)])
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.strip("│┃ ").split()) for line in result.stdout.splitlines()]
    for expected in [
        "rows read │ 4",
        "jobs │ 3",
        "refused rows │ 1",
        "GPU-hours requested │ 16.5",  # 2 x 8 x 1 h + 0.5 x 0.5 h + 1 x 0.25 h
        "first / last submit │ 0s / 7,200s",
        "team-a │ a │ 2 │ 16.2",
        "team-b │ b │ 1 │ 0.2",
        f"{trace}:4: duration_s '0': must be greater than 0",
    ]:
        assert expected in lines, result.stdout


def test_read_as_json(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    result = runner.invoke(app, ["trace", "read", str(trace), "-o", "json", "--limit", "3"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "source": str(trace),
        "rows": 3,
        "jobs": 2,
        "refused": 1,
        "refused_first": [f"{trace}:4: duration_s '0': must be greater than 0"],
        "notes": [],
        "gpu_hours": 16.25,
        "first_submit_s": 0.0,
        "last_submit_s": 10.0,
        "queues": [
            {"namespace": "team-a", "queue": "a", "jobs": 1, "gpu_hours": 16.0},
            {"namespace": "team-b", "queue": "b", "jobs": 1, "gpu_hours": 0.25},
        ],
    }


def test_read_strict_makes_a_bad_row_an_error(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    result = runner.invoke(app, ["trace", "read", str(trace), "--strict"])
    assert result.exit_code == 1
    assert result.stderr == f"error: {trace}:4: duration_s '0': must be greater than 0\n"
