"""Checks on machines: NodePools, GPUModels and ``v1`` Nodes.

:func:`validate_machines` runs before conversion, on every parsed manifest,
because a pool's GPU model is resolved through a catalogue that GPUModel
objects extend. :func:`placement_warnings` runs after conversion, on the
core nodes: ResourceFlavors no node matches and Topology levels the nodes
of a flavor do not carry are warnings (Kueue would leave such workloads pending).

Every function returns diagnostics and never raises on bad input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from decimal import Decimal

from gpuq.api import compute_class, kueue, machines, nodes_convert, provisioning_checks
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest
from gpuq.api.kube_nodes import GKE_ACCELERATOR_LABEL, GKE_ACCELERATORS, base_product, product_model
from gpuq.api.names import (
    Findings,
    dns_subdomain_problem,
    label_problems,
    label_value_problem,
    qualified_name_problem,
)
from gpuq.api.references import workload_manifests
from gpuq.core.devices import gfd_labels, sharing_problems
from gpuq.core.gpus import BUILTIN_MODELS, GPUCatalogue
from gpuq.core.mig import MIG_TABLES
from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.capacity import NodeCapacity, pod_shape

MAX_NODES_PER_POOL = 10_000
MAX_GPUS_PER_NODE = 16
MAX_PODS_PER_NODE = 1_000
MAX_CPU_PER_NODE = Decimal(4096)
MIN_MEMORY = Decimal(2**30)
MAX_MEMORY_PER_NODE = Decimal(64 * 2**40)
MAX_GPU_MEMORY = Decimal(2**40)
HOSTNAME_MAX = 63
NEGATIVE = "must be greater than or equal to 0"
_CAPABILITY = re.compile(r"^\d{1,2}\.\d$")


def validate_machines(manifests: Sequence[Manifest]) -> list[Diagnostic]:
    """Per-object checks of NodePools, GPUModels and Nodes, and node names across all of them."""
    catalogue = nodes_convert.build_catalogue(manifests)
    out: list[Diagnostic] = []
    for manifest in manifests:
        model = manifest.model
        if isinstance(model, machines.NodePool):
            out += [manifest.diagnostic(p, m) for p, m in pool_problems(model, catalogue)]
        elif isinstance(model, machines.GPUModel):
            out += [manifest.diagnostic(p, m) for p, m in gpu_model_problems(model)]
            if model.metadata.name in BUILTIN_MODELS:
                message = f"replaces the built-in GPU model {model.metadata.name!r}"
                out.append(manifest.diagnostic(("metadata", "name"), message, "warning"))
        elif isinstance(model, machines.Node):
            out += [manifest.diagnostic(p, m) for p, m in _node_problems(model)]
            out += _unknown_product(manifest, catalogue)
    out += _node_name_collisions(manifests)
    out += compute_class.validate_compute_classes(manifests)
    out += provisioning_checks.validate_price_catalogues(manifests)
    return out


# --- NodePool ---------------------------------------------------------------------------------


def pool_problems(pool: machines.NodePool, catalogue: GPUCatalogue) -> Findings:
    spec = pool.spec
    yield from _name_length(pool)
    if problem := label_value_problem(spec.machine_type) or (
        "is required" if not spec.machine_type else None
    ):
        yield ("spec", "machineType"), f"invalid machine type {spec.machine_type!r}: {problem}"
    yield from _size_problems(spec)
    yield from _node_name_problems(spec)
    yield from _resource_problems(spec)
    if spec.gpu is not None:
        yield from _gpu_problems(spec.gpu, catalogue)
    yield from label_problems(spec.labels, ("spec", "labels"))
    yield from _label_conflicts(pool, catalogue)
    yield from _taint_problems(spec.taints, ("spec", "taints"))
    if spec.zone is not None and (problem := label_value_problem(spec.zone)):
        yield ("spec", "zone"), f"invalid zone {spec.zone!r}: {problem}"
    yield from _topology_problems(spec)
    if spec.price is not None and spec.price < 0:
        yield ("spec", "price"), NEGATIVE
    yield from provisioning_checks.pool_provisioning_problems(spec)


def _name_length(pool: machines.NodePool) -> Findings:
    name = str(pool.metadata.name or "")
    width = nodes_convert.index_width(pool.spec.sizes()[2])
    if name and len(name) + 1 + width > HOSTNAME_MAX:
        yield (
            ("metadata", "name"),
            f"node names {name}-{'0' * width} would be longer than {HOSTNAME_MAX} characters "
            f"(the kubernetes.io/hostname label): use at most {HOSTNAME_MAX - 1 - width}",
        )


def _node_name_problems(spec: machines.NodePoolSpec) -> Findings:
    """``nodeNames``: valid, distinct hostnames, no more than the pool's ``max`` nodes."""
    high = spec.sizes()[2]
    if len(spec.node_names) > high:
        yield ("spec", "nodeNames"), f"names {len(spec.node_names)} nodes but the pool holds at most {high}"
    seen: set[str] = set()
    for index, name in enumerate(spec.node_names):
        if problem := dns_subdomain_problem(name):
            yield ("spec", "nodeNames", index), f"invalid node name {name!r}: {problem}"
        elif name in seen:
            yield ("spec", "nodeNames", index), f"node name {name!r} is given twice"
        seen.add(name)


