"""Which Kueue API versions each Kueue release serves, and which one it stores.

Read from the ``served`` / ``storage`` / ``deprecated`` flags of the CRDs in each
release's ``config/components/crd/bases/kueue.x-k8s.io_*.yaml`` (kubernetes-sigs/kueue,
tags v0.12.0 ... v0.19.2; every patch release of a minor one carries the same flags):

========  ===========================================================================
release   the kinds gpuq exports (ResourceFlavor, ClusterQueue, LocalQueue, Cohort,
          Topology, WorkloadPriorityClass, AdmissionCheck, ProvisioningRequestConfig)
========  ===========================================================================
v0.12     v1beta1; Cohort and Topology only v1alpha1
v0.13     v1beta1; Topology only v1alpha1 (Cohort moved to v1beta1)
v0.14     v1beta1 (stored) for every kind
v0.15     v1beta1 (stored) and v1beta2
v0.16+    v1beta1 (deprecated) and v1beta2 (stored), through v0.19
========  ===========================================================================

gpuq writes Kueue v0.14 and later: before it Topology (and before v0.13 Cohort) exist
only in ``v1alpha1``, which later releases no longer serve, so an export for them
would not survive the upgrade. :func:`api_versions` picks, per kind, the version
asked when the release serves it, else refuses; the default is the release's storage
version.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq.k8s.export_common import KueueVersion

GROUP = "kueue.x-k8s.io"
KINDS = (
    "Topology",
    "ResourceFlavor",
    "WorkloadPriorityClass",
    "ProvisioningRequestConfig",
    "AdmissionCheck",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
)
DEFAULT_RELEASE = "v0.19"
SCHEMA_RELEASE = "v0.19.2"
"""The release whose CRD schemas :mod:`gpuq.k8s.crd_schemas` bundles."""


@dataclass(frozen=True)
class Release:
    """What one Kueue minor release serves for every exported kind."""

    served: tuple[KueueVersion, ...]
    storage: KueueVersion
    deprecated: tuple[KueueVersion, ...] = ()


RELEASES: dict[str, Release] = {
    "v0.14": Release(("v1beta1",), "v1beta1"),
    "v0.15": Release(("v1beta1", "v1beta2"), "v1beta1"),
    "v0.16": Release(("v1beta1", "v1beta2"), "v1beta2", ("v1beta1",)),
    "v0.17": Release(("v1beta1", "v1beta2"), "v1beta2", ("v1beta1",)),
    "v0.18": Release(("v1beta1", "v1beta2"), "v1beta2", ("v1beta1",)),
    "v0.19": Release(("v1beta1", "v1beta2"), "v1beta2", ("v1beta1",)),
}
_OLDER = {"v0.12": "Cohort and Topology", "v0.13": "Topology"}


def minor(release: str) -> str:
    """``v0.19.2``, ``0.19`` or ``v0.19`` -> ``v0.19``; ValueError when it is not a release gpuq writes."""
    parts = release.strip().removeprefix("v").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:3]):
        raise ValueError(f"{release!r} is not a Kueue release (expected e.g. v0.19 or v0.19.2)")
    name = f"v{int(parts[0])}.{int(parts[1])}"
    if name in _OLDER:
        raise ValueError(
            f"Kueue {name} serves {_OLDER[name]} only in v1alpha1, which later releases no longer serve; "
            f"gpuq writes Kueue {next(iter(RELEASES))} to {list(RELEASES)[-1]}"
        )
    if name not in RELEASES:
        known = ", ".join(RELEASES)
        raise ValueError(f"gpuq does not know which APIs Kueue {name} serves (known: {known})")
    return name


def version_for(release: str, asked: KueueVersion | None) -> KueueVersion:
    """The API version to write for ``release``: ``asked`` when the release serves it, else its storage one.

    Raises ValueError when ``asked`` is not served by the release.
    """
    info = RELEASES[minor(release)]
    if asked is None:
        return info.storage
    if asked not in info.served:
        raise ValueError(
            f"Kueue {minor(release)} does not serve {GROUP}/{asked} (it serves {', '.join(info.served)})"
        )
    return asked


def deprecation(release: str, version: str) -> str | None:
    """A warning when ``release`` deprecates ``version``, else None."""
    name = minor(release)
    if version in RELEASES[name].deprecated:
        return (
            f"{GROUP}/{version} is deprecated in Kueue {name} (its storage version is "
            f"{RELEASES[name].storage}); the objects are written in {version} as asked"
        )
    return None


def api_versions(release: str, version: KueueVersion) -> dict[str, str]:
    """``kind -> apiVersion`` for every exported Kueue kind (they share one version in every release)."""
    chosen = version_for(release, version)
    return {kind: f"{GROUP}/{chosen}" for kind in KINDS}
