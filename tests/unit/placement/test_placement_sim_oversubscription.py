"""Oversubscription sweeps: the fabric's leaf->spine and block->core ratios are inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpfabric_bench.placement import main, placer
from tpfabric_bench.sim.cluster import Cluster, build_cluster
from tpfabric_bench.sim.constants import (
    BLOCK_CORE_SWEEP,
    DEFAULT_CONSTANTS,
    LEAF_SPINE_SWEEP,
    oversubscribed,
)
from tpfabric_bench.sim.engine import simulate
from tpfabric_bench.sim.model import UplinkIndex
from tpfabric_bench.sim.trace import SimJob
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_core.placement import CapacitySnapshot, GangPlan, GangRequest, Unschedulable
from tpfabric_core.placement.baselines import spread
from tpfabric_core.placement.cost import UplinkLoad


def two_blocks() -> Cluster:
    """Return 32 healthy nodes: leaves of 4, 2 leaves a spine, 2 spines a block, 2 blocks."""
    fabric = uniform_fabric(32, nodes_per_leaf=4, leaves_per_spine=2, spines_per_block=2)
    return build_cluster(fabric, seed=1, anomalies=False)


def spreading(
    s: CapacitySnapshot, r: GangRequest, w: float, _u: UplinkLoad | None, _t: int | None
) -> GangPlan | Unschedulable:
    return spread(s, r, waited_seconds=w)


def a_job(workers: int) -> SimJob:
    return SimJob("j", 0.0, workers, 8, 13.0, 8, 1, 8, 100)


def test_the_sweep_covers_non_blocking_to_vendor_leaves_and_llama3_aggregation() -> None:
    assert LEAF_SPINE_SWEEP == (1.0, 2.0, 3.0)
    assert max(BLOCK_CORE_SWEEP) == 7.0


def test_oversubscribed_replaces_leaf_spine_and_block_core_and_keeps_spine_block() -> None:
    constants = oversubscribed(DEFAULT_CONSTANTS, leaf_spine=3.0, block_core=7.0)
    assert constants.cost.oversubscription == {"spine": 3.0, "block": 2.0, "cluster": 7.0}
    assert DEFAULT_CONSTANTS.cost.oversubscription["spine"] == 1.0
    assert oversubscribed(DEFAULT_CONSTANTS) == DEFAULT_CONSTANTS


def test_a_ratio_below_one_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="below 1:1"):
        oversubscribed(DEFAULT_CONSTANTS, leaf_spine=0.5)


def test_a_leaf_uplink_carries_a_third_of_the_flows_at_three_to_one() -> None:
    topology = two_blocks().topology
    flat = UplinkIndex(topology, DEFAULT_CONSTANTS).capacity
    narrow = UplinkIndex(topology, oversubscribed(DEFAULT_CONSTANTS, leaf_spine=3.0)).capacity
    assert narrow[0, 0] == pytest.approx(flat[0, 0] / 3)
    assert narrow[1, 0] == pytest.approx(flat[1, 0])


def test_a_job_across_blocks_runs_longer_behind_a_seven_to_one_core() -> None:
    cluster = two_blocks()
    job = [a_job(32)]  # every node: the data-parallel rings cross the core
    core4 = simulate(cluster, job, spreading).outcomes[0]
    core7 = simulate(
        cluster, job, spreading, constants=oversubscribed(DEFAULT_CONSTANTS, block_core=7.0)
    ).outcomes[0]
    assert core7.end_s > core4.end_s


def test_a_job_inside_one_node_does_not_feel_the_leaf_uplinks() -> None:
    cluster = two_blocks()
    narrow = oversubscribed(DEFAULT_CONSTANTS, leaf_spine=3.0)
    alone = [a_job(1)]
    assert (
        simulate(cluster, alone, spreading).outcomes[0].end_s
        == simulate(cluster, alone, spreading, constants=narrow).outcomes[0].end_s
    )


def test_the_benchmark_prints_a_table_per_sweep_point_and_writes_every_point(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sweep.json"
    argv = ["--nodes", "64", "--jobs", "12", "--policies", "tpfabric,kueue_bestfit"]
    sweep = ["--oversubscription", "1,3", "--core-oversubscription", "7"]
    assert main([*argv, *sweep, "--scale-nodes", "0", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert "policies" not in result
    ratios = [point["oversubscription"] for point in result["sweep"]]
    assert ratios == [
        {"spine": 1.0, "block": 2.0, "cluster": 7.0},
        {"spine": 3.0, "block": 2.0, "cluster": 7.0},
    ]
    for point in result["sweep"]:
        assert point["policies"]["tpfabric"]["jobs_done"] == 12
        assert "mean_jct_gain_vs_kueue" in point["tpfabric_vs"]


@pytest.mark.parametrize("ratios", ["0.5", "two", ""])
def test_the_benchmark_refuses_a_ratio_it_cannot_use(ratios: str) -> None:
    with pytest.raises(SystemExit):
        main(["--oversubscription", ratios, "--scale-nodes", "0"])


def test_the_planner_told_the_fabric_plans_with_its_figures() -> None:
    """``tpfabric-told`` prices plans with the simulated fabric's ratios, as the placer's
    ``--oversubscription`` does with a real one's; ``tpfabric`` keeps its generic model."""
    told, aware = placer("tpfabric-told", oversubscribed(DEFAULT_CONSTANTS, leaf_spine=3))
    generic, _ = placer("tpfabric", oversubscribed(DEFAULT_CONSTANTS, leaf_spine=3))
    assert aware
    snapshot = two_blocks().snapshot.copy()
    request = a_job(6).request()  # spans two leaves of four
    priced = told(snapshot, request, 0.0, None, None)
    plain = generic(snapshot, request, 0.0, None, None)
    assert isinstance(priced, GangPlan)
    assert isinstance(plain, GangPlan)
    assert priced.leaves_spanned == plain.leaves_spanned == 2
    assert priced.cost.best_s > plain.cost.best_s  # its spine uplinks are 3:1 there
