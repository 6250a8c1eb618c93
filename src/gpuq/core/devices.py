"""How the NVIDIA device plugin and GPU Feature Discovery (GFD) present a node's GPUs.

Given a node's GPU model, GPU count and sharing configuration, this module
answers three questions the rest of gpuq asks when it builds or checks a
``Node``: which extended resources the node's allocatable gains
(``device_resources``), what is wrong with the configuration
(``sharing_problems``), and which ``nvidia.com/*`` labels GFD would write
(``gfd_labels``), so ResourceFlavor node labels written against real clusters
match simulated nodes.

``GPUSharing.mig_layout`` holds one layout per GPU; a single layout means "the
same on every GPU" (like mig-parted's ``devices: all``). Each layout is a tuple
of profile names, or one named mig-parted layout such as ``("all-balanced",)``.
An empty layout leaves that GPU whole (MIG disabled).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpuq.core.gpus import GPUModelSpec
from gpuq.core.mig import MIG_TABLES, MigLayoutError, MigProfile, expand_layout, layout_problems
from gpuq.core.nodes import GPU, GPU_MEMORY, GPU_MILLI, GPU_SHARED, MIG_PREFIX, GPUSharing, SharingMode

MIG_MODES = frozenset({SharingMode.MIG_SINGLE, SharingMode.MIG_MIXED})

_LABEL = "nvidia.com/gpu."
_MIG_STRATEGY = {SharingMode.MIG_SINGLE: "single", SharingMode.MIG_MIXED: "mixed"}


def per_gpu_layouts(
    spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing
) -> tuple[tuple[str, ...], ...]:
    """Each of the ``gpu_count`` GPUs' MIG profile names, named layouts expanded.

    A single layout applies to every GPU; a longer list is cut to ``gpu_count``
    and a shorter one leaves the remaining GPUs whole (``sharing_problems``
    reports both). Layouts that do not resolve against the model's MIG table
    are kept as given. Outside the MIG modes, or for a model without a MIG
    table, every GPU is whole.
    """
    if sharing.mode not in MIG_MODES or gpu_count <= 0:
        return ((),) * max(gpu_count, 0)
    given = sharing.mig_layout
    chosen = given * gpu_count if len(given) == 1 else (*given[:gpu_count], *((),) * (gpu_count - len(given)))
    table = spec.mig_table if spec is not None else None
    if table is None or table not in MIG_TABLES:  # MIG cannot be enabled: the plugin sees whole GPUs
        return ((),) * gpu_count
    return tuple(_expand(table, layout) for layout in chosen)


def _expand(table: str, layout: tuple[str, ...]) -> tuple[str, ...]:
    try:
        return expand_layout(table, layout[0] if len(layout) == 1 else layout)
    except MigLayoutError:
        return layout


def device_resources(spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing) -> dict[str, int]:
    """The extended resources the device plugin adds to allocatable, in whole units.

    EXCLUSIVE: ``nvidia.com/gpu: n``. TIME_SLICING: ``n × replicas`` of
    ``nvidia.com/gpu`` (``nvidia.com/gpu.shared`` with ``rename_by_default``).
    MIG_MIXED: ``nvidia.com/mig-<profile>`` per profile, summed over GPUs.
    MIG_SINGLE: every instance as one ``nvidia.com/gpu``. In both MIG modes a GPU
    with an empty layout stays one whole ``nvidia.com/gpu``. FRACTIONAL: the
    whole GPUs plus ``gpuq.dev/gpu-milli`` (1000 per GPU) and
    ``gpuq.dev/gpu-memory`` (the model's MiB per GPU, when known). Zero amounts
    are left out; no GPUs give ``{}``. Never raises: bad configurations are
    ``sharing_problems``' business (replicas below 1 count as 1 here).
    """
    if gpu_count <= 0:
        return {}
    mode = sharing.mode
    if mode is SharingMode.TIME_SLICING:
        return {GPU_SHARED if sharing.rename_by_default else GPU: gpu_count * max(sharing.replicas, 1)}
    if mode is SharingMode.FRACTIONAL:
        memory_mib = spec.memory_mib if spec is not None else 0
        found = {GPU: gpu_count, GPU_MILLI: gpu_count * 1000, GPU_MEMORY: gpu_count * memory_mib}
        return {name: amount for name, amount in found.items() if amount > 0}
    if mode not in MIG_MODES:
        return {GPU: gpu_count}
    layouts = per_gpu_layouts(spec, gpu_count, sharing)
    whole = sum(1 for layout in layouts if not layout)
    if mode is SharingMode.MIG_SINGLE:
        return {GPU: whole + sum(len(layout) for layout in layouts)}
    slices = Counter(name for layout in layouts for name in layout)
    found = {GPU: whole} | {MIG_PREFIX + name: slices[name] for name in sorted(slices)}
    return {name: amount for name, amount in found.items() if amount > 0}


def sharing_problems(spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing) -> list[str]:
    """What is wrong with this sharing configuration for this model; empty when it is usable.

    Checked: a negative GPU count; replicas below 1, above 1 outside time-slicing,
    or exactly 1 with time-slicing (the device plugin wants at least 2);
    ``rename_by_default`` outside time-slicing; fractional sharing without the
    model's memory; a MIG layout outside the MIG modes; and in the MIG modes the
    checks of ``_mig_problems``.
    """
    mode = sharing.mode
    problems: list[str] = []
    if gpu_count < 0:
        problems.append(f"gpu_count is {gpu_count}, it cannot be negative")
    if sharing.replicas < 1:
        problems.append(f"replicas is {sharing.replicas}, it must be at least 1")
    elif sharing.replicas > 1 and mode is not SharingMode.TIME_SLICING:
        problems.append(f"replicas={sharing.replicas} needs time-slicing, the mode is {mode}")
    elif mode is SharingMode.TIME_SLICING and sharing.replicas == 1:
        problems.append("time-slicing needs replicas of at least 2 (the device plugin rejects fewer)")
    if sharing.rename_by_default and mode is not SharingMode.TIME_SLICING:
        problems.append(f"rename_by_default only applies to time-slicing, the mode is {mode}")
    if mode is SharingMode.FRACTIONAL and (spec is None or spec.memory_mib <= 0):
        problems.append("fractional sharing needs the GPU model's memory, and the model gives none")
    if mode in MIG_MODES:
        problems.extend(_mig_problems(spec, gpu_count, sharing))
    elif sharing.mig_layout:
        problems.append(f"mig_layout is set but the mode is {mode}; MIG layouts need mig-single or mig-mixed")
    return problems


def _mig_problems(spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing) -> list[str]:
    """MIG checks, in order.

    1. The model must have a MIG table (nothing else is checked without one).
    2. ``mig_layout`` must list one layout per GPU, or exactly one for all.
    3. Each layout must resolve and fit one GPU (``layout_problems``), messages
       prefixed ``GPU i: `` (``GPU 0-7: `` for a layout shared by all).
    4. MIG single: every GPU partitioned, all into one and the same profile.
    """
    table = spec.mig_table if spec is not None else None
    if table is None or table not in MIG_TABLES:
        model = spec.name if spec is not None else "an unknown GPU model"
        return [f"{model} cannot be MIG-partitioned (no MIG table), but the mode is {sharing.mode}"]
    given = sharing.mig_layout
    problems: list[str] = []
    if len(given) not in (1, gpu_count):
        problems.append(
            f"mig_layout has {len(given)} layouts for {gpu_count} GPUs; give one per GPU or one for every GPU"
        )
    if len(given) == 1:
        every = "GPU 0" if gpu_count <= 1 else f"GPU 0-{gpu_count - 1}"
        groups: Sequence[tuple[str, tuple[str, ...]]] = [(every, given[0])]
    else:
        groups = [(f"GPU {i}", layout) for i, layout in enumerate(given[:gpu_count])]
    profiles: set[str] = set()
    for prefix, layout in groups:
        try:
            names = expand_layout(table, layout[0] if len(layout) == 1 else layout)
        except MigLayoutError as error:
            problems.append(f"{prefix}: {error}")
            continue
        problems.extend(f"{prefix}: {problem}" for problem in layout_problems(table, names))
        profiles.update(names)
        if sharing.mode is SharingMode.MIG_SINGLE and not names:
            problems.append(f"{prefix}: MIG single needs every GPU partitioned, this layout is empty")
    if sharing.mode is SharingMode.MIG_SINGLE and len(profiles) > 1:
        order = list(MIG_TABLES[table])
        listed = ", ".join(sorted(profiles, key=order.index))
        problems.append(f"MIG single needs the same single profile on every GPU, the layout mixes {listed}")
    return problems


def gfd_labels(spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing) -> dict[str, str]:
    """The ``nvidia.com/*`` node labels GFD (with the GPU operator) writes for these GPUs.

    Mirrors GFD's labelers (k8s-device-plugin ``internal/lm``): ``gpu.product``
    gains ``-SHARED`` under time-slicing with replicas > 1 unless the resource is
    renamed (renamed replicas are told apart by their resource name instead);
    ``gpu.replicas`` / ``gpu.sharing-strategy`` are ``1`` / ``none`` without
    sharing; ``mig.strategy`` is written only in the MIG modes (GFD writes it
    only when run with a MIG strategy); MIG single rewrites ``gpu.product``,
    ``gpu.count`` and ``gpu.memory`` for the slice (``-MIG-INVALID`` and zeros
    when the GPUs are not uniformly partitioned); MIG mixed adds
    ``nvidia.com/mig-<profile>.*`` per profile and, when every GPU is
    partitioned, reports ``gpu.replicas`` 0 as GFD does for MIG-enabled GPUs.
    MIG memory is nominal (the profile's GB × 1024). ``gpu.present`` comes from
    the GPU operator. Fractional sharing is invisible to GFD. No GPUs: ``{}``.
    Keys are sorted.
    """
    if spec is None or gpu_count <= 0:
        return {}
    labels = _full_gpu_labels(spec, gpu_count)
    mode = sharing.mode
    if mode is SharingMode.TIME_SLICING and sharing.replicas > 1:
        labels[_LABEL + "replicas"] = str(sharing.replicas)
        labels[_LABEL + "sharing-strategy"] = "time-slicing"
        if not sharing.rename_by_default:
            labels[_LABEL + "product"] = f"{spec.product}-SHARED"
    elif mode in MIG_MODES:
        labels["nvidia.com/mig.strategy"] = _MIG_STRATEGY[mode]
        table = MIG_TABLES.get(spec.mig_table) if spec.mig_table is not None else None
        if table is not None:
            layouts = per_gpu_layouts(spec, gpu_count, sharing)
            if mode is SharingMode.MIG_SINGLE:
                labels.update(_mig_single_labels(spec, table, layouts))
            else:
                labels.update(_mig_mixed_labels(spec, table, layouts))
    return dict(sorted(labels.items()))


def _full_gpu_labels(spec: GPUModelSpec, gpu_count: int) -> dict[str, str]:
    labels = {
        "nvidia.com/gpu.present": "true",
        _LABEL + "product": spec.product,
        _LABEL + "count": str(gpu_count),
        _LABEL + "family": spec.family,
        _LABEL + "compute.major": str(spec.compute_major),
        _LABEL + "compute.minor": str(spec.compute_minor),
        _LABEL + "replicas": "1",
        _LABEL + "sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if spec.mig_table is not None else "false",
        "nvidia.com/mps.capable": "false",
    }
    if spec.memory_mib > 0:  # GFD omits the memory label when NVML reports none
        labels[_LABEL + "memory"] = str(spec.memory_mib)
    return labels


def _mig_single_labels(
    spec: GPUModelSpec, table: Mapping[str, MigProfile], layouts: Sequence[tuple[str, ...]]
) -> dict[str, str]:
    if not any(layouts):  # no MIG-enabled GPU: GFD treats single like none
        return {}
    distinct = {name for layout in layouts for name in layout}
    uniform = len(distinct) == 1 and all(layouts) and next(iter(distinct)) in table
    if not uniform:
        invalid = {"product": f"{spec.product}-MIG-INVALID", "count": "0", "replicas": "0", "memory": "0"}
        return {_LABEL + key: value for key, value in invalid.items()}
    return _mig_device_labels(_LABEL, spec, table, next(iter(distinct)), sum(map(len, layouts)))


def _mig_mixed_labels(
    spec: GPUModelSpec, table: Mapping[str, MigProfile], layouts: Sequence[tuple[str, ...]]
) -> dict[str, str]:
    labels: dict[str, str] = {}
    if all(layouts):
        labels[_LABEL + "replicas"] = "0"
    counts = Counter(name for layout in layouts for name in layout)
    for name in sorted(counts):
        labels.update(_mig_device_labels(f"{MIG_PREFIX}{name}.", spec, table, name, counts[name]))
    return labels


def _mig_device_labels(
    prefix: str, spec: GPUModelSpec, table: Mapping[str, MigProfile], profile_name: str, count: int
) -> dict[str, str]:
    """GFD's labels for one MIG device type, keys under ``prefix`` (its resource name and a dot)."""
    labels = {
        "product": f"{spec.product}-MIG-{profile_name}",
        "count": str(count),
        "replicas": "1",
        "sharing-strategy": "none",
    }
    profile = table.get(profile_name)
    if profile is not None:
        labels["memory"] = str(profile.memory_mib)
        labels["slices.gi"] = str(profile.compute_slices)
        labels["slices.ci"] = str(profile.compute_slices)
    return {prefix + key: value for key, value in labels.items()}
