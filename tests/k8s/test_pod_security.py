"""The Pod Security Standards' rules (kubernetes.io/docs/concepts/security/pod-security-standards)
as :mod:`gpuq.k8s.pod_security` applies them to exported pod templates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuq.k8s import pod_security

HARDENED: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "a"},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "image": "i",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}
C = "spec.containers[0].securityContext"


def _with(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(HARDENED)
    here: Any = out
    for part in path[:-1]:
        here = here.setdefault(part, {}) if isinstance(part, str) else here[part]
    here[path[-1]] = value
    return out


CONTAINER = ("spec", "containers", 0)


@pytest.mark.parametrize(
    ("name", "obj", "baseline", "restricted"),
    [
        ("a hardened pod breaks nothing", HARDENED, [], []),
        (
            "host networking is baseline's",
            _with(("spec", "hostNetwork"), True),
            ["spec.hostNetwork"],
            ["spec.hostNetwork"],
        ),
        (
            "a privileged container is baseline's",
            _with((*CONTAINER, "securityContext", "privileged"), True),
            [f"{C}.privileged"],
            [f"{C}.privileged"],
        ),
        (
            "SYS_ADMIN is outside baseline's capabilities",
            _with((*CONTAINER, "securityContext", "capabilities", "add"), ["SYS_ADMIN"]),
            [f"{C}.capabilities.add"],
            [f"{C}.capabilities.add", f"{C}.capabilities.add"],
        ),
        (
            "a hostPath volume is baseline's",
            _with(("spec", "volumes"), [{"name": "v", "hostPath": {"path": "/dev"}}]),
            ["spec.volumes[0].hostPath"],
            ["spec.volumes[0].hostPath"],
        ),
        (
            "a host port is baseline's",
            _with((*CONTAINER, "ports"), [{"containerPort": 80, "hostPort": 80}]),
            ["spec.containers[0].ports[0].hostPort"],
            ["spec.containers[0].ports[0].hostPort"],
        ),
        (
            "an unsafe sysctl is baseline's",
            _with(("spec", "securityContext", "sysctls"), [{"name": "kernel.msgmax", "value": "1"}]),
            ["spec.securityContext.sysctls[0]"],
            ["spec.securityContext.sysctls[0]"],
        ),
        (
            "Unconfined seccomp is baseline's",
            _with(("spec", "securityContext", "seccompProfile"), {"type": "Unconfined"}),
            ["spec.securityContext.seccompProfile.type"],
            ["spec.securityContext.seccompProfile.type", f"{C}.seccompProfile.type"],
        ),
        (
            "a root user is restricted's",
            _with((*CONTAINER, "securityContext", "runAsUser"), 0),
            [],
            [f"{C}.runAsUser"],
        ),
        (
            "privilege escalation left open is restricted's",
            _with((*CONTAINER, "securityContext", "allowPrivilegeEscalation"), True),
            [],
            [f"{C}.allowPrivilegeEscalation"],
        ),
        (
            "a hostPath-free but non-restricted volume type is restricted's",
            _with(("spec", "volumes"), [{"name": "v", "nfs": {"server": "s", "path": "/"}}]),
            [],
            ["spec.volumes[0]"],
        ),
        (
            "a container that opts out of runAsNonRoot is restricted's",
            _with((*CONTAINER, "securityContext", "runAsNonRoot"), False),
            [],
            [f"{C}.runAsNonRoot"],
        ),
    ],
)
def test_pod_security_rules(
    name: str, obj: dict[str, Any], baseline: list[str], restricted: list[str]
) -> None:
    (pod,) = pod_security.pod_specs(obj)
    assert [f for f, _ in pod_security.violations(pod, "baseline")] == baseline, name
    assert sorted(f for f, _ in pod_security.violations(pod, "restricted")) == sorted(restricted), name
    assert pod_security.violations(pod, "privileged") == []


def test_hardening_fills_in_what_restricted_asks_and_keeps_what_the_user_wrote() -> None:
    obj = {
        "kind": "Job",
        "spec": {
            "template": {
                "spec": {
                    "securityContext": {"runAsUser": 1000},
                    "initContainers": [
                        {"name": "init", "securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}
                    ],
                    "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": True}}],
                }
            }
        },
    }
    (pod,) = pod_security.pod_specs(obj)
    pod_security.harden(pod)
    spec = obj["spec"]["template"]["spec"]
    assert spec["securityContext"] == {
        "runAsUser": 1000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["initContainers"][0]["securityContext"] == {
        "capabilities": {"drop": ["NET_RAW", "ALL"]},
        "allowPrivilegeEscalation": False,
    }
    assert spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is True  # the user's
    assert [f for f, _ in pod_security.violations(pod, "restricted")] == [
        "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation"
    ]


@pytest.mark.parametrize(
    ("kind", "spec", "paths"),
    [
        ("Deployment", {"template": {"spec": {"containers": []}}}, ["spec.template.spec"]),
        (
            "JobSet",
            {"replicatedJobs": [{"template": {"spec": {"template": {"spec": {"containers": []}}}}}]},
            ["spec.replicatedJobs[0].template.spec.template.spec"],
        ),
        (
            "PyTorchJob",
            {
                "pytorchReplicaSpecs": {
                    "Master": {"template": {"spec": {}}},
                    "Worker": {"template": {"spec": {}}},
                }
            },
            [
                "spec.pytorchReplicaSpecs.Master.template.spec",
                "spec.pytorchReplicaSpecs.Worker.template.spec",
            ],
        ),
        (
            "RayJob",
            {
                "rayClusterSpec": {
                    "headGroupSpec": {"template": {"spec": {}}},
                    "workerGroupSpecs": [{"template": {"spec": {}}}],
                }
            },
            [
                "spec.rayClusterSpec.headGroupSpec.template.spec",
                "spec.rayClusterSpec.workerGroupSpecs[0].template.spec",
            ],
        ),
        ("InferenceService", {"predictor": {"model": {"modelFormat": {"name": "x"}}}}, ["spec.predictor"]),
        ("ScaledObject", {"scaleTargetRef": {"name": "x"}}, []),
    ],
)
def test_pod_templates_are_found_in_every_kind_that_has_them(
    kind: str, spec: dict[str, Any], paths: list[str]
) -> None:
    assert [p.path for p in pod_security.pod_specs({"kind": kind, "spec": spec})] == paths


def test_an_inference_service_model_is_hardened_as_a_container() -> None:
    obj = {"kind": "InferenceService", "spec": {"predictor": {"model": {"modelFormat": {"name": "x"}}}}}
    (pod,) = pod_security.pod_specs(obj)
    pod_security.harden(pod)
    assert obj["spec"]["predictor"]["model"]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod_security.violations(pod, "restricted") == []
