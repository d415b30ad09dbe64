"""`topology show --cluster` paints what the fabric agent publishes: label, condition, rails."""

from __future__ import annotations

import io
import json

from rich.console import Console

from tpfabric_cli.kube_nodes import NodeCondition
from tpfabric_cli.topology import Discovery, domain_tree
from tpfabric_cli.topology.node_health import NodeHealth, node_health
from tpfabric_cli.topology.rendering import render_tree
from tpfabric_core import labels

SYMBOLS = "symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)"
SICK = NodeCondition("False", "LinkDegraded", SYMBOLS)
RAIL3 = json.dumps(
    {
        "state": "degraded",
        "rails": {
            "3": {"hca": "mlx5_3", "state": "degraded", "reasons": [SYMBOLS]},
            "0": {"hca": "mlx5_0", "state": "ok"},
        },
    }
)


def node(leaf: str, health: str | None = None, rail0: str = "sw0") -> dict[str, str]:
    found = {labels.LEAF: leaf, labels.SPINE: "s", labels.BLOCK: "b", labels.rail_key(0): rail0}
    found[labels.rail_key(3)] = f"{leaf}-rail3"
    if health is not None:
        found[labels.HEALTH] = health
    return found


def printed(discovery: Discovery) -> str:
    text = io.StringIO()
    Console(file=text, width=200, highlight=False).print(render_tree(domain_tree(discovery)))
    return text.getvalue()


def test_the_label_or_a_false_condition_makes_a_node_unhealthy() -> None:
    assert node_health({labels.HEALTH: "ok"}, NodeCondition("True", "LinksHealthy")) is None
    assert node_health({}, None) is None
    assert node_health({}, NodeCondition("Unknown", "NoFabricPorts")) is None
    assert node_health({labels.HEALTH: "degraded"}, None) == NodeHealth("degraded")
    assert node_health({labels.HEALTH: "down"}, None) == NodeHealth("down")
    found = node_health({}, SICK, RAIL3)
    assert found is not None
    assert (found.state, found.reason, found.message) == ("degraded", "LinkDegraded", SYMBOLS)
    assert [(r.rail, r.hca, r.state) for r in found.rails] == [(3, "mlx5_3", "degraded")]


def test_a_node_whose_agent_is_silent_is_unknown_whatever_its_last_label_said() -> None:
    silent = NodeCondition("Unknown", "AgentSilent", "the fabric agent of node n1 has not ...")
    for label in ({labels.HEALTH: "ok"}, {labels.HEALTH: "degraded"}, {}):
        found = node_health(label, silent, RAIL3)
        assert found == NodeHealth("unknown", "AgentSilent", silent.message)
    assert found.describe() == "unknown (AgentSilent: the fabric agent of node n1 has not ...)"


def test_an_unreadable_detail_annotation_still_paints_the_node() -> None:
    found = node_health({labels.HEALTH: "degraded"}, SICK, "{not json")
    assert found == NodeHealth("degraded", "LinkDegraded", SYMBOLS)


def test_the_tree_says_which_nodes_are_degraded_and_why() -> None:
    sick = node_health({}, SICK, RAIL3)
    assert sick is not None
    discovery = Discovery(
        "the cluster's node labels",
        {"n1": node("L"), "n2": node("L", "degraded"), "n3": node("L", "down"), "n4": node("L")},
        health={"n2": sick},
    )
    (leaf,) = domain_tree(discovery).leaf_domains
    assert leaf.degraded_nodes == ("n2", "n3")
    assert leaf.down_nodes == ("n3",)
    assert leaf.degraded_switches == frozenset()
    text = printed(discovery)
    assert "4 nodes, 1 leaf domains, rails 0,3, 2 unhealthy" in text
    assert "degraded: n[2-3] (down: n3)" in text
    assert f"n2: degraded (LinkDegraded: {SYMBOLS}; rail 3 (mlx5_3) degraded)" in text


def test_degraded_nodes_alone_do_not_blame_their_rail_switches() -> None:
    discovery = Discovery(
        "the cluster's node labels",
        {"a1": node("A", "degraded", rail0="swA"), "a2": node("A", "degraded", rail0="swA")},
    )
    (leaf,) = domain_tree(discovery).leaf_domains
    assert leaf.degraded_nodes == ("a1", "a2")
    assert leaf.degraded_switches == frozenset()
    assert "✗" not in printed(discovery)


def test_a_switch_the_cluster_suspects_is_painted_and_named() -> None:
    discovery = Discovery(
        "the cluster's node labels",
        {"n1": node("L", "degraded"), "n2": node("L")},
        suspect_switches=frozenset({"L-rail3"}),
    )
    (leaf,) = domain_tree(discovery).leaf_domains
    assert leaf.degraded_switches == frozenset({"L-rail3"})
    assert "rail 3 → L-rail3 ✗ degraded" in printed(discovery)
