"""gpuq.api.pods: Kubernetes effective pod requests."""

from decimal import Decimal
from typing import Any

import pytest

from gpuq.api.pods import effective_pod_requests, request_limit_problems
from gpuq.core.quantity import QuantityError


def c(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


SIDECAR = {"restartPolicy": "Always"}

CASES: list[tuple[str, dict[str, Any], dict[str, Decimal]]] = [
    ("no containers request nothing", {"containers": []}, {}),
    (
        "regular containers add up",
        {"containers": [c({"cpu": "500m", "memory": "1Gi"}), c({"cpu": "1"})]},
        {"cpu": Decimal("1.5"), "memory": Decimal(2**30)},
    ),
    (
        "a big init container sets the peak",
        {"initContainers": [c({"cpu": "4"})], "containers": [c({"cpu": "1"}), c({"cpu": "1"})]},
        {"cpu": Decimal(4)},
    ),
    (
        "a small init container does not matter",
        {"initContainers": [c({"cpu": "1"})], "containers": [c({"cpu": "3"})]},
        {"cpu": Decimal(3)},
    ),
    (
        "init containers run one at a time",
        {"initContainers": [c({"cpu": "2"}), c({"cpu": "3"})], "containers": [c({"cpu": "1"})]},
        {"cpu": Decimal(3)},
    ),
    (
        "a sidecar adds to the regular containers",
        {"initContainers": [c({"cpu": "1"}, **SIDECAR)], "containers": [c({"cpu": "2"})]},
        {"cpu": Decimal(3)},
    ),
    (
        "an init container after a sidecar runs next to it",
        {
            "initContainers": [c({"cpu": "1"}, **SIDECAR), c({"cpu": "4"})],
            "containers": [c({"cpu": "1"})],
        },
        {"cpu": Decimal(5)},
    ),
    (
        "an init container before a sidecar runs alone",
        {
            "initContainers": [c({"cpu": "4"}), c({"cpu": "1"}, **SIDECAR)],
            "containers": [c({"cpu": "1"})],
        },
        {"cpu": Decimal(4)},
    ),
    (
        "overhead is added on top",
        {"containers": [c({"cpu": "1"})], "overhead": {"cpu": "250m", "memory": "64Mi"}},
        {"cpu": Decimal("1.25"), "memory": Decimal(64 * 2**20)},
    ),
    (
        "limits stand in for missing requests",
        {"containers": [c(limits={"nvidia.com/gpu": 2, "cpu": "2"}, requests={"cpu": "1"})]},
        {"cpu": Decimal(1), "nvidia.com/gpu": Decimal(2)},
    ),
    (
        "limits only container",
        {"containers": [c(limits={"memory": "1Gi"})]},
        {"memory": Decimal(2**30)},
    ),
    (
        "containers without resources request nothing",
        {"containers": [{"name": "a"}, {"name": "b", "resources": None}]},
        {},
    ),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_effective_pod_requests(spec: dict[str, Any], expected: dict[str, Decimal]) -> None:
    assert effective_pod_requests(spec) == expected


def test_malformed_quantity_raises() -> None:
    with pytest.raises(QuantityError):
        effective_pod_requests({"containers": [c({"cpu": "lots"})]})


LIMIT_CASES = [
    ("a request equal to its limit is fine", {"cpu": "2"}, {"cpu": "2"}, []),
    ("a request below its limit is fine", {"cpu": "1"}, {"cpu": "2"}, []),
    ("a request above its limit is rejected", {"memory": "2Gi"}, {"memory": "1Gi"}, ["less than or equal"]),
    (
        "an extended resource request must equal its limit",
        {"nvidia.com/gpu": "2"},
        {"nvidia.com/gpu": "1"},
        ["must equal"],
    ),
    ("limits alone are fine", {}, {"nvidia.com/gpu": "1"}, []),
]


@pytest.mark.parametrize(
    ("requests", "limits", "expected"), [c[1:] for c in LIMIT_CASES], ids=[c[0] for c in LIMIT_CASES]
)
def test_request_limit_problems(
    requests: dict[str, str], limits: dict[str, str], expected: list[str]
) -> None:
    spec = {"containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}
    problems = list(request_limit_problems(spec))
    assert len(problems) == len(expected)
    for (path, message), phrase in zip(problems, expected, strict=True):
        assert path[:4] == ("containers", 0, "resources", "requests")
        assert phrase in message


def _container(requests: dict[str, str]) -> dict[str, Any]:
    return {"containers": [{"name": "a", "resources": {"requests": requests}}]}


HAMI_CASES = [
    (
        "a valid HAMi share",
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "4000"},
        [],
    ),
    (
        "cores above 100",
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"},
        ["between 1 and 100, got 150"],
    ),
    ("cores of zero", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}, ["between 1 and 100, got 0"]),
    ("fractional memory", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0.5"}, ["at least 1, got 0.5"]),
    ("no vGPU to divide", {"nvidia.com/gpumem": "4000"}, ["which this container does not request"]),
    ("a gpu-milli share above one GPU", {"gpuq.dev/gpu-milli": "1500"}, ["a multiple of 1000"]),
]


@pytest.mark.parametrize(("case", "requests", "expected"), HAMI_CASES, ids=[c[0] for c in HAMI_CASES])
def test_device_problems(case: str, requests: dict[str, str], expected: list[str]) -> None:
    from gpuq.api.pods import device_problems

    messages = [message for _, message in device_problems(_container(requests))]
    assert len(messages) == len(expected)
    for message, fragment in zip(messages, expected, strict=True):
        assert fragment in message
