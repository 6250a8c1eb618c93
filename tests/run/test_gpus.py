"""GPU discovery against a fake of the ``pynvml`` module, virtual GPUs, the local node, device env."""

from __future__ import annotations

import logging
import sys

import pytest

from gpuq.core.devices import gfd_labels
from gpuq.core.gpus import DEFAULT_CATALOGUE, GPUCatalogue, GPUModelSpec
from gpuq.core.nodes import GPUSharing, SharingMode
from gpuq.run.gpus import (
    Discovery,
    GPUDevice,
    GPUTelemetry,
    MigDevice,
    device_env,
    discover,
    local_node,
    telemetry,
    virtual_devices,
)

from .fake_nvml import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_LIBRARY_NOT_FOUND,
    H100,
    H100_MIB,
    FakeGPU,
    FakeNvml,
    two_h100,
)

GIB = 2**30
UUID0 = "GPU-11111111-0000-0000-0000-000000000000"
UUID1 = "GPU-22222222-0000-0000-0000-000000000000"
SLICES = (
    MigDevice("MIG-00000000-aaaa-bbbb-cccc-dddddddddddd", "3g.40gb", 40448),
    MigDevice("MIG-00000001-aaaa-bbbb-cccc-dddddddddddd", "2g.20gb", 20096),
    MigDevice("MIG-00000003-aaaa-bbbb-cccc-dddddddddddd", "1g.10gb", 9984),
    MigDevice("MIG-00000004-aaaa-bbbb-cccc-dddddddddddd", "1g.10gb", 9984),
)
WHOLE = GPUDevice(0, UUID0, H100, H100_MIB)
PARTITIONED = GPUDevice(1, UUID1, H100, H100_MIB, mig_enabled=True, mig_devices=SLICES)


# --- discover ---------------------------------------------------------------------------------------


def test_two_h100s_are_found_with_names_as_bytes_or_str_and_the_mig_slices_that_exist() -> None:
    nvml = two_h100()
    assert discover(nvml) == Discovery(devices=(WHOLE, PARTITIONED), driver_version="550.54.15")
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_mig_profiles_come_from_the_slice_sizes_when_nvml_names_do_not_carry_them() -> None:
    nvml = two_h100()
    for slot in nvml.gpus[1].mig_slots:
        if slot is not None:
            slot.name = "NVIDIA H100 80GB HBM3"
    assert discover(nvml).devices[1].mig_devices == SLICES


@pytest.mark.parametrize(
    ("nvml", "reason"),
    [
        pytest.param(
            FakeNvml([], init_error=ERROR_DRIVER_NOT_LOADED),
            "NVML is not available: Driver Not Loaded",
            id="driver not loaded",
        ),
        pytest.param(
            FakeNvml([], init_error=ERROR_LIBRARY_NOT_FOUND),
            "NVML is not available: NVML Shared Library Not Found",
            id="no libnvidia-ml",
        ),
        pytest.param(FakeNvml([]), "no NVIDIA GPU found", id="driver but no GPU"),
    ],
)
def test_no_gpu_gives_an_empty_discovery_with_the_reason_never_an_exception(
    nvml: FakeNvml, reason: str
) -> None:
    found = discover(nvml)
    assert (found.devices, found.reason) == ((), reason)
    assert nvml.shutdowns == nvml.inits  # shut down exactly when initialised


def test_a_missing_pynvml_library_is_a_reason_not_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert discover() == Discovery(reason="nvidia-ml-py (pynvml) is not installed")
    assert telemetry() == []


def test_the_real_binding_on_this_machine_never_raises() -> None:
    found = discover()
    assert found.devices or found.reason


def test_a_gpu_whose_calls_fail_is_left_out_and_named_and_the_others_still_count() -> None:
    nvml = two_h100()
    nvml.gpus[0].fail = frozenset({"nvmlDeviceGetUUID"})
    found = discover(nvml)
    assert found.devices == (PARTITIONED,)
    assert found.problems == ("GPU 0 left out: Unknown Error",)
    assert found.reason is None


def test_an_unreadable_mig_slice_leaves_its_gpu_out_rather_than_offering_a_wrong_partition() -> None:
    nvml = two_h100()
    slot = nvml.gpus[1].mig_slots[0]
    assert slot is not None
    slot.fail = frozenset({"nvmlDeviceGetUUID"})
    found = discover(nvml)
    assert found.devices == (WHOLE,)
    assert found.problems == ("GPU 1 left out: Unknown Error",)


