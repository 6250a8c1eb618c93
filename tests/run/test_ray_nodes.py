"""Ray nodes as gpuq nodes, from ``ray.nodes()`` dicts as Ray 2.60 returns them (no Ray started)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq.core.nodes import GPU, HOSTNAME_LABEL, Node
from gpuq.run.executors.ray_nodes import gpuq_nodes, node_names, ray_nodes, to_node

HEAD_ID = "6f7da8d89a5ce24b5ddf1638c27515f2941f8c422ea670de372fbde5"
WORKER_ID = "171db41e7b0c3ffc0790bffd6d12582e50ee4373a225b5fd0879600c"
THIRD_ID = "0430d853705f3e106073b5855eceef2dd0b9315179980e894cd68eef"


def info(
    node_id: str,
    address: str,
    *,
    alive: bool = True,
    gpus: float = 2.0,
    labels: dict[str, str] | None = None,
    death: str = "",
    **custom: float,
) -> dict[str, Any]:
    """One entry of ``ray.nodes()``, with the fields gpuq reads and a few it does not."""
    return {
        "NodeID": node_id,
        "Alive": alive,
        "NodeManagerAddress": address,
        "NodeManagerHostname": "vm",
        "NodeName": address,
        "DeathReasonMessage": death,
        "Resources": {
            "CPU": 1.0,
            "GPU": gpus,
            "memory": 24643219200.0,
            "object_store_memory": 100000000.0,
            f"node:{address}": 1.0,
            "accelerator_type:A100": 1.0,
            **custom,
        },
        "Labels": {"ray.io/node-id": node_id, **(labels or {})},
    }


NAME_CASES = [
    pytest.param(
        [info(HEAD_ID, "10.0.0.1"), info(WORKER_ID, "10.0.0.2")],
        {},
        {HEAD_ID: "10.0.0.1", WORKER_ID: "10.0.0.2"},
        id="distinct addresses name the nodes",
    ),
    pytest.param(
        [info(HEAD_ID, "10.0.0.1"), info(WORKER_ID, "10.0.0.1")],
        {},
        {HEAD_ID: "10.0.0.1-6f7da8", WORKER_ID: "10.0.0.1-171db4"},
        id="a shared address gets each node's id prefix",
    ),
    pytest.param(
        [info(HEAD_ID, "10.0.0.1", labels={"gpuq.dev/node": "a100-1"}), info(WORKER_ID, "10.0.0.1")],
        {},
        {HEAD_ID: "a100-1", WORKER_ID: "10.0.0.1"},
        id="the gpuq.dev/node label wins",
    ),
    pytest.param(
        [info(HEAD_ID, "10.0.0.1"), info(WORKER_ID, "10.0.0.1")],
        {HEAD_ID: "10.0.0.1"},
        {HEAD_ID: "10.0.0.1", WORKER_ID: "10.0.0.1-171db4"},
        id="a name given earlier is kept when a node joins at the same address",
    ),
    pytest.param(
        [info(WORKER_ID, "10.0.0.2", alive=False), info(THIRD_ID, "10.0.0.2")],
        {WORKER_ID: "10.0.0.2"},
        {WORKER_ID: "10.0.0.2", THIRD_ID: "10.0.0.2"},
        id="a node restarted at the same address comes back under its name",
    ),
    pytest.param(
        [info(WORKER_ID, "10.0.0.2", alive=False), info(THIRD_ID, "10.0.0.2")],
        {},
        {WORKER_ID: "10.0.0.2-171db4", THIRD_ID: "10.0.0.2"},
        id="a dead node never takes an alive node's name",
    ),
]


@pytest.mark.parametrize(("infos", "known", "want"), NAME_CASES)
def test_nodes_are_named_by_label_else_address(
    infos: list[dict[str, Any]], known: dict[str, str], want: dict[str, str]
) -> None:
    assert node_names(infos, known=known) == want


def test_a_ray_node_becomes_a_gpuq_node_with_its_gpus_cpus_memory_custom_resources_and_labels() -> None:
    node = to_node(info(HEAD_ID, "10.0.0.1", labels={"zone": "a"}, ssd=2.5, fpga=0.5), "10.0.0.1")
    assert node == Node(
        name="10.0.0.1",
        allocatable={"cpu": 1000, "memory": 24643219200, GPU: 2, "pods": 110, "ssd": 2},
        labels={HOSTNAME_LABEL: "10.0.0.1", "ray.io/node-id": HEAD_ID, "zone": "a"},
        gpu_count=2,
    )


def test_a_cpu_only_node_has_no_gpu_resource() -> None:
    node = to_node(info(HEAD_ID, "10.0.0.1", gpus=0.0), "head")
    assert GPU not in node.allocatable and node.gpu_count == 0


def test_only_alive_nodes_are_placed_on_and_dead_ones_keep_why() -> None:
    infos = [
        info(HEAD_ID, "10.0.0.1"),
        info(WORKER_ID, "10.0.0.2", alive=False, death="health check failed"),
    ]
    assert [n.name for n in gpuq_nodes(infos)] == ["10.0.0.1"]
    dead = ray_nodes(infos)[1]
    assert (dead.name, dead.alive, dead.death) == ("10.0.0.2", False, "health check failed")


def test_an_entry_without_a_node_id_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ray.nodes\(\)\[0\] has no NodeID"):
        node_names([{"Alive": True}])
