"""Kubernetes name syntax: object names, label keys and values, resource names.

Each ``*_problem`` function returns why a value is invalid, or None; the
messages are meant to follow a field path in a diagnostic.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from gpuq.api.diagnostics import FieldPath

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

Findings = Iterator[tuple[FieldPath, str]]
"""(field path, message) pairs a check yields; the caller locates them."""


def dns_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 subdomain (most object names), or None."""
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.match(value):
        return "must be a lowercase RFC 1123 subdomain (lowercase letters, digits, '-' and '.')"
    return None


def dns_label_problem(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 label (namespaces, pod set names), or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS_LABEL.match(value):
        return "must be a lowercase RFC 1123 label (lowercase letters, digits and '-')"
    return None


def qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a qualified name (``[prefix/]name``: label keys, resource names), or None."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or dns_subdomain_problem(prefix)):
        return "prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return "must be a qualified name (alphanumerics, '-', '_' or '.', at most 63, optional DNS prefix)"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value (at most 63 alphanumerics, '-', '_', '.'), or None."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return "must be a label value (at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)"
    return None


def label_problems(labels: Mapping[str, str], at: FieldPath) -> Findings:
    """Invalid keys or values of a label map, each at ``(*at, key)``."""
    for key, value in labels.items():
        if problem := qualified_name_problem(key):
            yield (*at, key), f"invalid label key {key!r}: {problem}"
        elif label_value_problem(value):
            yield (*at, key), f"invalid label value {value!r}"