def test_no_gpu_describable_is_a_reason() -> None:
    nvml = FakeNvml([FakeGPU(H100, UUID0, H100_MIB, fail=frozenset({"nvmlDeviceGetHandleByIndex"}))])
    found = discover(nvml)
    assert (found.devices, found.reason) == ((), "no usable NVIDIA GPU")


def test_a_gpu_that_cannot_do_mig_is_whole() -> None:
    nvml = FakeNvml([FakeGPU("Tesla T4", UUID0, 15360)])  # GetMigMode: Not Supported
    assert discover(nvml).devices == (GPUDevice(0, UUID0, "Tesla T4", 15360),)


# --- telemetry --------------------------------------------------------------------------------------


def test_telemetry_reads_every_gpu_and_leaves_a_failed_reading_none() -> None:
    nvml = two_h100()
    gpu0, gpu1 = nvml.gpus
    gpu0.utilization, gpu0.used_mib, gpu0.temperature_c, gpu0.power_mw = (87, 40), 60_000, 71, 612_500
    gpu1.fail = frozenset(
        {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetTotalEccErrors"}
    )
    assert telemetry(nvml) == [
        GPUTelemetry(0, UUID0, 87, 40, 60_000, H100_MIB - 60_000, 71, 612.5, 0),
        GPUTelemetry(1, UUID1, 0, 0, 0, H100_MIB, None, None, None),
    ]
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_discovery_can_carry_telemetry_and_telemetry_without_nvml_is_empty() -> None:
    found = discover(two_h100(), with_telemetry=True)
    assert [d.telemetry.temperature_c if d.telemetry else None for d in found.devices] == [35, 35]
    assert telemetry(FakeNvml([], init_error=ERROR_DRIVER_NOT_LOADED)) == []


# --- virtual GPUs -----------------------------------------------------------------------------------


def test_virtual_gpus_are_the_catalogue_model_with_stable_distinct_uuids() -> None:
    gpus = virtual_devices(8, "h100")  # any case, aliases too
    assert [(g.index, g.name, g.memory_mib, g.mig_enabled) for g in gpus] == [
        (i, "NVIDIA-H100-80GB-HBM3", 81559, False) for i in range(8)
    ]
    assert len({g.uuid for g in gpus}) == 8
    assert all(g.uuid.startswith("GPU-") for g in gpus)
    assert virtual_devices(8, "H100-80GB") == gpus


@pytest.mark.parametrize(
    ("count", "model", "message"),
    [
        pytest.param(2, "K80", "unknown GPU model 'K80'; known: A10, A100-40GB", id="unknown model"),
        pytest.param(0, "H100-80GB", "--gpus must be between 1 and 64, got 0", id="no GPU"),
        pytest.param(65, "H100-80GB", "--gpus must be between 1 and 64, got 65", id="too many"),
    ],
)
def test_virtual_gpus_refuse_unknown_models_and_counts_out_of_range(
    count: int, model: str, message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")):
        virtual_devices(count, model)


# --- the local node ---------------------------------------------------------------------------------


def test_virtual_h100s_make_a_node_like_a_nodepool_of_the_same_model() -> None:
    spec = DEFAULT_CATALOGUE.get("H100-80GB")
    node = local_node(
        virtual_devices(8, "H100-80GB"),
        name="box",
        cpu_milli=16_000,
        memory_bytes=64 * GIB,
        labels={"team": "ml", "kubernetes.io/hostname": "overridden"},
    )
    assert node.allocatable == {"cpu": 16_000, "memory": 64 * GIB, "nvidia.com/gpu": 8, "pods": 110}
    assert node.labels == dict(
        sorted({"team": "ml", **gfd_labels(spec, 8, GPUSharing()), "kubernetes.io/hostname": "box"}.items())
    )
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert (node.gpu_model, node.gpu_count, node.gpu_memory_mib) == ("H100-80GB", 8, 81559)


def test_a_mig_gpu_offers_its_slices_and_a_whole_gpu_stays_whole_mixed_strategy() -> None:
    node = local_node(discover(two_h100()).devices, name="box", cpu_milli=8_000, memory_bytes=GIB)
    assert node.allocatable == {
        "cpu": 8_000,
        "memory": GIB,
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
        "pods": 110,
    }
    assert node.sharing == GPUSharing(
        SharingMode.MIG_MIXED, mig_layout=((), ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
    )
    assert node.labels["nvidia.com/mig.strategy"] == "mixed"
    assert node.labels["nvidia.com/mig-1g.10gb.count"] == "2"
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_a_pcie_name_finds_its_model_through_the_catalogue_aliases() -> None:
    node = local_node([GPUDevice(0, UUID0, "NVIDIA H100 PCIe", 81559)], name="b", cpu_milli=1, memory_bytes=1)
    assert node.gpu_model == "H100-80GB"


def test_an_unknown_real_gpu_still_counts_with_a_warning_and_the_labels_gfd_would_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = [GPUDevice(i, f"GPU-{i}", "NVIDIA RTX A6000", 49140) for i in range(2)]
    with caplog.at_level(logging.WARNING, logger="gpuq.run.gpus"):
        node = local_node(gpus, name="ws", cpu_milli=4_000, memory_bytes=GIB, pods=20)
    assert node.allocatable == {"cpu": 4_000, "memory": GIB, "nvidia.com/gpu": 2, "pods": 20}
    assert (node.gpu_model, node.gpu_count, node.gpu_memory_mib) == (None, 2, 49140)
    assert node.labels == {
        "kubernetes.io/hostname": "ws",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.memory": "49140",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-RTX-A6000",
    }
    assert "'NVIDIA RTX A6000' is not in the GPU catalogue" in caplog.text


def test_a_user_gpu_model_names_an_otherwise_unknown_gpu() -> None:
    a6000 = GPUModelSpec("A6000", "NVIDIA-RTX-A6000", 49140, 8, 6, "ampere", None)
    gpus = [GPUDevice(0, "GPU-0", "NVIDIA RTX A6000", 49140)]
    node = local_node(gpus, name="ws", cpu_milli=1, memory_bytes=1, catalogue=GPUCatalogue([a6000]))
    assert node.gpu_model == "A6000"
    assert node.labels["nvidia.com/gpu.family"] == "ampere"


def test_mixed_gpu_models_name_no_model_but_count_every_gpu(caplog: pytest.LogCaptureFixture) -> None:
    gpus = [GPUDevice(0, "GPU-0", H100, H100_MIB), GPUDevice(1, "GPU-1", "Tesla T4", 15360)]
    node = local_node(gpus, name="b", cpu_milli=1, memory_bytes=1)
    assert (node.gpu_model, node.gpu_count, node.allocatable["nvidia.com/gpu"]) == (None, 2, 2)
    assert "different models" in caplog.text


def test_a_machine_without_gpus_is_a_cpu_node() -> None:
    node = local_node([], name="laptop", cpu_milli=8_000, memory_bytes=GIB)
    assert node.allocatable == {"cpu": 8_000, "memory": GIB, "pods": 110}
    assert node.labels == {"kubernetes.io/hostname": "laptop"}
    assert (node.gpu_model, node.gpu_count) == (None, 0)


# --- device env -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        pytest.param(
            ("0", "3"),
            {
                "CUDA_VISIBLE_DEVICES": "0,3",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "NVIDIA_VISIBLE_DEVICES": "0,3",
            },
            id="indices",
        ),
        pytest.param(
            ("MIG-00000003-aaaa-bbbb-cccc-dddddddddddd",),
            {
                "CUDA_VISIBLE_DEVICES": "MIG-00000003-aaaa-bbbb-cccc-dddddddddddd",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "NVIDIA_VISIBLE_DEVICES": "MIG-00000003-aaaa-bbbb-cccc-dddddddddddd",
            },
            id="a MIG slice",
        ),
        pytest.param(
            (),
            {"CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NVIDIA_VISIBLE_DEVICES": "void"},
            id="no device means no GPU, not all of them",
        ),
    ],
)
def test_device_env_names_exactly_the_given_devices(
    devices: tuple[str, ...], expected: dict[str, str]
) -> None:
    assert device_env(devices) == expected


@pytest.mark.parametrize("bad", ["", "0,1", " 0"])
def test_device_env_refuses_ids_that_would_widen_the_list(bad: str) -> None:
    with pytest.raises(ValueError, match="not a device id"):
        device_env((bad,))
