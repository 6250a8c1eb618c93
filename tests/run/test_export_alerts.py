"""``gpuq export alerts``: Prometheus rule groups on the metrics gpuq serve exposes."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.commands.export import alert_rules


def test_rules_cover_temperature_memory_idle_xid_and_long_waits() -> None:
    rules = {r["alert"]: r for g in alert_rules()["groups"] for r in g["rules"]}
    assert set(rules) == {
        "GPUTemperatureHigh",
        "GPUMemoryAlmostFull",
        "GPUIdle",
        "GPUXidErrors",
        "WorkloadsPendingLong",
    }
    assert rules["GPUTemperatureHigh"]["expr"] == "DCGM_FI_DEV_GPU_TEMP > 85"
    assert rules["GPUIdle"]["expr"] == "gpuq_gpu_idle_seconds > 1800"
    for rule in rules.values():
        assert (
            rule["labels"]["severity"] in {"info", "warning", "critical"} and rule["annotations"]["summary"]
        )


def test_the_command_prints_loadable_yaml_with_the_given_thresholds() -> None:
    result = CliRunner().invoke(app, ["export", "alerts", "--temperature", "80", "--idle-minutes", "10"])
    assert result.exit_code == 0, result.output
    rules = {r["alert"]: r for g in yaml.safe_load(result.output)["groups"] for r in g["rules"]}
    assert rules["GPUTemperatureHigh"]["expr"] == "DCGM_FI_DEV_GPU_TEMP > 80"
    assert rules["GPUIdle"]["expr"] == "gpuq_gpu_idle_seconds > 600"


def test_absurd_thresholds_are_refused() -> None:
    result = CliRunner().invoke(app, ["export", "alerts", "--temperature", "500"])
    assert result.exit_code == 2 and "--temperature" in result.output
