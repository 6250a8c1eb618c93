"""Dynamic Resource Allocation: ``resource.k8s.io/v1`` claims and device classes as quota.

The engine never sees a DRA object: a pod set's claims become quota requests here, once, the way
Kueue's workload reconciler pre-processes them (``pkg/controller/core/workload_controller.go``,
``pkg/dra/claims.go``, ``counters.go``, ``extended_resources.go``; KEP-2941). For one workload:

1. no DRA gate (``KueueDRAIntegration`` off): a workload with claims is inadmissible (while
   ``KueueDRARejectWorkloadsWhenDRADisabled``, on by default), else its claims are ignored;
2. a pod naming a ``resourceClaimName`` is inadmissible (only templates are supported);
3. each ``resourceClaimTemplateName`` is resolved in the workload's namespace; each device
   request must be ``exactly`` with ``ExactCount``, no ``adminAccess``; its device class must be
   in ``resources.deviceClassMappings`` and charges ``count`` of the mapped name (device count),
   unless the mapping has counter sources (step 5) or capacity sources (step 6);
4. an extended resource request (``example.com/gpu: 1``) whose name a DeviceClass's
   ``extendedResourceName`` carries is charged under that class's mapped name, or its own name
   (``KueueDRAIntegrationExtendedResource``, on by default);
5. counter sources (``KueueDRAIntegrationPartitionableDevices``, on by default): the charge is
   the largest ``consumesCounters`` value of that counter over the driver's matching ResourceSlice
   devices (complete pools of the newest generation), times ``count``;
6. capacity sources (``KueueDRAIntegrationConsumableCapacity``, off by default): the charge is
   the request's ``capacity.requests`` of the dimension, else the device's default or capacity,
   rounded up per the device's ``requestPolicy``, the largest over the matching devices.

The first problem leaves the workload pending with Kueue's message. CEL selectors are evaluated
only in the form ``device.driver == "name"`` (joined by ``&&``); any other expression matches
every device, and validation warns about it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal

from pydantic import Field

from gpuq.api import kueue
from gpuq.api.kueue import DeviceSelector, Loose, Object, Quantity, Strict
from gpuq.api.pods import effective_pod_requests

GROUP = "resource.k8s.io"
GATES = {
    "KueueDRAIntegration": True,
    "KueueDRAIntegrationExtendedResource": True,
    "KueueDRARejectWorkloadsWhenDRADisabled": True,
    "KueueDRAIntegrationPartitionableDevices": True,
    "KueueDRAIntegrationConsumableCapacity": False,
}
"""Kueue v0.19.2's DRA feature gates and their defaults (``pkg/features/kube_features.go``)."""
RENAMED_GATES = {
    "DynamicResourceAllocation": "KueueDRAIntegration",
    "DRAExtendedResources": "KueueDRAIntegrationExtendedResource",
}
"""Gates renamed in Kueue v0.18 (``site/content/en/docs/concepts/dynamic_resource_allocation.md``)."""

# --- resource.k8s.io/v1 models ------------------------------------------------------------


class CapacityRequirements(Strict):
    requests: dict[str, Quantity] = Field(default_factory=dict)


class ExactDeviceRequest(Strict):
    device_class_name: str = ""
    selectors: list[DeviceSelector] = Field(default_factory=list)
    allocation_mode: str = "ExactCount"
    count: int | None = None
    admin_access: bool | None = None
    tolerations: Any = None
    capacity: CapacityRequirements | None = None


class DeviceRequest(Strict):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[Any] | None = None


class DeviceClaim(Strict):
    requests: list[DeviceRequest] = Field(default_factory=list)
    constraints: Any = None
    config: Any = None


class ResourceClaimSpec(Strict):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class ResourceClaimTemplateSpec(Strict):
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(Object):
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)


class ResourceClaim(Object):
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class DeviceClassSpec(Strict):
    selectors: list[DeviceSelector] = Field(default_factory=list)
    config: Any = None
    extended_resource_name: str | None = None


class DeviceClass(Object):
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


class ValidRange(Loose):
    min: Quantity | None = None
    max: Quantity | None = None
    step: Quantity | None = None