def _size_problems(spec: machines.NodePoolSpec) -> Findings:
    count, low, high = spec.sizes()
    scaling = spec.autoscaling or machines.PoolAutoscaling()
    where: dict[str, FieldPath] = {
        "min": ("spec", "min")
        if spec.min is not None or scaling.min is None
        else ("spec", "autoscaling", "min"),
        "max": ("spec", "max")
        if spec.max is not None or scaling.max is None
        else ("spec", "autoscaling", "max"),
    }
    written_low, written_high = spec.bounds()
    for key, value in (("count", spec.count), ("min", written_low), ("max", written_high)):
        at: FieldPath = where.get(key, ("spec", key))
        if value is not None and value < 0:
            yield at, f"{NEGATIVE} (got {value})"
        elif value is not None and value > MAX_NODES_PER_POOL:
            yield at, f"{value} nodes is more than {MAX_NODES_PER_POOL} in one pool"
    for key in ("min", "max"):
        if getattr(spec, key) is not None and getattr(scaling, key) is not None:
            yield ("spec", "autoscaling", key), f"set either spec.{key} or spec.autoscaling.{key}, not both"
    if min(count, low, high) < 0:
        return
    if high < 1:
        at = where["max"] if written_high is not None else ("spec",)
        yield at, "a pool needs max ≥ 1: set spec.count (a fixed-size pool) or spec.max"
    elif written_low is None and count > high:
        yield ("spec", "count"), f"count {count} is greater than max {high}"
    elif low > high:
        yield where["min"], f"min {low} is greater than max {high}"
    elif not low <= count <= high:
        yield ("spec", "count"), f"count {count} is outside [min, max] = [{low}, {high}]"


def _resource_problems(spec: machines.NodePoolSpec) -> Findings:
    if spec.cpu <= 0:
        yield ("spec", "cpu"), f"must be greater than 0 (got {spec.cpu})"
    elif spec.cpu > MAX_CPU_PER_NODE:
        yield ("spec", "cpu"), f"{spec.cpu} CPUs is more than {MAX_CPU_PER_NODE} per node: check the unit"
    if spec.memory < MIN_MEMORY:
        yield ("spec", "memory"), f"{spec.memory} bytes is less than 1Gi per node: write a unit (e.g. 768Gi)"
    elif spec.memory > MAX_MEMORY_PER_NODE:
        yield ("spec", "memory"), "is more than 64Ti per node: check the unit"
    if not 1 <= spec.pods <= MAX_PODS_PER_NODE:
        yield ("spec", "pods"), f"must be between 1 and {MAX_PODS_PER_NODE} (got {spec.pods})"


