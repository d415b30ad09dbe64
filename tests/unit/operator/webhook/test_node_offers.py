"""The gang webhook's view of the nodes: kept from a list and watch events, a new generation
only when what a node offers changed."""

from __future__ import annotations

from typing import Any

from tpfabric_core.rdma_default import NodeOffer
from tpfabric_operator.webhook.node_offers import NodeOffers


def node(name: str, rdma: str = "8", heartbeat: str = "t0") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"topology.tpfabric.io/leaf": "l1"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "rdma/ib": rdma, "cpu": "128"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
        },
    }


def view(*nodes: dict[str, Any]) -> NodeOffers:
    offers = NodeOffers(None)  # type: ignore[arg-type]  # no API: fed as a list and a watch would
    offers._replace([offers._slim(n) for n in nodes])
    return offers


def test_a_list_gives_every_nodes_offer() -> None:
    offers = view(node("a"), node("b", rdma="4"))
    assert [o.resources["rdma/ib"] for o in offers.offers()] == [8, 4]


def test_a_heartbeat_keeps_the_generation_and_the_remembered_decisions() -> None:
    offers = view(node("a"))
    first = offers.generation
    calls: list[int] = []

    def count(nodes: tuple[NodeOffer, ...]) -> int:
        calls.append(1)
        return len(nodes)

    assert offers.remember("shape", count) == 1
    offers._event("/a", node("a", heartbeat="t1"))
    assert offers.generation == first
    assert offers.remember("shape", count) == 1
    assert len(calls) == 1


def test_a_changed_offer_a_new_node_and_a_deleted_one_are_seen() -> None:
    offers = view(node("a"))
    offers._event("/a", node("a", rdma="0"))
    assert offers.offers()[0].resources["rdma/ib"] == 0
    offers._event("/b", node("b"))
    assert {o.name for o in offers.offers()} == {"a", "b"}
    offers._event("/a", None)
    assert {o.name for o in offers.offers()} == {"b"}


def test_a_node_object_without_a_name_is_left_out() -> None:
    offers = view({"metadata": {}}, node("a"))
    assert [o.name for o in offers.offers()] == ["a"]
