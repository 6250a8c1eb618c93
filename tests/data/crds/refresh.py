"""Rebuild ``src/gpuq/k8s/crds/*.json.gz`` from the upstream CRDs (see that folder's PROVENANCE.md).

Run from the repository root with each project's git repository at hand::

    python tests/data/crds/refresh.py /path/to/mirrors [BUNDLE...]

where ``/path/to/mirrors/<owner>+<name>/repo`` is a (bare) clone. For every CRD listed
in ``SOURCES`` the ``openAPIV3Schema`` of each served version is kept, with its
``description`` texts removed (they are most of the bytes and carry no rule), and
written with the version's ``served`` / ``storage`` / ``deprecated`` flags as one
gzip-compressed JSON document per project release.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

# project-release -> (mirror, tag, [CRD paths])
SOURCES: dict[str, tuple[str, str, list[str]]] = {
    "kueue-v0.19.2": (
        "kubernetes-sigs+kueue",
        "v0.19.2",
        [
            f"config/components/crd/bases/kueue.x-k8s.io_{name}.yaml"
            for name in (
                "admissionchecks",
                "clusterqueues",
                "cohorts",
                "localqueues",
                "provisioningrequestconfigs",
                "resourceflavors",
                "topologies",
                "workloadpriorityclasses",
            )
        ],
    ),
    "karpenter-v1.14.1": (
        "kubernetes-sigs+karpenter",
        "v1.14.1",
        ["pkg/apis/crds/karpenter.sh_nodepools.yaml"],
    ),
    "karpenter-provider-aws-v1.14.1": (
        "aws+karpenter-provider-aws",
        "v1.14.1",
        ["pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml"],
    ),
    "keda-v2.20.2": ("kedacore+keda", "v2.20.2", ["config/crd/bases/keda.sh_scaledobjects.yaml"]),
    "kserve-v0.20.0": (
        "kserve+kserve",
        "v0.20.0",
        ["config/crd/full/serving.kserve.io_inferenceservices.yaml"],
    ),
    "kuberay-v1.7.0": (
        "ray-project+kuberay",
        "v1.7.0",
        [f"ray-operator/config/crd/bases/ray.io_{n}.yaml" for n in ("rayclusters", "rayjobs", "rayservices")],
    ),
    "prometheus-operator-v0.93.0": (
        "prometheus-operator+prometheus-operator",
        "v0.93.0",
        ["example/prometheus-operator-crd-full/monitoring.coreos.com_prometheusrules.yaml"],
    ),
    "jobset-v0.12.0": (
        "kubernetes-sigs+jobset",
        "v0.12.0",
        ["config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"],
    ),
    "training-operator-v1.9.0": (
        "kubeflow+training-operator",
        "v1.9.0",
        ["manifests/base/crds/kubeflow.org_pytorchjobs.yaml"],
    ),
    "trainer-v2.2.1": (
        "kubeflow+trainer",
        "v2.2.1",
        [
            f"manifests/base/crds/trainer.kubeflow.org_{name}.yaml"
            for name in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
        ],
    ),
}
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_ONE = ("items", "additionalProperties", "not")


def strip(schema: Any) -> Any:
    """``schema`` without ``description`` texts; property names (``description`` included) stay."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in _SCHEMA_MAPS:
            out[key] = {name: strip(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS:
            out[key] = [strip(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = strip(value)
        else:
            out[key] = value
    return out


def crd_entries(text: str, path: str) -> dict[str, Any]:
    crd = yaml.safe_load(text)
    spec = crd["spec"]
    entries = {}
    for version in spec["versions"]:
        key = f"{spec['group']}/{version['name']}/{spec['names']['kind']}"
        entries[key] = {
            "source": path,
            "scope": spec["scope"],
            "served": bool(version.get("served")),
            "storage": bool(version.get("storage")),
            "deprecated": bool(version.get("deprecated", False)),
            "schema": strip(version["schema"]["openAPIV3Schema"]),
        }
    return entries


def main(mirrors: str, only: list[str]) -> None:
    target = Path("src/gpuq/k8s/crds")
    for bundle, (mirror, tag, paths) in SOURCES.items():
        if only and bundle not in only:
            continue
        repo = f"{mirrors}/{mirror}/repo"
        rev = ["git", "-C", repo, "rev-parse", f"{tag}^{{commit}}"]
        commit = subprocess.check_output(rev, text=True).strip()
        entries: dict[str, Any] = {}
        for path in paths:
            text = subprocess.check_output(["git", "-C", repo, "show", f"{commit}:{path}"], text=True)
            entries.update(crd_entries(text, path))
        document = {"release": tag, "commit": commit, "kinds": entries}
        data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        (target / f"{bundle}.json.gz").write_bytes(gzip.compress(data, mtime=0))
        print(bundle, commit, len(data), "bytes,", len(gzip.compress(data)), "compressed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
