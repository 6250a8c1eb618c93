"""From a variant's configuration and the Scenario's ``spec.serving`` to a :class:`ServingPlan`.

1. The services are read from the configuration (:func:`gpuq.api.serving.build_services`).
2. Each ``spec.serving.services`` entry names one (``namespace/name``, or a ``name`` unique across
   namespaces); the revisions of a KServe canary share their service's entry. A service without an
   entry, or an entry without a service, is an error: traffic must be said, not guessed. A
   *pending* service (its object has a field gpuq cannot shape replicas from) needs no entry and
   excuses the entries that would be its own; it runs no replica.
3. Each metric an autoscaler reads must be one the simulator produces
   (:data:`gpuq.sim.serving.modelled_metrics.KNOWN`), and each priority class must exist.
4. Rates come per step from the trace or generator, times the revision's traffic share.
"""

from __future__ import annotations

from pathlib import Path

from gpuq.api import kueue
from gpuq.api.convert import PriorityTable
from gpuq.api.loader import LoadResult
from gpuq.api.serving import ServiceSpec, build_services
from gpuq.api.serving_scenario import ServiceTraffic, ServingSection
from gpuq.core.autoscaling.keda import ScaledObjectSpec
from gpuq.sim.serving.fleet import ServicePlan, ServingPlan
from gpuq.sim.serving.modelled_metrics import KNOWN, resolve
from gpuq.sim.serving.traffic import TrafficError, rate_steps


class ServingPlanError(ValueError):
    """The serving part of a scenario cannot be simulated; the message says which service and why."""


def _entry_for(spec: ServiceSpec, entries: dict[str, ServiceTraffic]) -> ServiceTraffic | None:
    key = spec.traffic_key
    if key in entries:
        return entries[key]
    return entries.get(key.split("/", 1)[1])


def _check_metrics(spec: ServiceSpec) -> None:
    autoscaler = spec.autoscaler
    if autoscaler is None:
        return
    known = ", ".join(KNOWN)
    if isinstance(autoscaler, ScaledObjectSpec):
        for trigger in autoscaler.triggers:
            if resolve(trigger.name, spec.trigger_queries.get(trigger.name, "")) is None:
                raise ServingPlanError(
                    f"service {spec.key}: {spec.autoscaler_ref} trigger {trigger.name!r}: its query names no "
                    f"metric the simulator produces (known: {known})"
                )
        return
    for metric in autoscaler.metrics:
        if resolve(metric.name) is None:
            raise ServingPlanError(
                f"service {spec.key}: {spec.autoscaler_ref}: metric {metric.name!r} is not produced by the "
                f"simulator (known: {known})"
            )


def _priority(spec: ServiceSpec, table: PriorityTable) -> int:
    if not spec.priority_class:
        return table.default
    classes = table.classes.get(spec.priority_source, {})
    if spec.priority_class not in classes:
        kind = "WorkloadPriorityClass" if spec.priority_source == kueue.WPC_SOURCE else "PriorityClass"
        raise ServingPlanError(f"service {spec.key}: {kind} {spec.priority_class!r} not found")
    return classes[spec.priority_class]


def _of_pending(entry: str, specs: list[ServiceSpec]) -> bool:
    """Whether ``entry`` may name a service of a pending object: its name, or a Serve deployment
    (``<RayService>-...``) that the object's unreadable config would have declared."""
    name = entry.split("/", 1)[-1]
    return any(
        s.pending and (entry in (s.key, s.name) or name.startswith(f"{s.name}-")) and
        ("/" not in entry or entry.split("/", 1)[0] == s.namespace)
        for s in specs
    )  # fmt: skip


def serving_plan(
    result: LoadResult, section: ServingSection, horizon_s: float | None, seed: int, base_dir: Path
) -> ServingPlan:
    """Steps 1-4 of the module docstring."""
    if horizon_s is None:
        raise ServingPlanError("spec.settings.horizon is required when the Scenario has spec.serving")
    specs, diagnostics = build_services(result.manifests)
    if any(d.severity == "error" and not d.stays_pending for d in diagnostics):  # reported by the loader
        raise ServingPlanError("the serving objects have errors")
    entries = {e.service: e for e in section.services}
    table = PriorityTable.from_models([m.model for m in result.manifests])
    plans = []
    used: set[str] = set()
    for spec in specs:
        entry = _entry_for(spec, entries)
        if entry is None and spec.pending:
            plans.append(ServicePlan(spec, None, (), table.default))  # shown with its reason, no traffic
            continue
        if entry is None:
            raise ServingPlanError(
                f"service {spec.key} ({spec.kind}) has no entry in spec.serving.services: give its traffic"
            )
        used.add(entry.service)
        _check_metrics(spec)
        try:
            rates = rate_steps(entry.traffic, section.step, horizon_s, seed, spec.traffic_key, base_dir)
        except TrafficError as err:
            raise ServingPlanError(f"service {spec.key}: {err}") from err
        shared = tuple(r * spec.traffic_share for r in rates)
        plans.append(
            ServicePlan(
                spec, entry, shared, _priority(spec, table), spec.trigger_queries, section.price_per_gpu_hour
            )
        )
    unknown = sorted(e for e in set(entries) - used if not _of_pending(e, specs))
    if unknown:
        names = ", ".join(s.key for s in specs) or "none"
        raise ServingPlanError(
            f"spec.serving.services names {', '.join(unknown)}, which no Deployment, StatefulSet, "
            f"InferenceService or RayService defines (services: {names})"
        )
    return ServingPlan(tuple(plans), section.step, dict(section.provisioning))
