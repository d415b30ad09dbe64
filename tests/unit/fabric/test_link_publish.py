"""What the agent publishes for a verdict, when it writes, and the switch inference."""

from __future__ import annotations

import json

from tpfabric_core import labels
from tpfabric_core.fabric.link_judge import (
    LinkJudge,
    LinkJudgeConfig,
    NodeSample,
    NodeVerdict,
    PcieVerdict,
    PortVerdict,
)
from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    RailDetail,
    condition_patch,
    metadata_patch,
    parse_detail,
    publication_of,
    suspect_rail_switches,
)
from tpfabric_core.fabric.link_samples import PcieLink, PortSample

NOW = "2026-12-01T10:00:00Z"
LATER = "2026-12-01T10:05:00Z"


def ok_port(rail: int) -> PortVerdict:
    return PortVerdict(f"mlx5_{rail}", 1, rail, "ok")


def sick_node() -> NodeVerdict:
    sick = PortVerdict(
        "mlx5_3", 1, 3, "degraded", ("symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)",)
    )
    return NodeVerdict((ok_port(0), sick))


def test_a_healthy_node_is_true_ok_and_every_rail_ok() -> None:
    published = publication_of(NodeVerdict((ok_port(0), ok_port(1))))
    assert (published.status, published.reason, published.label) == ("True", "LinksHealthy", "ok")
    assert json.loads(published.annotation) == {
        "state": "ok",
        "rails": {"0": {"hca": "mlx5_0", "state": "ok"}, "1": {"hca": "mlx5_1", "state": "ok"}},
    }


def test_a_healthy_annotation_has_no_bandwidth_and_keeps_its_exact_text() -> None:
    published = publication_of(NodeVerdict((ok_port(0), ok_port(1))))
    assert published.annotation == (
        '{"rails":{"0":{"hca":"mlx5_0","state":"ok"},"1":{"hca":"mlx5_1","state":"ok"}},'
        '"state":"ok"}'
    )
    assert "bandwidth" not in publication_of(sick_node()).annotation  # symbol errors only


