"""Recorded topology assignments decode as Kueue writes them: every encoding case of Kueue's own
``pkg/util/tas/tas_assignment_test.go`` (v0.19.2; the first twelve unchanged since v0.15.0), in
its v1beta2 compressed form and in the v1beta1 ``levels`` + ``domains`` form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api import convert, kueue

CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parents[1] / "data/kueue-v0.19.2/pkg/util/tas/assignments.yaml").read_text()
)


def _domains(internal: dict[str, Any]) -> tuple[tuple[tuple[str, ...], int], ...]:
    return tuple((tuple(d["values"]), d["count"]) for d in internal.get("domains") or ())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_v1beta2_slices_decode_to_kueue_domains(case: dict[str, Any]) -> None:
    recorded = convert.recorded_topology(kueue.TopologyAssignment.model_validate(case["v1beta2"]))
    assert recorded is not None
    assert (recorded.levels, recorded.domains) == (
        tuple(case["internal"]["levels"]),
        _domains(case["internal"]),
    )


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_v1beta1_domains_decode_alike(case: dict[str, Any]) -> None:
    value = {"levels": case["internal"]["levels"], "domains": case["internal"].get("domains") or []}
    recorded = convert.recorded_topology(kueue.TopologyAssignment.model_validate(value))
    assert recorded is not None and recorded.domains == _domains(case["internal"])


def test_kueue_cases_cover_every_encoding() -> None:
    """The cases hold prefixes, suffixes, empty roots, universal values and both pod count forms."""
    text = yaml.safe_dump([c["v1beta2"] for c in CASES])
    for needle in ("prefix:", "suffix:", "- ''", "universal: a1", "universal: 1", "individual:\n"):
        assert needle in text, needle
