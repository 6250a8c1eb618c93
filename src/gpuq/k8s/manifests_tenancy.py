"""One tenant per team namespace: the Namespace, its ResourceQuota, NetworkPolicy and RBAC.

A *team namespace* is a namespace that holds a LocalQueue or a workload, other
than Kubernetes' own (``default``, ``kube-*``). Each team is the group
``gpuq:team:<namespace>`` (:func:`team_group`); the identity provider puts
people in it.

* Namespace: the declared labels plus the Pod Security Standards labels at the
  chosen level (``enforce``, ``audit``, ``warn``). Declared namespaces that are
  not team namespaces are written with their labels only.
* ResourceQuota ``gpuq-quota``: a backstop under Kueue, per resource the most its
  ClusterQueues could ever admit (:func:`namespace_ceiling`).
* NetworkPolicy ``gpuq-team-isolation``: ingress only from pods of the same
  namespace, the monitoring namespace (metrics scraping, dashboards) and, where the
  namespace serves, the ingress gateways' namespaces, Knative Serving's (KServe's
  activator path) and the KubeRay operator's (:func:`ingress_sources`); every other
  namespace, other teams' included, is denied. Egress is not limited.
* Role and RoleBinding ``gpuq-team``: the team creates and manages Jobs, JobSets,
  PyTorchJobs, RayJobs, RayClusters, RayServices, Deployments, StatefulSets,
  Services, HorizontalPodAutoscalers, KEDA ScaledObjects, KServe InferenceServices
  and PodDisruptionBudgets in its namespace and reads pods, logs, events, Kueue
  Workloads and LocalQueues there.
* ClusterRole and ClusterRoleBinding ``gpuq-team-queue-reader``: every team reads
  (get, list, watch; never create, update, patch or delete) ClusterQueues,
  LocalQueues, ResourceFlavors, Cohorts, Topologies and WorkloadPriorityClasses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpuq.api import kueue
from gpuq.api.diagnostics import Manifest
from gpuq.core.model import ClusterConfig, ResourceGroup, Workload
from gpuq.core.quantity import format_amount
from gpuq.k8s.export_common import MANAGED_BY, ExportOptions, Obj, first_models, make

SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
PSS_PREFIX = "pod-security.kubernetes.io/"
NAME_LABEL = "kubernetes.io/metadata.name"
RBAC = "rbac.authorization.k8s.io"
RBAC_API = f"{RBAC}/v1"
READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
TEAM_ROLE = "gpuq-team"
QUEUE_READER = "gpuq-team-queue-reader"
WORKLOAD_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("batch", ("jobs",)),
    ("jobset.x-k8s.io", ("jobsets",)),
    ("kubeflow.org", ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs")),
    ("ray.io", ("rayjobs", "rayclusters", "rayservices")),
    ("sparkoperator.k8s.io", ("sparkapplications",)),
    ("trainer.kubeflow.org", ("trainjobs",)),
    ("", ("services",)),
    ("apps", ("deployments", "statefulsets")),
    ("autoscaling", ("horizontalpodautoscalers",)),
    ("keda.sh", ("scaledobjects",)),
    ("serving.kserve.io", ("inferenceservices",)),
    ("policy", ("poddisruptionbudgets",)),
)
"""(API group, resources) a team may create and manage in its own namespaces: the batch kinds
and the serving ones docs/serving.md reads, with the Services that expose them."""
SERVING_KINDS = frozenset({"Deployment", "StatefulSet", "InferenceService", "RayService"})
KSERVE_KINDS = frozenset({"InferenceService"})
RAY_KINDS = frozenset({"RayJob", "RayCluster", "RayService"})


def team_group(namespace: str) -> str:
    """The RBAC group of the team that owns ``namespace``."""
    return f"gpuq:team:{namespace}"


def team_namespaces(config: ClusterConfig, workloads: Iterable[Workload]) -> list[str]:
    """Namespaces holding a LocalQueue or a workload, Kubernetes' own excluded; sorted."""
    found = {namespace for namespace, _ in config.local_queues}
    found |= {wl.namespace for wl in workloads}
    return sorted(found - SYSTEM_NAMESPACES)


