"""The layer rules (README, "Layers"): who may import whom inside gpuq.

Every module under ``src/gpuq`` is parsed with :mod:`ast`; every ``import`` and ``from ... import``
counts, at module level, inside functions and under ``TYPE_CHECKING`` alike (a function-level
import is still a dependency, only a later one). Relative imports are resolved. A module's layer
is its top-level package under ``gpuq`` (``gpuq.sim.serving.fleet`` is in ``sim``; ``gpuq.cli`` is
``cli``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "gpuq"


@dataclass(frozen=True, slots=True)
class Edge:
    """``module`` imports ``target`` (a gpuq module or package) at ``line``."""

    module: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, source: str, is_package: bool = False) -> Iterator[Edge]:
    """Every gpuq module ``source`` imports (``from gpuq.x import y`` yields ``gpuq.x.y`` when
    ``y`` is a module, else ``gpuq.x``: :func:`known` decides)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    yield Edge(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name != ROOT and not name.startswith(ROOT + "."):
                continue
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                yield Edge(module, sub if sub in known() else name, node.lineno)


@cache
def known() -> frozenset[str]:
    return frozenset(module_name(p) for p in (SRC / ROOT).rglob("*.py"))


@cache
def edges() -> tuple[Edge, ...]:
    found: list[Edge] = []
    for path in sorted((SRC / ROOT).rglob("*.py")):
        found += imports_of(module_name(path), path.read_text(encoding="utf-8"), path.name == "__init__.py")
    return tuple(dict.fromkeys(found))  # one edge per (module, target, line)


def layer(module: str) -> str:
    """The top-level package (or module) under gpuq; ``gpuq`` itself for the root package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def layers() -> frozenset[str]:
    return frozenset(layer(m) for m in known()) - {ROOT}


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in layers()}
    for edge in edges():
        source, target = layer(edge.module), layer(edge.target)
        if source != target and ROOT not in (source, target):
            graph[source].add(target)
    return graph


def reaches(start: Iterable[str], forbidden: str) -> list[list[str]]:
    """Import chains (module by module) from ``start`` to a module of layer ``forbidden``."""
    out: dict[str, list[str]] = {}
    for edge in edges():
        out.setdefault(edge.module, []).append(edge.target)
    chains: list[list[str]] = []
    seen: set[str] = set()
    stack = [[m] for m in sorted(start)]
    while stack:
        chain = stack.pop()
        here = chain[-1]
        if here in seen:
            continue
        seen.add(here)
        if layer(here) == forbidden:
            chains.append(chain)
            continue
        for target in out.get(here, ()):
            # Importing a.b.c runs a/__init__ and a/b/__init__ first.
            parts = target.split(".")
            for end in range(2, len(parts) + 1):
                stack.append([*chain, ".".join(parts[:end])])
    return chains


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# ---------------------------------------------------------------------------------- the rules
@dataclass(frozen=True, slots=True)
class Rule:
    """Modules of ``layer`` may import gpuq modules only of ``allowed`` (and their own layer), or,
    with ``forbidden``, anything but those layers."""

    layer: str
    allowed: frozenset[str] | None = None
    forbidden: frozenset[str] = frozenset()

    def violations(self) -> list[Edge]:
        bad = []
        for edge in edges():
            if layer(edge.module) != self.layer or layer(edge.target) in (self.layer, ROOT):
                continue
            target = layer(edge.target)
            if (self.allowed is not None and target not in self.allowed) or target in self.forbidden:
                bad.append(edge)
        return bad


RULES = [
    pytest.param(Rule("core", allowed=frozenset()), id="core imports nothing of gpuq outside core"),
    pytest.param(Rule("api", allowed=frozenset({"core"})), id="api imports only api and core"),
    pytest.param(
        Rule("snapshot", allowed=frozenset({"api", "core"})),
        id="snapshot (what the live state looks like to a forecast) imports only api and core",
    ),
    pytest.param(
        Rule("run", forbidden=frozenset({"sim", "forecast"})), id="run imports neither sim nor forecast"
    ),
    pytest.param(
        Rule("sim", forbidden=frozenset({"run", "forecast"})), id="sim imports neither run nor forecast"
    ),
    pytest.param(
        Rule("forecast", forbidden=frozenset({"run", "server", "commands", "cli"})),
        id="forecast sits below server and commands",
    ),
]


@pytest.mark.parametrize("rule", RULES)
def test_layer_rule(rule: Rule) -> None:
    assert rule.layer in layers()
    assert rule.violations() == [], "\n".join(map(str, rule.violations()))


def test_run_never_reaches_the_simulator() -> None:
    """Not even through another package: no chain of imports leads from run to sim."""
    run = sorted(m for m in known() if layer(m) == "run")
    chains = reaches(run, "sim")
    assert chains == [], "\n".join(" -> ".join(chain) for chain in chains)


def test_no_cycle_between_top_level_packages() -> None:
    graph = package_graph()
    assert {"sim", "run", "api", "core", "forecast", "server", "commands", "k8s", "pack", "cli"} <= set(graph)
    assert cycles(graph) == []


# ------------------------------------------------------------------------- the parser itself
@pytest.mark.parametrize(
    ("module", "source", "targets"),
    [
        pytest.param("gpuq.run.x", "from gpuq.core.model import Workload\n", ["gpuq.core.model"], id="from"),
        pytest.param("gpuq.run.x", "import gpuq.sim.simulator\n", ["gpuq.sim.simulator"], id="import"),
        pytest.param(
            "gpuq.run.x",
            "def f():\n    from gpuq.sim.simulator import Simulation\n",
            ["gpuq.sim.simulator"],
            id="function-level",
        ),
        pytest.param(
            "gpuq.run.x",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuq.sim import simulator\n",
            ["gpuq.sim.simulator"],
            id="TYPE_CHECKING, a module named in the import list",
        ),
        pytest.param(
            "gpuq.run.serving.x", "from ..loop import ControlLoop\n", ["gpuq.run.loop"], id="relative"
        ),
        pytest.param("gpuq.run.x", "import os\nfrom typing import Any\n", [], id="not gpuq"),
    ],
)
def test_imports_are_found(module: str, source: str, targets: list[str]) -> None:
    assert [e.target for e in imports_of(module, source)] == targets


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
