"""``metadata.generateName``: the names an API server gives objects created without one.

Kubernetes' ``SimpleNameGenerator`` (``k8s.io/apiserver/pkg/storage/names/generate.go``) cuts the
prefix to :data:`MAX_PREFIX` (58) characters and appends :data:`SUFFIX_LENGTH` (5) characters of
``k8s.io/apimachinery/pkg/util/rand``'s alphabet (:data:`ALPHABET`, no vowels, no 0/1/3). A document
with both ``name`` and ``generateName`` keeps its ``name``, as Kubernetes does.

Two ways to draw the suffix:

- offline (``gpuq admit``, ``simulate``, ``validate``): :func:`plan_names` derives it from a seed,
  the document's file and position (sha256), so the same input gives the same names, two
  documents get different ones, and a collision with a name already taken (written, or generated
  earlier in the same input) is resolved by hashing again with the next attempt number;
- live (``gpuq serve``'s apply): :func:`random_name`, drawn by the server like an API server does.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""``k8s.io/apimachinery/pkg/util/rand``'s alphanumerics: no vowels (no words), no 0, 1, 3."""
SUFFIX_LENGTH = 5
MAX_PREFIX = 63 - SUFFIX_LENGTH
"""``names.MaxGeneratedNameLength``: longer prefixes are cut, so that most generated names fit 63."""

NameScope = tuple[str, str, str]
"""(API group, kind, namespace or ''): the names that must differ (one resource's, in one namespace)."""


def generate_name_of(data: Any) -> str | None:
    """The ``generateName`` prefix to apply to ``data``, or None: None too when it has a name."""
    metadata = data.get("metadata") if isinstance(data, Mapping) else None
    if not isinstance(metadata, Mapping):
        return None
    name, prefix = metadata.get("name"), metadata.get("generateName")
    if (isinstance(name, str) and name) or not isinstance(prefix, str) or not prefix:
        return None
    return prefix


def with_suffix(prefix: str, suffix: str) -> str:
    """``SimpleNameGenerator.GenerateName``: the prefix cut to :data:`MAX_PREFIX`, then the suffix."""
    return prefix[:MAX_PREFIX] + suffix


def random_name(prefix: str) -> str:
    """A name as an API server draws it (``utilrand.String(5)``): the live control plane's."""
    return with_suffix(prefix, "".join(secrets.choice(ALPHABET) for _ in range(SUFFIX_LENGTH)))


def seeded_suffix(seed: int, path: str, position: int, attempt: int = 0) -> str:
    """Five characters of :data:`ALPHABET` from sha256 of the seed, file, position and attempt."""
    digest = hashlib.sha256(f"{seed}\n{path}\n{position}\n{attempt}".encode()).digest()
    value = int.from_bytes(digest[:8], "big")
    chars = []
    for _ in range(SUFFIX_LENGTH):
        value, index = divmod(value, len(ALPHABET))
        chars.append(ALPHABET[index])
    return "".join(chars)


def scope_of(data: Mapping[str, Any]) -> NameScope:
    """The :data:`NameScope` of an object (its namespace as written; '' when none)."""
    api_version = str(data.get("apiVersion") or "")
    group = api_version.rpartition("/")[0]
    metadata = data.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return group, str(data.get("kind") or ""), str(namespace or "")


def plan_names(documents: Sequence[tuple[str, int, Any]], seed: int = 0) -> dict[int, str]:
    """Index -> generated name for each ``(path, line, data)`` that has a ``generateName`` and no name.

    1. every name written is taken, in its :func:`scope_of`;
    2. in input order, each document without one gets ``prefix + seeded_suffix(seed, path, line)``;
       while that name is taken in its scope, the next attempt is hashed; the name is then taken.
    """
    taken: set[tuple[NameScope, str]] = set()
    for _, _, data in documents:
        metadata = data.get("metadata") if isinstance(data, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if isinstance(name, str) and name:
            taken.add((scope_of(data), name))
    planned: dict[int, str] = {}
    for index, (path, line, data) in enumerate(documents):
        prefix = generate_name_of(data)
        if prefix is None:
            continue
        scope, attempt = scope_of(data), 0
        name = with_suffix(prefix, seeded_suffix(seed, path, line))
        while (scope, name) in taken:
            attempt += 1
            name = with_suffix(prefix, seeded_suffix(seed, path, line, attempt))
        taken.add((scope, name))
        planned[index] = name
    return planned


def named(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A shallow copy of ``data`` whose metadata (copied) has ``name``: the document is not modified."""
    metadata = dict(data.get("metadata") or {})
    metadata["name"] = name
    return {**data, "metadata": metadata}
