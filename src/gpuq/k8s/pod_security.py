"""Pod Security Standards for the pod templates gpuq exports.

The rules are those of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(policy version ``latest``, Kubernetes 1.33), written as checks on a pod spec and
its containers (``containers``, ``initContainers``, ``ephemeralContainers``):

* baseline: no HostProcess, no host namespaces (``hostNetwork``, ``hostPID``,
  ``hostIPC``), no privileged containers, added capabilities only from the baseline
  list, no ``hostPath`` volumes, no host ports, AppArmor only ``RuntimeDefault`` /
  ``Localhost``, SELinux type only the container types and no user or role,
  ``procMount`` only ``Default``, seccomp never ``Unconfined``, only safe sysctls;
* restricted, in addition: only the volume types ``configMap``, ``csi``,
  ``downwardAPI``, ``emptyDir``, ``ephemeral``, ``persistentVolumeClaim``,
  ``projected``, ``secret``; ``allowPrivilegeEscalation: false``; ``runAsNonRoot:
  true`` (pod or every container, none false); ``runAsUser`` never 0; seccomp
  ``RuntimeDefault`` or ``Localhost`` (pod or every container); capabilities drop
  ``ALL`` and add at most ``NET_BIND_SERVICE``.

:func:`pod_specs` finds the pod templates of every kind the export writes;
:func:`harden` fills in what ``restricted`` requires where the user left it unset
(never overriding a value written); :func:`violations` lists what a level refuses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

LEVELS = ("restricted", "baseline", "privileged")
"""Strictest first."""
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")


@dataclass(frozen=True)
class PodSpec:
    """One pod template of an exported object: where it is, the pod-level fields and its containers."""

    path: str
    pod: dict[str, Any]
    containers: tuple[tuple[str, dict[str, Any]], ...]


def _template(path: str, holder: Any) -> Iterator[PodSpec]:
    """The pod spec under ``holder.template.spec``."""
    template = holder.get("template") if isinstance(holder, dict) else None
    spec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(spec, dict):
        yield _pod(f"{path}.template.spec", spec)


def _pod(path: str, pod: dict[str, Any], extra: Mapping[str, Any] | None = None) -> PodSpec:
    containers = [
        (f"{path}.{key}[{i}]", c)
        for key in CONTAINER_LISTS
        for i, c in enumerate(pod.get(key) or [])
        if isinstance(c, dict)
    ]
    containers += [(f"{path}.{k}", c) for k, c in (extra or {}).items() if isinstance(c, dict)]
    return PodSpec(path, pod, tuple(containers))


def _ray_cluster(path: str, spec: Any) -> Iterator[PodSpec]:
    if not isinstance(spec, dict):
        return
    yield from _template(f"{path}.headGroupSpec", spec.get("headGroupSpec") or {})
    for i, group in enumerate(spec.get("workerGroupSpecs") or []):
        yield from _template(f"{path}.workerGroupSpecs[{i}]", group)


def pod_specs(obj: Mapping[str, Any]) -> list[PodSpec]:
    """Every pod template of an exported object (none for kinds without pods)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if not isinstance(spec, dict):
        return []
    if kind == "Pod":
        return [_pod("spec", spec)]
    if kind in ("Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        return list(_template("spec", spec))
    if kind == "JobSet":
        return [
            p
            for i, rj in enumerate(spec.get("replicatedJobs") or [])
            for p in _template(
                f"spec.replicatedJobs[{i}].template.spec", ((rj.get("template") or {}).get("spec")) or {}
            )
        ]
    if kind == "PyTorchJob":
        roles = spec.get("pytorchReplicaSpecs") or {}
        return [p for role, rs in roles.items() for p in _template(f"spec.pytorchReplicaSpecs.{role}", rs)]
    if kind == "RayCluster":
        return list(_ray_cluster("spec", spec))
    if kind == "RayJob":
        return list(_ray_cluster("spec.rayClusterSpec", spec.get("rayClusterSpec")))
    if kind == "RayService":
        return list(_ray_cluster("spec.rayClusterConfig", spec.get("rayClusterConfig")))
    if kind == "InferenceService":
        out = []
        for name in KSERVE_COMPONENTS:
            component = spec.get(name)
            if isinstance(component, dict):  # KServe inlines a PodSpec; ``model`` is one more container
                out.append(_pod(f"spec.{name}", component, {"model": component.get("model")}))
        return out
    return []


def _contexts(pod: PodSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    yield f"{pod.path}.securityContext", pod.pod.get("securityContext") or {}
    for path, container in pod.containers:
        yield f"{path}.securityContext", container.get("securityContext") or {}


def baseline_violations(pod: PodSpec) -> list[tuple[str, str]]:
    """``(field, rule)`` for each baseline rule the pod template breaks."""
    out: list[tuple[str, str]] = []
    spec = pod.pod
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append((f"{pod.path}.{key}", "host namespaces are not allowed"))
    for i, volume in enumerate(spec.get("volumes") or []):
        if "hostPath" in volume:
            out.append((f"{pod.path}.volumes[{i}].hostPath", "hostPath volumes are not allowed"))
    for i, sysctl in enumerate((spec.get("securityContext") or {}).get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append((f"{pod.path}.securityContext.sysctls[{i}]", f"unsafe sysctl {sysctl.get('name')}"))
    for path, container in pod.containers:
        for j, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                out.append((f"{path}.ports[{j}].hostPort", "host ports are not allowed"))
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            out.append((f"{path}.securityContext.privileged", "privileged containers are not allowed"))
        added = set((context.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            out.append((f"{path}.securityContext.capabilities.add", f"adds {', '.join(sorted(added))}"))
        if context.get("procMount") not in (None, "Default"):
            out.append((f"{path}.securityContext.procMount", "only the Default /proc mount is allowed"))
    for path, context in _contexts(pod):
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            out.append((f"{path}.windowsOptions.hostProcess", "HostProcess pods are not allowed"))
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append((f"{path}.seccompProfile.type", "seccomp must not be Unconfined"))
        if (context.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append((f"{path}.appArmorProfile.type", "AppArmor must be RuntimeDefault or Localhost"))
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            out.append((f"{path}.seLinuxOptions", "custom SELinux user, role or type"))
    return out


def restricted_violations(pod: PodSpec) -> list[tuple[str, str]]:
    """``(field, rule)`` for each restricted rule (baseline's included) the pod template breaks."""
    out = baseline_violations(pod)
    spec = pod.pod
    pod_context = spec.get("securityContext") or {}
    for i, volume in enumerate(spec.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if kinds - RESTRICTED_VOLUMES and "hostPath" not in kinds:
            out.append((f"{pod.path}.volumes[{i}]", f"volume type {', '.join(sorted(kinds))} is not allowed"))
    if pod_context.get("runAsUser") == 0:
        out.append((f"{pod.path}.securityContext.runAsUser", "must not run as root (0)"))
    pod_non_root = pod_context.get("runAsNonRoot") is True
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    for path, container in pod.containers:
        context = container.get("securityContext") or {}
        where = f"{path}.securityContext"
        if context.get("allowPrivilegeEscalation") is not False:
            out.append((f"{where}.allowPrivilegeEscalation", "must be false"))
        non_root = context.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            out.append((f"{where}.runAsNonRoot", "must be true (here or on the pod)"))
        if context.get("runAsUser") == 0:
            out.append((f"{where}.runAsUser", "must not run as root (0)"))
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp is None and not pod_seccomp:
            out.append(
                (f"{where}.seccompProfile.type", "must be RuntimeDefault or Localhost (here or on the pod)")
            )
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            out.append((f"{where}.capabilities.drop", "must include ALL"))
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append((f"{where}.capabilities.add", "may add only NET_BIND_SERVICE"))
    return out


def violations(pod: PodSpec, level: str) -> list[tuple[str, str]]:
    """What ``level`` refuses of a pod template (nothing under ``privileged``)."""
    if level == "restricted":
        return restricted_violations(pod)
    if level == "baseline":
        return baseline_violations(pod)
    return []


def harden(pod: PodSpec) -> None:
    """Fill in, in place, what ``restricted`` asks and the user left unset.

    The pod gets ``runAsNonRoot: true`` and ``seccompProfile: RuntimeDefault``; each
    container ``allowPrivilegeEscalation: false`` and ``capabilities.drop: [ALL]``
    (``ALL`` appended to a drop list that lacks it). A value the user wrote is kept,
    even when it breaks the level: :func:`violations` then names it.
    """
    context = pod.pod.setdefault("securityContext", {})
    context.setdefault("runAsNonRoot", True)
    context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for _, container in pod.containers:
        own = container.setdefault("securityContext", {})
        own.setdefault("allowPrivilegeEscalation", False)
        capabilities = own.setdefault("capabilities", {})
        drop = capabilities.setdefault("drop", [])
        if "ALL" not in drop:
            drop.append("ALL")


def strictest_level(pods: list[PodSpec], ceiling: str) -> tuple[str, list[tuple[str, str]]]:
    """The strictest level, no stricter than ``ceiling``, that every pod meets, and what the stricter
    levels refused (``(field, rule)``, empty when ``ceiling`` holds)."""
    refused: list[tuple[str, str]] = []
    for level in LEVELS[LEVELS.index(ceiling) :]:
        found = [v for pod in pods for v in violations(pod, level)]
        if not found:
            return level, refused
        refused = refused or found
    return "privileged", refused


def secure(objects: list[dict[str, Any]], teams: list[str], ceiling: str) -> tuple[dict[str, str], list[str]]:
    """Harden the pod templates of ``objects`` in team namespaces and choose each namespace's level.

    1. under ``restricted``, every pod template of a team namespace is hardened (:func:`harden`);
    2. each team namespace gets the strictest level, no stricter than ``ceiling``, that all its
       pod templates meet;
    3. a namespace set below ``ceiling`` gets a warning naming the object, field and rule.

    Returns ``(namespace -> level, warnings)``.
    """
    by_namespace: dict[str, list[tuple[str, PodSpec]]] = {ns: [] for ns in teams}
    for obj in objects:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        if namespace not in by_namespace:
            continue
        ident = f"{obj.get('kind')}/{namespace}/{metadata.get('name')}"
        for pod in pod_specs(obj):
            if ceiling == "restricted":
                harden(pod)
            by_namespace[namespace].append((ident, pod))
    levels: dict[str, str] = {}
    warnings: list[str] = []
    for namespace, found in by_namespace.items():
        level, refused = strictest_level([pod for _, pod in found], ceiling)
        levels[namespace] = level
        if level != ceiling:
            where = {id(pod): ident for ident, pod in found}
            first = next(
                f"{where[id(pod)]}: {field}: {rule}"
                for pod in (p for _, p in found)
                for field, rule in violations(pod, ceiling)
            )
            warnings.append(
                f"namespace {namespace}: Pod Security {level!r}, not {ceiling!r}: {len(refused)} "
                f"field(s) break {ceiling!r}, first {first}"
            )
    return levels, warnings
