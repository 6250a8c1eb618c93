"""One live replica of a service: the Pod that runs it, its port, and its readiness probe.

A replica is a ``v1`` Pod workload in the store (so it is queued, admitted, placed, started,
restarted, listed and logged like any workload), built from the service's pod template:

- labels: the template's, the service's ``kueue.x-k8s.io/queue-name`` and priority-class labels,
  ``gpuq.dev/service`` (the service) and ``gpuq.dev/revision`` (a canary's own service name);
- the container's first ``containerPort`` is this machine's free port chosen at creation (pods
  share the machine's network, where Kubernetes gives each pod its own IP): the process gets it as
  ``$PORT``, and ``$(VAR)`` references in ``command`` and ``args`` are expanded from the
  container's env as the kubelet expands them (``$$`` escapes); the annotation
  ``gpuq.dev/replica-port`` remembers it for a new leader;
- ``GPUQ_SERVICE`` and ``GPUQ_REVISION`` are set in its env.

Readiness (:class:`Probe`): ``readinessProbe.httpGet`` (path; the port is the replica's port) or,
without one, the port accepting a connection; ``periodSeconds`` (default 10, 1 without a probe),
``initialDelaySeconds``, ``timeoutSeconds`` (1), ``successThreshold`` (1) and ``failureThreshold``
(3) as the kubelet reads them.
"""

from __future__ import annotations

import copy
import http.client
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuq.api.serving import ISVC_LABEL, PRIORITY_CLASS_LABEL, ServiceSpec
from gpuq.api.source_fields import QUEUE_LABEL

SERVICE_LABEL = "gpuq.dev/service"
REVISION_LABEL = "gpuq.dev/revision"
PORT_ANNOTATION = "gpuq.dev/replica-port"
DEFAULT_PORT_NAME = "PORT"
_POD_SPEC_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName")
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ReplicaError(ValueError):
    """The service cannot run live (no command, a RayService...); the message names the field."""


@dataclass(frozen=True)
class Probe:
    """A container's readiness probe as the kubelet reads it; ``path`` None: a TCP connect."""

    path: str | None = None
    period_s: float = 1.0
    initial_delay_s: float = 0.0
    timeout_s: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def pod_template(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template a replica of this object runs (Deployment, StatefulSet, InferenceService)."""
    spec = data.get("spec") or {}
    if kind in ("Deployment", "StatefulSet"):
        return copy.deepcopy(dict(spec.get("template") or {}))
    if kind == "InferenceService":
        predictor = spec.get("predictor") or {}
        if not predictor.get("containers"):
            raise ReplicaError(
                "spec.predictor.containers: a live replica runs a container's command; a model "
                "(storageUri) alone names no server to start"
            )
        pod_spec = {k: copy.deepcopy(predictor[k]) for k in _POD_SPEC_FIELDS if k in predictor}
        pod_spec["containers"] = copy.deepcopy(predictor["containers"])
        labels = dict(((data.get("metadata") or {}).get("labels")) or {})
        labels[ISVC_LABEL] = str((data.get("metadata") or {}).get("name"))
        return {"metadata": {"labels": labels}, "spec": pod_spec}
    raise ReplicaError(f"{kind}: not run live (run its Ray cluster as a RayCluster); simulate it instead")


def container_port(template: Mapping[str, Any]) -> tuple[int | None, str]:
    """The first container's first ``containerPort`` and its name (None, '' when none is declared)."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    ports = containers[0].get("ports") or []
    if not ports:
        return None, ""
    return int(ports[0].get("containerPort") or 0) or None, str(ports[0].get("name") or "")


def probe_of(template: Mapping[str, Any]) -> Probe:
    """The first container's ``readinessProbe`` (a TCP check every second when it has none)."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    probe = containers[0].get("readinessProbe")
    if not isinstance(probe, Mapping):
        return Probe()
    http_get = probe.get("httpGet") if isinstance(probe.get("httpGet"), Mapping) else None
    return Probe(
        path=str(http_get.get("path") or "/") if http_get is not None else None,
        period_s=float(probe.get("periodSeconds") or 10),
        initial_delay_s=float(probe.get("initialDelaySeconds") or 0),
        timeout_s=float(probe.get("timeoutSeconds") or 1),
        success_threshold=int(probe.get("successThreshold") or 1),
        failure_threshold=int(probe.get("failureThreshold") or 3),
    )


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: known variables replaced, unknown ones kept, ``$$`` -> ``$``."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _VAR.sub(one, text)


def replica_manifest(
    spec: ServiceSpec, template: Mapping[str, Any], name: str, port: int, priority_class: str = ""
) -> dict[str, Any]:
    """The Pod of replica ``name`` of ``spec`` listening on ``port`` (see the module docstring)."""
    template_meta = template.get("metadata") or {}
    pod_spec = copy.deepcopy(dict(template.get("spec") or {}))
    containers = pod_spec.get("containers") or []
    if not containers or not containers[0].get("command"):
        raise ReplicaError("spec.template.spec.containers[0].command: a live replica needs a command")
    container = containers[0]
    env_items = [e for e in container.get("env") or [] if e.get("name") != DEFAULT_PORT_NAME]
    env_items += [
        {"name": DEFAULT_PORT_NAME, "value": str(port)},
        {"name": "GPUQ_SERVICE", "value": spec.traffic_key},
        {"name": "GPUQ_REVISION", "value": spec.name},
    ]
    env = {str(e["name"]): str(e.get("value", "")) for e in env_items}
    container["env"] = env_items
    container["command"] = [expand(str(c), env) for c in container["command"]]
    container["args"] = [expand(str(a), env) for a in container.get("args") or []]
    if container.get("ports"):
        container["ports"][0]["containerPort"] = port
    labels = {str(k): str(v) for k, v in (template_meta.get("labels") or {}).items()}
    labels |= {SERVICE_LABEL: spec.traffic_key.split("/", 1)[1], REVISION_LABEL: spec.name}
    if spec.queue_name:
        labels[QUEUE_LABEL] = spec.queue_name
    if priority_class:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            "labels": labels,
            "annotations": {PORT_ANNOTATION: str(port)},
        },
        "spec": pod_spec,
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on this machine now (another process may take it before the replica binds it)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def probe_once(probe: Probe, port: int, host: str = "127.0.0.1") -> bool:
    """One readiness check: HTTP GET answering 200-399, or the port accepting a connection."""
    try:
        if probe.path is None:
            with socket.create_connection((host, port), timeout=probe.timeout_s):
                return True
        connection = http.client.HTTPConnection(host, port, timeout=probe.timeout_s)
        try:
            connection.request("GET", probe.path, headers={"User-Agent": "gpuq-probe"})
            status = connection.getresponse().status
        finally:
            connection.close()
        return 200 <= status < 400
    except (OSError, http.client.HTTPException):
        return False