class RequestPolicy(Loose):
    default: Quantity | None = None
    valid_values: list[Quantity] = Field(default_factory=list)
    valid_range: ValidRange | None = None


class DeviceCapacity(Loose):
    value: Quantity
    request_policy: RequestPolicy | None = None


class CounterValue(Loose):
    value: Quantity


class DeviceCounterConsumption(Loose):
    counter_set: str = ""
    counters: dict[str, CounterValue] = Field(default_factory=dict)


class Device(Loose):
    name: str = ""
    attributes: dict[str, Any] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    consumes_counters: list[DeviceCounterConsumption] = Field(default_factory=list)


class ResourcePool(Loose):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(Loose):
    driver: str = ""
    pool: ResourcePool = Field(default_factory=ResourcePool)
    devices: list[Device] = Field(default_factory=list)


class ResourceSlice(Object):
    spec: ResourceSliceSpec = Field(default_factory=ResourceSliceSpec)


NAMESPACED = frozenset({"ResourceClaimTemplate", "ResourceClaim"})
for _model in (ResourceClaimTemplate, ResourceClaim, DeviceClass, ResourceSlice):
    kueue.KINDS[(GROUP, _model.__name__)] = _model
kueue.VERSIONS[GROUP] = ("v1",)


# --- the context a workload's claims are resolved in ----------------------------------------


def gate(config: kueue.Configuration | None, name: str) -> bool:
    """A DRA feature gate as ``config`` sets it, else Kueue v0.19.2's default."""
    gates = config.feature_gates if config is not None else {}
    return gates.get(name, GATES[name])


@dataclass(frozen=True)
class DraContext:
    """What claims are resolved against: the objects loaded and the Configuration's mappings."""

    config: kueue.Configuration | None = None
    templates: Mapping[tuple[str, str], ResourceClaimSpec] = field(default_factory=dict)
    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    slices: Sequence[ResourceSlice] = ()

    @classmethod
    def from_models(cls, models: Sequence[Any]) -> DraContext:
        config = next((m for m in models if isinstance(m, kueue.Configuration)), None)
        templates: dict[tuple[str, str], ResourceClaimSpec] = {}
        classes: dict[str, DeviceClass] = {}
        for m in models:
            if isinstance(m, ResourceClaimTemplate):
                templates.setdefault((m.metadata.namespace or "default", str(m.metadata.name)), m.spec.spec)
            elif isinstance(m, DeviceClass):
                classes.setdefault(str(m.metadata.name), m)
        slices = tuple(m for m in models if isinstance(m, ResourceSlice))
        return cls(config, templates, classes, slices)

    def mappings(self) -> list[kueue.DeviceClassMapping]:
        resources = self.config.resources if self.config is not None else None
        return list(resources.device_class_mappings) if resources is not None else []

    def lookup(self, device_class: str) -> kueue.DeviceClassMapping | None:
        """The first mapping naming ``device_class`` (Kueue's ``ResourceMapper.Lookup``)."""
        return next((m for m in self.mappings() if device_class in m.device_class_names), None)

    def sources(
        self, device_class: str, kind: Literal["counter", "capacity"]
    ) -> list[kueue.DeviceClassSource]:
        """Counter or capacity sources of every mapping naming ``device_class``, when their gate is on."""
        gate_name = (
            "KueueDRAIntegrationPartitionableDevices"
            if kind == "counter"
            else "KueueDRAIntegrationConsumableCapacity"
        )
        if not gate(self.config, gate_name):
            return []
        out = []
        for mapping in self.mappings():
            if device_class in mapping.device_class_names:
                out += [s for src in mapping.sources if (s := getattr(src, kind)) is not None]
        return out


@dataclass(frozen=True)
class Charges:
    """What a workload's claims add to quota, per pod set name, or why it is inadmissible.

    ``extra``: quota resources added per pod; ``replaced``: extended resources whose request is
    charged through ``extra`` instead; ``problem``: (field path, Kueue's message)."""

    extra: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    replaced: Mapping[str, frozenset[str]] = field(default_factory=dict)
    problem: tuple[tuple[str | int, ...], str] | None = None