def pss_labels(level: str) -> dict[str, str]:
    """Pod Security Standards labels enforcing, auditing and warning at ``level``."""
    return {
        f"{PSS_PREFIX}enforce": level,
        f"{PSS_PREFIX}enforce-version": "latest",
        f"{PSS_PREFIX}audit": level,
        f"{PSS_PREFIX}warn": level,
    }


def namespaces(manifests: Sequence[Manifest], teams: Sequence[str], levels: Mapping[str, str]) -> list[Obj]:
    """Team namespaces with PSS labels at their level (``levels``), other declared namespaces as
    declared; sorted by name."""
    declared = {
        str(n.metadata.name): dict(n.metadata.labels) for n in first_models(manifests, kueue.Namespace)
    }
    out = []
    for name in sorted(set(declared) | set(teams)):
        labels = declared.get(name, {})
        if name in teams:
            labels = {**labels, **MANAGED_BY, **pss_labels(levels[name])}
        out.append(make("v1", "Namespace", name, labels=labels))
    return out


# --- ResourceQuota ------------------------------------------------------------------------------

FlavorResource = tuple[str, str]


def _nominal(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, int]:
    return {
        (flavor.name, resource): quota.nominal
        for group in groups
        for flavor in group.flavors
        for resource, quota in flavor.resources.items()
    }


def _root_cohort(config: ClusterConfig, cohort: str) -> str:
    seen = {cohort}
    while (
        parent := config.cohorts[cohort].parent if cohort in config.cohorts else None
    ) and parent not in seen:
        seen.add(parent)
        cohort = parent
    return cohort


def _cohort_pools(config: ClusterConfig) -> dict[str, dict[FlavorResource, int]]:
    """Per root cohort, the nominal quota of every queue and cohort under it, per flavor and resource."""
    pools: dict[str, dict[FlavorResource, int]] = {}
    members = [(cq.cohort, cq.resource_groups) for cq in config.cluster_queues.values() if cq.cohort]
    members += [(name, c.resource_groups) for name, c in config.cohorts.items()]
    for cohort, groups in members:
        assert cohort is not None
        pool = pools.setdefault(_root_cohort(config, cohort), {})
        for key, amount in _nominal(groups).items():
            pool[key] = pool.get(key, 0) + amount
    return pools


def queue_ceiling(
    config: ClusterConfig, name: str, pools: Mapping[str, Mapping[FlavorResource, int]]
) -> dict[str, int]:
    """Per resource, the most ClusterQueue ``name`` can admit at once: nominal plus what it may
    borrow (its borrowing limit, else its cohort tree's whole pool), summed over flavors."""
    cq = config.cluster_queues[name]
    pool = pools.get(_root_cohort(config, cq.cohort), {}) if cq.cohort else {}
    out: dict[str, int] = {}
    for group in cq.resource_groups:
        for flavor in group.flavors:
            for resource, quota in flavor.resources.items():
                most = quota.nominal
                if cq.cohort:
                    shared = pool.get((flavor.name, resource), quota.nominal)
                    limit = quota.borrowing_limit
                    most = shared if limit is None else min(quota.nominal + limit, shared)
                out[resource] = out.get(resource, 0) + most
    return out


def namespace_ceiling(config: ClusterConfig, namespace: str) -> dict[str, int]:
    """The sum of the ceilings of the ClusterQueues the namespace's LocalQueues point to."""
    pools = _cohort_pools(config)
    queues = sorted(
        {lq.cluster_queue for (ns, _), lq in config.local_queues.items() if ns == namespace}
        & set(config.cluster_queues)
    )
    total: dict[str, int] = {}
    for name in queues:
        for resource, amount in queue_ceiling(config, name, pools).items():
            total[resource] = total.get(resource, 0) + amount
    return total


def quota_key(resource: str) -> str:
    """The ResourceQuota name of a Kueue resource: ``pods`` as is, the rest ``requests.<name>``."""
    return resource if resource == "pods" else f"requests.{resource}"


