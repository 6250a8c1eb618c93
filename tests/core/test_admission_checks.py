"""Admission checks (Kueue: pkg/workload/admissionchecks.go): quota reservation before admission."""

from __future__ import annotations

import pytest

from builders import Case, case, cluster_queue, config, run_case, workload
from gpuq.core.model import CheckState, ClusterConfig, Workload


def checked(
    *names: str, on_flavors: tuple[str, ...] = (), declared: tuple[str, ...] = ("prov", "cap")
) -> ClusterConfig:
    cq = (
        cluster_queue("a")
        .flavor("f1", gpu=2)
        .flavor("f2", gpu=4)
        .checks(*names, on_flavors=on_flavors)
        .build()
    )
    return config(cq, checks=declared)


def gpus(name: str, n: int, **checks: CheckState) -> Workload:
    return workload(name).queue("a").request(n, gpu=1).checks(**checks).build()


CASES: list[Case] = [
    case(
        "quota is reserved but admission waits for admission checks",
        checked("prov"),
        gpus("w", 2),
        reserved={"w": "f1 until prov"},
    ),
    case(
        "without admission checks the workload is admitted at once",
        checked(),
        gpus("w", 2),
        admitted={"w": "f1"},
    ),
    case(
        "every check of the ClusterQueue must pass before admission",
        checked("prov", "cap"),
        gpus("w", 2),
        reserved={"w": "f1 until prov,cap"},
    ),
    case(
        "a check restricted to other flavors does not apply to the workload",
        checked("prov", on_flavors=("f2",)),
        gpus("w", 2),
        admitted={"w": "f1"},
    ),
    case(
        "a check restricted to the assigned flavor applies to the workload",
        checked("prov", on_flavors=("f2",)),
        gpus("w", 3),
        reserved={"w": "f2 until prov"},
    ),
    case(
        "a workload with a check in Retry is not nominated",
        checked("prov"),
        gpus("w", 2, prov=CheckState.RETRY),
        pending={"w": "admission checks prov are in Retry or Rejected"},
    ),
    case(
        "a workload with a Rejected check is not nominated",
        checked("prov"),
        gpus("w", 2, prov=CheckState.REJECTED),
        pending={"w": "admission checks prov are in Retry or Rejected"},
    ),
    case(
        "a quota-reserved workload still waiting for its checks holds its quota",
        checked("prov"),
        workload("waiting")
        .queue("a")
        .request(4, gpu=1)
        .admitted("a", {"gpu": "f2"})
        .checks(prov=CheckState.PENDING)
        .build(),
        gpus("w", 3),
        pending={
            "w": "insufficient quota for nvidia.com/gpu in flavor f1, request > maximum capacity (3 > 2)"
        },
    ),
    case(
        "a ClusterQueue requiring an undeclared admission check is inactive",
        checked("ghost"),
        gpus("w", 2),
        pending={
            "w": "ClusterQueue a is inactive: Can't admit new workloads: "
            "references missing AdmissionCheck(s): ghost."
        },
        cycles=None,
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_admission_checks(c: Case) -> None:
    assert run_case(c) == c.want
