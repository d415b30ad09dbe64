from __future__ import annotations

from placement_builders import a_cluster, node_name

from tpfabric_core.placement import CostModelConfig, modelled_allreduce

TOPOLOGY = a_cluster().with_leaves(4, nodes=4, per_spine=2, spines_per_block=1).topology()
ONE_LEAF = [node_name(0, k) for k in range(4)]
TWO_LEAVES = [node_name(0, 0), node_name(0, 1), node_name(1, 0), node_name(1, 1)]
TWO_BLOCKS = [node_name(0, 0), node_name(0, 1), node_name(2, 0), node_name(2, 1)]


def best(nodes: list[str], **kwargs: object) -> float:
    return modelled_allreduce(TOPOLOGY, nodes, 8, **kwargs).best_s  # type: ignore[arg-type]


def test_one_leaf_is_cheaper_than_two_leaves_which_is_cheaper_than_two_blocks() -> None:
    assert best(ONE_LEAF) < best(TWO_LEAVES) < best(TWO_BLOCKS)


def test_a_degraded_endpoint_makes_the_collective_slower() -> None:
    assert best(ONE_LEAF, degraded=frozenset({ONE_LEAF[0]})) > best(ONE_LEAF)


def test_the_one_leaf_reference_is_never_slower_than_the_placement() -> None:
    assert best(TWO_BLOCKS, as_one_leaf=True) == best(ONE_LEAF)


def test_a_ring_that_zigzags_between_leaves_costs_more_than_one_crossing_each_way() -> None:
    zigzag = [node_name(0, 0), node_name(1, 0), node_name(0, 1), node_name(1, 1)]
    slow = CostModelConfig(oversubscription={"spine": 4.0})
    big = TOPOLOGY  # leaves of 4 nodes: one uplink per rail at 4:1
    assert (
        modelled_allreduce(big, zigzag, 8, config=slow).ring_s
        > modelled_allreduce(big, TWO_LEAVES, 8, config=slow).ring_s
    )


def test_faster_links_lower_the_modelled_time() -> None:
    assert best(ONE_LEAF, config=CostModelConfig(link_gbps=800)) < best(ONE_LEAF)


def test_tree_beats_ring_for_small_messages_on_many_nodes() -> None:
    nodes = [node_name(leaf, k) for leaf in range(4) for k in range(4)]
    cost = modelled_allreduce(TOPOLOGY, nodes, 8, config=CostModelConfig(message_bytes=4096))
    assert cost.algorithm == "tree"


def test_a_single_worker_only_pays_nvlink() -> None:
    cost = modelled_allreduce(TOPOLOGY, ONE_LEAF[:1], 8)
    assert cost.ring_s == cost.tree_s > 0