def _gpu_problems(gpu: machines.NodeGPUSpec, catalogue: GPUCatalogue) -> Findings:
    at = ("spec", "gpu")
    if gpu.count < 1:
        yield (*at, "count"), f"must be at least 1 (got {gpu.count}); leave spec.gpu out for CPU nodes"
    elif gpu.count > MAX_GPUS_PER_NODE:
        yield (*at, "count"), f"{gpu.count} GPUs is more than {MAX_GPUS_PER_NODE} per node"
    if gpu.memory is not None and not MIN_MEMORY <= gpu.memory <= MAX_GPU_MEMORY:
        yield (*at, "memory"), f"must be between 1Gi and 1Ti per GPU (got {gpu.memory} bytes)"
    spec = catalogue.get(gpu.model)
    if spec is None:
        known = ", ".join(catalogue.names())
        yield (*at, "model"), f"unknown GPU model {gpu.model!r}; known: {known} (or define a GPUModel)"
        return
    if gpu.count < 1:
        return
    model = nodes_convert.effective_model(gpu, catalogue)
    for problem in sharing_problems(model, gpu.count, nodes_convert.sharing_of(gpu)):
        yield _sharing_field(problem, gpu), _camel(problem, catalogue)


def _sharing_field(problem: str, gpu: machines.NodeGPUSpec) -> FieldPath:
    """The field a ``sharing_problems`` message is about (``GPU i:`` -> ``migLayout[i]`` when per GPU)."""
    at = ("spec", "gpu", "sharing")
    if problem.startswith("replicas") or "needs replicas" in problem:
        return (*at, "replicas")
    if problem.startswith("rename_by_default"):
        return (*at, "renameByDefault")
    if "cannot be MIG-partitioned" in problem or problem.startswith("fractional"):
        return (*at, "strategy")
    match = re.match(r"GPU (\d+): ", problem)
    per_gpu = isinstance(gpu.sharing.mig_layout, list) and any(
        isinstance(item, list) for item in gpu.sharing.mig_layout
    )
    if match and per_gpu:
        return (*at, "migLayout", int(match[1]))
    return (*at, "migLayout")


def _camel(problem: str, catalogue: GPUCatalogue) -> str:
    """A core message in the manifest's spelling, with MIG-capable models named where MIG is refused."""
    text = problem.replace("mig_layout", "migLayout").replace("rename_by_default", "renameByDefault")
    if "cannot be MIG-partitioned" in text:
        capable = [n for n in catalogue.names() if (m := catalogue.get(n)) and m.mig_table in MIG_TABLES]
        text += f" (MIG-capable models: {', '.join(capable)})"
    return text


def _label_conflicts(pool: machines.NodePool, catalogue: GPUCatalogue) -> Findings:
    """User labels may not contradict the labels gpuq or GPU Feature Discovery set."""
    gpu = pool.spec.gpu
    if gpu is not None and catalogue.get(gpu.model) is None:
        return
    name = next(nodes_convert.node_names(pool, 1))
    model = nodes_convert.effective_model(gpu, catalogue)
    count = gpu.count if gpu is not None else 0
    labels = {
        **gfd_labels(model, count, nodes_convert.sharing_of(gpu)),
        **nodes_convert.generated_labels(pool, name, 0),
    }
    for key, value in pool.spec.labels.items():
        actual = labels.get(key, value)
        if actual != value:
            yield ("spec", "labels", key), f"label {key}={value!r} contradicts the {actual!r} gpuq sets"


def _taint_problems(taints: Sequence[kueue.Taint], at: FieldPath) -> Findings:
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        if problem := qualified_name_problem(taint.key):
            yield (*at, index, "key"), f"invalid taint key {taint.key!r}: {problem}"
        if taint.value and (problem := label_value_problem(taint.value)):
            yield (*at, index, "value"), f"invalid taint value {taint.value!r}: {problem}"
        if (taint.key, taint.effect) in seen:
            yield (*at, index), f"duplicate taint {taint.key}:{taint.effect}"
        seen.add((taint.key, taint.effect))


def _topology_problems(spec: machines.NodePoolSpec) -> Findings:
    at = ("spec", "topology")
    for level in ("block", "rack", "host"):
        key = getattr(spec.topology_labels, level)
        if problem := qualified_name_problem(key):
            yield ("spec", "topologyLabels", level), f"invalid label key {key!r}: {problem}"
    topology = spec.topology
    if topology is None:
        return
    for key, value in (("block", topology.block), ("rack", topology.rack)):
        if value is not None and (problem := label_value_problem(value)):
            yield (*at, key), f"invalid {key} {value!r}: {problem}"
    for index, rack in enumerate(topology.racks or ()):
        if problem := label_value_problem(rack):
            yield (*at, "racks", index), f"invalid rack {rack!r}: {problem}"
        if rack in (topology.racks or [])[:index]:
            yield (*at, "racks", index), f"duplicate rack {rack!r}"
    yield from _rack_spread(spec, topology)


