"""Parsers of single trace fields into the units :class:`TraceJob` keeps.

Each takes the column name and the text as written and returns the value,
or raises :class:`RowError` with ``<column> <value>: <why>`` so that a bad
row says exactly what to fix. Values are stripped of surrounding spaces by
the callers.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, InvalidOperation

from gpuq.api.names import dns_label_problem, dns_subdomain_problem
from gpuq.core.quantity import QuantityError, to_amount
from gpuq.sim.traces.reading import MAX_SECONDS, RowError

MAX_PODS = 100_000
MAX_GPUS_PER_POD = 64
MAX_CPU_MILLI = 4096 * 1000  # per pod; more than any node holds
MAX_MEMORY_BYTES = 64 * 2**40  # per pod
_INT32 = 2**31 - 1  # Kueue priorities are int32
_FAILED = {"": False, "completed": False, "succeeded": False, "failed": True}


def _problem(column: str, text: str, why: str) -> RowError:
    return RowError(f"{column} {text!r}: {why}")


def seconds(column: str, text: str, *, positive: bool) -> float:
    """A time or duration in seconds: finite, at least 0 (above 0 when ``positive``), at most 10 years."""
    if not text:
        raise RowError(f"missing {column}")
    try:
        value = float(text)
    except ValueError:
        raise _problem(column, text, "not a number of seconds") from None
    if not math.isfinite(value):
        raise _problem(column, text, "not a finite number of seconds")
    if positive and value <= 0:
        raise _problem(column, text, "must be greater than 0")
    if value < 0:
        raise _problem(column, text, "must be 0 or more")
    if value > MAX_SECONDS:
        raise _problem(column, text, "more than 10 years: check the unit")
    return value


def count(column: str, text: str, *, low: int, high: int) -> int:
    """A whole number in ``[low, high]``; ``2.0`` reads as 2 (JSON writers emit it)."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise _problem(column, text, "not a whole number") from None
        if not number.is_integer():
            raise _problem(column, text, "not a whole number") from None
        value = int(number)
    if value < low:
        raise _problem(column, text, f"must be at least {low}")
    if value > high:
        raise _problem(column, text, f"more than {high:,}: check the column")
    return value


def gpu_milli(column: str, text: str) -> int:
    """GPUs per pod in thousandths: ``0.5`` -> 500, ``2`` -> 2000.

    Below one GPU a share is allowed to a thousandth; from one GPU up only
    whole GPUs, as the device plugin hands out whole devices.
    """
    if text.isdigit():
        whole = int(text)
        if whole > MAX_GPUS_PER_POD:
            raise _problem(column, text, f"more than {MAX_GPUS_PER_POD} GPUs per pod")
        return whole * 1000
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _problem(column, text, "not a number of GPUs") from None
    if not value.is_finite():
        raise _problem(column, text, "not a finite number of GPUs")
    if value < 0:
        raise _problem(column, text, "must be 0 or more")
    if value > MAX_GPUS_PER_POD:
        raise _problem(column, text, f"more than {MAX_GPUS_PER_POD} GPUs per pod")
    if value >= 1 and value != value.to_integral_value():
        raise _problem(column, text, "from 1 GPU up only whole GPUs (fractions only below 1)")
    milli = value * 1000
    if milli != milli.to_integral_value():
        raise _problem(column, text, "finer than a thousandth of a GPU")
    return int(milli)


def quantity(column: str, resource: str, text: str) -> int | None:
    """A Kubernetes quantity as milli-CPU (``cpu``) or bytes (``memory``); empty is None."""
    if not text:
        return None
    try:
        amount = to_amount(resource, text)
    except QuantityError as err:
        raise _problem(column, text, str(err).replace(repr(text) + " ", "", 1)) from None
    if amount < 0:
        raise _problem(column, text, "must be 0 or more")
    if amount > (MAX_CPU_MILLI if resource == "cpu" else MAX_MEMORY_BYTES):
        raise _problem(column, text, "more than any node holds: check the unit")
    return amount


def priority(column: str, text: str) -> str | None:
    """A WorkloadPriorityClass name or an int32, kept as written; empty is None."""
    if not text:
        return None
    digits = text[1:] if text[0] in "+-" else text
    if digits.isdigit():
        if abs(int(text)) > _INT32:
            raise _problem(column, text, "outside the int32 range of Kueue priorities")
        return text
    if problem := dns_subdomain_problem(text):
        raise _problem(column, text, f"neither an integer nor a priority class name ({problem})")
    return text


def failed(column: str, text: str) -> bool:
    """``failed`` -> True; ``completed``, ``succeeded`` or empty -> False (any case)."""
    try:
        return _FAILED[text.lower()]
    except KeyError:
        raise _problem(column, text, "must be completed, succeeded, failed or empty") from None


def object_name(column: str, text: str) -> str:
    """A workload name: required, an RFC 1123 subdomain."""
    if not text:
        raise RowError(f"missing {column}")
    if problem := dns_subdomain_problem(text):
        raise _problem(column, text, problem)
    return text


_label_problem = functools.lru_cache(maxsize=4096)(dns_label_problem)


def label(column: str, text: str) -> str:
    """A namespace or LocalQueue name: required, an RFC 1123 label (checked once per distinct value)."""
    if not text:
        raise RowError(f"missing {column}")
    if problem := _label_problem(text):
        raise _problem(column, text, problem)
    return text
