"""Kubeflow jobs (kubeflow.org TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob, MPIJob) as Kueue sees them.

One builder serves every kind; a :class:`KubeflowKind` row holds what differs.
Kueue's ``kubeflowjob.KubeflowJob.PodSets`` (``pkg/controller/jobs/kubeflow/
kubeflowjob/kubeflowjob_controller.go``) and ``mpijob.MPIJob.PodSets``
(``pkg/controller/jobs/mpijob/mpijob_controller.go``) do the same thing:

1. Walk the kind's ``OrderedReplicaTypes`` (``jobs/<kind>/<kind>_controller.go``),
   keeping those present in the replica specs.
2. Each becomes a pod set named by the lowercased replica type, count =
   ``replicas`` (default 1), template copied; no ``minCount`` (Kueue's Kubeflow
   integrations have no partial admission).
3. Priority class: ``spec.runPolicy.schedulingPolicy.priorityClass``, else the
   first ordered replica type whose template names one (``PriorityClass()``).

Refusals: the operators' own admission rules that change what would run
(training-operator v1.9 ``pkg/webhooks/<kind>/*_webhook.go``: known replica
types, the default container name, ``Master`` replicas 1, at most one TFJob
``Chief``/``Master``, an XGBoostJob's ``Master``; mpi-operator v0.8
``pkg/apis/kubeflow/validation/validation.go``: one ``Launcher``, workers >= 1).
gpuq refuses replica types the operator accepts but Kueue would drop (none for
the kinds here), so no pod runs unaccounted for. Container images are not
required: gpuq's live mode runs commands, not images.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuq.api.source_fields import (
    SourceError,
    check_pod_sets,
    int_field,
    make_pod_set,
    mapping_field,
    pod_template,
)

POD_INDEX_OFFSET_ANNOTATION = "kueue.x-k8s.io/pod-index-offset"
POD_SET_GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"


@dataclass(frozen=True)
class KubeflowKind:
    """What one Kubeflow job kind's integration and operator fix.

    ``replica_types`` is Kueue's ``OrderedReplicaTypes``; ``container`` the
    operator's required container name ("" for none); ``exactly_one`` replica
    types whose replicas must be 1; ``required`` those that must be present;
    ``at_most_one_of`` replica types of which at most one may be present;
    ``min_replicas`` the fewest replicas the others may ask for.
    """

    field: str
    replica_types: tuple[str, ...]
    container: str = ""
    exactly_one: frozenset[str] = frozenset()
    required: tuple[str, ...] = ()
    at_most_one_of: frozenset[str] = frozenset()
    min_replicas: int = 0
    operator: str = "the training operator"


TFJOB = KubeflowKind(
    "tfReplicaSpecs",
    ("Chief", "Master", "PS", "Worker", "Evaluator"),
    "tensorflow",
    at_most_one_of=frozenset({"Chief", "Master"}),
)
PYTORCHJOB = KubeflowKind(
    "pytorchReplicaSpecs", ("Master", "Worker"), "pytorch", frozenset({"Master"}), min_replicas=1
)
XGBOOSTJOB = KubeflowKind(
    "xgbReplicaSpecs", ("Master", "Worker"), "xgboost", frozenset({"Master"}), required=("Master",)
)
PADDLEJOB = KubeflowKind("paddleReplicaSpecs", ("Master", "Worker"), "paddle")
JAXJOB = KubeflowKind("jaxReplicaSpecs", ("Worker",), "jax")
MPIJOB = KubeflowKind(
    "mpiReplicaSpecs",
    ("Launcher", "Worker"),
    exactly_one=frozenset({"Launcher"}),
    required=("Launcher",),
    min_replicas=1,
    operator="the MPI operator",
)
KINDS: dict[str, KubeflowKind] = {
    "TFJob": TFJOB,
    "PyTorchJob": PYTORCHJOB,
    "XGBoostJob": XGBOOSTJOB,
    "PaddleJob": PADDLEJOB,
    "JAXJob": JAXJOB,
    "MPIJob": MPIJOB,
}
"""Kind -> its row; the MPIJob is ``kubeflow.org/v2beta1``, the others ``kubeflow.org/v1``."""


def _check_replica(kind: KubeflowKind, replica_type: str, replica: Mapping[str, Any], at: str) -> int:
    """The replica's pod count (default 1), after the operator's per-replica rules."""
    count = int_field(replica, "replicas", f"{at}.replicas", 1)
    if replica_type in kind.exactly_one and count != 1:
        raise SourceError(f"{at}.replicas", f"must be 1 ({kind.operator}'s rule), got {count}")
    if replica_type not in kind.exactly_one and count < kind.min_replicas:
        raise SourceError(
            f"{at}.replicas", f"must be at least {kind.min_replicas} ({kind.operator}'s rule), got {count}"
        )
    containers = replica["template"]["spec"].get("containers")
    where = f"{at}.template.spec.containers"
    if not isinstance(containers, list) or not containers:
        raise SourceError(where, "must be specified")
    if kind.container and not any(
        isinstance(c, dict) and c.get("name") == kind.container for c in containers
    ):
        raise SourceError(
            where, f"must have at least one container named {kind.container!r} ({kind.operator}'s rule)"
        )
    return count


def _replica_specs(kind: KubeflowKind, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The replica-spec map, after the rules about which replica types may appear."""
    field = f"spec.{kind.field}"
    replica_specs = mapping_field(spec.get(kind.field), field)
    for replica_type in replica_specs:
        if replica_type not in kind.replica_types:
            expected = ", ".join(kind.replica_types)
            raise SourceError(f"{field}[{replica_type}]", f"unknown replica type; expected one of {expected}")
    for replica_type in kind.required:
        if replica_specs.get(replica_type) is None:
            raise SourceError(f"{field}[{replica_type}]", f"must be present ({kind.operator}'s rule)")
    present = [t for t in kind.replica_types if t in kind.at_most_one_of and replica_specs.get(t) is not None]
    if len(present) > 1:
        raise SourceError(field, f"must not have more than one of {' or '.join(sorted(kind.at_most_one_of))}")
    return replica_specs


