"""Whether a move off degraded nodes makes a gang's collectives faster (placement.move_gain)."""

from __future__ import annotations

import math

from placement_builders import a_cluster, node_name

from tpfabric_core.fabric.link_publish import RailDetail, bandwidth_kept
from tpfabric_core.placement.move_gain import move_gain

TOPOLOGY = a_cluster().with_leaves(4, nodes=4, per_spine=2, spines_per_block=1).topology()
INDEX = TOPOLOGY.index_of
HERE = [INDEX[node_name(0, k)] for k in range(4)]  # one leaf, rank 1 on the degraded node
OTHER_LEAF = [INDEX[node_name(1, k)] for k in range(4)]
TWO_BLOCKS = [
    INDEX[n] for n in (node_name(1, 0), node_name(1, 1), node_name(2, 0), node_name(2, 1))
]
SICK = frozenset({HERE[1]})


def test_a_healthy_leaf_is_faster_than_a_halved_link() -> None:
    gain = move_gain(TOPOLOGY, HERE, OTHER_LEAF, 8, degraded=SICK, kept=0.5)
    assert gain.faster
    assert gain.there_s < gain.here_s
    assert gain.kept == 0.5


def test_across_blocks_is_slower_than_a_link_that_lost_little() -> None:
    """Two blocks cross a 2:1 uplink with a quarter of it taken (the cost model's defaults):
    a link keeping 90% of its rate is the faster path."""
    assert not move_gain(TOPOLOGY, HERE, TWO_BLOCKS, 8, degraded=SICK, kept=0.9).faster
    assert move_gain(TOPOLOGY, HERE, TWO_BLOCKS, 8, degraded=SICK, kept=0.1).faster


def test_an_unmeasured_link_is_taken_at_the_cost_models_factor() -> None:
    unmeasured = move_gain(TOPOLOGY, HERE, OTHER_LEAF, 8, degraded=SICK, kept=None)
    assert unmeasured == move_gain(TOPOLOGY, HERE, OTHER_LEAF, 8, degraded=SICK, kept=0.5)


def test_a_rail_down_makes_any_room_faster() -> None:
    gain = move_gain(TOPOLOGY, HERE, TWO_BLOCKS, 8, degraded=SICK, kept=0.0)
    assert math.isinf(gain.here_s)
    assert gain.faster
    assert "never where it runs" in gain.words


def test_the_same_nodes_are_never_faster() -> None:
    assert not move_gain(TOPOLOGY, HERE, HERE, 8, degraded=frozenset(), kept=0.5).faster


def test_what_a_node_keeps_is_its_worst_rail_and_nothing_with_a_rail_down() -> None:
    rails = (
        RailDetail(0, "mlx5_0", "degraded", bandwidth=0.5),
        RailDetail(1, "mlx5_1", "degraded", bandwidth=0.25),
        RailDetail(2, "mlx5_2", "ok"),
    )
    assert bandwidth_kept(rails) == 0.25
    assert bandwidth_kept((*rails, RailDetail(3, "mlx5_3", "down"))) == 0.0
    assert bandwidth_kept((RailDetail(0, "mlx5_0", "degraded", reasons=("errors",)),)) is None
