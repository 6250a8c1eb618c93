"""Exported custom resources checked against the real CRD schemas of the projects they belong to.

``gpuq/k8s/crds/*.json.gz`` bundles, per project release, the ``openAPIV3Schema``
of every served version of the CRDs the export writes (Kueue v0.19.2, Karpenter
v1.14.1 and its AWS provider, KEDA v2.20.2, KServe v0.20.0, KubeRay v1.7.0, the
Prometheus operator v0.93.0, JobSet v0.12.0, Kubeflow's training operator v1.9.0 and
Trainer v2.2.1;
their ``PROVENANCE.md`` names paths and commits). :func:`check_custom` validates an
object the way the API server does on create (``kubectl apply`` validates with
``fieldValidation=Strict``), as far as JSON Schema can:

1. the CRD schema is made strict: an object schema that lists ``properties`` (or
   none, and no ``additionalProperties``) and is not
   ``x-kubernetes-preserve-unknown-fields`` refuses other keys, since the API server
   prunes them and strict field validation reports them
   (k8s.io/apiextensions-apiserver ``pkg/apiserver/schema/pruning``);
   ``x-kubernetes-int-or-string`` accepts an integer or a string; ``nullable``
   accepts null; a required field with a ``default`` may be left out (defaulting
   runs before validation);
2. the top-level ``metadata`` is checked against Kubernetes' own ObjectMeta
   schema (the API server validates it, not the CRD);
3. ``x-kubernetes-list-type: set`` and ``map`` (with ``x-kubernetes-list-map-keys``)
   refuse duplicate items and keys;
4. ``x-kubernetes-validations`` (CEL) rules: the ones :data:`CEL_RULES` implements
   (Kueue's, Karpenter's label and requirement rules, KEDA's replica bounds) are
   evaluated; transition rules (``oldSelf``) do not apply on create; every other
   rule is listed by :func:`unevaluated_rules` rather than silently passed.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from kubernetes_validate import utils as kv  # type: ignore[import-untyped]

BUNDLES = (
    "kueue-v0.19.2",
    "karpenter-v1.14.1",
    "karpenter-provider-aws-v1.14.1",
    "keda-v2.20.2",
    "kserve-v0.20.0",
    "kuberay-v1.7.0",
    "prometheus-operator-v0.93.0",
    "jobset-v0.12.0",
    "training-operator-v1.9.0",
    "trainer-v2.2.1",
)
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@dataclass(frozen=True)
class CrdVersion:
    """One served version of one CRD: ``group/version/Kind`` and its flags."""

    key: str
    bundle: str
    source: str
    scope: str
    served: bool
    storage: bool
    deprecated: bool
    schema: Mapping[str, Any]


@functools.cache
def crd_versions() -> dict[str, CrdVersion]:
    """Every bundled CRD version by ``group/version/Kind``."""
    out: dict[str, CrdVersion] = {}
    folder = resources.files("gpuq.k8s") / "crds"
    for bundle in BUNDLES:
        document = json.loads(gzip.decompress((folder / f"{bundle}.json.gz").read_bytes()))
        for key, entry in document["kinds"].items():
            out[key] = CrdVersion(
                key,
                bundle,
                entry["source"],
                entry["scope"],
                entry["served"],
                entry["storage"],
                entry["deprecated"],
                entry["schema"],
            )
    return out


def crd_version(api_version: str, kind: str) -> CrdVersion | None:
    """The bundled CRD version of ``apiVersion`` / ``kind``, or None."""
    return crd_versions().get(f"{api_version}/{kind}")


def strict(schema: Any, root: bool = True) -> Any:
    """Step 1: a structural CRD schema as a strict JSON Schema (draft 2020-12)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: strict(sub, False) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = strict(value, False)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [strict(sub, False) for sub in value]
        elif key == "pattern" and "(?i)" in value:  # Go (RE2) allows ^(?i)...; Python wants flags first
            out[key] = "(?i)" + value.replace("(?i)", "")
        elif key not in ("nullable", "x-kubernetes-int-or-string", "default"):
            out[key] = value
    defaulted = {
        k for k, sub in schema.get("properties", {}).items() if isinstance(sub, dict) and "default" in sub
    }
    if "required" in out and defaulted:  # the API server defaults before it validates
        out["required"] = [k for k in out["required"] if k not in defaulted]
    if schema.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if schema.get("nullable") and "type" in out:
        out["type"] = [*(out["type"] if isinstance(out["type"], list) else [out["type"]]), "null"]
    is_object = schema.get("type") == "object"
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
        "x-kubernetes-embedded-resource"
    )
    if is_object and not preserve and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    if root:
        out["properties"] = {**out.get("properties", {}), "metadata": {"$ref": f"#/$defs/{OBJECT_META}"}}
    return out


