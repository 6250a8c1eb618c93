"""Concrete devices for pods on nodes that only count them: MIG slices and GPUs of MIG-mixed nodes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuq.run.devices import DeviceAllocator
from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import GPUDevice, MigDevice, local_node
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store

H100 = "NVIDIA H100 80GB HBM3"
DEVICES = (
    GPUDevice(0, "GPU-0", H100, 81559),
    GPUDevice(
        1,
        "GPU-1",
        H100,
        81559,
        mig_enabled=True,
        mig_devices=(
            MigDevice("MIG-a", "3g.40gb", 40448),
            MigDevice("MIG-b", "1g.10gb", 9984),
            MigDevice("MIG-c", "1g.10gb", 9984),
        ),
    ),
)


def test_the_allocator_hands_out_free_devices_and_takes_them_back() -> None:
    allocator = DeviceAllocator(DEVICES)
    assert allocator.take("p1", {"nvidia.com/mig-1g.10gb": 2}) == ("MIG-b", "MIG-c")
    with pytest.raises(ValueError, match=r"1 nvidia\.com/mig-1g\.10gb asked, 0 free"):
        allocator.take("p2", {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu": 1})
    assert allocator.free("nvidia.com/gpu") == 1  # nothing taken by the refused request
    assert allocator.take("p3", {"nvidia.com/gpu": 1, "cpu": 4000}) == ("0",)
    allocator.give("p1")
    assert allocator.free("nvidia.com/mig-1g.10gb") == 2
    assert allocator.take("p4", {"nvidia.com/mig-1g.10gb": 1}) == ("MIG-b",)


CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: serving}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 1}
      - {name: nvidia.com/mig-1g.10gb, nominalQuota: 2}
      - {name: nvidia.com/mig-3g.40gb, nominalQuota: 1}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team}
spec: {clusterQueue: serving}
"""


def test_pods_on_a_mig_node_see_exactly_their_slices(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    node = local_node(DEVICES, name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    work = tmp_path / "work"
    loop = ControlLoop(
        store, LocalExecutor(work), [node], workdir=work, restart_backoff_s=0, devices={"box": DEVICES}
    )
    out = tmp_path / "out"
    out.mkdir()
    for name, resource in (("small", "nvidia.com/mig-1g.10gb"), ("whole", "nvidia.com/gpu")):
        script = f"import os; open({str(out / name)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
        container = {
            "name": "m",
            "command": [sys.executable, "-c", script],
            "resources": {"requests": {resource: 1}},
        }
        doc = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
        store.add_workload("team", name, "q", "Job", doc, 0, time.time())
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            loop.step()
            states = {w.name: w.state for w in store.list_workloads()}
            if states == {"small": "Succeeded", "whole": "Succeeded"}:
                break
            time.sleep(0.02)
        assert states == {"small": "Succeeded", "whole": "Succeeded"}
    finally:
        loop.close()
        store.close()
    assert (out / "small").read_text() == "MIG-b"
    assert (out / "whole").read_text() == "0"
