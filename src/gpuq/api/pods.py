"""Kubernetes effective pod requests, computed from a pod template's ``spec``.

Mirrors ``k8s.io/component-helpers/resource.PodRequests`` (the value the
scheduler and Kueue use): the larger of

1. the sum of the regular containers' requests plus every sidecar (an init
   container with ``restartPolicy: Always``), and
2. for each ordinary init container, its request plus the sidecars started
   before it (and each sidecar: the sum of sidecars up to and including it),

then ``spec.overhead`` is added. A container that sets a limit but no request
for a resource requests its limit, as the API server defaults it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpuq.core.nodes import GPU_MILLI, HAMI_CORES, HAMI_MEMORY
from gpuq.core.quantity import QuantityError, parse_quantity

Requests = dict[str, Decimal]


def container_requests(container: Mapping[str, Any]) -> Requests:
    """Requests of one container, with limits standing in for unset requests.

    Raises :class:`~gpuq.core.quantity.QuantityError` for a value that is not a quantity.
    """
    resources = container.get("resources") or {}
    requests = {name: parse_quantity(v) for name, v in (resources.get("requests") or {}).items()}
    for name, value in (resources.get("limits") or {}).items():
        requests.setdefault(name, parse_quantity(value))
    return requests


def _add(into: Requests, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, Decimal(0)) + value


def _max(into: Requests, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        if name not in into or value > into[name]:
            into[name] = value


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def effective_pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Return the per-pod effective request of every resource named in ``pod_spec``.

    Values are exact ``Decimal`` quantities (``cpu: 500m`` → ``Decimal("0.5")``).
    Raises :class:`~gpuq.core.quantity.QuantityError` on a malformed quantity.
    """
    total: Requests = {}
    for container in pod_spec.get("containers") or ():
        _add(total, container_requests(container))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for container in pod_spec.get("initContainers") or ():
        own = container_requests(container)
        if _is_sidecar(container):
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
            _max(init_peak, running)
    _max(total, init_peak)
    overhead = {name: parse_quantity(v) for name, v in (pod_spec.get("overhead") or {}).items()}
    _add(total, overhead)
    return total


def iter_quantity_fields(pod_spec: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, object]]:
    """Yield ``(field path under spec, resource, raw value)`` for every request, limit and overhead."""
    for group in ("initContainers", "containers"):
        for index, container in enumerate(pod_spec.get(group) or ()):
            resources = (container or {}).get("resources") or {}
            for section in ("requests", "limits"):
                for name, value in (resources.get(section) or {}).items():
                    yield (group, index, "resources", section, name), name, value
    for name, value in (pod_spec.get("overhead") or {}).items():
        yield ("overhead", name), name, value


def quantity_problems(pod_spec: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Yield ``(field path, message)`` for malformed or negative quantities in ``pod_spec``."""
    for path, _name, value in iter_quantity_fields(pod_spec):
        try:
            quantity = parse_quantity(value)
        except QuantityError as err:
            yield path, str(err)
            continue
        if quantity < 0:
            yield path, f"must be greater than or equal to 0 (got {value})"


def is_extended_resource(name: str) -> bool:
    """Extended resources (``vendor.example/thing``) cannot be overcommitted: requests equal limits."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests.", "hugepages-"))


def request_limit_problems(pod_spec: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Yield ``(field path, message)`` where a request exceeds its limit, as the API server rejects it
    (and, for extended resources such as ``nvidia.com/gpu``, where a request differs from its limit)."""
    for group in ("initContainers", "containers"):
        for index, container in enumerate(pod_spec.get(group) or ()):
            resources = (container or {}).get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for name in sorted(set(requests) & set(limits)):
                try:
                    request, limit = parse_quantity(requests[name]), parse_quantity(limits[name])
                except QuantityError:
                    continue  # reported by quantity_problems
                path = (group, index, "resources", "requests", name)
                if is_extended_resource(name) and request != limit:
                    both = f"({requests[name]} != {limits[name]})"
                    yield path, f"must equal its limit for extended resource {name} {both}"
                elif request > limit:
                    yield path, f"must be less than or equal to its limit ({requests[name]} > {limits[name]})"


def gpu_milli_problem(value: Decimal) -> str | None:
    """Why ``value`` is not a placeable GPU share: 1..1000 (one GPU) or whole GPUs (multiples of 1000)."""
    if value != value.to_integral_value():
        return f"must be a whole number of thousandths of a GPU (got {value})"
    if value <= 1000 or value % 1000 == 0:
        return None
    return f"must be between 1 and 1000 (a share of one GPU) or a multiple of 1000 (whole GPUs), got {value}"


def hami_problems(pod_spec: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """HAMi shares: ``gpucores`` a whole percentage 1..100, ``gpumem`` at least 1 MiB, both only
    beside ``nvidia.com/gpu`` (the vGPUs they divide) in the same container."""
    for group in ("initContainers", "containers"):
        for index, container in enumerate(pod_spec.get(group) or ()):
            resources = (container or {}).get("resources") or {}
            for section in ("requests", "limits"):
                values = resources.get(section) or {}
                yield from _hami_section(values, (group, index, "resources", section))


def _hami_section(
    values: Mapping[str, Any], at: tuple[str | int, ...]
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    for name, low, high in ((HAMI_CORES, 1, 100), (HAMI_MEMORY, 1, None)):
        if name not in values:
            continue
        try:
            amount = parse_quantity(values[name])
        except QuantityError:
            continue  # reported by quantity_problems
        if amount != amount.to_integral_value() or amount < low or (high is not None and amount > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            yield (*at, name), f"must be a whole number {bound}, got {values[name]}"
        if "nvidia.com/gpu" not in values:
            yield (*at, name), f"{name} divides nvidia.com/gpu, which this container does not request"


def device_problems(pod_spec: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Yield ``(field path, message)`` for a GPU share no node could place (the first one found).

    Each container's ``gpuq.dev/gpu-milli`` and the pod's effective total must
    be 1..1000 or a multiple of 1000; malformed quantities are left to
    :func:`quantity_problems`.
    """
    yield from hami_problems(pod_spec)
    first: tuple[str | int, ...] | None = None
    for path, name, value in iter_quantity_fields(pod_spec):
        if name != GPU_MILLI:
            continue
        try:
            quantity = parse_quantity(value)
        except QuantityError:
            return
        first = first or path
        if quantity >= 0 and (problem := gpu_milli_problem(quantity)):
            yield path, problem
            return
    if first is None:
        return
    try:
        total = effective_pod_requests(pod_spec).get(GPU_MILLI, Decimal(0))
    except QuantityError:
        return
    if total > 0 and (problem := gpu_milli_problem(total)):
        yield first, f"the pod's total {GPU_MILLI} {problem}"
