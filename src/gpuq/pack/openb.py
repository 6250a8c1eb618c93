"""Readers for the openb node and pod lists (Alibaba cluster-trace-gpu-v2023, the FGD paper's input).

Node lists: ``sn,cpu_milli,memory_mib,gpu,model``. Pod lists:
``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` and optionally ``gpu_spec``
(allowed GPU models, ``|``-separated; the ``multigpu`` files have only the
first five columns). Other columns (qos, phase, timestamps) are ignored: the
packing experiment does not use them. Every bad row raises ``OpenbError``
naming the file, the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
GPU_SPEC_COLUMN = "gpu_spec"
FULL_GPU_MILLI = 1000


class OpenbError(ValueError):
    """A file that cannot be read as an openb list: ``path:line: column: message``."""

    def __init__(self, path: str, line: int, message: str, column: str | None = None) -> None:
        self.path, self.line, self.column, self.message = path, line, column, message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {column}: {message}" if column else f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class OpenbNode:
    """One machine: CPU milli, memory MiB, GPU count and model (None for CPU-only nodes)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str | None


@dataclass(frozen=True, slots=True)
class OpenbPod:
    """One task: ``gpu_count`` GPUs with ``gpu_milli`` thousandths each; ``gpu_models`` the
    allowed models in file order (None: any)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...] | None = None

    @property
    def gpu_total_milli(self) -> int:
        return self.gpu_count * self.gpu_milli


def read_nodes(path: str | Path) -> tuple[OpenbNode, ...]:
    """The nodes of an ``openb_node_list_*.csv`` file, in file order."""
    nodes: list[OpenbNode] = []
    names: dict[str, int] = {}
    for line, row in _rows(str(path), NODE_COLUMNS):
        name = _name(str(path), line, row, "sn", names)
        cpu, memory, gpus = (_count(str(path), line, row, c) for c in ("cpu_milli", "memory_mib", "gpu"))
        nodes.append(OpenbNode(name, cpu, memory, gpus, row["model"].strip() or None))
    return tuple(nodes)


def read_pods(path: str | Path) -> tuple[OpenbPod, ...]:
    """The pods of an ``openb_pod_list_*.csv`` file, in file order."""
    pods: list[OpenbPod] = []
    names: dict[str, int] = {}
    for line, row in _rows(str(path), POD_COLUMNS):
        name = _name(str(path), line, row, "name", names)
        cpu, memory, gpus, milli = (
            _count(str(path), line, row, c) for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
        )
        _check_gpu_request(str(path), line, gpus, milli)
        models = tuple(m for m in row.get(GPU_SPEC_COLUMN, "").strip().split("|") if m)
        pods.append(OpenbPod(name, cpu, memory, gpus, milli, models or None))
    return tuple(pods)


def _rows(path: str, required: tuple[str, ...]) -> Iterator[tuple[int, Mapping[str, str]]]:
    """(line number, row by column name) for each non-blank data row; the header must name
    every ``required`` column."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = [column.strip() for column in next(reader, [])]
            if not header or header == [""]:
                raise OpenbError(path, 1, f"empty file; expected a header with {', '.join(required)}")
            for column in required:
                if column not in header:
                    raise OpenbError(path, 1, "missing column in the header", column)
            for values in reader:
                if not any(value.strip() for value in values):
                    continue
                if len(values) < len(header):
                    missing = header[len(values)]
                    if missing in required:
                        raise OpenbError(path, reader.line_num, "missing value", missing)
                    values = values + [""] * (len(header) - len(values))
                yield reader.line_num, dict(zip(header, values, strict=False))
    except OSError as error:
        raise OpenbError(path, 0, f"cannot read: {error.strerror or error}") from error
    except (UnicodeDecodeError, csv.Error) as error:
        raise OpenbError(path, 0, f"not a CSV text file: {error}") from error


def _name(path: str, line: int, row: Mapping[str, str], column: str, seen: dict[str, int]) -> str:
    name = row[column].strip()
    if not name:
        raise OpenbError(path, line, "empty name", column)
    if name in seen:
        raise OpenbError(path, line, f"duplicate name {name!r} (first on line {seen[name]})", column)
    seen[name] = line
    return name


def _count(path: str, line: int, row: Mapping[str, str], column: str) -> int:
    text = row[column].strip()
    try:
        value = int(text)
    except ValueError:
        raise OpenbError(path, line, f"not an integer: {text!r}", column) from None
    if value < 0:
        raise OpenbError(path, line, f"negative value {value}", column)
    return value


def _check_gpu_request(path: str, line: int, gpus: int, milli: int) -> None:
    """The trace's GPU request rules: milli per GPU in 1..1000 for GPU pods, 0 for CPU-only
    pods, and a share below 1000 only for a single GPU."""
    if gpus == 0 and milli != 0:
        raise OpenbError(path, line, f"{milli} GPU milli but num_gpu is 0", "gpu_milli")
    if gpus > 0 and not 0 < milli <= FULL_GPU_MILLI:
        raise OpenbError(path, line, f"{milli} is not a per-GPU share in 1..1000", "gpu_milli")
    if gpus > 1 and milli < FULL_GPU_MILLI:
        raise OpenbError(
            path, line, f"a {milli}-milli share of {gpus} GPUs (shares need num_gpu 1)", "gpu_milli"
        )
