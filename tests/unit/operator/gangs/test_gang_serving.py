"""What a serving group's record says and when a degraded group is moved. Pure."""

from __future__ import annotations

import time
from typing import Any

import pytest
from gang_world import T0, lws_pod, pods_of

from tpfabric_core import labels
from tpfabric_core.gangs import GangSettings, Near, gang_of
from tpfabric_operator.fabric_health import RankOnDegradedNode
from tpfabric_operator.gangs.records import GangPod
from tpfabric_operator.gangs.serving import (
    MOVE_SECONDS,
    LwsView,
    Moving,
    RecordLife,
    Unready,
    group_ready,
    lws_view,
    merge_conditions,
    move_decision,
    others_unready,
    record_life,
    surge_message,
)

pytestmark = pytest.mark.unit


def an_lws(**rolling: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 4, "leaderWorkerTemplate": {"size": 2}}
    if rolling:
        spec["rolloutStrategy"] = {"rollingUpdateConfiguration": rolling}
    return {"metadata": {"name": "chat"}, "spec": spec}


def test_an_lws_is_read_with_lws_defaults_and_percentages_scaled_as_lws_scales_them() -> None:
    assert lws_view(an_lws()) == LwsView("chat", 4, 1, 0, "report")
    # maxSurge rounds up, maxUnavailable down (GetScaledValueFromIntOrPercent)
    assert lws_view(an_lws(maxSurge="30%", maxUnavailable="30%")) == LwsView(
        "chat", 4, 1, 2, "report"
    )
    asked = an_lws()
    asked["spec"]["leaderWorkerTemplate"]["workerTemplate"] = {
        "metadata": {"annotations": {"tpfabric.io/on-degraded-link": "restart-elsewhere"}}
    }
    assert lws_view(asked).on_degraded_link == "restart-elsewhere"


def test_a_group_at_or_above_the_replicas_is_a_surge_group() -> None:
    view = LwsView("chat", 4, 1, 1, "report")
    assert surge_message(3, view) == ""
    assert "group 4 of LeaderWorkerSet 'chat' is a surge group" in surge_message(4, view)


def test_a_group_is_ready_only_when_every_pod_exists_and_is_ready() -> None:
    assert group_ready([True, True], 2)
    assert not group_ready([True], 2), "a worker not made yet"
    assert not group_ready([True, False], 2)


VIEW = LwsView("chat", 4, 1, 0, "restart-elsewhere")


def decide(**kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "group": "chat-1",
        "view": VIEW,
        "degraded": True,
        "ready": True,
        "others_unready": Unready(0),
        "moving": None,
    }
    return move_decision(**(args | kwargs))


def test_a_ready_degraded_group_is_moved_when_the_budget_allows() -> None:
    assert decide().now


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"others_unready": Unready(1, ("chat-3",))},
            (
                "waits: 1 other group(s) of 'chat' are not ready (chat-3); moving this one "
                "would pass maxUnavailable 1"
            ),
        ),
        ({"moving": "chat-2"}, "group chat-2 of 'chat' is being moved (one at a time)"),
        ({"ready": False}, "waits for the group to be ready"),
        ({"view": LwsView("chat", 4, 0, 1, "restart-elsewhere")}, "maxUnavailable 0"),
        (
            {"placed_back": ["n7"]},
            "not moved again: its last move placed it back on degraded node(s) n7",
        ),
        (
            {"no_room": "no healthy room for the whole gang: leaf l2 fits 1 of 2"},
            "not moved: no healthy room for the whole gang: leaf l2 fits 1 of 2",
        ),
    ],
)
def test_a_move_waits_for_a_safe_point(change: dict[str, Any], words: str) -> None:
    move = decide(**change)
    assert not move.now
    assert words in move.message


def test_nothing_is_moved_unless_the_owner_asked() -> None:
    assert decide(view=LwsView("chat", 4, 1, 0, "report")) is None
    assert decide(degraded=False) is None
    assert decide(view=None) is None


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    stored = [{"type": "Ready", "status": "True", "lastTransitionTime": "T0", "message": "1/2"}]
    same = merge_conditions([{"type": "Ready", "status": "True", "message": "2/2"}], stored, "T1")
    flipped = merge_conditions([{"type": "Ready", "status": "False"}], stored, "T1")
    assert same[0]["lastTransitionTime"] == "T0"
    assert flipped[0]["lastTransitionTime"] == "T1"


SETTINGS = GangSettings(levels={"spine": labels.SPINE, "leaf": labels.LEAF})


def member(annotations: dict[str, str]) -> Any:
    meta = {
        "name": "decode-0",
        "labels": {
            "leaderworkerset.sigs.k8s.io/name": "decode",
            "leaderworkerset.sigs.k8s.io/worker-index": "0",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        },
        "annotations": {"leaderworkerset.sigs.k8s.io/size": "2", **annotations},
    }
    return gang_of(meta, SETTINGS)


def test_near_is_read_from_the_pods_annotations_spine_and_preferred_by_default() -> None:
    assert member({"tpfabric.io/near": "prefill"}).near == Near("prefill", "spine", "preferred")
    asked = member(
        {
            "tpfabric.io/near": "prefill",
            "tpfabric.io/near-level": "leaf",
            "tpfabric.io/near-mode": "required",
        }
    )
    assert asked.near == Near("prefill", "leaf", "required")
    assert member({}).near is None