def _list_keys(validator: Any, keys: list[str], instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """Step 3, ``map`` lists: no two items with the same keys."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(instance, list):
        return
    seen: set[str] = set()
    for index, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        ident = json.dumps([item.get(k) for k in keys])
        if ident in seen:
            yield jsonschema.ValidationError(
                f"duplicate entry for key {dict(zip(keys, json.loads(ident), strict=True))}", path=[index]
            )
        seen.add(ident)


def _list_type(validator: Any, list_type: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """Step 3, ``set`` lists: no duplicate items."""
    if list_type != "set" or not isinstance(instance, list):
        return
    seen: set[str] = set()
    for index, item in enumerate(instance):
        ident = json.dumps(item, sort_keys=True)
        if ident in seen:
            yield jsonschema.ValidationError(f"duplicate value {item!r}", path=[index])
        seen.add(ident)


def _cel(
    validator: Any, rules: list[Mapping[str, Any]], instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    """Step 4: the CEL rules :data:`CEL_RULES` implements; the others are skipped here.

    A value of the wrong type is reported by its ``type`` alone, as the API server does.
    """
    expected = {"object": dict, "array": list, "string": str}.get(str(schema.get("type")))
    if expected is not None and not isinstance(instance, expected):
        return
    for rule in rules:
        check = CEL_RULES.get(" ".join(str(rule["rule"]).split()))
        if check is None:
            continue
        try:
            ok = check(instance)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            ok = False
        if not ok:
            yield jsonschema.ValidationError(str(rule.get("message") or f"failed rule: {rule['rule']}"))


_Validator = jsonschema.validators.extend(
    jsonschema.validators.Draft202012Validator,
    {
        "x-kubernetes-list-map-keys": _list_keys,
        "x-kubernetes-list-type": _list_type,
        "x-kubernetes-validations": _cel,
    },
)


@functools.cache
def validator(api_version: str, kind: str, kubernetes_version: str) -> Any:
    """A validator for one custom kind (None when no CRD is bundled for it); ObjectMeta is
    Kubernetes ``kubernetes_version``'s (a version ``kubernetes-validate`` bundles, e.g. ``1.33.0``)."""
    version = crd_version(api_version, kind)
    if version is None:
        return None
    schema = strict(version.schema)
    schema["$defs"] = _definitions(kubernetes_version)
    return _Validator(schema)


@functools.cache
def _definitions(kubernetes_version: str) -> Any:
    path = f"kubernetes-json-schema/v{kubernetes_version}-local-strict/_definitions.json"
    return kv.schema_contents(path, kubernetes_version)["$defs"]


def check_custom(obj: Mapping[str, Any], kubernetes_version: str) -> list[Any] | None:
    """Every ``jsonschema.ValidationError`` of ``obj``, or None when no CRD is bundled for its kind."""
    check = validator(str(obj.get("apiVersion")), str(obj.get("kind")), kubernetes_version)
    if check is None:
        return None
    plain = json.loads(json.dumps(obj))
    return list(check.iter_errors(plain))


def unevaluated_rules(api_version: str, kind: str) -> list[str]:
    """The CEL rules of a kind's schema that apply on create and :data:`CEL_RULES` does not implement."""
    version = crd_version(api_version, kind)
    if version is None:
        return []
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                text = " ".join(str(rule["rule"]).split())
                if "oldSelf" not in text and text not in CEL_RULES:
                    found.append(text)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(version.schema)
    return sorted(set(found))


def _karpenter_domain_ok(label: str) -> bool:
    # karpenter.sh_nodepools.yaml: label domain "karpenter.sh" is restricted
    return label in ("karpenter.sh/capacity-type", "karpenter.sh/nodepool") or not re.match(
        r"^([^/]+)", label
    ).group(1).endswith(  # type: ignore[union-attr]
        "karpenter.sh"
    )


def _borrowing_limits(spec: Mapping[str, Any]) -> bool:
    """Whether any quota of a ClusterQueue spec sets a borrowing limit."""
    groups = spec.get("resourceGroups", [])
    return any("borrowingLimit" in r for rg in groups for f in rg["flavors"] for r in f["resources"])


_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

CEL_RULES: dict[str, Callable[[Any], bool]] = {
    # kueue.x-k8s.io_clusterqueues.yaml
    "!has(self.preference) || "
    "(self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": (
        lambda s: (
            "preference" not in s
            or (s.get("whenCanBorrow") == "TryNextFlavor" and s.get("whenCanPreempt") == "TryNextFlavor")
        )
    ),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && "
    "self.borrowWithinCohort.policy != 'Never')": (
        lambda s: (
            not (
                s.get("reclaimWithinCohort") == "Never"
                and "borrowWithinCohort" in s
                and s["borrowWithinCohort"].get("policy") != "Never"
            )
        )
    ),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": (
        lambda s: all(len(f["resources"]) == len(s["coveredResources"]) for f in s["flavors"])
    ),
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true": (
        lambda s: "cohortName" in s or not _borrowing_limits(s)
    ),
    "!has(self.cohort) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true": (
        lambda s: "cohort" in s or not _borrowing_limits(s)
    ),
    # kueue.x-k8s.io_resourceflavors.yaml
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": (
        lambda s: "topologyName" not in s or len(s["nodeLabels"]) >= 1
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (
        lambda s: all("effect" not in x or x["effect"] in _EFFECTS for x in s)
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (
        lambda s: all(x["effect"] in _EFFECTS for x in s)
    ),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": (
        lambda s: all("key" in x or x.get("operator") == "Exists" for x in s)
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": (
        lambda s: all(x.get("operator", "Equal") in ("Equal", "Exists") for x in s)
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": (
        lambda s: all(not (x.get("operator") == "Exists" and "value" in x) for x in s)
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": (
        lambda s: all("tolerationSeconds" not in x or x.get("effect") == "NoExecute" for x in s)
    ),
    # kueue.x-k8s.io_topologies.yaml
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || "
    "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'": (
        lambda s: (
            all(x["nodeLabel"] != "kubernetes.io/hostname" for x in s)
            or s[-1]["nodeLabel"] == "kubernetes.io/hostname"
        )
    ),
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": (
        lambda s: len({json.dumps(x, sort_keys=True) for x in s}) == len(s)
    ),
    # karpenter.sh_nodepools.yaml
    'self != "karpenter.sh/nodepool"': lambda s: s != "karpenter.sh/nodepool",
    'self != "kubernetes.io/hostname"': lambda s: s != "kubernetes.io/hostname",
    "self != ''": lambda s: s != "",
    'self.all(x, x != "karpenter.sh/nodepool")': lambda s: "karpenter.sh/nodepool" not in s,
    'self.all(x, x != "kubernetes.io/hostname")': lambda s: "kubernetes.io/hostname" not in s,
    'self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
    '!self.find("^([^/]+)").endsWith("karpenter.sh")': _karpenter_domain_ok,
    'self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
    '!x.find("^([^/]+)").endsWith("karpenter.sh"))': lambda s: all(_karpenter_domain_ok(x) for x in s),
    "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)": (
        lambda s: all(x["operator"] != "In" or len(x.get("values", [])) != 0 for x in s)
    ),
    "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
    "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)": (
        lambda s: all(
            x["operator"] not in ("Gt", "Lt", "Gte", "Lte")
            or (len(x["values"]) == 1 and int(x["values"][0]) >= 0)
            for x in s
        )
    ),
    "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)": (
        lambda s: all(
            not (x["operator"] == "In" and "minValues" in x) or len(x["values"]) >= x["minValues"] for x in s
        )
    ),
    "self.all(x, has(x.schedule) == has(x.duration))": (
        lambda s: all(("schedule" in x) == ("duration" in x) for x in s)
    ),
    "!has(self.replicas) || !has(self.weight)": lambda s: "replicas" not in s or "weight" not in s,
    # keda.sh_scaledobjects.yaml
    "!has(self.minReplicaCount) || self.minReplicaCount <= "
    "(has(self.maxReplicaCount) ? self.maxReplicaCount : 100)": (
        lambda s: "minReplicaCount" not in s or s["minReplicaCount"] <= s.get("maxReplicaCount", 100)
    ),
    # ray.io_ray*.yaml
    "self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']": (
        lambda s: s in ("ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue")
    ),
}
