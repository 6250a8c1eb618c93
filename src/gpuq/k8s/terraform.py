"""``gpuq export terraform``: node pools and the Kueue objects as Terraform configuration (JSON syntax).

:func:`build_terraform` turns a loaded configuration and its ``gpuq export k8s`` export into the
documents of ``DIR``; :func:`write_terraform` writes them. The steps (docs/terraform.md):

1. every NodePool's cloud from its machine type (:func:`pool_clouds`): GCE machine types make
   ``google_container_node_pool`` resources (:mod:`gpuq.k8s.terraform_gke`), EC2 instance types
   an ``EC2NodeClass`` and the k8s export's Karpenter NodePools; a pool of neither, or pools of
   both, is refused, naming the file, pool and field;
2. the k8s export's cluster objects (namespaces, priorities, Kueue, tenancy, devices, nodes,
   monitoring: not the workloads and serving objects, which are applications) as
   ``kubernetes_manifest`` resources, reused as the export built them, in groups applied in
   order: each group ``depends_on`` every resource of the group before it (namespaces; priority
   classes; flavors, cohorts, topologies and checks; ClusterQueues; LocalQueues; ...);
3. ``providers.tf.json`` with the two providers pinned, ``variables.tf.json`` with the cluster's
   name, project and location (nothing hard-coded), and a README saying what to run.

Strings copied from manifests are escaped (``$${``, ``%%{``) so Terraform reads them as written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuq.api import machines
from gpuq.api.diagnostics import Manifest
from gpuq.api.loader import LoadResult
from gpuq.k8s import export_validate
from gpuq.k8s.export import Export, build_export
from gpuq.k8s.export_common import ExportOptions, Obj
from gpuq.k8s.terraform_gke import Cloud, PoolShapeError, cloud_of, gke_node_pool

GOOGLE_PROVIDER = {"source": "hashicorp/google", "version": "~> 7.45"}
KUBERNETES_PROVIDER = {"source": "hashicorp/kubernetes", "version": "~> 3.2"}
REQUIRED_TERRAFORM = ">= 1.0"
PROVIDERS_FILE = "providers.tf.json"
VARIABLES_FILE = "variables.tf.json"
NODE_POOLS_FILE = "node-pools.tf.json"
KUBERNETES_FILE = "kubernetes.tf.json"
README_FILE = "README.md"
FILES = (PROVIDERS_FILE, VARIABLES_FILE, NODE_POOLS_FILE, KUBERNETES_FILE, README_FILE)
MANIFEST_FILES = (
    "00-namespaces.yaml",
    "10-priorities.yaml",
    "20-kueue.yaml",
    "30-tenancy.yaml",
    "40-devices.yaml",
    "50-nodes.yaml",
    "60-monitoring.yaml",
)
"""The k8s export's files that become ``kubernetes_manifest`` resources, in apply order."""
_LATER_IN_FILE = {"ClusterQueue": 1, "LocalQueue": 2, "NodePool": 1}
"""Kinds applied after the rest of their file: queues after flavors and cohorts, Karpenter
NodePools after their EC2NodeClass."""
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


class TerraformInvalid(Exception):
    """What stops the export, one line each; nothing is written."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Resource:
    """One resource written: its file, Terraform address and the object it comes from."""

    file: str
    type: str
    name: str
    source: str

    @property
    def address(self) -> str:
        return f"{self.type}.{self.name}"


@dataclass(frozen=True)
class TerraformExport:
    """File name -> document (``*.tf.json`` as data, the README as text), and what they hold."""

    cloud: Cloud | None
    documents: Mapping[str, Obj]
    readme: str
    resources: tuple[Resource, ...]
    warnings: tuple[str, ...] = ()


def node_pools(manifests: Sequence[Manifest]) -> Iterator[tuple[Manifest, machines.NodePool]]:
    """The first definition of each NodePool with the manifest it was read from, in file order."""
    seen: set[str] = set()
    for manifest in manifests:
        model = manifest.model
        if type(model) is machines.NodePool and manifest.name not in seen:
            seen.add(manifest.name)
            yield manifest, model


def pool_clouds(manifests: Sequence[Manifest]) -> Cloud | None:
    """The one cloud of every NodePool (None without pools); :class:`TerraformInvalid` naming each
    pool of no known shape, or the first pool of a second cloud."""
    problems: list[str] = []
    found: dict[Cloud, str] = {}
    for manifest, pool in node_pools(manifests):
        try:
            found.setdefault(cloud_of(manifest, pool), manifest.name)
        except PoolShapeError as err:
            problems.append(str(err))
    if len(found) > 1:
        problems.append(
            f"NodePool/{found['gke']} is a GCE machine and NodePool/{found['aws']} an EC2 instance: "
            "one Terraform configuration is for one cluster, export each cloud's pools separately"
        )
    if problems:
        raise TerraformInvalid(problems)
    return next(iter(found), None)


def literal(value: Any) -> Any:
    """``value`` with every string (keys too) escaped from Terraform's template syntax."""
    if isinstance(value, str):
        return value.replace("${", "$${").replace("%{", "%%{")
    if isinstance(value, dict):
        return {literal(k): literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal(v) for v in value]
    return value


