"""``-o`` is an output format in every verb (table, wide, json, yaml, as kubectl's); directories are
``--out-dir``; the old spellings still work with a deprecation warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.commands.render import OutputFormat

ROOT = Path(__file__).resolve().parent.parent
FAIR = str(ROOT / "examples" / "configs" / "fair-sharing.yaml")
RETAIL = str(ROOT / "examples" / "symbol-retail")
runner = CliRunner()
FORMATS = ["table", "wide", "json", "yaml"]
LEGACY_DIRECTORY = {("export", "k8s"), ("import", "k8s")}
"""Verbs whose -o named a directory before it meant a format."""


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every leaf command of the CLI (typer ships its own click: walk by shape, not by class)."""
    found = []
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            found += _commands(command, (*prefix, name))
        else:
            found.append(((*prefix, name), command))
    return found


def test_the_output_format_is_kubectl_s_set() -> None:
    assert [f.value for f in OutputFormat] == FORMATS


def test_every_o_option_is_the_same_output_format() -> None:
    root = typer.main.get_command(app)
    checked = []
    for path, command in _commands(root):
        for param in command.params:
            if "-o" in getattr(param, "opts", []):
                annotation = param.type_descriptor.annotation
                if path in LEGACY_DIRECTORY:  # a str: -o DIR still works, deprecated
                    assert "table, wide, json or yaml" in (param.help or ""), path
                else:
                    assert annotation is OutputFormat, (path, annotation)
                checked.append(" ".join(path))
    assert {"admit", "simulate", "diff", "pack", "trace read", "get workloads", "forecast-accuracy"} <= set(
        checked
    )


@pytest.mark.parametrize(
    ("args", "parse"),
    [
        (["admit", "-f", FAIR], None),
        (["diff", FAIR, FAIR], None),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_documents_parse_and_tables_print(args: list[str], parse: None, fmt: str) -> None:
    result = runner.invoke(app, [*args, "-o", fmt])
    assert result.exit_code == 0, result.output
    if fmt == "json":
        assert isinstance(json.loads(result.stdout), dict)
    elif fmt == "yaml":
        assert isinstance(yaml.safe_load(result.stdout), dict)
    else:
        assert result.stdout.strip()


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_simulate_o_prints_the_metrics_document_it_writes(tmp_path: Path, fmt: str) -> None:
    result = runner.invoke(app, ["simulate", "-f", RETAIL, "--out-dir", str(tmp_path), "-o", fmt, "-q"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert printed == json.loads((tmp_path / "metrics.json").read_text())
    assert "wrote" in result.stderr


def test_the_old_out_still_works_with_a_deprecation_warning(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "-f", RETAIL, "--out", str(tmp_path), "-q"])
    assert result.exit_code == 0, result.output
    assert "--out is deprecated; use --out-dir" in result.stderr
    assert (tmp_path / "metrics.json").exists()


def test_get_workloads_wide_adds_columns_offline() -> None:
    wide = runner.invoke(app, ["get", "workloads", "-f", RETAIL, "--admit", "-o", "wide"])
    narrow = runner.invoke(app, ["get", "workloads", "-f", RETAIL, "--admit"])
    assert wide.exit_code == narrow.exit_code == 0
    assert "requeues" in wide.stdout and "requeues" not in narrow.stdout


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_k8s_prints_in_every_format_on_stdout(fmt: str) -> None:
    result = runner.invoke(app, ["export", "k8s", "-f", RETAIL, "-o", fmt])
    assert result.exit_code == 0, result.output
    if fmt == "json":
        document = json.loads(result.stdout)
        assert document["kind"] == "List" and document["items"]
    elif fmt == "yaml":
        assert [d for d in yaml.safe_load_all(result.stdout) if d]
    else:
        assert "ClusterQueue" in result.stdout and "Exported objects" in result.stdout


def test_export_k8s_o_dir_still_writes_the_directory_with_a_warning(tmp_path: Path) -> None:
    result = runner.invoke(app, ["export", "k8s", "-f", RETAIL, "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "deprecated; use --out-dir" in result.stderr
    assert any((tmp_path / "out").iterdir())
