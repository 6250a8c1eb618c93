"""Checks for DRA objects and the Configuration settings that change what quota a workload takes.

Errors mirror the API server's validation of ``resource.k8s.io/v1`` (``pkg/apis/resource/validation``)
and Kueue's Configuration validation (``pkg/config/validation.go``: integrations, transformations,
device class mappings). Warnings say what gpuq reads differently: CEL it does not evaluate, DRA
feature gates renamed in Kueue v0.18, ``concurrentAdmissionPolicy`` (not modelled yet). A
workload whose claims cannot be resolved gets Kueue's message as a ``stays_pending`` finding.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuq.api import dra, frameworks, kueue
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest
from gpuq.api.names import Findings, dns_label_problem, qualified_name_problem

MAX_REQUESTS = 32
MAX_DEVICE_CLASS_NAMES = 8


def check_claim_template(template: dra.ResourceClaimTemplate) -> Findings:
    yield from _claim_spec(template.spec.spec, ("spec", "spec"))


def check_claim(claim: dra.ResourceClaim) -> Findings:
    yield from _claim_spec(claim.spec, ("spec",))


def _claim_spec(spec: dra.ResourceClaimSpec, at: FieldPath) -> Findings:
    requests = spec.devices.requests
    if len(requests) > MAX_REQUESTS:
        yield (*at, "devices", "requests"), f"must have at most {MAX_REQUESTS} items"
    seen: set[str] = set()
    for i, request in enumerate(requests):
        where = (*at, "devices", "requests", i)
        if not request.name:
            yield (*where, "name"), "is required"
        elif problem := dns_label_problem(request.name):
            yield (*where, "name"), f"invalid name {request.name!r}: {problem}"
        elif request.name in seen:
            yield (*where, "name"), f"duplicate request name {request.name!r}"
        seen.add(request.name)
        if (request.exactly is None) == (request.first_available is None):
            yield where, "exactly one of exactly or firstAvailable is required"
        if request.exactly is not None:
            yield from _exact(request.exactly, (*where, "exactly"))


def _exact(exact: dra.ExactDeviceRequest, at: FieldPath) -> Findings:
    if not exact.device_class_name:
        yield (*at, "deviceClassName"), "is required"
    if exact.allocation_mode not in ("ExactCount", "All"):
        yield (
            (*at, "allocationMode"),
            f'unsupported value {exact.allocation_mode!r} (expected "ExactCount", "All")',
        )
    if exact.count is not None and exact.allocation_mode != "ExactCount":
        yield (*at, "count"), "must not be set unless allocationMode is ExactCount"
    elif exact.count is not None and exact.count <= 0:
        yield (*at, "count"), "must be greater than zero"


def check_device_class(device_class: dra.DeviceClass) -> Findings:
    name = device_class.spec.extended_resource_name
    if name is not None and (problem := qualified_name_problem(name)):
        yield ("spec", "extendedResourceName"), f"invalid resource name {name!r}: {problem}"


def configuration_problems(config: kueue.Configuration) -> Findings:
    """Kueue's validateIntegrations, validateResourceTransformations and device class mappings."""
    integrations = config.integrations
    if integrations is not None:
        known = sorted(set(frameworks.FRAMEWORKS.values()))
        for i, name in enumerate(integrations.frameworks):
            if name not in known:
                yield (
                    ("integrations", "frameworks", i),
                    f"unsupported value {name!r} (supported: {', '.join(known)})",
                )
            elif name in integrations.frameworks[:i]:
                yield ("integrations", "frameworks", i), f"duplicate framework {name!r}"
        for i, entry in enumerate(integrations.external_frameworks):
            if frameworks._external(entry) is None:
                yield ("integrations", "externalFrameworks", i), "must be format, 'Kind.version.group.com'"
    resources = config.resources
    if resources is None:
        return
    inputs: set[str] = set()
    for i, rule in enumerate(resources.transformations):
        if rule.input in inputs:
            yield ("resources", "transformations", i, "input"), f"duplicate input {rule.input!r}"
        inputs.add(rule.input)
    yield from _mappings(config, resources.device_class_mappings)


def _mappings(config: kueue.Configuration, mappings: Sequence[kueue.DeviceClassMapping]) -> Findings:
    names: set[str] = set()
    owner: dict[str, str] = {}
    for i, mapping in enumerate(mappings):
        at = ("resources", "deviceClassMappings", i)
        if problem := qualified_name_problem(mapping.name):
            yield (*at, "name"), f"invalid resource name {mapping.name!r}: {problem}"
        if mapping.name in names:
            yield (*at, "name"), f"duplicate resource name {mapping.name!r}"
        names.add(mapping.name)
        if not mapping.device_class_names:
            yield (*at, "deviceClassNames"), "at least one device class name is required"
        if len(mapping.device_class_names) > MAX_DEVICE_CLASS_NAMES:
            yield (*at, "deviceClassNames"), f"must have at most {MAX_DEVICE_CLASS_NAMES} items"
        for j, device_class in enumerate(mapping.device_class_names):
            if owner.get(device_class, mapping.name) != mapping.name:
                yield (
                    (*at, "deviceClassNames", j),
                    f"device class already mapped to resource {owner[device_class]}",
                )
            owner.setdefault(device_class, mapping.name)
        yield from _sources(config, mapping, at)