def _unique_name(base: str, taken: set[str]) -> str:
    name = _NOT_A_NAME.sub("_", base)
    if not name[0].isalpha() and name[0] != "_":
        name = f"_{name}"
    candidate, suffix = name, 2
    while candidate in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    taken.add(candidate)
    return candidate


def _source(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))
    return f"{obj.get('kind')}/{name}"


def ec2_node_class(options: ExportOptions) -> Obj:
    """The EC2NodeClass the Karpenter NodePools name: AL2023 (its GPU variant on GPU instances), the
    cluster's subnets and security groups by Karpenter's discovery tag, the node role a variable."""
    discovery = [{"tags": {"karpenter.sh/discovery": "${var.cluster_name}"}}]
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": options.node_class, "labels": {"app.kubernetes.io/managed-by": "gpuq"}},
        "spec": {
            "role": "${var.node_role}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": discovery,
            "securityGroupSelectorTerms": discovery,
        },
    }


def _manifest_groups(exported: Export, cloud: Cloud | None, options: ExportOptions) -> list[list[Obj]]:
    """Objects in apply groups: by file, and inside a file by :data:`_LATER_IN_FILE`.

    On GKE the device plugin ConfigMaps are left out: the node pool's GPU settings replace them.
    """
    groups: list[list[Obj]] = []
    for file in MANIFEST_FILES:
        objects = [literal(obj) for obj in exported.files.get(file, [])]
        if file == "40-devices.yaml" and cloud == "gke":
            continue
        if file == "50-nodes.yaml" and cloud == "aws":
            objects.insert(0, ec2_node_class(options))
        for rank in sorted({_LATER_IN_FILE.get(str(o.get("kind")), 0) for o in objects}):
            groups.append([o for o in objects if _LATER_IN_FILE.get(str(o.get("kind")), 0) == rank])
    return groups


def _kubernetes_resources(groups: list[list[Obj]]) -> tuple[Obj, list[Resource]]:
    body: Obj = {}
    resources: list[Resource] = []
    taken: set[str] = set()
    before: list[str] = []
    for group in groups:
        addresses = []
        for obj in group:
            metadata = obj.get("metadata") or {}
            parts = [str(obj.get("kind")).lower(), metadata.get("namespace"), str(metadata.get("name"))]
            name = _unique_name("_".join(p for p in parts if p), taken)
            body[name] = {"manifest": obj, **({"depends_on": before} if before else {})}
            resources.append(Resource(KUBERNETES_FILE, "kubernetes_manifest", name, _source(obj)))
            addresses.append(f"kubernetes_manifest.{name}")
        before = addresses
    return body, resources


def _variables(cloud: Cloud | None) -> Obj:
    cluster = {"type": "string", "description": "Name of the existing cluster the node pools join."}
    if cloud == "gke":
        return {
            "project": {"type": "string", "description": "Google Cloud project of the cluster."},
            "location": {"type": "string", "description": "Region or zone of the GKE cluster."},
            "cluster_name": cluster,
        }
    variables: Obj = {
        "kubeconfig": {"type": "string", "default": "~/.kube/config", "description": "kubeconfig file."},
        "kube_context": {"type": "string", "default": None, "description": "kubeconfig context (current)."},
    }
    if cloud == "aws":
        variables["cluster_name"] = {
            **cluster,
            "description": "EKS cluster name (Karpenter's discovery tag).",
        }
        variables["node_role"] = {"type": "string", "description": "IAM role of the Karpenter nodes."}
    return variables


def _providers(cloud: Cloud | None) -> Obj:
    if cloud != "gke":
        required = {"kubernetes": KUBERNETES_PROVIDER}
        kubernetes = {"config_path": "${var.kubeconfig}", "config_context": "${var.kube_context}"}
        return {
            "terraform": {"required_version": REQUIRED_TERRAFORM, "required_providers": required},
            "provider": {"kubernetes": kubernetes},
        }
    cluster = "data.google_container_cluster.cluster"
    certificate = f"{cluster}.master_auth[0].cluster_ca_certificate"
    return {
        "terraform": {
            "required_version": REQUIRED_TERRAFORM,
            "required_providers": {"google": GOOGLE_PROVIDER, "kubernetes": KUBERNETES_PROVIDER},
        },
        "provider": {
            "google": {"project": "${var.project}"},
            "kubernetes": {
                "host": f"https://${{{cluster}.endpoint}}",
                "token": "${data.google_client_config.default.access_token}",
                "cluster_ca_certificate": f"${{base64decode({certificate})}}",
            },
        },
        "data": {
            "google_client_config": {"default": {}},
            "google_container_cluster": {
                "cluster": {
                    "name": "${var.cluster_name}",
                    "location": "${var.location}",
                    "project": "${var.project}",
                }
            },
        },
    }