def _rack_spread(spec: machines.NodePoolSpec, topology: machines.PoolTopology) -> Findings:
    at = ("spec", "topology")
    if topology.rack is not None and topology.racks is not None:
        yield (*at, "racks"), "set either rack or racks, not both"
    if topology.racks is not None and not topology.racks:
        yield (*at, "racks"), "must list at least 1 rack"
    if topology.nodes_per_rack is None:
        return
    if topology.racks is None:
        yield (*at, "nodesPerRack"), "only applies with racks"
    elif topology.nodes_per_rack < 1:
        yield (*at, "nodesPerRack"), f"must be at least 1 (got {topology.nodes_per_rack})"
    elif (room := len(topology.racks) * topology.nodes_per_rack) < (high := spec.sizes()[2]):
        yield (
            (*at, "nodesPerRack"),
            f"{len(topology.racks)} racks × {topology.nodes_per_rack} nodes hold {room} nodes, "
            f"fewer than the pool's max {high}",
        )


# --- GPUModel and Node ------------------------------------------------------------------------


def gpu_model_problems(model: machines.GPUModel) -> Findings:
    spec = model.spec
    if not spec.product:
        yield ("spec", "product"), "is required"
    elif problem := label_value_problem(spec.product):
        yield ("spec", "product"), f"invalid product {spec.product!r}: {problem}"
    if not MIN_MEMORY <= spec.memory <= MAX_GPU_MEMORY:
        yield ("spec", "memory"), f"must be between 1Gi and 1Ti (got {spec.memory} bytes): check the unit"
    if not _CAPABILITY.match(spec.compute_capability):
        text = spec.compute_capability
        yield ("spec", "computeCapability"), f'must be major.minor, e.g. "9.0" (got {text!r})'
    if spec.family is not None and (problem := label_value_problem(spec.family)):
        yield ("spec", "family"), f"invalid family {spec.family!r}: {problem}"
    if spec.mig_table is not None and spec.mig_table not in MIG_TABLES:
        known = ", ".join(MIG_TABLES)
        yield ("spec", "migTable"), f"unknown MIG table {spec.mig_table!r}; known: {known} (or leave it out)"
    if spec.price_per_hour is not None and spec.price_per_hour < 0:
        yield ("spec", "pricePerHour"), NEGATIVE
    for index, alias in enumerate(spec.aliases):
        if not alias.strip():
            yield ("spec", "aliases", index), "must not be empty"


def _node_problems(node: machines.Node) -> Findings:
    yield from _taint_problems(node.spec.taints, ("spec", "taints"))
    for section in ("allocatable", "capacity"):
        for name, value in getattr(node.status, section).items():
            if value < 0:
                yield ("status", section, name), f"{NEGATIVE} (got {value})"


def _unknown_product(manifest: Manifest, catalogue: GPUCatalogue) -> Iterator[Diagnostic]:
    labels = manifest.model.metadata.labels
    product = labels.get(machines.PRODUCT_LABEL)
    accelerator = labels.get(GKE_ACCELERATOR_LABEL)
    if not product and accelerator and product_model(labels, catalogue) is None:
        message = (
            f"unknown GKE accelerator {accelerator!r}: the node loads without a GPU model "
            f"(known: {', '.join(sorted(GKE_ACCELERATORS))}; or define a GPUModel with it as an alias)"
        )
        yield manifest.diagnostic(("metadata", "labels", GKE_ACCELERATOR_LABEL), message, "warning")
    if product and catalogue.get(base_product(product)) is None:
        message = (
            f"unknown GPU product {product!r}: the node loads without a GPU model "
            f"(known: {', '.join(catalogue.names())}; or define a GPUModel)"
        )
        yield manifest.diagnostic(("metadata", "labels", machines.PRODUCT_LABEL), message, "warning")