def resource_quotas(config: ClusterConfig, teams: Sequence[str]) -> list[Obj]:
    out = []
    for namespace in teams:
        ceiling = namespace_ceiling(config, namespace)
        if not ceiling:
            continue
        hard = {quota_key(r): format_amount(r, amount) for r, amount in sorted(ceiling.items())}
        out.append({**make("v1", "ResourceQuota", "gpuq-quota", namespace), "spec": {"hard": hard}})
    return out


# --- NetworkPolicy and RBAC ---------------------------------------------------------------------


def ingress_sources(kinds: Iterable[str], options: ExportOptions) -> list[str]:
    """The namespaces, besides its own and monitoring, whose pods reach a namespace holding ``kinds``:
    the ingress gateways when it serves (a Deployment, StatefulSet, InferenceService or RayService),
    Knative Serving when it holds InferenceServices, the KubeRay operator when it holds Ray objects."""
    found = set(kinds)
    out: list[str] = []
    if found & SERVING_KINDS:
        out += options.ingress_namespaces
    if found & KSERVE_KINDS:
        out.append(options.knative_namespace)
    if found & RAY_KINDS:
        out.append(options.kuberay_namespace)
    return sorted(set(out) - {options.monitoring_namespace})


def network_policies(
    teams: Sequence[str], options: ExportOptions, manifests: Sequence[Manifest] = ()
) -> list[Obj]:
    """Per team namespace, ingress from its own pods, the monitoring namespace and
    :func:`ingress_sources` (namespaces selected by their ``kubernetes.io/metadata.name`` label)."""
    kinds: dict[str, set[str]] = {}
    for manifest in manifests:
        kinds.setdefault(manifest.namespace or "default", set()).add(manifest.kind)
    out = []
    for ns in teams:
        allowed = [options.monitoring_namespace, *ingress_sources(kinds.get(ns, ()), options)]
        peers = [{"namespaceSelector": {"matchLabels": {NAME_LABEL: name}}} for name in allowed]
        spec = {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}]}, {"from": peers}],
        }
        out.append({**make("networking.k8s.io/v1", "NetworkPolicy", "gpuq-team-isolation", ns), "spec": spec})
    return out


def _group_subject(namespace: str) -> Obj:
    return {"kind": "Group", "apiGroup": RBAC, "name": team_group(namespace)}


def team_role_rules() -> list[Obj]:
    """What a team may do inside its own namespaces."""
    rules: list[Obj] = [
        {"apiGroups": [group], "resources": list(resources), "verbs": list(WRITE)}
        for group, resources in WORKLOAD_KINDS
    ]
    rules.append({"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": list(READ)})
    rules.append(
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": list(READ)}
    )
    return rules


def queue_reader_rules() -> list[Obj]:
    """What every team may read cluster-wide: Kueue's queues and what they refer to."""
    resources = ["clusterqueues", "localqueues", "resourceflavors", "cohorts", "topologies"]
    resources.append("workloadpriorityclasses")
    return [{"apiGroups": ["kueue.x-k8s.io"], "resources": resources, "verbs": list(READ)}]


def rbac(teams: Sequence[str]) -> list[Obj]:
    """Per team a Role and RoleBinding; one ClusterRole and ClusterRoleBinding for all teams."""
    out: list[Obj] = []
    for ns in teams:
        out.append({**make(RBAC_API, "Role", TEAM_ROLE, ns), "rules": team_role_rules()})
        binding = make(RBAC_API, "RoleBinding", TEAM_ROLE, ns)
        binding["roleRef"] = {"apiGroup": RBAC, "kind": "Role", "name": TEAM_ROLE}
        binding["subjects"] = [_group_subject(ns)]
        out.append(binding)
    if not teams:
        return out
    out.append({**make(RBAC_API, "ClusterRole", QUEUE_READER), "rules": queue_reader_rules()})
    binding = make(RBAC_API, "ClusterRoleBinding", QUEUE_READER)
    binding["roleRef"] = {"apiGroup": RBAC, "kind": "ClusterRole", "name": QUEUE_READER}
    binding["subjects"] = [_group_subject(ns) for ns in teams]
    out.append(binding)
    return out
