"""Placement near another gang (policy/near.py): inside the partner's domains when the gang
asks to be, anywhere else only when it merely prefers it; while the partner is not placed, the
gang waits and says so."""

from __future__ import annotations

from dataclasses import replace

from placer_world import two_leaves
from policy_world import add_job, add_pods, cycle_of, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import CollectiveCost, GangPlan, Unschedulable
from tpfabric_scheduler.policy.near import NearTarget, domain_at, plan_near, wait_for_partner
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory, gang_request_of

PARTNER_NODES = frozenset({"leaf-a-n0", "leaf-a-n1"})


def near(mode: str, nodes: frozenset[str] | None = PARTNER_NODES) -> NearTarget:
    return NearTarget("prefill", "leaf", mode, nodes, ("leaf-a",), ("prefill",))


def asked(store: ClusterStore) -> GangRequest:
    two_leaves(store)
    add_job(store, "decode", 1)
    add_pods(store, "decode", range(1))
    return gang_request_of(work_of(store, "decode"))


class Nowhere:
    """An engine that finds room nowhere and notes the nodes each request allowed."""

    def __init__(self) -> None:
        self.seen: list[frozenset[str] | None] = []

    def __call__(self, request: GangRequest) -> Unschedulable:
        self.seen.append(request.eligible_nodes)
        return Unschedulable(request.name, "tpfabric", "leaf", (), "no room")


def test_a_gang_is_planned_inside_its_partner_s_domains() -> None:
    request = asked(ClusterStore())
    plan = Nowhere()
    seen = plan.seen
    plan_near(plan, request, near("required"))
    assert seen == [PARTNER_NODES], "required: there or nowhere"
    seen.clear()
    plan_near(plan, request, near("preferred"))
    assert seen == [PARTNER_NODES, None], "preferred: then where the request alone puts it"
    seen.clear()
    plan_near(
        plan, replace(request, eligible_nodes=frozenset({"leaf-a-n1", "x"})), near("required")
    )
    assert seen == [frozenset({"leaf-a-n1"})], "and only where the pods may run"


def test_a_gang_whose_partner_is_not_placed_is_planned_as_asked() -> None:
    plan = Nowhere()
    plan_near(plan, asked(ClusterStore()), near("preferred", nodes=None))
    assert plan.seen == [None]


def test_a_gang_waiting_for_its_partner_says_so_once() -> None:
    store = ClusterStore()
    asked(store)
    item, memory = work_of(store, "decode"), PlacerMemory()
    first = wait_for_partner(item, near("required", nodes=None), 0.0, memory)
    message = read_placement(first.placement).message
    assert message == (
        "waits for 'prefill' to be placed: it must be in the same leaf (near, required; "
        "found: prefill)"
    )
    assert first.event == "WaitingForPartner"
    assert [p.name for p in first.tell] == ["decode-worker-0"]
    again = replace(item, placement=read_placement(first.placement))
    assert wait_for_partner(again, near("required", nodes=None), 0.0, memory).placement is None


def test_a_plan_s_domain_is_named_at_the_partner_s_level() -> None:
    store = ClusterStore()
    asked(store)
    topology = cycle_of(store).snapshot.topology
    cost = CollectiveCost(0.0, 0.0, 0)
    plan = GangPlan("x", "tpfabric", "leaf", "leaf-b", (), ("leaf-b-n1",), 8, 0, 1, 1, cost)
    assert domain_at(plan, "leaf", topology) == "leaf-b"
    assert domain_at(plan, "rack", topology) is None
