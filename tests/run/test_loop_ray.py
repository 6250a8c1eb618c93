"""The control loop's end-to-end scenarios of ``test_loop.py``, with pods run as Ray actors.

The scenarios are ``test_loop.py``'s own functions, collected here a second time; this
module's ``plane`` fixture, which pytest resolves for them here, swaps ``LocalExecutor``
for ``RayExecutor`` on one local Ray instance with as many virtual GPUs as the node.
Left out: the restart scenario (its second loop is built with a ``LocalExecutor``) and
waitForPodsReady (pods that placement cannot bind never reach the executor).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import yaml

from gpuq.run.executors.ray import RayExecutor
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store

from . import test_loop as scenarios

NODE_GPUS = 2
NODE = "box"  # the loop's node: the Ray node is labelled with it, so that pods placed there run there


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayExecutor]:
    """One local Ray instance for the module (Ray's GPUs and name = the node's); the loops' executors
    share it."""
    owner = RayExecutor(
        workdir=tmp_path_factory.mktemp("ray-owner"), num_gpus=NODE_GPUS, num_cpus=2, node_name=NODE
    )
    yield owner
    owner.close()
    assert not ray.is_initialized()


@pytest.fixture
def plane(ray_instance: RayExecutor, tmp_path: Path) -> Iterator[tuple[Store, ControlLoop, Path]]:
    """``test_loop.plane`` with a Ray executor."""
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(scenarios.CONFIG):
        store.apply_object(document)
    node = local_node(
        virtual_devices(NODE_GPUS, "A100-80GB"), name=NODE, cpu_milli=16_000, memory_bytes=64 << 30
    )
    executor = RayExecutor(workdir=tmp_path / "work")
    loop = ControlLoop(store, executor, [node], workdir=tmp_path / "work", restart_backoff_s=0)
    yield store, loop, tmp_path
    loop.close()
    assert executor.running() == set()
    store.close()


test_two_teams_run_on_distinct_gpus = scenarios.test_two_teams_run_on_distinct_gpus
test_a_high_priority_job_preempts_and_the_victim_resumes_from_its_checkpoint = (
    scenarios.test_a_high_priority_job_preempts_and_the_victim_resumes_from_its_checkpoint
)
test_failed_pods_restart_until_the_backoff_limit = scenarios.test_failed_pods_restart_until_the_backoff_limit
test_active_deadline_fails_a_job_that_runs_too_long = (
    scenarios.test_active_deadline_fails_a_job_that_runs_too_long
)
