"""``status.placement`` has one reader and one writer: what a stored placement means, how each
kind of placement is written, what every write carries over and tests, and the operator's words
the placer reads."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_core import labels
from tpfabric_core.api import Placement
from tpfabric_core.api import placement as status
from tpfabric_core.api.placement import (
    MAX_REASONS,
    NO_PLACEMENT,
    REFUSAL_SECONDS,
    prepare_write,
    read_placement,
)
from tpfabric_core.placement import topology
from tpfabric_core.placement.results import (
    CollectiveCost,
    DomainShortfall,
    GangPlan,
    Unschedulable,
)
from tpfabric_core.timestamps import rfc3339

NOW = 1_800_000_000.0
SPINE, LEAF = labels.SPINE, labels.LEAF


def a_plan(*nodes: str, level: str = "leaf", domain: str = "l1") -> GangPlan:
    return GangPlan(
        job="ns/llama",
        policy="tpfabric",
        level=level,
        domain=domain,
        domain_path=("s1", domain),
        nodes_by_rank=nodes or ("n1", "n2"),
        gpus_per_worker=8,
        rdma_per_worker=0,
        hops=1,
        leaves_spanned=1,
        cost=CollectiveCost(0.000153, 0.000168, 16 << 20),
        reasons=("smallest level that fits", "rank order"),
        domain_labels=((SPINE, "s1"), (LEAF, domain)) if level != "cluster" else (),
    )


def a_wait(domains: int) -> Unschedulable:
    candidates = tuple(
        DomainShortfall("leaf", f"l{i}", 2, 4, (), workers_ever=8) for i in range(domains)
    )
    return Unschedulable("ns/llama", "tpfabric", "leaf", candidates, "no leaf has room")


def stored(**fields: Any) -> status.StoredPlacement:
    return read_placement(fields)


# -- reading: typed and tolerant ------------------------------------------------------------


def test_a_stored_plan_reads_as_typed_fields() -> None:
    placement = stored(
        state="Planned",
        level="leaf",
        domain="l1",
        domainLabels={SPINE: "s1", LEAF: "l1"},
        nodes=["n1", "n2"],
        plannedAt=rfc3339(NOW),
        waitingSince=rfc3339(NOW - 30),
        attempt=2,
        term=4,
    )
    assert placement.planned
    assert placement.present
    assert placement.nodes == ["n1", "n2"]
    assert placement.domain_labels == {SPINE: "s1", LEAF: "l1"}
    assert (placement.planned_at_time, placement.waiting_since_time) == (NOW, NOW - 30)
    assert (placement.attempt, placement.term) == (2, 4)


def test_fields_another_version_added_are_ignored() -> None:
    placement = stored(state="Waiting", message="no leaf", shinyNewField={"a": 1})
    assert placement.waiting
    assert placement.message == "no leaf"
    assert placement.ignored == ()


def test_a_field_that_cannot_be_read_is_ignored_alone_and_never_hides_the_job() -> None:
    placement = stored(state="Superseded", nodes=["n1"], hops="three", message="m")
    assert placement.present  # the job still has a placement: the placer sees it
    assert placement.state is None  # not a state this version knows: not Planned, not Waiting
    assert (placement.nodes, placement.message, placement.hops) == (["n1"], "m", None)
    assert set(placement.ignored) == {"state", "hops"}


def test_one_bad_item_of_a_list_is_ignored_not_the_list() -> None:
    good = {"node": "n2", "reason": "pod affinity", "since": rfc3339(NOW)}
    placement = stored(refusedNodes=[{"node": "n1", "since": rfc3339(NOW)}, good])
    assert [r.node for r in placement.refused_nodes] == ["n2"]
    assert placement.ignored == ("refusedNodes[0]",)


def test_null_reads_as_absent_and_no_mapping_as_no_placement() -> None:
    cleared = stored(state="Waiting", domainLabels=None, nodes=None, healthyRoom=None)
    assert (cleared.domain_labels, cleared.nodes, cleared.healthy_room) == ({}, [], None)
    for nothing in (None, {}, "Planned", ["n1"]):
        assert read_placement(nothing) is NO_PLACEMENT
        assert not NO_PLACEMENT.present
    assert status.placement_of_status({"placement": {"state": "Planned"}}).planned
    assert status.placement_of_status(None) is NO_PLACEMENT


def test_the_domain_is_read_by_every_level_label_else_by_the_level_of_an_older_plan() -> None:
    def key_of(level: str) -> str | None:
        return {"leaf": LEAF}.get(level)

    labelled = stored(level="leaf", domain="l1", domainLabels={SPINE: "s1", LEAF: "l1"})
    assert labelled.domain_labels_or_level(key_of) == {SPINE: "s1", LEAF: "l1"}
    older = stored(level="leaf", domain="l1")  # persisted before domainLabels existed
    assert older.domain_labels_or_level(key_of) == {LEAF: "l1"}
    assert stored(level="rack", domain="r1").domain_labels_or_level(key_of) is None
    assert stored(level="leaf").domain_labels_or_level(key_of) is None
    assert stored(level="cluster", domain="cluster").domain_labels_or_level(key_of) == {}


def test_the_cluster_level_is_the_engine_s() -> None:
    assert status.CLUSTER_LEVEL == topology.CLUSTER_LEVEL


def test_the_plan_level_is_node_on_one_node_else_the_level_else_cluster() -> None:
    assert stored(level="leaf", nodes=["n1", "n1"]).plan_level == "node"
    assert stored(level="spine", nodes=["n1", "n2"]).plan_level == "spine"
    assert stored(nodes=["n1", "n2"]).plan_level == "cluster"
    assert stored(level="leaf").plan_level is None


def test_the_last_nodes_are_the_plan_s_else_those_of_the_last_plan() -> None:
    assert stored(nodes=["n1"], previousNodes=["n9"]).last_nodes == ("n1",)
    assert stored(previousNodes=["n9", ""]).last_nodes == ("n9",)


def test_released_reads_the_last_release_else_the_plan() -> None:
    assert stored(plannedAt=rfc3339(NOW)).released_time == NOW
    assert stored(plannedAt=rfc3339(NOW), releasedAt=rfc3339(NOW + 5)).released_time == NOW + 5


def test_a_refusal_lasts_refusal_seconds() -> None:
    fresh = status.refusal("n1", "pod affinity", rfc3339(NOW - REFUSAL_SECONDS + 1))
    old = status.refusal("n2", "volume", rfc3339(NOW - REFUSAL_SECONDS))
    placement = stored(refusedNodes=[fresh, old])
    assert placement.refusals(NOW) == [fresh]
    assert [r.node for r in placement.live_refusals(NOW)] == ["n1"]


def test_a_wait_read_again_keeps_everything_but_its_first_wait() -> None:
    planned = stored(state="Planned", nodes=["n1"], term=3)
    again = planned.with_waiting_since(NOW - 60)
    assert again.waiting_since_time == NOW - 60
    assert (again.nodes, again.term, again.planned) == (["n1"], 3, True)


# -- the operator's words the placer reads ----------------------------------------------------


def test_a_refused_creation_is_read_from_workers_created() -> None:
    refused = {
        "type": "WorkersCreated",
        "status": "False",
        "reason": "CreateFailed",
        "message": "exceeded quota",
    }
    creating = {**refused, "reason": "Creating"}
    assert status.create_refused({"conditions": [creating, refused]}) == "exceeded quota"
    assert status.create_refused({"conditions": [creating]}) == ""
    assert status.create_refused({"conditions": [{**refused, "message": ""}]}) == "CreateFailed"


def test_a_surge_group_is_read_from_its_condition() -> None:
    assert status.surge({"conditions": [{"type": "Surge", "status": "True"}]})
    assert not status.surge({"conditions": [{"type": "Surge", "status": "False"}, "junk"]})


def test_a_gang_s_problems_phase_and_attempt_are_read_tolerantly() -> None:
    assert status.gang_problems({"problems": ["rank 1 twice"]}) == ("rank 1 twice",)
    assert status.gang_problems({"problems": "not a list"}) == ()
    assert status.finished({"phase": "Failed"})
    assert not status.finished({"phase": "Running"})
    assert [status.status_attempt({"attempt": a}) for a in (3, "4", None, "x")] == [3, 4, 0, 0]


# -- the builders: each kind of placement as written ------------------------------------------


def test_a_plan_names_its_domain_by_every_label_and_clears_what_a_wait_left() -> None:
    written = status.planned(a_plan("n1", "n2"), NOW, attempt=1, waiting_since=NOW - 40)
    assert written["state"] == "Planned"
    assert written["domainLabels"] == {SPINE: "s1", LEAF: "l1"}
    assert written["nodes"] == ["n1", "n2"]
    assert (written["plannedAt"], written["releasedAt"]) == (rfc3339(NOW), rfc3339(NOW))
    assert written["waitingSince"] == rfc3339(NOW - 40)  # the first wait is kept
    assert written["modelledAllreduceUs"] == 153.0
    for cleared in ("replacedRanks", "previousNodes", "healthyRoom"):
        assert written[cleared] is None
    assert "near" not in written
    near = status.planned(a_plan(), NOW, near="near 'prefill' in spine 's1' (required)")
    assert near["near"] == "near 'prefill' in spine 's1' (required)"


def test_a_wait_shows_the_best_few_domains_and_counts_the_rest() -> None:
    written = status.waiting(a_wait(MAX_REASONS + 3), NOW)
    assert len(written["reasons"]) == MAX_REASONS
    assert written["message"] == "no leaf has room (5 of 8 leaf domains in reasons)"
    assert status.waiting(a_wait(2), NOW)["message"] == "no leaf has room"
    assert status.waiting(a_wait(2), NOW, "mine")["message"] == "mine"


def test_a_placement_without_a_plan_clears_every_plan_field() -> None:
    for written in (
        status.waiting(a_wait(1), NOW),
        status.partner_waiting("waits for 'prefill'", NOW),
        status.replanning("dropped", NOW),
        status.invalid("unknown level 'rack'"),
    ):
        for field in ("level", "domain", "domainLabels", "hops", "plannedAt", "releasedAt"):
            assert written[field] is None
        assert written["nodes"] == []


def test_a_dropped_plan_waits_since_its_first_wait_else_since_now() -> None:
    assert status.replanning("x", NOW)["waitingSince"] == rfc3339(NOW)
    assert status.replanning("x", NOW, NOW - 90)["waitingSince"] == rfc3339(NOW - 90)
    refused = [status.refusal("n1", "pod affinity", rfc3339(NOW))]
    assert status.replanning("x", NOW, refused=refused)["refusedNodes"] == refused
    assert "refusedNodes" not in status.replanning("x", NOW)


def test_moved_ranks_say_their_moves_once_in_the_message() -> None:
    before = stored(state="Planned", message="planned [replaced: rank 0 -> n5]", term=2)
    moved = status.ranks_moved(before, a_plan("n7", "n2"), {"0": "uid-7"}, ["rank 0 -> n7"], NOW)
    assert moved["message"] == "planned [replaced: rank 0 -> n7]"
    assert moved["nodes"] == ["n7", "n2"]
    assert (moved["replacedRanks"], moved["term"]) == ({"0": "uid-7"}, 2)
    assert moved["releasedAt"] == rfc3339(NOW)


def test_a_healthy_room_answer_replaces_the_old_one() -> None:
    room = status.healthy_room(True, {"n2", "n1"}, "leaf 'l2' has room", NOW)
    written = {
        "found": True,
        "degradedNodes": ["n1", "n2"],
        "message": "leaf 'l2' has room",
        "since": rfc3339(NOW),
    }
    before = stored(state="Planned", nodes=["n1"], healthyRoom={**written, "found": False})
    assert status.with_healthy_room(before, room)["healthyRoom"] == written
    cleared = status.with_healthy_room(before, None)
    assert (cleared["healthyRoom"], cleared["nodes"]) == (None, ["n1"])


def test_a_whole_typed_placement_is_stored_in_camel_case_without_its_defaults() -> None:
    typed = Placement(state="Planned", level="leaf", domain="l1", nodes=["n1"], hops=1)
    stored_status = status.stored_status(typed)
    form = {"state": "Planned", "level": "leaf", "domain": "l1", "nodes": ["n1"], "hops": 1}
    assert stored_status == {"placement": form}
    assert status.placement_of_status(stored_status).nodes == ["n1"]


# -- every write: what it carries, when it is sent, what it tests -----------------------------


def test_a_refusal_is_carried_across_writes_until_it_expires() -> None:
    live = status.refusal("n1", "pod affinity", rfc3339(NOW - 10))
    expired = status.refusal("n2", "volume", rfc3339(NOW - REFUSAL_SECONDS - 1))
    before = stored(state="Replanning", refusedNodes=[live, expired], term=1)
    write = prepare_write(before, status.planned(a_plan(), NOW), now=NOW, term=1)
    assert write.placement["refusedNodes"] == [live]
    gone = prepare_write(stored(state="Waiting", refusedNodes=[expired]), {}, now=NOW, term=1)
    assert gone.placement["refusedNodes"] is None


def test_where_the_gang_ran_is_kept_until_it_is_planned_again() -> None:
    ran = stored(state="Planned", nodes=["n1", "n2"], term=1)
    dropped = prepare_write(ran, status.replanning("x", NOW), now=NOW, term=1)
    assert dropped.placement["previousNodes"] == ["n1", "n2"]
    replanned = prepare_write(dropped.written, status.planned(a_plan("n3"), NOW), now=NOW, term=1)
    assert replanned.placement["previousNodes"] is None


def test_every_write_records_its_term_and_tests_the_placement_it_replaces() -> None:
    before = stored(state="Waiting", message="old", term=3)
    write = prepare_write(before, status.waiting(a_wait(1), NOW), now=NOW, term=5)
    assert write.placement["term"] == 5
    assert write.test == {"op": "test", "path": "/status/placement/term", "value": 3}
    first = prepare_write(NO_PLACEMENT, status.waiting(a_wait(1), NOW), now=NOW, term=5)
    assert first.test == {"op": "test", "path": "/status/placement", "value": None}


def test_a_write_is_sent_when_its_meaning_changes_and_a_plan_always() -> None:
    waiting = status.waiting(a_wait(1), NOW)
    before = prepare_write(NO_PLACEMENT, waiting, now=NOW, term=1).written
    later = status.waiting(a_wait(1), NOW)  # the same words a minute later
    assert not prepare_write(before, later, now=NOW + 60, term=1).send
    reworded = status.waiting(a_wait(1), NOW, "no leaf has room; blocked")
    assert prepare_write(before, reworded, now=NOW, term=1).send
    plan = status.planned(a_plan(), NOW)
    planned = prepare_write(NO_PLACEMENT, plan, now=NOW, term=1).written
    assert prepare_write(planned, plan, now=NOW, term=1).send


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("state", "Replanning"),
        ("message", "another"),
        ("reasons", [{"level": "leaf", "domain": "l9", "reason": "r"}]),
        ("waitingSince", rfc3339(NOW - 1)),
        ("nodes", ["n9"]),
        ("domainLabels", {LEAF: "l9"}),
        ("refusedNodes", [status.refusal("n9", "r", rfc3339(NOW))]),
        ("healthyRoom", {"found": True}),
    ],
)
def test_these_fields_carry_a_placement_s_meaning(field: str, value: Any) -> None:
    before = stored(state="Waiting", message="m", waitingSince=rfc3339(NOW))
    assert status.meaning_changed(before, {**before.raw, field: value})


def test_times_hops_and_terms_do_not_change_a_placement_s_meaning() -> None:
    before = stored(state="Waiting", message="m", hops=1, term=1, releasedAt=rfc3339(NOW))
    after = {**before.raw, "hops": 3, "term": 2, "releasedAt": rfc3339(NOW + 9), "nodes": []}
    assert not status.meaning_changed(before, after)


def test_a_new_domain_s_labels_delete_the_old_ones() -> None:
    before = stored(state="Planned", domainLabels={SPINE: "s1", "rack": "r1"}, term=1)
    write = prepare_write(before, status.planned(a_plan(), NOW), now=NOW, term=1)
    assert write.patch["placement"]["domainLabels"] == {"rack": None, SPINE: "s1", LEAF: "l1"}
    assert write.placement["domainLabels"] == {SPINE: "s1", LEAF: "l1"}


def test_dropping_a_placement_tests_the_one_it_drops() -> None:
    drop = status.prepare_drop(stored(state="Planned", term=7))
    assert drop.patch == {"placement": None}
    assert drop.send
    assert drop.test == {"op": "test", "path": "/status/placement/term", "value": 7}