def _node_name_collisions(manifests: Sequence[Manifest]) -> Iterator[Diagnostic]:
    """A Node named like a node a pool generates (up to its max), or two pools generating one name."""
    owners: dict[str, Manifest] = {}
    pools = [m for m in manifests if isinstance(m.model, machines.NodePool)]
    seen_pools: set[str] = set()
    for manifest in pools:
        if manifest.name in seen_pools:
            continue  # a duplicate NodePool is reported as such
        seen_pools.add(manifest.name)
        upto = min(max(manifest.model.spec.sizes()[2], 0), MAX_NODES_PER_POOL)
        for name in nodes_convert.node_names(manifest.model, upto):
            if name in owners:
                message = f"node name {name!r} is also {_origin(owners[name])}"
                yield manifest.diagnostic(("metadata", "name"), message)
            owners.setdefault(name, manifest)
    for manifest in manifests:
        if isinstance(manifest.model, machines.Node) and manifest.name in owners:
            message = f"node name {manifest.name!r} is also {_origin(owners[manifest.name])}"
            yield manifest.diagnostic(("metadata", "name"), message)


def _origin(pool: Manifest) -> str:
    return f"generated by NodePool/{pool.name} ({pool.path}:{pool.line})"


# --- after conversion -------------------------------------------------------------------------


def placement_warnings(
    manifests: Sequence[Manifest], config: ClusterConfig, nodes: Sequence[Node]
) -> list[Diagnostic]:
    """Flavors that no node matches, and Topology levels missing on a flavor's nodes (when nodes exist)."""
    if not nodes:
        return []
    out: list[Diagnostic] = []
    topologies = {m.name: m for m in manifests if isinstance(m.model, kueue.Topology)}
    for manifest in manifests:
        if not isinstance(manifest.model, kueue.ResourceFlavor) or manifest.name not in config.flavors:
            continue
        flavor = config.flavors[manifest.name]
        matching = [n for n in nodes if all(n.labels.get(k) == v for k, v in flavor.node_labels.items())]
        if not matching:
            message = "no node carries these labels: pods of this flavor cannot be placed"
            out.append(manifest.diagnostic(("spec", "nodeLabels"), message, "warning"))
            continue
        topology = topologies.get(flavor.topology_name or "")
        if topology is not None:
            out += _missing_levels(topology, manifest.name, matching)
    return out


def _missing_levels(topology: Manifest, flavor: str, nodes: Sequence[Node]) -> Iterator[Diagnostic]:
    for index, level in enumerate(topology.model.spec.levels):
        missing = [n.name for n in nodes if level.node_label not in n.labels]
        if missing:
            example = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            message = f"nodes of flavor {flavor!r} do not carry label {level.node_label!r} ({example})"
            yield topology.diagnostic(("spec", "levels", index, "nodeLabel"), message, "warning")


def oversized_pods(
    manifests: Sequence[Manifest], workloads: Sequence[Workload], nodes: Sequence[Node]
) -> list[Diagnostic]:
    """Warn about pod sets whose single pod no node could hold even empty (when nodes exist).

    Selectors and flavors are not considered: this catches requests larger than every machine,
    which the admission engine would admit on quota and the pods would then wait for ever.
    """
    if not nodes:
        return []
    machines_by_shape = {
        (tuple(sorted(n.allocatable.items())), n.sharing, n.gpu_count, n.gpu_memory_mib): n for n in nodes
    }
    empty = [NodeCapacity(node) for node in machines_by_shape.values()]
    by_key = workload_manifests(manifests)
    out: list[Diagnostic] = []
    for workload in workloads:
        manifest = by_key.get((workload.namespace, workload.name))
        if manifest is None:
            continue
        for index, pod_set in enumerate(workload.pod_sets):
            shape = pod_shape(pod_set.requests)
            reasons = [capacity.shortage(shape) for capacity in empty]
            if all(reasons):
                why = sorted({r for r in reasons if r})
                message = (
                    f"no node can hold one pod of pod set {pod_set.name!r} even when empty "
                    f"({'; '.join(why)}): it would be admitted on quota and never start"
                )
                out.append(manifest.diagnostic(("spec", "podSets", index), message, "warning"))
    return out
