"""gpuq's Prometheus alert rules as a Prometheus operator ``PrometheusRule``.

The rules are :func:`gpuq.commands.export.alert_rules` (``gpuq export alerts``),
unchanged; the object lives in the monitoring namespace, where the operator's
default rule selector finds it.
"""

from __future__ import annotations

from typing import Any

from gpuq.k8s.export_common import ExportOptions, Obj, make


def prometheus_rule(rules: dict[str, Any], options: ExportOptions) -> Obj:
    """The rule groups ``rules`` (``{"groups": [...]}``) in a PrometheusRule named ``gpuq-alerts``."""
    obj = make("monitoring.coreos.com/v1", "PrometheusRule", "gpuq-alerts", options.monitoring_namespace)
    return {**obj, "spec": {"groups": rules["groups"]}}
