from __future__ import annotations

import itertools

import pytest
from placement_builders import a_cluster, node_name

from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.placement import ClusterTopology, LevelSpec, parse_levels


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


def test_a_node_without_a_leaf_label_is_outside_the_labelled_fabric() -> None:
    topology = a_cluster().with_leaves(1, nodes=3).unlabelled(node_name(0, 1)).topology()
    outside = topology.index_of[node_name(0, 1)]
    assert topology.outside == frozenset({outside})
    assert not topology.leaf_of(node_name(0, 1)).labelled
    assert topology.leaf_of(node_name(0, 0)).size == 2
    assert outside == len(topology) - 1  # sorted after every labelled node
    assert topology.outside_note() == (
        "1 node(s) outside the labelled fabric (no topology.tpfabric.io/leaf label)"
    )


def test_a_node_missing_any_level_label_is_outside_at_every_level() -> None:
    topology = (
        a_cluster().with_leaves(2, nodes=2).unlabelled(node_name(1, 0), labels.SPINE).topology()
    )
    node = node_name(1, 0)
    for level in ("leaf", "spine", "block"):
        assert not topology.domain_of(node, level).labelled
    # the node keeps its leaf label but is no neighbour of its former leaf peers
    assert topology.leaf_of(node_name(1, 1)).size == 1
    assert topology.span_depth([topology.index_of[node]]) == topology.cluster_depth


def test_two_unlabelled_nodes_are_no_neighbours() -> None:
    topology = (
        a_cluster()
        .with_leaves(1, nodes=3)
        .unlabelled(node_name(0, 0))
        .unlabelled(node_name(0, 1))
        .topology()
    )
    a, b = (topology.index_of[node_name(0, k)] for k in range(2))
    assert topology.common_depth(a, b) == topology.cluster_depth


def test_the_outside_note_counts_each_missing_label() -> None:
    topology = (
        a_cluster()
        .with_leaves(2, nodes=2)
        .unlabelled(node_name(0, 0))
        .unlabelled(node_name(1, 0), labels.LEAF, labels.SPINE)
        .topology()
    )
    assert topology.outside_note() == (
        "2 node(s) outside the labelled fabric (1 without topology.tpfabric.io/spine, "
        "2 without topology.tpfabric.io/leaf)"
    )


def test_leaves_named_alike_under_two_spines_are_two_domains() -> None:
    node_labels = {
        f"n{spine}{k}": {
            labels.BLOCK: "b",
            labels.SPINE: f"spine-{spine}",
            labels.LEAF: "rack-1",
        }
        for spine in range(2)
        for k in range(2)
    }
    topology = ClusterTopology.from_node_labels(node_labels)
    leaves = topology.domains[0]
    assert [leaf.path for leaf in leaves] == [
        ("b", "spine-0", "rack-1"),
        ("b", "spine-1", "rack-1"),
    ]
    # they only meet at the block above both spines
    assert topology.common_depth(topology.index_of["n00"], topology.index_of["n10"]) == 2
    assert topology.domain_at("leaf", ("b", "spine-1", "rack-1")).start == 2
    assert topology.domain_labels(leaves[1]) == (
        (labels.BLOCK, "b"),
        (labels.SPINE, "spine-1"),
        (labels.LEAF, "rack-1"),
    )


def test_the_cluster_root_has_no_domain_labels() -> None:
    topology = a_cluster().with_leaves(1).topology()
    assert topology.domain_labels(topology.domains[topology.cluster_depth][0]) == ()


def test_levels_parse_from_name_equals_label_key_text() -> None:
    levels = parse_levels(
        "zone=cloud.google.com/gce-topology-block, leaf=cloud.google.com/gce-topology-subblock"
    )
    assert levels == (
        LevelSpec("zone", "cloud.google.com/gce-topology-block"),
        LevelSpec("leaf", "cloud.google.com/gce-topology-subblock"),
    )


def test_a_level_named_nvlink_or_written_with_a_bang_keeps_tp_groups() -> None:
    levels = parse_levels(
        "block=topology.tpfabric.io/block,spine=topology.tpfabric.io/spine,"
        "leaf=topology.tpfabric.io/leaf,nvlink=nvidia.com/gpu.clique"
    )
    assert [spec.keep_tp_groups for spec in levels] == [False, False, False, True]
    assert parse_levels("rack!=example.com/rack")[0].keep_tp_groups
    topology = ClusterTopology.from_node_labels({}, levels)
    assert topology.tp_group_depth == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no topology level"),
        ("leaf=a/b,,spine=c/d", "empty entry"),
        ("leaf", "has no '='"),
        ("Leaf=example.com/leaf", "level name 'Leaf' is not valid"),
        ("cluster=example.com/x", "implicit root"),
        ("leaf=", "empty label key"),
        ("leaf=example.com/bad key", "invalid name part"),
        ("leaf=Example_com/leaf", "invalid prefix"),
        ("leaf=example.com/a,leaf=example.com/b", "given twice"),
        ("a=example.com/x,b=example.com/x", "label key 'example.com/x' is given twice"),
    ],
)
def test_bad_level_text_is_an_input_error(text: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem) as caught:
        parse_levels(text)
    assert caught.value.where == "--levels"


def test_a_node_whose_rail_plugs_into_another_leaf_is_a_rail_anomaly() -> None:
    topology = a_cluster().with_leaves(1, nodes=3).miscabled(node_name(0, 1), 5, 7).topology()
    assert [topology.rail_anomaly[topology.index_of[node_name(0, k)]] for k in range(3)] == [
        False,
        True,
        False,
    ]
