"""``gpuq export``: configuration for the systems around gpuq (Prometheus alert rules, Kubernetes)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
import yaml

from gpuq.commands.render import LEGACY_DIRECTORY_HELP, OutputFormat, format_or_directory, write_document
from gpuq.k8s.export_common import ExportOptions, KueueVersion, PodSecurityLevel, Provisioner
from gpuq.k8s.kueue_releases import DEFAULT_RELEASE

export_app = typer.Typer(
    help="Write configuration for other systems (Prometheus alert rules, Kubernetes manifests).",
    no_args_is_help=True,
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


@export_app.command("k8s")
def k8s(
    files: Annotated[
        list[str], typer.Option("-f", "--filename", help="Manifest files or directories ('-' for stdin).")
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "-o", "--output", help=f"{LEGACY_DIRECTORY_HELP} On stdout: yaml (one stream, the default)."
        ),
    ] = None,
    out_dir: Annotated[
        str | None, typer.Option("--out-dir", help="Directory to write; stdout (one stream) when left out.")
    ] = None,
    provisioner: Annotated[
        Provisioner,
        typer.Option("--provisioner", help="Node objects: GKE ComputeClasses or Karpenter NodePools."),
    ] = "gke",
    kubernetes_version: Annotated[
        str, typer.Option("--kubernetes-version", help="Kubernetes version whose schemas check core kinds.")
    ] = "1.33",
    kueue_release: Annotated[
        str, typer.Option("--kueue-release", help="Kueue release of the cluster (v0.14 to v0.19).")
    ] = DEFAULT_RELEASE,
    kueue_version: Annotated[
        KueueVersion | None,
        typer.Option("--kueue-version", help="Kueue API to write (default: the release's storage version)."),
    ] = None,
    pod_security: Annotated[
        PodSecurityLevel, typer.Option("--pod-security", help="Pod Security Standard of team namespaces.")
    ] = "restricted",
    monitoring_namespace: Annotated[
        str, typer.Option("--monitoring-namespace", help="Namespace of Prometheus (scrapes team pods).")
    ] = "monitoring",
    gpu_operator_namespace: Annotated[
        str,
        typer.Option("--gpu-operator-namespace", help="Namespace of the NVIDIA GPU operator's ConfigMaps."),
    ] = "gpu-operator",
    ingress_namespaces: Annotated[
        list[str] | None,
        typer.Option(
            "--ingress-namespace",
            help="Namespace of an ingress gateway reaching serving pods (repeatable; default istio-system).",
        ),
    ] = None,
    knative_namespace: Annotated[
        str,
        typer.Option("--knative-namespace", help="Knative Serving's namespace (KServe's activator path)."),
    ] = "knative-serving",
    kuberay_namespace: Annotated[
        str, typer.Option("--kuberay-namespace", help="Namespace of the KubeRay operator.")
    ] = "default",
    node_class: Annotated[
        str, typer.Option("--node-class", help="Karpenter EC2NodeClass the NodePools refer to.")
    ] = "default",
) -> None:
    """Write the configuration as Kubernetes manifests for a real Kueue cluster (docs/kubernetes.md)."""
    fmt, directory = format_or_directory(output, out_dir, OutputFormat.YAML)
    from gpuq.api.loader import load
    from gpuq.k8s import kueue_releases
    from gpuq.k8s.export import build_export, check_export, render_stream, write_export
    from gpuq.k8s.export_validate import ExportInvalid, schema_version

    try:
        version = kueue_releases.version_for(kueue_release, kueue_version)
    except ValueError as err:
        hint = "--kueue-version" if kueue_version and "serve" in str(err) else "--kueue-release"
        raise typer.BadParameter(str(err), param_hint=hint) from None
    warning = kueue_releases.deprecation(kueue_release, version)
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    options = ExportOptions(
        provisioner=provisioner,
        kueue_release=kueue_releases.minor(kueue_release),
        kueue_version=version,
        kubernetes_version=kubernetes_version,
        pod_security=pod_security,
        monitoring_namespace=monitoring_namespace,
        gpu_operator_namespace=gpu_operator_namespace,
        ingress_namespaces=tuple(ingress_namespaces or ("istio-system",)),
        knative_namespace=knative_namespace,
        kuberay_namespace=kuberay_namespace,
        node_class=node_class,
    )
    try:
        schema_version(kubernetes_version)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--kubernetes-version") from None
    result = load(files)
    for diagnostic in result.diagnostics:
        typer.echo(str(diagnostic), err=True)
    if result.config is None:
        raise typer.Exit(1)
    exported = build_export(result, options, alert_rules())
    for warning in exported.warnings:
        typer.echo(f"warning: {warning}", err=True)
    try:
        check_export(exported, options)
    except ExportInvalid as err:
        for problem in err.problems:
            typer.echo(f"invalid: {problem}", err=True)
        typer.echo("nothing written", err=True)
        raise typer.Exit(1) from None
    if directory is None:
        objects = [obj for objs in exported.cluster_files().values() for obj in objs]
        if fmt == OutputFormat.YAML:
            sys.stdout.write(render_stream(exported))
        elif fmt == OutputFormat.JSON:
            write_document({"apiVersion": "v1", "kind": "List", "items": objects}, fmt)
        else:
            _print_objects(exported.cluster_files())
        if exported.gpuq_files():
            typer.echo(
                "note: gpuq-only objects (NodePools, ...) are written only with --out-dir DIR", err=True
            )
        return
    for path in write_export(exported, directory):
        typer.echo(f"wrote {path}", err=True)


def _print_objects(files: dict[str, list[dict[str, Any]]]) -> None:
    """``-o table``: what the export holds, one row per object, by the file it goes to."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Exported objects", title_justify="left")
    for column in ("file", "apiVersion", "kind", "namespace", "name"):
        table.add_column(column)
    for name, objects in files.items():
        for obj in objects:
            metadata = obj.get("metadata") or {}
            row = (name, str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
            table.add_row(*row, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


@export_app.command("terraform")
def terraform(
    files: Annotated[
        list[str], typer.Option("-f", "--filename", help="Manifest files or directories ('-' for stdin).")
    ],
    out_dir: Annotated[str, typer.Option("--out-dir", help="Directory to write the *.tf.json files to.")],
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="What was written: table, wide, json or yaml.")
    ] = OutputFormat.TABLE,
    kueue_release: Annotated[
        str, typer.Option("--kueue-release", help="Kueue release of the cluster (v0.14 to v0.19).")
    ] = DEFAULT_RELEASE,
    node_class: Annotated[
        str, typer.Option("--node-class", help="Name of the Karpenter EC2NodeClass written for EC2 pools.")
    ] = "default",
) -> None:
    """Write node pools and the Kueue objects as Terraform configuration (docs/terraform.md)."""
    from gpuq.api.loader import load
    from gpuq.k8s import kueue_releases
    from gpuq.k8s.export import check_export
    from gpuq.k8s.export_validate import ExportInvalid
    from gpuq.k8s.terraform import TerraformInvalid, build_terraform, export_for, write_terraform

    try:
        version = kueue_releases.version_for(kueue_release, None)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--kueue-release") from None
    result = load(files)
    for diagnostic in result.diagnostics:
        typer.echo(str(diagnostic), err=True)
    if result.config is None:
        raise typer.Exit(1)
    options = ExportOptions(
        kueue_release=kueue_releases.minor(kueue_release), kueue_version=version, node_class=node_class
    )
    try:
        exported = export_for(result, options, alert_rules())
        check_export(exported, options)
        written = build_terraform(result, exported, options)
    except (TerraformInvalid, ExportInvalid) as err:
        for problem in err.problems:
            typer.echo(f"error: {problem}", err=True)
        typer.echo("nothing written", err=True)
        raise typer.Exit(1) from None
    for warning in written.warnings:
        typer.echo(f"warning: {warning}", err=True)
    paths = write_terraform(written, out_dir)
    rows = [
        {"file": r.file, "type": r.type, "name": r.name, "source": r.source} for r in written.resources
    ]
    if not output.is_table:
        write_document({"files": paths, "resources": rows}, output)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Written to {out_dir}", title_justify="left")
    columns = ("file", "type", "name", "source") if output == OutputFormat.WIDE else ("file", "type", "name")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(row[c] for c in columns))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
