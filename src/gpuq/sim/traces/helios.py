"""SenseTime Helios (SC '21) virtual clusters as Kueue queues, and their per-minute timelines.

The Helios job logs are not staged; what is (``data/traces/helios``) are
the daily GPU quota of every virtual cluster (VC) and, for Earth in May
2020, each VC's per-minute running and pending demand. The quotas become a
Kueue configuration to simulate against (one ClusterQueue per VC in one
cohort, so idle quota can be lent, the imbalance the paper describes); the
timelines are what a replay is calibrated on.

Names: a VC column ``vc6YE`` becomes ``vc-6ye`` (lowercase DNS label) for
its Namespace, ClusterQueue and LocalQueue; the ``gpuq.dev/source``
annotation keeps the original spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gpuq.api.names import dns_label_problem
from gpuq.sim.traces.mapping import derived_name
from gpuq.sim.traces.model import TraceError
from gpuq.sim.traces.reading import column_index, read_csv

KUEUE = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
SOURCE = "gpuq.dev/source"


@dataclass(frozen=True, slots=True)
class VcQuota:
    """One VC's GPUs on the chosen date: the column as written and the queue name derived from it."""

    vc: str
    name: str
    gpus: int


@dataclass(frozen=True, slots=True)
class HeliosQueues:
    """Kueue manifests (plain dicts, ready for ``yaml.safe_dump_all``) of one day's VC quotas.

    Order: ResourceFlavor, Cohort, then per VC sorted by name its Namespace,
    ClusterQueue and LocalQueue. ``quotas`` holds only the VCs with GPUs
    that day, sorted by name; ``total_gpus`` is their sum.
    """

    date: str
    quotas: tuple[VcQuota, ...]
    total_gpus: int
    manifests: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]

    def to_yaml(self) -> str:
        return yaml.safe_dump_all(self.manifests, sort_keys=False)


def helios_queues(
    path: str | Path,
    date: str | None = None,
    *,
    cohort: str = "helios",
    flavor: str = "default",
    namespace_prefix: str = "",
) -> HeliosQueues:
    """The quotas of ``date`` (``YYYY-MM-DD``; None: the latest date) in a ``*_cluster_gpu_number.csv``.

    Every VC with a non-zero quota gets a ClusterQueue with ``nominalQuota``
    = its GPUs of ``nvidia.com/gpu`` in ``flavor``, in ``cohort``, reclaiming
    lent quota with ``reclaimWithinCohort: Any``; its namespace is
    ``namespace_prefix`` + the name. Raises TraceError for an unknown date
    (naming the first and last), missing columns, a cell that is not a whole
    number, or names that are not DNS labels. A ``total`` that differs from
    the sum of the VCs is not an error but a note: the file is what it is.
    """
    source = Path(path)
    names = (("cohort", cohort, cohort), ("flavor", flavor, flavor))
    for what, value, label in (*names, ("namespace prefix", namespace_prefix, namespace_prefix + "vc")):
        if problem := dns_label_problem(label):
            raise TraceError(f"{what} {value!r}: {problem}")
    header, by_date = _rows_by_date(source)
    first, last = min(by_date), max(by_date)
    chosen = last if date is None else date
    if chosen not in by_date:
        raise TraceError(f"{source}: no quotas for date {chosen!r}; dates run from {first} to {last}")
    line, row = by_date[chosen]
    cells = dict(zip(header, row, strict=True))
    vcs = [column for column in header if column not in ("date", "total")]
    gpus = {vc: _whole(source, line, vc, cells[vc]) for vc in vcs}
    quotas = _quotas(source, {vc: n for vc, n in gpus.items() if n > 0})
    total = sum(q.gpus for q in quotas)
    stated = _whole(source, line, "total", cells["total"])
    notes = [
        f"date {chosen} ({'latest of' if date is None else 'one of'} {len(by_date)} days, {first} to {last})",
        f"{len(quotas)} ClusterQueues in cohort {cohort}, {total} GPUs",
    ]
    skipped = [vc for vc in vcs if gpus[vc] == 0]
    if skipped:
        notes.append(f"{len(skipped)} VC(s) with no GPUs that day are left out: {', '.join(skipped)}")
    if stated != total:
        notes.append(f"the total column says {stated} GPUs but the VCs add up to {total}")
    manifests = _manifests(quotas, f"{source.name} on {chosen}", cohort, flavor, namespace_prefix)
    return HeliosQueues(chosen, quotas, total, manifests, tuple(notes))


def _rows_by_date(source: Path) -> tuple[list[str], dict[str, tuple[int, list[str]]]]:
    """The header and each date's first row with its line; TraceError for a malformed or empty file."""
    header, rows = read_csv(source)
    index = column_index(header, source, ("date", "total"))["date"]
    by_date: dict[str, tuple[int, list[str]]] = {}
    for line, row in rows:
        if len(row) != len(header):
            raise TraceError(f"{source}:{line}: {len(row)} fields where the header has {len(header)}")
        by_date.setdefault(row[index].strip(), (line, row))
    if not by_date:
        raise TraceError(f"{source}: no dates (the file has only a header)")
    return header, by_date


