"""The Kueue API written follows the target release: what it serves, what it stores, what it deprecates."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.k8s import kueue_releases
from gpuq.k8s.crd_schemas import crd_versions

runner = CliRunner()
EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "serving" / "00-cluster.yaml")


@pytest.mark.parametrize(
    ("name", "release", "asked", "expected"),
    [
        ("v0.19 stores v1beta2", "v0.19", None, "v1beta2"),
        ("a patch release is its minor release", "v0.19.2", None, "v1beta2"),
        ("the v prefix is optional", "0.16", None, "v1beta2"),
        ("v0.15 still stores v1beta1", "v0.15", None, "v1beta1"),
        ("v0.14 serves only v1beta1", "v0.14", None, "v1beta1"),
        ("a served version asked for is written", "v0.19", "v1beta1", "v1beta1"),
        ("v0.15 serves v1beta2 already", "v0.15", "v1beta2", "v1beta2"),
    ],
)
def test_the_version_written_is_the_one_asked_or_the_storage_one(
    name: str, release: str, asked: str | None, expected: str
) -> None:
    assert kueue_releases.version_for(release, asked) == expected, name  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("release", "asked", "message"),
    [
        ("v0.14", "v1beta2", "Kueue v0.14 does not serve kueue.x-k8s.io/v1beta2 (it serves v1beta1)"),
        ("v0.13", None, "Kueue v0.13 serves Topology only in v1alpha1"),
        ("v0.12", None, "Kueue v0.12 serves Cohort and Topology only in v1alpha1"),
        ("v0.25", None, "gpuq does not know which APIs Kueue v0.25 serves"),
        ("latest", None, "'latest' is not a Kueue release"),
    ],
)
def test_releases_that_cannot_take_the_export_are_refused(
    release: str, asked: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kueue_releases.version_for(release, asked)  # type: ignore[arg-type]


def test_the_release_table_agrees_with_the_bundled_v0_19_2_crds() -> None:
    info = kueue_releases.RELEASES["v0.19"]
    for kind in kueue_releases.KINDS:
        versions = {
            k.split("/")[1]: v
            for k, v in crd_versions().items()
            if k.startswith("kueue.x-k8s.io/") and k.endswith(f"/{kind}")
        }
        assert tuple(sorted(v for v, c in versions.items() if c.served)) == info.served, kind
        assert [v for v, c in versions.items() if c.storage] == [info.storage], kind
        assert tuple(v for v, c in versions.items() if c.deprecated) == info.deprecated, kind


@pytest.mark.parametrize(
    ("args", "code", "versions", "said"),
    [
        ([], 0, {"kueue.x-k8s.io/v1beta2"}, ""),
        (["--kueue-version", "v1beta1"], 0, {"kueue.x-k8s.io/v1beta1"}, "deprecated in Kueue v0.19"),
        (["--kueue-release", "v0.15"], 0, {"kueue.x-k8s.io/v1beta1"}, ""),
        (["--kueue-release", "v0.14", "--kueue-version", "v1beta2"], 2, set(), "--kueue-version"),
        (["--kueue-release", "v0.13"], 2, set(), "--kueue-release"),
    ],
)
def test_the_cli_writes_every_kueue_kind_in_a_version_the_release_serves(
    tmp_path: Path, args: list[str], code: int, versions: set[str], said: str
) -> None:
    import yaml

    out = tmp_path / "out"
    result = runner.invoke(app, ["export", "k8s", "-f", EXAMPLE, "--out-dir", str(out), *args])
    assert result.exit_code == code, result.output
    assert said in " ".join(result.output.replace("│", " ").split())
    if code == 0:
        kueue = [d for d in yaml.safe_load_all((out / "20-kueue.yaml").read_text()) if d]
        assert {d["apiVersion"] for d in kueue} == versions
        assert {"Cohort", "ClusterQueue"} <= {d["kind"] for d in kueue}
