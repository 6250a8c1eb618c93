"""``gpuq export``: configuration for the systems around gpuq (Prometheus alert rules)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
import yaml

export_app = typer.Typer(
    help="Write configuration for other systems (Prometheus alert rules).", no_args_is_help=True
)


def alert_rules(
    *,
    temperature_c: float = 85.0,
    memory_fraction: float = 0.95,
    idle_minutes: float = 30.0,
    pending_minutes: float = 60.0,
) -> dict[str, Any]:
    """Prometheus rule groups on the metrics ``gpuq serve`` exposes (DCGM and Kueue names)."""
    gpu = "{{ $labels.Hostname }} GPU {{ $labels.gpu }} ({{ $labels.UUID }})"
    return {
        "groups": [
            {
                "name": "gpuq-gpus",
                "rules": [
                    {
                        "alert": "GPUTemperatureHigh",
                        "expr": f"DCGM_FI_DEV_GPU_TEMP > {temperature_c:g}",
                        "for": "5m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": f"{gpu} is at {{{{ $value }}}} C (over {temperature_c:g} C)"
                        },
                    },
                    {
                        "alert": "GPUMemoryAlmostFull",
                        "expr": "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) "
                        f"> {memory_fraction:g}",
                        "for": "10m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": f"{gpu} memory is {{{{ $value | humanizePercentage }}}} full"
                        },
                    },
                    {
                        "alert": "GPUIdle",
                        "expr": f"gpuq_gpu_idle_seconds > {idle_minutes * 60:g}",
                        "labels": {"severity": "info"},
                        "annotations": {
                            "summary": f"{gpu} has been idle for {{{{ $value | humanizeDuration }}}}",
                            "description": "An unused or allocated-but-idle GPU: reclaim it or lower quota.",
                        },
                    },
                    {
                        "alert": "GPUXidErrors",
                        "expr": "DCGM_FI_DEV_XID_ERRORS > 0",
                        "labels": {"severity": "critical"},
                        "annotations": {"summary": f"{gpu} reported XID {{{{ $value }}}}"},
                    },
                ],
            },
            {
                "name": "gpuq-queues",
                "rules": [
                    {
                        "alert": "WorkloadsPendingLong",
                        "expr": 'kueue_pending_workloads{status="inadmissible"} > 0',
                        "for": f"{pending_minutes:g}m",
                        "labels": {"severity": "info"},
                        "annotations": {
                            "summary": "{{ $value }} workloads of ClusterQueue {{ $labels.cluster_queue }} "
                            f"have waited over {pending_minutes:g} minutes for quota"
                        },
                    }
                ],
            },
        ]
    }


@export_app.command("alerts")
def alerts(
    temperature: Annotated[
        float, typer.Option("--temperature", min=30, max=120, help="GPU temperature limit, C.")
    ] = 85.0,
    memory: Annotated[
        float, typer.Option("--memory", min=0.5, max=1.0, help="Framebuffer fraction in use.")
    ] = 0.95,
    idle_minutes: Annotated[
        float, typer.Option("--idle-minutes", min=1, help="Idle time before alerting.")
    ] = 30.0,
    pending_minutes: Annotated[
        float, typer.Option("--pending-minutes", min=1, help="Queue wait before alerting.")
    ] = 60.0,
) -> None:
    """Print Prometheus alert rules (temperature, memory almost full, idle GPUs, XID errors, long waits)."""
    rules = alert_rules(
        temperature_c=temperature,
        memory_fraction=memory,
        idle_minutes=idle_minutes,
        pending_minutes=pending_minutes,
    )
    sys.stdout.write(yaml.safe_dump(rules, sort_keys=False))
