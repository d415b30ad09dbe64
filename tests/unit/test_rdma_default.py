"""The RDMA devices a gang pod gets when it names none: what the nodes that could hold it offer."""

from __future__ import annotations

import pytest

from tpfabric_core import labels
from tpfabric_core.placement.pod_fit import node_matcher
from tpfabric_core.rdma_default import (
    NodeOffer,
    RdmaDecision,
    decide_rdma,
    parse_decision,
    rdma_condition,
)

LEAF = {labels.LEAF: "leaf1"}


def node(name: str, gpus: int = 8, rdma: int = 8, **node_labels: str) -> NodeOffer:
    resources = {"nvidia.com/gpu": gpus, **({"rdma/ib": rdma} if rdma else {})}
    return NodeOffer(name, {**LEAF, **node_labels}, resources)


def default(nodes: list[NodeOffer], pod_gpus: int = 8, **kwargs: object) -> RdmaDecision:
    return decide_rdma(
        resource="rdma/ib",
        pod_gpus=pod_gpus,
        gang_size=2,
        nodes=nodes,
        fabric_keys=(labels.LEAF,),
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_whole_node_pod_gets_every_rdma_device_of_the_node() -> None:
    decision = default([node("a"), node("b")])
    assert (decision.count, decision.reason, decision.transport) == (8, "NodesOffer", "rdma")


def test_a_pod_of_half_a_node_gets_half_its_devices_and_never_none_of_some() -> None:
    assert default([node("a")], pod_gpus=4).count == 4
    assert default([node("a", rdma=4)], pod_gpus=1).count == 1, "4 x 1/8 rounds up to one"


def test_the_most_common_offer_wins_and_a_tie_goes_to_the_smaller() -> None:
    assert default([node("a"), node("b"), node("c", rdma=4)]).count == 8
    assert default([node("a"), node("c", rdma=4)]).count == 4


def test_nodes_that_cannot_hold_the_pod_do_not_vote() -> None:
    small = [node(f"s{i}", gpus=4, rdma=2) for i in range(5)]
    cpu = [NodeOffer("cpu", LEAF, {"example.com/x": 1})]
    assert default([*small, *cpu, node("big")]).count == 8, "only the 8-GPU node fits"
    selector = node_matcher({"nodeSelector": {"pool": "b"}})
    nodes = [node("a"), node("b", rdma=2, pool="b")]
    assert default(nodes, eligible=selector).count == 2


def test_nodes_of_the_labelled_fabric_are_asked_before_the_others() -> None:
    outside = [NodeOffer(f"o{i}", {}, {"nvidia.com/gpu": 8}) for i in range(5)]
    assert default([*outside, node("in")]).count == 8
    assert default(outside).reason == "NodesOfferNone", "unlabelled nodes only: they decide"


def test_no_rdma_offered_means_tcp_with_the_resource_and_the_fix_named() -> None:
    decision = default([node("a", rdma=0)])
    assert (decision.count, decision.reason, decision.transport) == (0, "NodesOfferNone", "tcp")
    assert "offers rdma/ib" in decision.message
    assert "rdma.resourceName" in decision.message
    nothing = default([])
    assert "no GPU node with 8 allocatable GPU(s) matches the pod" in nothing.message


def test_what_the_pod_asks_wins_and_zero_means_tcp() -> None:
    asked = default([], asked=2, asked_by="annotation tpfabric.io/rdma-count")
    assert (asked.count, asked.reason) == (2, "Requested")
    off = default([node("a")], asked=0, asked_by="annotation tpfabric.io/rdma-count")
    assert (off.count, off.reason) == (0, "NotRequested")
    assert "annotation tpfabric.io/rdma-count asks 0 rdma/ib" in off.message


@pytest.mark.parametrize(
    ("pod_gpus", "gang_size", "why"),
    [(0, 4, "takes no GPUs"), (8, 1, "a gang of one pod")],
)
def test_pods_without_gpus_and_gangs_of_one_get_none_by_default(
    pod_gpus: int, gang_size: int, why: str
) -> None:
    decision = decide_rdma(
        resource="rdma/ib", pod_gpus=pod_gpus, gang_size=gang_size, nodes=[node("a")]
    )
    assert (decision.count, decision.reason) == (0, "NotRequested")
    assert why in decision.message


def test_a_gang_of_unknown_size_counts_as_more_than_one_pod() -> None:
    assert decide_rdma(resource="rdma/ib", pod_gpus=8, gang_size=None, nodes=[node("a")]).count == 8


def test_the_decision_survives_its_annotation_and_bad_annotations_read_as_none() -> None:
    decision = default([node("a")])
    assert parse_decision(decision.annotation()) == decision
    bad = (
        None,
        "",
        "{",
        "[]",
        '{"count": -1, "reason": "Requested"}',
        '{"count": 8, "reason": "Because"}',
        '{"count": true, "reason": "Requested"}',
    )
    for text in bad:
        assert parse_decision(text) is None, text


def test_a_node_object_reads_into_an_offer_and_odd_quantities_count_as_absent() -> None:
    obj = {
        "metadata": {"name": "n1", "labels": {"a": "b"}},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8", "rdma/ib": "lots"}},
    }
    offer = NodeOffer.from_node(obj)
    assert offer == NodeOffer("n1", {"a": "b"}, {"nvidia.com/gpu": 8})
    assert NodeOffer.from_node({"metadata": {}}) is None
    assert NodeOffer.from_node({"metadata": {"name": "x"}, "status": "odd"}) is not None


def test_the_gangs_condition_says_false_when_any_pod_runs_without_rdma() -> None:
    rdma = default([node("a")])
    tcp = default([node("a", rdma=0)])
    assert rdma_condition([None]) is None
    assert rdma_condition([rdma, rdma]) == {
        "type": "RDMA",
        "status": "True",
        "reason": "NodesOffer",
        "message": rdma.message,
    }
    condition = rdma_condition([rdma, tcp, None])
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "NodesOfferNone")