def test_a_port_retrained_from_4x_to_2x_publishes_half_the_bandwidth_on_its_rail() -> None:
    judge = LinkJudge(LinkJudgeConfig(), {"mlx5_0": 0, "mlx5_3": 3})
    ports = (
        PortSample("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, 4),
        PortSample("mlx5_3", 1, "ACTIVE", "LinkUp", 200.0, 2),  # 200 Gb/sec (2X NDR)
    )
    published = publication_of(judge.observe(NodeSample(0.0, ports)))
    rails = json.loads(published.annotation)["rails"]
    assert rails["3"]["bandwidth"] == 0.5
    assert "bandwidth" not in rails["0"]
    assert parse_detail(published.annotation)[1].bandwidth == 0.5


def test_a_rail_with_several_slow_ports_publishes_the_smallest_fraction_rounded() -> None:
    ports = (
        PortVerdict("mlx5_3", 1, 3, "degraded", ("rate 200 Gb/s",), bandwidth=0.5),
        PortVerdict("mlx5_3", 2, 3, "degraded", ("rate 100 Gb/s",), bandwidth=1 / 3),
        PortVerdict("mlx5_4", 1, 4, "ok"),
    )
    rails = json.loads(publication_of(NodeVerdict(ports)).annotation)["rails"]
    assert rails["3"]["bandwidth"] == 0.333
    assert "bandwidth" not in rails["4"]


def test_parse_detail_reads_the_bandwidth_and_turns_junk_into_none() -> None:
    def rail(value: str) -> RailDetail:
        text = f'{{"rails":{{"3":{{"hca":"mlx5_3","state":"degraded","bandwidth":{value}}}}}}}'
        (detail,) = parse_detail(text)
        return detail

    assert rail("0.5") == RailDetail(3, "mlx5_3", "degraded", bandwidth=0.5)
    assert rail("0").bandwidth == 0.0
    assert rail("1").bandwidth == 1.0
    huge = "1" + "0" * 400
    for junk in ('"0.5"', "-0.1", "1.5", "true", "null", "[0.5]", "NaN", "Infinity", huge):
        assert rail(junk).bandwidth is None, junk
    assert parse_detail('{"rails":{"0":{"hca":"mlx5_0","state":"ok"}}}')[0].bandwidth is None


def test_a_degraded_port_makes_the_node_false_degraded_with_the_reason_as_message() -> None:
    published = publication_of(sick_node())
    assert (published.status, published.reason, published.label) == (
        "False",
        "LinkDegraded",
        "degraded",
    )
    assert published.message == "symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)"
    assert parse_detail(published.annotation) == (
        RailDetail(0, "mlx5_0", "ok"),
        RailDetail(
            3, "mlx5_3", "degraded", ("symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)",)
        ),
    )


def test_a_down_port_says_link_down_and_pcie_alone_says_pcie_degraded() -> None:
    down = NodeVerdict((PortVerdict("mlx5_1", 1, 1, "down", ("link DOWN (Polling)",)),))
    assert publication_of(down).reason == "LinkDown"
    link = PcieLink("0000:17:00.0", "hca", "mlx5_0", 32.0, 32.0, 8, 16)
    pcie = NodeVerdict((ok_port(0),), (PcieVerdict(link, "PCIe x8 ..."),))
    published = publication_of(pcie)
    assert (published.reason, published.label, published.message) == (
        "PcieDegraded",
        "degraded",
        "PCIe x8 ...",
    )
    assert json.loads(published.annotation)["pcie"] == ["PCIe x8 ..."]


def test_a_node_without_fabric_ports_is_unknown_and_leaves_the_label_alone() -> None:
    published = publication_of(NodeVerdict(()))
    assert (published.status, published.reason, published.label) == (
        "Unknown",
        "NoFabricPorts",
        None,
    )
    assert metadata_patch(published, {labels.HEALTH: "degraded"}, {}) == {
        "metadata": {"annotations": {DETAIL_ANNOTATION: published.annotation}}
    }


def test_a_long_list_of_reasons_is_cut_and_counted() -> None:
    ports = tuple(
        PortVerdict(f"mlx5_{i}", 1, i, "degraded", (f"reason {i} " + "x" * 200,)) for i in range(8)
    )
    message = publication_of(NodeVerdict(ports)).message
    assert len(message) <= 1100
    assert message.endswith("more)")


def test_the_condition_is_written_once_and_keeps_its_transition_time() -> None:
    published = publication_of(sick_node())
    first = condition_patch(published, None, NOW)
    assert first == {
        "type": CONDITION_TYPE,
        "status": "False",
        "reason": "LinkDegraded",
        "message": published.message,
        "lastTransitionTime": NOW,
        "lastHeartbeatTime": NOW,
    }
    assert condition_patch(published, first, LATER) is None
    reworded = publication_of(
        NodeVerdict((PortVerdict("mlx5_3", 1, 3, "degraded", ("rate 200 Gb/s",)),))
    )
    again = condition_patch(reworded, first, LATER)
    assert again is not None
    assert again["lastTransitionTime"] == NOW  # still False: no transition
    healthy = condition_patch(publication_of(NodeVerdict((ok_port(0),))), first, LATER)
    assert healthy is not None
    assert healthy["lastTransitionTime"] == LATER


def test_metadata_is_patched_only_where_it_differs() -> None:
    published = publication_of(sick_node())
    assert metadata_patch(published, {}, {}) == {
        "metadata": {
            "labels": {labels.HEALTH: "degraded"},
            "annotations": {DETAIL_ANNOTATION: published.annotation},
        }
    }
    carried = {DETAIL_ANNOTATION: published.annotation}
    assert metadata_patch(published, {labels.HEALTH: "degraded"}, carried) is None


def test_an_unreadable_annotation_has_no_rails() -> None:
    assert parse_detail(None) == ()
    assert parse_detail("{not json") == ()
    assert parse_detail('{"rails": [1, 2]}') == ()


def nodes_on_switch(
    count: int, rail: int = 3, switch: str = "leaf-r3-a"
) -> dict[str, tuple[dict[str, str], tuple[RailDetail, ...]]]:
    return {
        f"n{i}": (
            {labels.rail_key(rail): switch, labels.rail_key(0): "leaf-r0-a"},
            (RailDetail(0, "mlx5_0", "ok"), RailDetail(rail, f"mlx5_{rail}", "degraded")),
        )
        for i in range(count)
    }


def test_three_nodes_degraded_on_the_rail_of_one_switch_make_the_switch_suspect() -> None:
    suspects = suspect_rail_switches(nodes_on_switch(3))
    assert [(s.switch, s.rails, s.nodes) for s in suspects] == [
        ("leaf-r3-a", (3,), ("n0", "n1", "n2"))
    ]
    assert suspects[0].message.startswith("rail switch leaf-r3-a suspect: 3 nodes degraded")


def test_two_nodes_are_not_enough_and_other_switches_do_not_add_up() -> None:
    nodes = nodes_on_switch(2) | {
        "m0": (
            {labels.rail_key(3): "leaf-r3-b"},
            (RailDetail(3, "mlx5_3", "degraded"),),
        )
    }
    assert suspect_rail_switches(nodes) == []
    assert suspect_rail_switches(nodes, min_nodes=2)[0].switch == "leaf-r3-a"
