"""What one sync of a gang's record decides, from what it read: whether to make the record and
what to tell the pods, then the ranks, the status and whether the gang is settled. Pure."""

from __future__ import annotations

from typing import Any

import pytest
from gang_world import T0, group_pod, lws_pod, pods_of

from tpfabric_operator.gangs.decide import GangIntent, SyncFacts, record_step, sync_intent
from tpfabric_operator.gangs.owners import Identity, OwnerRead, identify
from tpfabric_operator.gangs.records import GangPod, OwnerRef, record_manifest
from tpfabric_operator.gangs.serving import Unready

pytestmark = pytest.mark.unit

LWS = OwnerRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "chat", "uid-chat")


def facts(**kwargs: Any) -> SyncFacts:
    return SyncFacts(
        **{
            "elsewhere": [],
            "degraded": [],
            "lws": None,
            "unready": Unready(0),
            "moving": None,
            "placed_back": None,
            "near_by": [],
            "now": T0,
            "monotonic": T0,
        }
        | kwargs
    )


def chat() -> list[GangPod]:
    return pods_of(lws_pod("chat", 1, 0), lws_pod("chat", 1, 1))


def test_a_gang_with_a_size_and_an_owner_gets_its_record() -> None:
    pods = chat()
    step = record_step(identify(pods[0], None, OwnerRead(LWS, {})), None)
    assert step.make == record_manifest(pods[0], 2, LWS)
    assert (step.warn, step.stop, step.owner_gone) == (None, False, "")


def test_a_gang_whose_owner_is_gone_gets_no_record() -> None:
    pods = chat()
    step = record_step(identify(pods[0], None, OwnerRead()), None)
    assert (step.make, step.stop, step.owner_gone) == (None, True, "LeaderWorkerSet")


def test_a_pod_group_has_no_owner_object_and_gets_a_record_all_the_same() -> None:
    pods = pods_of(group_pod("grp", "a"))
    step = record_step(identify(pods[0], None, OwnerRead()), None)
    assert step.make is not None
    assert step.make["spec"]["workers"] == 3


def test_a_gang_without_a_size_gets_no_record_and_its_pods_say_why() -> None:
    pods = pods_of(group_pod("grp", "a"))
    identity = identify(pods[0], None, OwnerRead())
    no_size = Identity(identity.first, None, None, None, ["tpfabric.io/gang-size: missing"])
    step = record_step(no_size, None)
    assert step.warn is not None
    assert (step.warn.reason, step.warn.words) == (
        "NoGangRecord",
        "no Gang record: tpfabric.io/gang-size: missing",
    )
    assert (step.make, step.stop) == (None, True)
    assert record_step(no_size, {"spec": {"workers": 3}}).stop, "nor with a record"


def test_a_gang_with_its_record_makes_none() -> None:
    pods = chat()
    step = record_step(identify(pods[0], {"spec": {"workers": 2}}, None), {"spec": {"workers": 2}})
    assert (step.make, step.warn, step.stop) == (None, None, False)


def a_record(pods: list[GangPod], status: dict[str, Any] | None = None) -> dict[str, Any]:
    record = record_manifest(pods[0], 3, None)
    record["status"] = status or {}
    return record


def intent(
    pods: list[GangPod], record: dict[str, Any], *, made: bool = False, **read: Any
) -> GangIntent:
    return sync_intent(identify(pods[0], record, None), record, pods, facts(**read), made=made)


def test_the_status_is_written_when_it_changed_and_the_gang_is_then_not_settled() -> None:
    pods = pods_of(group_pod("grp", "a", rank=0), group_pod("grp", "bb", rank=1))
    written = intent(pods, a_record(pods))
    assert written.status is not None
    assert (written.status["phase"], written.status["ready"]) == ("Pending", "0/3")
    assert not written.settled


def test_a_gang_whose_record_shows_it_all_is_settled_unless_short_of_pods_or_just_made() -> None:
    pods = pods_of(*(group_pod("grp", n, rank=i) for i, n in enumerate(("a", "bb", "ccc"))))
    record = a_record(pods)
    record["status"] = intent(pods, record).status
    shown = intent(pods, record)
    assert (shown.status, shown.ranks, shown.settled) == (None, {}, True)
    assert not intent(pods, record, made=True).settled
    short = pods[:2]
    record["status"] = intent(short, record).status
    assert intent(short, record).status is None
    assert not intent(short, record).settled, "a namesake elsewhere shows in no event of its own"


def test_a_gang_with_a_problem_gets_no_ranks() -> None:
    pods = pods_of(group_pod("grp", "a"), group_pod("grp", "bb"), group_pod("grp", "ccc"))
    record = a_record(pods)
    assert intent(pods, record).ranks == {"a": 0, "bb": 1, "ccc": 2}
    two_owners = pods_of(
        group_pod("grp", "a"), group_pod("grp", "bb"), group_pod("grp", "ccc", job="other")
    )
    named = intent(two_owners, record)
    assert named.ranks == {}
    assert named.status is not None
    assert named.status["phase"] == "Invalid"
    assert "claimed by pods of 2 owners" in named.status["problems"][0]


def test_a_pod_group_short_of_pods_with_a_namesake_elsewhere_says_so() -> None:
    pods = pods_of(group_pod("grp", "a"), group_pod("grp", "bb"))
    named = intent(pods, a_record(pods), elsewhere=["team-b"])
    assert named.status is not None
    assert "another namespace has a gang of that name too" in named.status["problems"][0]


def test_the_gangs_placed_near_it_are_in_its_status() -> None:
    pods = chat()
    written = intent(pods, a_record(pods), near_by=["decode-1: on leaf l1 with chat-1"])
    assert written.status is not None
    assert written.status["nearBy"] == ["decode-1: on leaf l1 with chat-1"]