def _whole(source: Path, line: int, column: str, text: str) -> int:
    if not text.strip().isdigit():
        raise TraceError(f"{source}:{line}: {column} {text!r}: not a whole number")
    return int(text)


def _quotas(source: Path, gpus: dict[str, int]) -> tuple[VcQuota, ...]:
    """Quotas sorted by derived name; two columns that derive the same name are a TraceError."""
    named: dict[str, VcQuota] = {}
    for vc, count in gpus.items():
        name = derived_name(vc.removeprefix("vc"), "vc-", always=True)
        if name is None:
            raise TraceError(f"{source}: column {vc!r}: no DNS label can be derived from it")
        if name in named:
            raise TraceError(f"{source}: columns {named[name].vc!r} and {vc!r} both become {name!r}")
        named[name] = VcQuota(vc, name, count)
    return tuple(named[name] for name in sorted(named))


def _manifests(
    quotas: tuple[VcQuota, ...], origin: str, cohort: str, flavor: str, namespace_prefix: str
) -> tuple[dict[str, Any], ...]:
    out = [_object("ResourceFlavor", {"name": flavor}), _object("Cohort", {"name": cohort})]
    for quota in quotas:
        namespace = namespace_prefix + quota.name
        annotations = {SOURCE: f"{origin}: {quota.vc}, {quota.gpus} GPUs"}
        resources = [{"name": GPU, "nominalQuota": quota.gpus}]
        groups = [{"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": resources}]}]
        spec = {"cohortName": cohort, "namespaceSelector": {}, "preemption": {"reclaimWithinCohort": "Any"}}
        out += [
            _object("Namespace", {"name": namespace}, api="v1"),
            _object(
                "ClusterQueue",
                {"name": quota.name, "annotations": annotations},
                spec | {"resourceGroups": groups},
            ),
            _object("LocalQueue", {"name": quota.name, "namespace": namespace}, {"clusterQueue": quota.name}),
        ]
    return tuple(out)


def _object(
    kind: str, metadata: dict[str, Any], spec: dict[str, Any] | None = None, api: str = KUEUE
) -> dict[str, Any]:
    manifest: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": metadata}
    return manifest if spec is None else manifest | {"spec": spec}


# --- per-minute timelines -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VcMinute:
    """One minute of one VC: its quota, and GPUs and jobs (CPU and GPU jobs) running and waiting."""

    minute: int  # minutes since the timeline's start
    total_gpus: int
    running_gpus: int
    pending_gpus: int  # GPUs asked for by waiting jobs
    running_jobs: int
    pending_jobs: int
    running_gpu_jobs: int
    pending_gpu_jobs: int


_COLUMNS = (
    "total_gpu_num", "running_gpu_num", "pending_gpu_num", "running_job_num", "pending_job_num",
    "running_gpujob_num", "pending_gpujob_num",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class HeliosTimeline:
    """A VC's minutes in file order; ``start`` is the first row's time as written."""

    vc: str
    start: str
    minutes: tuple[VcMinute, ...]

    @property
    def mean_running_gpus(self) -> float:
        return sum(m.running_gpus for m in self.minutes) / len(self.minutes) if self.minutes else 0.0

    @property
    def mean_pending_gpus(self) -> float:
        return sum(m.pending_gpus for m in self.minutes) / len(self.minutes) if self.minutes else 0.0

    @property
    def pending_share(self) -> float:
        """The fraction of minutes in which some GPU demand waited."""
        waiting = sum(1 for m in self.minutes if m.pending_gpus > 0)
        return waiting / len(self.minutes) if self.minutes else 0.0


def helios_timeline(path: str | Path) -> HeliosTimeline:
    """A ``earth_vc_sequence_2020-05/<vc>.csv.xz`` file; the VC is the file name without suffixes.

    ``time`` (``YYYY-MM-DD HH:MM:SS``) becomes whole minutes since the first
    row. Raises TraceError naming the line for a time that does not parse, is
    not a whole minute after the start, or a count that is not a whole number.
    """
    source = Path(path)
    header, rows = read_csv(source)
    index = column_index(header, source, ("time", *_COLUMNS))
    vc = source.name.split(".", 1)[0]
    start: datetime | None = None
    minutes: list[VcMinute] = []
    for line, row in rows:
        if len(row) != len(header):
            raise TraceError(f"{source}:{line}: {len(row)} fields where the header has {len(header)}")
        text = row[index["time"]]
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            raise TraceError(f"{source}:{line}: time {text!r}: not YYYY-MM-DD HH:MM:SS") from None
        start = start or at
        offset_s = (at - start).total_seconds()
        if offset_s % 60:
            raise TraceError(f"{source}:{line}: time {text!r}: not a whole minute after {start}")
        counts = [_whole(source, line, c, row[index[c]]) for c in _COLUMNS]
        minutes.append(VcMinute(int(offset_s // 60), *counts))
    return HeliosTimeline(vc, str(start) if start else "", tuple(minutes))
