"""``scheduling.k8s.io/v1`` PriorityClasses: the configuration's own, and one per WorkloadPriorityClass.

Kueue's WorkloadPriorityClass orders workloads in queues; the kube-scheduler
knows only PriorityClasses. A PriorityClass of the same name and value lets a
team's pods name the class they queue with (``priorityClassName``). A declared
PriorityClass of that name wins. The mirrors never become the global default
and never preempt pods (``preemptionPolicy: Never``): preemption stays Kueue's.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuq.api import kueue
from gpuq.api.diagnostics import Manifest
from gpuq.k8s.export_common import MANAGED_BY, Obj, first_models, make

API = "scheduling.k8s.io/v1"


def priority_classes(manifests: Sequence[Manifest]) -> list[Obj]:
    """Declared PriorityClasses as declared, then the mirrors, each group in file order."""
    declared = list(first_models(manifests, kueue.PriorityClass))
    out = [_declared(pc) for pc in declared]
    names = {str(pc.metadata.name) for pc in declared}
    for wpc in first_models(manifests, kueue.WorkloadPriorityClass):
        if str(wpc.metadata.name) in names:
            continue
        obj = make(API, "PriorityClass", str(wpc.metadata.name))
        obj["value"] = wpc.value
        obj["globalDefault"] = False
        obj["preemptionPolicy"] = "Never"
        obj["description"] = f"Mirrors Kueue WorkloadPriorityClass {wpc.metadata.name} for pods."
        out.append(obj)
    return out


def _declared(pc: kueue.PriorityClass) -> Obj:
    obj = make(API, "PriorityClass", str(pc.metadata.name), labels={**MANAGED_BY, **pc.metadata.labels})
    obj["value"] = pc.value
    obj["globalDefault"] = pc.global_default
    if pc.description:
        obj["description"] = pc.description
    if pc.preemption_policy:
        obj["preemptionPolicy"] = pc.preemption_policy
    return obj
