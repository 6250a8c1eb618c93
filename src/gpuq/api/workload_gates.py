"""Two Workload annotations other controllers set to steer admission: ``admission-gated-by`` and
``priority-boost``.

- ``kueue.x-k8s.io/admission-gated-by`` (KEP-6915, the AdmissionGatedBy gate, beta and on since
  v0.19): a comma-separated list of controller names, each domain-prefixed (``example.com/ctrl``)
  and at most 63 characters. Kueue copies it from the job to its Workload
  (``PropagateAdmissionGatedByAnnotation`` in pkg/controller/jobframework/reconciler.go) and does
  not queue the Workload while it is non-empty: it stays pending with "Admission is gated by: ..."
  (pkg/controller/core/workload_controller.go). The format is checked as
  pkg/util/webhook/validation_admissiongatedby.go checks it.
- ``kueue.x-k8s.io/priority-boost`` (KEP-7990, the PriorityBoost gate, alpha and off by default):
  a signed 32-bit integer on the Workload added to its priority (``EffectivePriority`` in
  pkg/util/priority/priority.go). Applied only when the Configuration's ``featureGates`` turn it on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping

from gpuq.api.kueue import parse_duration
from gpuq.api.names import dns_subdomain_problem

ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
MIN_RUNTIME = "gpuq.dev/min-runtime"
"""gpuq's preemption protection: for this long after its quota is reserved the workload is no
preemption candidate (a Go duration, ``30m``; docs/preemption-protection.md)."""
USAGE_HALF_LIFE = "gpuq.dev/usage-half-life"
"""On a root Cohort: its tree's fair sharing ranks by decayed usage (docs/usage-fair-share.md)."""
EXPECTED_DURATION = "gpuq.dev/expected-duration"
"""How long a workload runs, as its owner declares it: forecasts and the simulator read it, and
backfill admits a workload ahead of a reserved head only when it ends in time (docs/backfill.md)."""
PRIORITY_BOOST = "kueue.x-k8s.io/priority-boost"
GATE_DEFAULTS: Mapping[str, bool] = {"AdmissionGatedBy": True, "PriorityBoost": False}
MAX_GATE_NAME_LENGTH = 63
_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")  # apimachinery's IsDomainPrefixedPath
_INT32 = (-(2**31), 2**31 - 1)
_SIGNED = re.compile(r"^[+-]?[0-9]+$")


def enabled(gates: Mapping[str, bool], name: str) -> bool:
    return gates.get(name, GATE_DEFAULTS[name])


def gates_of(value: str) -> list[str]:
    """The controller names of an ``admission-gated-by`` value (Kueue parses it as CSV)."""
    return [part.strip() for part in value.split(",")] if value else []


def admission_gate_problems(value: str) -> Iterator[str]:
    """Why an ``admission-gated-by`` value is refused (Kueue's webhook), one message per problem."""
    seen: set[str] = set()
    for gate in gates_of(value):
        if not gate:
            yield "cannot contain empty gate names"
            continue
        if gate in seen:
            yield f"duplicate gate name: {gate}"
            continue
        seen.add(gate)
        host, slash, path = gate.partition("/")
        if not slash or not path:
            yield f"{gate!r} must be a domain-prefixed path (such as 'acme.io/foo')"
        elif problem := dns_subdomain_problem(host):
            yield f"{gate!r}: prefix {problem}"
        elif not _PATH.match(path):
            yield f"{gate!r}: path must contain only valid path characters"
        if len(gate) > MAX_GATE_NAME_LENGTH:
            yield f"{gate!r} must have at most {MAX_GATE_NAME_LENGTH} characters"


def min_runtime_s(value: str | None) -> float | None:
    """The seconds of ``gpuq.dev/min-runtime`` (0 without it); None when it is not a duration >= 0."""
    if value is None:
        return 0.0
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def usage_half_life_s(value: str) -> float | None:
    """The seconds of a root cohort's ``gpuq.dev/usage-half-life``; None unless a positive duration."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def priority_boost(value: str | None) -> int | None:
    """The boost a ``priority-boost`` value gives; None when it is not a signed 32-bit integer
    (Kueue's webhook refuses it; an empty value too: "use \"0\" explicitly")."""
    if value is None:
        return 0
    if not _SIGNED.match(value):  # strconv.ParseInt(value, 10, 32): no spaces, no underscores
        return None
    boost = int(value)
    return boost if _INT32[0] <= boost <= _INT32[1] else None


def expected_duration(value: str | None) -> tuple[float | None, str]:
    """Seconds from a ``gpuq.dev/expected-duration`` annotation (``30m``, ``2h``, ``1h30m``, ``900``), or
    None with why it was ignored."""
    if value is None:
        return None, ""
    text = value.strip()
    try:
        seconds = float(text) if _is_number(text) else parse_duration(text)
    except ValueError:
        return None, f"ignored {EXPECTED_DURATION}={value!r}: not a duration (e.g. 30m, 2h, 1h30m, 900)"
    if not math.isfinite(seconds) or seconds <= 0:
        return None, f"ignored {EXPECTED_DURATION}={value!r}: must be a positive duration"
    return seconds, ""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
