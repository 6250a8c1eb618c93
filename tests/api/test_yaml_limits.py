"""YAML that would cost far more to read than its size: alias bombs, recursive aliases, deep nesting.

The loader refuses such a text with one diagnostic naming the file and line, in milliseconds and
before anything expands it; plain documents, with or without a few aliases, read as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.api.loader import MAX_ALIAS_NODES, MAX_DEPTH, load, parse_documents, yaml_refusal

REFUSED = f"YAML aliases expand past {MAX_ALIAS_NODES} nodes: refused"


def laughs(levels: int = 9, width: int = 9, indent: str = "") -> str:
    """The "billion laughs": each level a list of ``width`` aliases of the one before (9^9 leaves)."""
    lines = [f"{indent}a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    lines += [f"{indent}a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def wide(items: int, uses: int) -> str:
    """One anchor of ``items`` scalars, used ``uses`` times."""
    return f"base: &b [{', '.join(['x'] * items)}]\n" + "".join(f"use{i}: *b\n" for i in range(uses))


def nested(depth: int) -> str:
    return "x: " + "[" * depth + "]" * depth + "\n"


def documents(count: int, items: int) -> str:
    """``count`` documents, each adding ``items`` nodes by one alias: the bound is for the whole text."""
    return "".join(f"---\nbase: &b [{', '.join(['x'] * items)}]\nuse: *b\n" for _ in range(count))


RESOURCES = """\
apiVersion: batch/v1
kind: Job
metadata: {name: two, namespace: team-a}
spec:
  template:
    spec:
      containers:
      - name: a
        image: x
        resources: &resources {requests: {cpu: "1", memory: 1Gi}}
      - name: b
        image: x
        resources: *resources
"""


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (laughs(), 5, REFUSED),  # 620 bytes, 10^9 nodes expanded: refused where the count passes the bound
        (laughs(levels=30, width=2), 12, REFUSED),  # a deep chain of doubling aliases
        (wide(4000, 3), 4, REFUSED),  # one big anchor used a few times
        (documents(3, 4000), 9, REFUSED),  # small expansions that add up over the documents of one text
        ("a: &a [*a]\n", 1, "a YAML alias refers to a node that contains it: refused"),
        ("kind: Pod\nmetadata: &m {name: x, labels: *m}\n", 2, "a node that contains it: refused"),
        (nested(MAX_DEPTH + 50), 1, f"YAML nests deeper than {MAX_DEPTH} levels: refused"),
        (RESOURCES, None, None),  # a few aliases: read as before
        (wide(100, 90), None, None),  # 9,000 nodes added: within the bound
        (documents(2, 4000), None, None),
        (nested(MAX_DEPTH - 5), None, None),
        ("items: [" + ", ".join(str(i) for i in range(30_000)) + "]\n", None, None),  # big, no alias
    ],
    ids=[
        "billion laughs",
        "doubling chain",
        "big anchor used thrice",
        "adds up over documents",
        "recursive list",
        "recursive mapping",
        "too deep",
        "shared resources block",
        "many small aliases",
        "two documents",
        "deep enough",
        "large without aliases",
    ],
)
def test_costly_yaml_is_refused_fast_and_plain_yaml_reads(
    text: str, line: int | None, message: str | None
) -> None:
    # no timing is asserted: a bomb that were expanded (10^9 nodes) would not return at all
    parsed, problems = parse_documents("bomb.yaml", text)
    refusal = yaml_refusal(text)
    if message is None:  # read as before (and as fast: reading is the cost, no measuring)
        assert problems == [] and parsed and refusal is None
        return
    assert parsed == [] and len(problems) == 1
    assert problems[0].path == "bomb.yaml" and problems[0].line == line
    assert message in problems[0].message
    assert str(problems[0]).startswith(f"bomb.yaml:{line}: ")
    assert refusal is not None and refusal[0] == line and message in refusal[1]


def test_aliases_still_mean_what_they_say() -> None:
    parsed, problems = parse_documents("job.yaml", RESOURCES)
    assert problems == []
    containers = parsed[0].data["spec"]["template"]["spec"]["containers"]
    assert (
        containers[0]["resources"]
        == containers[1]["resources"]
        == {"requests": {"cpu": "1", "memory": "1Gi"}}
    )


def test_a_bomb_in_a_file_is_one_diagnostic_naming_the_file_and_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: lol}\nspec:\n" + laughs(indent="  "))
    result = load([str(bomb)])  # an expanded bomb would not return: no timing asserted
    assert result.config is None
    assert [str(d) for d in result.errors] == [f"{bomb}:9: {REFUSED}"]
