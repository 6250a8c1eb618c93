"""Every exported object checked before anything is written.

Core kinds (``v1``, ``batch/v1``, ``apps/v1``, ``autoscaling/v2``, ``policy/v1``,
``networking.k8s.io/v1``, ``rbac.authorization.k8s.io/v1``, ``scheduling.k8s.io/v1``) are
validated against the Kubernetes OpenAPI schemas that the ``kubernetes-validate``
package bundles, in strict mode (unknown fields are errors), for the newest bundled
Kubernetes version not newer than the one asked for. Custom resources are validated
against the real CRD schemas of their projects (:mod:`gpuq.k8s.crd_schemas`), GKE's
ComputeClass, which has no published CRD, by :mod:`gpuq.k8s.schemas`. A kind with
none of these is an error too: nothing unchecked is written.

Messages name the field itself: an unknown key is ``<path>.<key>: unknown field``,
a missing one ``<path>.<key>: is required``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import referencing
from kubernetes_validate import utils as kv  # type: ignore[import-untyped]

from gpuq.k8s import crd_schemas, schemas

CORE_API_VERSIONS = frozenset(
    {
        "v1",
        "batch/v1",
        "apps/v1",
        "autoscaling/v2",
        "policy/v1",
        "networking.k8s.io/v1",
        "rbac.authorization.k8s.io/v1",
        "scheduling.k8s.io/v1",
        "resource.k8s.io/v1",  # DRA, served from Kubernetes 1.34
    }
)


@dataclass(frozen=True)
class ExportProblem:
    """One invalid field of one object about to be written."""

    file: str
    kind: str
    name: str
    namespace: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.file}: {self.kind}/{where}: {self.field}: {self.message}"


class ExportInvalid(Exception):
    """Objects failed their checks; ``problems`` lists every one."""

    def __init__(self, problems: Iterable[ExportProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2])


def schema_version(kubernetes_version: str) -> str:
    """The bundled schema version used for ``kubernetes_version`` (``1.33`` -> ``1.33.0``).

    Raises ValueError when it is newer than every bundled version or older than all.
    """
    wanted = _version_key(kubernetes_version.removeprefix("v"))
    bundled = [v for v in kv.all_versions() if _version_key(v) <= wanted]
    if not bundled or wanted > _version_key(kv.latest_version()):
        known = ", ".join(".".join(v.split(".")[:2]) for v in kv.all_versions())
        raise ValueError(f"Kubernetes {kubernetes_version} has no bundled schema (known: {known})")
    return str(bundled[-1])


@functools.cache
def _definitions(version: str) -> referencing.Registry[Any]:
    contents = kv.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version
    )
    return referencing.Resource.from_contents(contents) @ referencing.Registry()


@functools.cache
def _validator(version: str, api_version: str, kind: str) -> Any:
    """A JSON-schema validator for one core kind, or None when the bundle has no schema for it."""
    group_version = re.sub(
        r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version
    )  # rbac.authorization.k8s.io/v1 -> rbac-v1
    path = f"kubernetes-json-schema/v{version}-local-strict/{kind.lower()}-{group_version}.json"
    try:
        schema = kv.schema_contents(path, version)
    except FileNotFoundError:
        return None
    registry = referencing.Resource.from_contents(schema) @ _definitions(version)
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def check_core(obj: Mapping[str, Any], kubernetes_version: str) -> list[tuple[str, str]]:
    """``(field, message)`` problems of a core object against the Kubernetes schema."""
    version = schema_version(kubernetes_version)
    validator = _validator(version, str(obj.get("apiVersion")), str(obj.get("kind")))
    if validator is None:
        return [
            (
                "kind",
                f"no Kubernetes {version} schema for {obj.get('apiVersion')}/{obj.get('kind')}: that release "
                "does not serve it (--kubernetes-version names the release the export targets)",
            )
        ]
    plain = json.loads(json.dumps(obj))
    return _named(validator.iter_errors(plain))


def _named(errors: Iterable[Any]) -> list[tuple[str, str]]:
    """``(field, message)`` per error, sorted by field; unknown and missing keys named one by one."""
    out: list[tuple[str, str]] = []
    for error in errors:
        path = list(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = error.schema.get("properties", {})
            out += [(_path([*path, k]), "unknown field") for k in error.instance if k not in allowed]
        elif error.validator == "required" and isinstance(error.validator_value, list):
            missing = [k for k in error.validator_value if k not in error.instance]
            out += [(_path([*path, k]), "is required") for k in missing]
        else:
            out.append((_path(path) or "<object>", _message(error)))
    return sorted(set(out))


def _message(error: Any) -> str:
    """jsonschema's message; for an ``anyOf`` (int-or-string quantities) the most specific one."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        return str(max(error.context, key=lambda e: len(list(e.absolute_path))).message)
    return str(error.message)


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def check_objects(files: Mapping[str, list[dict[str, Any]]], kubernetes_version: str) -> list[ExportProblem]:
    """Every problem of every object in ``files`` (file name -> objects)."""
    table = schemas.schemas()
    problems: list[ExportProblem] = []
    for file, objects in files.items():
        for obj in objects:
            metadata = obj.get("metadata") or {}
            ident = (
                file,
                str(obj.get("kind")),
                str(metadata.get("name")),
                str(metadata.get("namespace") or ""),
            )
            for field, message in _problems(obj, table, kubernetes_version):
                problems.append(ExportProblem(*ident, field, message))
    return problems


def _problems(
    obj: Mapping[str, Any], table: Mapping[tuple[str, str], schemas.Field], kubernetes_version: str
) -> list[tuple[str, str]]:
    if str(obj.get("apiVersion")) in CORE_API_VERSIONS:
        return check_core(obj, kubernetes_version)
    errors = crd_schemas.check_custom(obj, schema_version(kubernetes_version))
    if errors is not None:
        return _named(errors)
    found = schemas.check_object(obj, table)
    if found is None:
        return [("kind", f"gpuq has no field checks for {obj.get('apiVersion')}/{obj.get('kind')}")]
    return found