class _Inadmissible(Exception):
    def __init__(self, at: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.at = at
        self.message = message


def _claims(pod_set: kueue.PodSet) -> list[dict[str, Any]]:
    claims = pod_set.template.spec.model_dump(by_alias=True).get("resourceClaims") or []
    return [c for c in claims if isinstance(c, dict)]


def workload_charges(wl: kueue.Workload, ctx: DraContext) -> Charges:
    """Steps 1-6 of the module docstring for one workload."""
    claims = [_claims(ps) for ps in wl.spec.pod_sets]
    has_dra = any(
        c.get("resourceClaimName") or c.get("resourceClaimTemplateName") for cs in claims for c in cs
    )
    if not gate(ctx.config, "KueueDRAIntegration"):
        if has_dra and gate(ctx.config, "KueueDRARejectWorkloadsWhenDRADisabled"):
            message = "Workload uses DRA resources but the KueueDRAIntegration feature gate is not enabled"
            return Charges(problem=(("spec", "podSets"), message))
        return Charges()
    for i, cs in enumerate(claims):
        for j, claim in enumerate(cs):
            if claim.get("resourceClaimName"):
                at = ("spec", "podSets", i, "template", "spec", "resourceClaims", j, "resourceClaimName")
                return Charges(
                    problem=(at, "KueueDRAIntegration feature does not support use of resource claims")
                )
    extra: dict[str, dict[str, Decimal]] = {}
    replaced: dict[str, frozenset[str]] = {}
    namespace = wl.metadata.namespace or "default"
    try:
        for i, (ps, cs) in enumerate(zip(wl.spec.pod_sets, claims, strict=True)):
            charged = _template_charges(ctx, namespace, i, ps.name, cs)
            ext, swapped = _extended_charges(ctx, i, ps)
            for name, amount in ext.items():
                charged[name] = charged.get(name, Decimal(0)) + amount
            if charged:
                extra[ps.name] = charged
            if swapped:
                replaced[ps.name] = swapped
    except _Inadmissible as err:
        return Charges(problem=(err.at, err.message))
    return Charges(extra, replaced)


def _template_charges(
    ctx: DraContext, namespace: str, index: int, pod_set: str, claims: list[dict[str, Any]]
) -> dict[str, Decimal]:
    """Steps 3, 5 and 6 for one pod set (Kueue's GetResourceRequestsForResourceClaimTemplates)."""
    out: dict[str, Decimal] = {}
    for j, claim in enumerate(claims):
        template = claim.get("resourceClaimTemplateName")
        if not template:
            continue
        at: tuple[str | int, ...] = ("spec", "podSets", index, "template", "spec", "resourceClaims", j)
        spec = ctx.templates.get((namespace, str(template)))
        if spec is None:
            raise _Inadmissible(
                at,
                f"{_path(at)}: Internal error: failed to get claim spec for ResourceClaimTemplate {template} "
                f'in podset {pod_set}: resourceclaimtemplates.resource.k8s.io "{template}" not found',
            )
        for name, amount in _claim_spec_charges(ctx, spec, str(template), pod_set, at).items():
            out[name] = out.get(name, Decimal(0)) + amount
    return out


def _claim_spec_charges(
    ctx: DraContext, spec: ResourceClaimSpec, template: str, pod_set: str, at: tuple[str | int, ...]
) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for r, request in enumerate(spec.devices.requests):
        req_at = (*at, "devices", "requests", r)
        exact = _exact(request, template, req_at)
        device_class = exact.device_class_name
        if not device_class:
            continue
        mapping = ctx.lookup(device_class)
        if mapping is None:
            raise _Inadmissible(
                (*at, "resourceClaimTemplateName"),
                f"{_path((*at, 'resourceClaimTemplateName'))}: Not found: "
                f'"DeviceClass {device_class} is not mapped in DRA configuration for podset {pod_set}"',
            )
        count = Decimal(exact.count if exact.count is not None else 1)
        counters, capacities = ctx.sources(device_class, "counter"), ctx.sources(device_class, "capacity")
        if not counters and not capacities:
            out[mapping.name] = out.get(mapping.name, Decimal(0)) + count
        for source in counters:
            out[mapping.name] = out.get(mapping.name, Decimal(0)) + _counter_charge(
                ctx, exact, source, req_at
            )
        for source in capacities:
            out[mapping.name] = out.get(mapping.name, Decimal(0)) + _capacity_charge(
                ctx, exact, source, req_at
            )
    return out


def _exact(request: DeviceRequest, template: str, at: tuple[str | int, ...]) -> ExactDeviceRequest:
    """Kueue's countDevicesPerClass checks: only ``exactly`` with ``ExactCount``, no admin access."""

    def invalid(where: tuple[str | int, ...], value: str, detail: str) -> _Inadmissible:
        return _Inadmissible(
            where, f"{_path(where)}: Invalid value: {value}: ResourceClaimTemplate {template}: {detail}"
        )

    if request.first_available is not None:
        return _raise(invalid(at, "null", "FirstAvailable device selection is not supported"))
    if request.exactly is None:
        return _raise(invalid(at, "null", "Exactly must be set if FirstAvailable is nil"))
    exact = request.exactly
    if exact.admin_access:
        return _raise(invalid((*at, "exactly", "adminAccess"), "null", "AdminAccess is not supported"))
    if exact.allocation_mode == "All":
        return _raise(
            invalid((*at, "exactly", "allocationMode"), '"All"', "AllocationMode 'All' is not supported")
        )
    if exact.allocation_mode != "ExactCount":
        mode = exact.allocation_mode
        return _raise(
            invalid((*at, "exactly", "allocationMode"), f'"{mode}"', f"unsupported allocation mode: {mode}")
        )
    return exact


def _raise(err: _Inadmissible) -> ExactDeviceRequest:
    raise err


def _extended_charges(
    ctx: DraContext, index: int, ps: kueue.PodSet
) -> tuple[dict[str, Decimal], frozenset[str]]:
    """Step 4 (Kueue's ResolveExtendedResourceQuota): the pod's DRA-backed extended resources."""
    if not gate(ctx.config, "KueueDRAIntegrationExtendedResource") or not ctx.classes:
        return {}, frozenset()
    requests = effective_pod_requests(ps.template.spec.model_dump(by_alias=True))
    out: dict[str, Decimal] = {}
    replaced: set[str] = set()
    for name, amount in sorted(requests.items()):
        if amount <= 0 or not _is_extended(name):
            continue
        backing = [dc for dc in ctx.classes.values() if dc.spec.extended_resource_name == name]
        if not backing:
            continue
        chosen = min(
            backing, key=lambda dc: (-(dc.metadata.creation_timestamp or 0.0), str(dc.metadata.name))
        )
        mapping = ctx.lookup(str(chosen.metadata.name))
        key = mapping.name if mapping is not None else name
        if amount != amount.to_integral_value():
            at = ("spec", "podSets", index, "template", "spec")
            raise _Inadmissible(
                at, f"{_path(at)}: Invalid value: {amount}: extended resource quantity must be an integer"
            )
        out[key] = out.get(key, Decimal(0)) + amount
        replaced.add(name)
    return out, frozenset(replaced)


def _is_extended(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a prefixed name outside ``kubernetes.io`` and ``requests.``."""
    prefix = name.partition("/")[0] if "/" in name else ""
    if not prefix or prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return False
    return not name.startswith("requests.")


# --- counters and capacity: ResourceSlice devices --------------------------------------------

_DRIVER_TERM = re.compile(r"""^\s*device\.driver\s*==\s*(?:"([^"]*)"|'([^']*)')\s*$""")


