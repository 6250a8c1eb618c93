"""The packing experiment: arrival order and tuning, the placement loop, points, the command."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpuq.commands.pack import pack
from gpuq.core.placement.fragmentation import FragmentationMeter, cluster_fragmentation, typical_tasks
from gpuq.core.placement.policies import POLICIES, PolicyInputs, TieBreak, choose_node, fits, make_policy
from gpuq.pack.experiment import PackingState, PackPoint, arrival_order, node_view, pod_view, run_pack
from gpuq.pack.openb import OpenbNode, OpenbPod

OPENB = (Path(__file__).resolve().parents[2] / "data/traces/openb")


def pods_of(*gpu_milli: tuple[int, int]) -> list[OpenbPod]:
    """Pods p-00, p-01... asking (num_gpu, gpu_milli) each."""
    return [OpenbPod(f"p-{i:02d}", 1_000, 1_024, count, milli) for i, (count, milli) in enumerate(gpu_milli)]


def total_milli(pods: list[OpenbPod]) -> int:
    return sum(pod.gpu_total_milli for pod in pods)


TUNE_CASES = [
    ("copies are appended until one more would pass the target", [(1, 1000)] * 4, 1.3, 13, 13_000),
    ("a target between two pods stops below it", [(1, 1000)] * 4, 1.25, 12, 12_000),
    ("a multi-GPU copy is checked by its per-GPU milli and may overshoot", [(2, 1000)], 1.3, 7, 14_000),
    ("above the target pods are removed until it is met", [(1, 1000)] * 20, 0.5, 5, 5_000),
    ("removal may stop below the target and appends nothing", [(3, 1000)] * 10, 0.5, 1, 3_000),
    ("tune 0 keeps the list", [(1, 1000)] * 20, 0.0, 20, 20_000),
]


@pytest.mark.parametrize(
    ("name", "requests", "tune", "count", "milli"), TUNE_CASES, ids=[case[0] for case in TUNE_CASES]
)
def test_tuning_stops_as_upstream(
    name: str, requests: list[tuple[int, int]], tune: float, count: int, milli: int
) -> None:
    order = arrival_order(pods_of(*requests), tune, 10_000, random.Random(1))
    assert (len(order), total_milli(order)) == (count, milli)


def test_arrival_is_the_name_sorted_list_shuffled_then_tuned_copies() -> None:
    pods = pods_of(*[(1, 500)] * 10)
    order = arrival_order(list(reversed(pods)), 1.0, 10_000, random.Random(5))
    expected = sorted(pods, key=lambda pod: pod.name)
    random.Random(5).shuffle(expected)
    assert order[:10] == expected
    assert [pod.name.split("-tuned-")[1] for pod in order[10:]] == [str(i) for i in range(10)]
    assert arrival_order(pods, 1.0, 10_000, random.Random(6))[:10] != expected


def synthetic_cluster(rng: random.Random) -> tuple[list[OpenbNode], list[OpenbPod]]:
    shapes = [
        (96_000, 8, "G2"),
        (32_000, 2, "T4"),
        (16_000, 1, "A10"),
        (64_000, 4, "V100M32"),
        (32_000, 0, None),
    ]
    nodes = [
        OpenbNode(f"n-{i:02d}", cpu, 262_144, gpus, model)
        for i, (cpu, gpus, model) in enumerate(shapes[i % len(shapes)] for i in range(12))
    ]
    requests = [(1, 200), (1, 300), (1, 470), (1, 810), (1, 1000), (2, 1000), (8, 1000), (0, 0)]
    pods = []
    for i in range(160):
        count, milli = rng.choice(requests)
        models = rng.choice([None, None, None, ("T4",), ("V100M32", "G2")]) if count else None
        pods.append(OpenbPod(f"p-{i:03d}", rng.choice([1_000, 4_000, 12_000]), 8_192, count, milli, models))
    return nodes, pods


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_indexed_loop_places_exactly_as_the_reference_selection(policy: str) -> None:
    nodes, pods = synthetic_cluster(random.Random(11))
    tasks = typical_tasks(pod_view(pod).task for pod in pods)
    rng = random.Random(3)
    chosen = make_policy(policy, PolicyInputs(typical_tasks=tasks, rng=rng))
    ranks = list(reversed(range(len(nodes))))
    state = PackingState([node_view(node) for node in nodes], chosen, FragmentationMeter(tasks), rng, ranks)
    for pod in map(pod_view, pods):
        before = list(state.views)
        expected = choose_node(chosen, before, pod, random.Random(0), ranks)
        placed = state.place(pod)
        changed = [i for i, view in enumerate(before) if view is not state.views[i]]
        assert placed is (expected is not None)
        if chosen.tie_break is TieBreak.UNIFORM:
            assert not placed or fits(before[changed[0]], pod)
        else:
            assert changed == ([expected] if placed else [])
    assert state.frag_total == pytest.approx(cluster_fragmentation(state.views, tasks))


def test_points_average_records_per_whole_percent_of_arrived_demand() -> None:
    node = OpenbNode("n", 64_000, 262_144, 2, "T4")
    pods = pods_of((1, 1000), (1, 1000), (1, 1000))
    result = run_pack([node], pods, "bestfit", tune=0.0, seed=1)
    by_pct = {point.arrived_pct: point for point in result.points}
    assert (result.pods, result.failed, len(result.points)) == (3, 1, 151)
    # Records at 50 %, 100 % and 150 %; 49 and 51 borrow the 50 % record; 2..48 keep the empty cluster.
    assert by_pct[0] == PackPoint(0, 0.0, 0.0, 0.0, 0)
    assert [by_pct[pct].alloc_pct for pct in (48, 49, 50, 51, 52, 100, 149, 150)] == [
        0.0,
        50.0,
        50.0,
        50.0,
        50.0,
        100.0,
        100.0,
        100.0,
    ]
    assert by_pct[150].failed_pods == 1


def test_same_seed_gives_the_same_json_and_seeds_differ() -> None:
    nodes, pods = synthetic_cluster(random.Random(2))
    first = json.dumps(run_pack(nodes, pods, "fgd", 1.3, 42).as_dict())
    assert first == json.dumps(run_pack(nodes, pods, "fgd", 1.3, 42).as_dict())
    assert first != json.dumps(run_pack(nodes, pods, "fgd", 1.3, 43).as_dict())


def test_a_cluster_without_gpus_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU"):
        run_pack([OpenbNode("n", 1_000, 1_024, 0, None)], pods_of((1, 1000)), "fgd")


@pytest.mark.skipif(not OPENB.is_dir(), reason="openb trace not present")
def test_openb_default_list_at_a_fifth_of_the_cluster_places_everything() -> None:
    from gpuq.pack.openb import read_nodes, read_pods

    nodes = read_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = read_pods(OPENB / "openb_pod_list_default.csv")
    result = run_pack(nodes, pods, "fgd", tune=0.2, seed=42)
    last = result.points[-1]
    assert (result.total_gpus, result.nodes, result.failed, last.arrived_pct) == (6212, 1213, 0, 20)
    assert 19.5 < last.alloc_pct < 20.5
    assert 13.0 < result.points[0].frag_pct < 15.0  # CPU-only tasks see every idle GPU as fragmented


def command_app() -> typer.Typer:
    app = typer.Typer()
    app.command("pack")(pack)
    app.command("noop")(lambda: None)  # two commands, as in gpuq's CLI, so "pack" is a subcommand
    return app


def test_command_prints_the_same_json_twice_and_a_table(tmp_path: Path) -> None:
    nodes, pods = synthetic_cluster(random.Random(4))
    nodes_csv, pods_csv = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes_csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"{n.name},{n.cpu_milli},{n.memory_mib},{n.gpu_count},{n.gpu_model or ''}\n" for n in nodes)
    )
    pods_csv.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        + "".join(
            f"{p.name},{p.cpu_milli},{p.memory_mib},{p.gpu_count},{p.gpu_milli},{spec}\n"
            for p, spec in ((p, "|".join(p.gpu_models or ())) for p in pods)
        )
    )
    args = ["pack", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--policy", "gpu-packing"]
    runner = CliRunner()
    first = runner.invoke(command_app(), [*args, "-o", "json"])
    second = runner.invoke(command_app(), [*args, "-o", "json"])
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    document = json.loads(first.stdout)
    assert (document["policy"], document["seed"], len(document["points"])) == ("gpu-packing", 42, 131)
    table = runner.invoke(command_app(), args)
    assert table.exit_code == 0
    assert "GPU alloc %" in table.stdout and "pods placed" in table.stdout


def test_command_names_the_bad_line_and_exits_2(tmp_path: Path) -> None:
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,x,2,T4\n")
    result = CliRunner().invoke(command_app(), ["pack", "--nodes", str(nodes_csv), "--pods", str(nodes_csv)])
    assert result.exit_code == 2
    assert f"{nodes_csv}:2: memory_mib: not an integer" in result.stderr


def test_command_refuses_a_negative_tune(tmp_path: Path) -> None:
    result = CliRunner().invoke(command_app(), ["pack", "--nodes", "a", "--pods", "b", "--tune", "-1"])
    assert result.exit_code == 2
