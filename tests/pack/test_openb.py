"""Reading openb node and pod lists, and naming file, line and column for every bad row."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.pack.openb import OpenbError, OpenbNode, OpenbPod, read_nodes, read_pods

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time\n"
)


def write(tmp_path: Path, text: str, name: str = "list.csv") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_node_list_loads_gpu_and_cpu_only_nodes(tmp_path: Path) -> None:
    path = write(
        tmp_path, NODE_HEADER + "openb-node-0000,64000,262144,2,P100\nopenb-node-0001,32000,131072,0,\n"
    )
    assert read_nodes(path) == (
        OpenbNode("openb-node-0000", 64_000, 262_144, 2, "P100"),
        OpenbNode("openb-node-0001", 32_000, 131_072, 0, None),
    )


def test_pod_list_loads_shares_whole_gpus_cpu_pods_and_model_constraints(tmp_path: Path) -> None:
    rows = [
        "p-0,12000,16384,1,1000,,LS,Running,0,10",
        "p-1,6000,12288,1,460,,LS,Running,0,10",
        "p-2,8000,30517,0,0,,BE,Failed,0,10",
        "p-3,4000,8192,8,1000,V100M16|V100M32|V100M32,LS,Running,0,10",
        "",
    ]
    path = write(tmp_path, POD_HEADER + "\n".join(rows) + "\n")
    assert read_pods(path) == (
        OpenbPod("p-0", 12_000, 16_384, 1, 1000),
        OpenbPod("p-1", 6_000, 12_288, 1, 460),
        OpenbPod("p-2", 8_000, 30_517, 0, 0),
        OpenbPod("p-3", 4_000, 8_192, 8, 1000, ("V100M16", "V100M32", "V100M32")),
    )


def test_five_column_multigpu_lists_load(tmp_path: Path) -> None:
    path = write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,88000,327680,8,1000\n")
    assert read_pods(path) == (OpenbPod("p-0", 88_000, 327_680, 8, 1000),)


POD_ERRORS = [
    (
        "a header without num_gpu",
        "name,cpu_milli,memory_mib,gpu_milli\np,1,1,0\n",
        1,
        "num_gpu",
        "missing column",
    ),
    ("an empty file", "", 1, None, "empty file"),
    ("a decimal CPU request", "p,1.5,1,0,0\n", 2, "cpu_milli", "not an integer: '1.5'"),
    ("an empty memory request", "p,1,,0,0\n", 2, "memory_mib", "not an integer: ''"),
    ("a negative GPU count", "p,1,1,-1,0\n", 2, "num_gpu", "negative value -1"),
    ("a row cut short", "p,1,1\n", 2, "num_gpu", "missing value"),
    ("a second pod with the same name", "p,1,1,0,0\np,1,1,0,0\n", 3, "name", "duplicate name 'p'"),
    ("GPU milli on a CPU-only pod", "p,1,1,0,500\n", 2, "gpu_milli", "num_gpu is 0"),
    ("a GPU pod asking more than one GPU per GPU", "p,1,1,1,1500\n", 2, "gpu_milli", "not a per-GPU share"),
    ("a share of several GPUs", "p,1,1,2,500\n", 2, "gpu_milli", "shares need num_gpu 1"),
]


@pytest.mark.parametrize(
    ("name", "body", "line", "column", "message"), POD_ERRORS, ids=[case[0] for case in POD_ERRORS]
)
def test_bad_pod_rows_name_file_line_and_column(
    tmp_path: Path, name: str, body: str, line: int, column: str | None, message: str
) -> None:
    header = "" if body.startswith("name") or not body else "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    path = write(tmp_path, header + body)
    with pytest.raises(OpenbError) as caught:
        read_pods(path)
    error = caught.value
    assert (error.path, error.line, error.column) == (path, line, column)
    assert message in error.message
    assert str(error).startswith(f"{path}:{line}: " + (f"{column}: " if column else ""))


def test_bad_node_rows_name_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, NODE_HEADER + "n-0,64000,262144,2,P100\nn-1,64000,262144,two,P100\n")
    with pytest.raises(OpenbError, match=r"list\.csv:3: gpu: not an integer: 'two'"):
        read_nodes(path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(OpenbError, match=r"nope\.csv: cannot read: No such file"):
        read_nodes(missing)