def test_a_bad_near_is_a_problem_naming_the_annotation() -> None:
    bad = member({"tpfabric.io/near": "prefill", "tpfabric.io/near-level": "rack"})
    assert bad.near is None
    assert [p.key for p in bad.problems] == ["tpfabric.io/near-level"]
    assert "level 'rack' is not configured" in bad.problems[0].message
    wrong = member({"tpfabric.io/near": "Pre_fill", "tpfabric.io/near-mode": "always"})
    assert [p.key for p in wrong.problems] == ["tpfabric.io/near", "tpfabric.io/near-mode"]


def test_other_groups_not_ready_are_those_not_ready_and_those_without_pods() -> None:
    groups = {0: ("chat-0", True), 2: ("chat-2", False)}
    # group 1 is the one deciding; group 3 has no pod (LWS makes it again)
    assert others_unready(VIEW, groups, own=1) == Unready(2, ("chat-2", "chat-3"))
    assert others_unready(VIEW, {i: (f"chat-{i}", True) for i in (0, 2, 3)}, own=1) == Unready(0)
    # a surge group above the replicas is not a missing one
    assert others_unready(VIEW, {7: ("chat-7", False)}, own=1) == Unready(
        4, ("chat-7", "chat-0", "chat-2")
    )


def test_an_lws_of_two_billion_replicas_is_counted_not_walked() -> None:
    view = LwsView("chat", 2**31 - 1, 1, 0, "restart-elsewhere")
    started = time.monotonic()
    unready = others_unready(view, {0: ("chat-0", True)}, own=5)
    assert time.monotonic() - started < 0.5, "walked the LWS's groups one by one"
    assert unready == Unready(2**31 - 3, ("chat-1", "chat-2", "chat-3"))


def life(pods: list[GangPod], **kwargs: Any) -> RecordLife:
    args: dict[str, Any] = {
        "degraded": [],
        "lws": VIEW,
        "unready": Unready(0),
        "moving": None,
        "placed_back": None,
        "now": T0,
        "monotonic": 100.0,
    }
    return record_life(pods[0], pods, 2, kwargs.pop("stored", {}), **(args | kwargs))


def chat_1(*, ready: bool = True) -> list[GangPod]:
    return pods_of(
        lws_pod("chat", 1, 0, ready=ready, node="n1"), lws_pod("chat", 1, 1, ready=ready, node="n2")
    )


ON_N1 = [RankOnDegradedNode(0, "n1", ("symbol errors",))]
ROOM = {"placement": {"healthyRoom": {"found": True, "degradedNodes": ["n1"]}}}


def by_type(result: RecordLife) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in result.conditions}


def test_a_group_on_a_degraded_node_says_so_until_it_heals() -> None:
    sick = life(chat_1(), degraded=ON_N1, lws=None)
    assert (
        by_type(sick)["Degraded"]["message"] == "straggler risk: rank 0 on node n1: symbol errors"
    )
    assert not sick.settled, "the node's recovery is no event of the gang's"
    healed = life(chat_1(), lws=None, stored={"conditions": sick.conditions})
    assert by_type(healed)["Degraded"]["reason"] == "LinksHealthy"
    assert healed.settled
    assert "Degraded" not in by_type(life(chat_1(), lws=None)), "never degraded: not named"


def test_a_ready_degraded_group_that_asks_to_move_names_its_leader() -> None:
    moved = life(chat_1(), degraded=ON_N1, stored=ROOM)
    assert moved.move_leader is not None
    assert moved.move_leader.name == "chat-1"
    assert by_type(moved)["Moving"]["status"] == "True"
    no_room = life(chat_1(), degraded=ON_N1)
    assert no_room.move_leader is None
    assert "not moved: the placer has not looked" in by_type(no_room)["Moving"]["message"]


def test_a_move_is_over_after_move_seconds_even_if_the_group_never_came_back() -> None:
    old = frozenset(p.uid for p in chat_1())
    under_way = Moving("chat-1", 100.0, old)
    assert not life(chat_1(ready=False), moving=under_way, monotonic=100.0 + MOVE_SECONDS).move_over
    over = life(chat_1(ready=False), moving=under_way, monotonic=100.1 + MOVE_SECONDS)
    assert over.move_over
    assert over.placed_back is None
    other = Moving("chat-0", 100.0, frozenset())
    assert not life(chat_1(), moving=other, monotonic=10_000.0).move_over, "not this group's"


def test_where_a_move_left_a_group_is_forgotten_once_its_degraded_nodes_change() -> None:
    kept = life(chat_1(), degraded=ON_N1, stored=ROOM, placed_back=frozenset({"n1"}))
    assert kept.placed_back == frozenset({"n1"})
    assert kept.move_leader is None
    on_n2 = [RankOnDegradedNode(1, "n2", ("link down",))]
    changed = life(chat_1(), degraded=on_n2, placed_back=frozenset({"n1"}))
    assert changed.placed_back is None