def export_for(result: LoadResult, options: ExportOptions, alert_rules: dict[str, Any]) -> Export:
    """The k8s export the Terraform configuration reuses: Karpenter NodePools for EC2 pools, GKE
    ComputeClasses otherwise (:class:`TerraformInvalid` when the pools have no one cloud)."""
    cloud = pool_clouds(result.manifests)
    return build_export(
        result, replace(options, provisioner="karpenter" if cloud == "aws" else "gke"), alert_rules
    )


def build_terraform(result: LoadResult, exported: Export, options: ExportOptions) -> TerraformExport:
    """The documents of ``DIR`` for a configuration that loaded and its k8s export (:func:`export_for`)."""
    cloud = pool_clouds(result.manifests)
    warnings = list(exported.warnings)
    resources: list[Resource] = []
    documents: dict[str, Obj] = {
        PROVIDERS_FILE: _providers(cloud),
        VARIABLES_FILE: {"variable": _variables(cloud)},
    }
    if cloud == "gke":
        pools: Obj = {}
        problems: list[str] = []
        taken: set[str] = set()
        for manifest, pool in node_pools(result.manifests):
            try:
                built = gke_node_pool(manifest, pool, result.gpu_catalogue)
            except PoolShapeError as err:
                problems.append(str(err))
                continue
            name = _unique_name(manifest.name, taken)
            pools[name] = built.resource
            warnings.extend(built.warnings)
            resources.append(
                Resource(NODE_POOLS_FILE, "google_container_node_pool", name, f"NodePool/{manifest.name}")
            )
        if problems:
            raise TerraformInvalid(problems)
        documents[NODE_POOLS_FILE] = {"resource": {"google_container_node_pool": pools}}
    if cloud == "aws":
        found = export_validate.check_objects(
            {"EC2NodeClass": [ec2_node_class(options)]}, options.kubernetes_version
        )
        if found:
            raise TerraformInvalid([str(p) for p in found])
    body, manifests = _kubernetes_resources(_manifest_groups(exported, cloud, options))
    if body:
        documents[KUBERNETES_FILE] = {"resource": {"kubernetes_manifest": body}}
    resources.extend(manifests)
    return TerraformExport(cloud, documents, readme(cloud, documents), tuple(resources), tuple(warnings))


def readme(cloud: Cloud | None, documents: Mapping[str, Obj]) -> str:
    """What ``DIR`` holds and the commands that apply it."""
    files = "\n".join(f"- `{name}`" for name in documents)
    if cloud == "gke":
        variables = " -var project=PROJECT -var location=LOCATION -var cluster_name=CLUSTER"
        first = "the GKE cluster exists (`cluster_name`) and Kueue is installed in it"
    elif cloud == "aws":
        variables = " -var cluster_name=CLUSTER -var node_role=KARPENTER_NODE_ROLE"
        first = "the EKS cluster exists with Karpenter and Kueue installed in it"
    else:
        variables = ""
        first = "the cluster exists (the kubeconfig's current context) and Kueue is installed in it"
    return (
        "# Generated by `gpuq export terraform`\n\n"
        f"Terraform configuration in JSON syntax:\n\n{files}\n\n"
        f"Before: {first}. The `kubernetes_manifest` resources need the cluster's API and the CRDs of "
        "their kinds when Terraform plans (hashicorp/kubernetes reads their schemas then), so they "
        "cannot create the cluster or install Kueue in the same apply; `depends_on` orders the rest "
        "(namespaces, priorities, flavors and cohorts, ClusterQueues, LocalQueues, ...), so one apply "
        "creates the node pools and the queues:\n\n"
        f"    terraform init\n    terraform apply{variables}\n"
    )


def render(document: Obj) -> str:
    """One ``*.tf.json`` document: indented JSON, keys in the order built, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_terraform(export: TerraformExport, directory: str) -> list[str]:
    """Write every document under ``directory`` and return their paths; the files of :data:`FILES`
    an earlier export wrote and this one has none for are removed, other files are left alone."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for name in FILES:
        path = os.path.join(directory, name)
        text = (
            export.readme
            if name == README_FILE
            else (render(export.documents[name]) if name in export.documents else None)
        )
        if text is None:
            if os.path.isfile(path):
                os.remove(path)
            continue
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written.append(path)
    return written