def cel_supported(expression: str) -> bool:
    """Whether gpuq evaluates ``expression`` (``device.driver == "x"`` terms joined by ``&&``)."""
    return all(_DRIVER_TERM.match(term) for term in expression.split("&&"))


def _matches(selectors: Sequence[DeviceSelector | None], driver: str) -> bool:
    for selector in selectors:
        if selector is None or selector.cel is None or not cel_supported(selector.cel.expression):
            continue  # not evaluated: matches (validation warns)
        for term in selector.cel.expression.split("&&"):
            found = _DRIVER_TERM.match(term)
            assert found is not None
            if (found.group(1) if found.group(1) is not None else found.group(2)) != driver:
                return False
    return True


def _devices(ctx: DraContext, exact: ExactDeviceRequest, source: kueue.DeviceClassSource) -> list[Device]:
    """Devices of ``source.driver`` in complete pools of their newest generation that every
    selector (the source's, the device class's, the request's) matches."""
    pools: dict[str, tuple[int, int, list[ResourceSlice]]] = {}
    for s in ctx.slices:
        if s.spec.driver != source.driver:
            continue
        pool = s.spec.pool
        gen, want, have = pools.get(pool.name, (pool.generation, pool.resource_slice_count, []))
        if pool.generation > gen:
            gen, want, have = pool.generation, pool.resource_slice_count, []
        if pool.generation == gen:
            pools[pool.name] = (gen, want, [*have, s])
    device_class = ctx.classes.get(exact.device_class_name)
    selectors = [
        source.device_selector,
        *(device_class.spec.selectors if device_class else []),
        *exact.selectors,
    ]
    if not _matches(selectors, source.driver):
        return []
    return [
        d
        for _, (_, want, have) in sorted(pools.items())
        if len(have) == want
        for s in have
        for d in s.spec.devices
    ]


