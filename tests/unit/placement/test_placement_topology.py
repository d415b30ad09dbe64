from __future__ import annotations

import itertools

from placement_builders import a_cluster, node_name

from tpfabric_core.placement import ClusterTopology, LevelSpec


def test_every_domain_is_a_contiguous_run_of_nodes_inside_its_parent() -> None:
    topology = a_cluster().with_leaves(4, nodes=3, per_spine=2).topology()
    for depth in range(1, topology.cluster_depth + 1):
        for parent in topology.domains[depth]:
            children = [topology.domains[depth - 1][c] for c in parent.children]
            assert children[0].start == parent.start
            assert children[-1].end == parent.end
            assert all(a.end == b.start for a, b in itertools.pairwise(children))


def test_a_node_knows_its_leaf_path_and_rail_leaves() -> None:
    topology = a_cluster().with_leaves(2, nodes=2).topology()
    node = node_name(1, 0)
    assert topology.leaf_of(node).name == "leaf-1"
    assert topology.domain_path(node) == ("block-0", "spine-0", "leaf-1")
    assert topology.rail_leaves(node)[3] == "leaf-1-rail3"
    assert topology.rails == 8


def test_levels_are_data_so_other_label_conventions_work() -> None:
    levels = (
        LevelSpec("zone", "example.com/zone"),
        LevelSpec("rack", "example.com/rack"),
    )
    topology = ClusterTopology.from_node_labels(
        {
            "a": {"example.com/zone": "z1", "example.com/rack": "r1"},
            "b": {"example.com/zone": "z1", "example.com/rack": "r2"},
        },
        levels,
    )
    assert topology.level_names == ("rack", "zone", "cluster")
    assert topology.domain_of("b", "zone").name == "z1"
    assert topology.common_depth(0, 1) == 1


def test_a_node_without_a_leaf_label_gets_a_leaf_of_its_own() -> None:
    node_labels = a_cluster().with_leaves(1, nodes=2).node_labels()
    del node_labels[node_name(0, 1)]["topology.tpfabric.io/leaf"]
    topology = ClusterTopology.from_node_labels(node_labels)
    assert topology.leaf_of(node_name(0, 1)).size == 1
    assert topology.leaf_of(node_name(0, 0)).name == "leaf-0"


def test_a_node_whose_rail_plugs_into_another_leaf_is_a_rail_anomaly() -> None:
    topology = a_cluster().with_leaves(1, nodes=3).miscabled(node_name(0, 1), 5, 7).topology()
    assert [topology.rail_anomaly[topology.index_of[node_name(0, k)]] for k in range(3)] == [
        False,
        True,
        False,
    ]