def _sources(config: kueue.Configuration, mapping: kueue.DeviceClassMapping, at: FieldPath) -> Findings:
    kinds = {"counter" if s.counter else "capacity" for s in mapping.sources if s.counter or s.capacity}
    if len(kinds) > 1:
        yield (*at, "sources"), "counter and capacity sources cannot be mixed in one mapping"
    for k, source in enumerate(mapping.sources):
        where = (*at, "sources", k)
        if (source.counter is None) == (source.capacity is None):
            yield where, "exactly one source type must be set per entry"
        elif source.counter is not None and not dra.gate(config, "KueueDRAIntegrationPartitionableDevices"):
            yield (
                (*where, "counter"),
                "counter sources require KueueDRAIntegrationPartitionableDevices to be enabled",
            )
        elif source.capacity is not None and not dra.gate(config, "KueueDRAIntegrationConsumableCapacity"):
            yield (
                (*where, "capacity"),
                "capacity sources require KueueDRAIntegrationConsumableCapacity to be enabled",
            )


# --- warnings and pending workloads ---------------------------------------------------------


def review(manifests: Sequence[Manifest], claims: dra.DraContext | None = None) -> list[Diagnostic]:
    """Warnings about what gpuq reads differently, and the workloads whose claims keep them pending."""
    models = [m.model for m in manifests if m.model is not None]
    claims = claims if claims is not None else dra.DraContext.from_models(models)
    out: list[Diagnostic] = []
    for manifest in manifests:
        model = manifest.model
        if isinstance(model, kueue.Configuration):
            out += _configuration_warnings(manifest, model)
        elif isinstance(model, kueue.ClusterQueue) and model.spec.concurrent_admission_policy is not None:
            message = (
                "gpuq does not model Kueue's ConcurrentAdmission yet: the policy is kept (gpuq export k8s "
                "writes it back) but does not change gpuq's decisions"
            )
            out.append(manifest.diagnostic(("spec", "concurrentAdmissionPolicy"), message, "warning"))
        elif isinstance(model, dra.DeviceClass):
            out += _cel_warnings(
                manifest, [(("spec", "selectors", i), s) for i, s in enumerate(model.spec.selectors)]
            )
        elif isinstance(model, dra.ResourceClaimTemplate):
            out += _cel_warnings(manifest, _request_selectors(model.spec.spec, ("spec", "spec")))
        elif isinstance(model, kueue.Workload) and model.status.admission is None:
            problem = dra.workload_charges(model, claims).problem
            if problem is not None:
                out.append(manifest.diagnostic(problem[0], problem[1], stays_pending=True))
    return out


def _request_selectors(
    spec: dra.ResourceClaimSpec, at: FieldPath
) -> list[tuple[FieldPath, kueue.DeviceSelector]]:
    out = []
    for i, request in enumerate(spec.devices.requests):
        for j, selector in enumerate(request.exactly.selectors if request.exactly else []):
            out.append(((*at, "devices", "requests", i, "exactly", "selectors", j), selector))
    return out


def _cel_warnings(
    manifest: Manifest, selectors: Sequence[tuple[FieldPath, kueue.DeviceSelector | None]]
) -> list[Diagnostic]:
    out = []
    for at, selector in selectors:
        if (
            selector is not None
            and selector.cel is not None
            and not dra.cel_supported(selector.cel.expression)
        ):
            message = (
                'gpuq evaluates only `device.driver == "name"` CEL selectors: this one matches every device '
                "when counter or capacity quota is charged"
            )
            out.append(manifest.diagnostic((*at, "cel", "expression"), message, "warning"))
    return out


def _configuration_warnings(manifest: Manifest, config: kueue.Configuration) -> list[Diagnostic]:
    out = []
    for name, renamed in sorted(dra.RENAMED_GATES.items()):
        if name in config.feature_gates:
            message = (
                f"feature gate {name} was renamed {renamed} in Kueue v0.18; Kueue v0.19.2 does not know it"
            )
            out.append(manifest.diagnostic(("featureGates", name), message, "warning"))
    resources = config.resources
    for i, mapping in enumerate(resources.device_class_mappings if resources else []):
        for k, source in enumerate(mapping.sources):
            for kind in ("counter", "capacity"):
                found = getattr(source, kind)
                if found is not None:
                    at = ("resources", "deviceClassMappings", i, "sources", k, kind, "deviceSelector")
                    out += _cel_warnings(manifest, [(at, found.device_selector)])
    return out