def _counter_charge(
    ctx: DraContext, exact: ExactDeviceRequest, source: kueue.DeviceClassSource, at: tuple[str | int, ...]
) -> Decimal:
    """Step 5 (Kueue's processCounterCharge)."""
    count = exact.count if exact.count is not None else 1
    devices = _devices(ctx, exact, source)
    if len(devices) < count:
        raise _Inadmissible(
            at,
            f"{_path(at)}: Internal error: insufficient matching devices for counter driver: "
            f"{len(devices)} device(s) match but {count} requested",
        )
    values = [
        c.counters[source.name].value
        for d in devices
        for c in d.consumes_counters
        if source.name in c.counters
    ]
    if not values:
        raise _Inadmissible(
            at,
            f"{_path(at)}: Internal error: matched devices have no consumesCounters entry "
            f'for counter "{source.name}"',
        )
    return max(max(values), Decimal(0)) * count


def _capacity_charge(
    ctx: DraContext, exact: ExactDeviceRequest, source: kueue.DeviceClassSource, at: tuple[str | int, ...]
) -> Decimal:
    """Step 6 (Kueue's consumable-capacity charge, ``pkg/dra/capacity.go``)."""
    count = exact.count if exact.count is not None else 1
    devices = [d for d in _devices(ctx, exact, source) if source.name in d.capacity]
    if not devices:
        raise _Inadmissible(
            at, f"{_path(at)}: Internal error: matched devices have no capacity dimension {source.name!r}"
        )
    requested = exact.capacity.requests.get(source.name) if exact.capacity is not None else None
    charges = []
    for device in devices:
        capacity = device.capacity[source.name]
        policy = capacity.request_policy
        amount = (
            requested
            if requested is not None
            else (policy.default if policy and policy.default else capacity.value)
        )
        rounded = _round(amount, policy)
        if rounded is None:
            raise _Inadmissible(
                at,
                f"{_path(at)}: Internal error: capacity request cannot be satisfied: "
                f"{amount} on device {device.name}",
            )
        charges.append(rounded)
    return max(charges) * count


def _round(amount: Decimal, policy: RequestPolicy | None) -> Decimal | None:
    """``amount`` rounded up per a device's RequestPolicy; None when no valid value holds it."""
    if policy is None:
        return amount
    if policy.valid_values:
        return min((v for v in policy.valid_values if v >= amount), default=None)
    rng = policy.valid_range
    if rng is None:
        return amount
    low = rng.min if rng.min is not None else Decimal(0)
    value = max(amount, low)
    if rng.step:
        value = low + ((value - low) / rng.step).to_integral_value(rounding=ROUND_CEILING) * rng.step
    return None if rng.max is not None and value > rng.max else value


def _path(parts: Sequence[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out