def kubeflow_pod_sets(kind: KubeflowKind, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Steps 1 and 2 of the module docstring: one pod set per present replica type, in Kueue's order."""
    field = f"spec.{kind.field}"
    replica_specs = _replica_specs(kind, spec)
    pod_sets = []
    for replica_type in kind.replica_types:
        if replica_specs.get(replica_type) is None:
            continue
        at = f"{field}[{replica_type}]"
        replica = mapping_field(replica_specs[replica_type], at)
        template = pod_template(replica, "template", f"{at}.template")
        count = _check_replica(kind, replica_type, replica, at)
        pod_sets.append(make_pod_set(replica_type.lower(), count, template, at))
    return check_pod_sets(pod_sets, field)


def kubeflow_priority_class(kind: KubeflowKind, spec: Mapping[str, Any]) -> str:
    """Step 3: ``spec.runPolicy.schedulingPolicy.priorityClass``, else the first ordered template's."""
    policy = ((spec.get("runPolicy") or {}).get("schedulingPolicy")) or {}
    if policy.get("priorityClass"):
        return str(policy["priorityClass"])
    replica_specs = spec.get(kind.field) or {}
    for replica_type in kind.replica_types:
        pod_spec = (((replica_specs.get(replica_type) or {}).get("template")) or {}).get("spec") or {}
        if pod_spec.get("priorityClassName"):
            return str(pod_spec["priorityClassName"])
    return ""


def mpijob_pod_sets(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``launcher`` then ``worker``; with ``runLauncherAsWorker`` the workers' pod indexes start at 1.

    Kueue's MPIJob defaulting webhook (``mpijob_webhook.go`` ``Default``, TAS on,
    as it is by default) marks the Worker template
    ``kueue.x-k8s.io/pod-index-offset: "1"`` when the launcher also works and is
    not in a pod-set group, so topology placement counts the launcher as rank 0.
    """
    pod_sets = kubeflow_pod_sets(MPIJOB, spec)
    launcher_works = spec.get("runLauncherAsWorker") is True
    if launcher_works and len(pod_sets) == 2:
        launcher, worker = pod_sets
        if POD_SET_GROUP_ANNOTATION not in (
            (launcher["template"].get("metadata") or {}).get("annotations") or {}
        ):
            metadata = worker["template"].setdefault("metadata", {})
            metadata["annotations"] = {
                **(metadata.get("annotations") or {}),
                POD_INDEX_OFFSET_ANNOTATION: "1",
            }
    return pod_sets
