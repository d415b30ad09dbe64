"""One sync of a gang's record, as a script, against a recording stand-in of the API server: what
it reads, what it writes and when a gang is settled. (Against a real API server:
tests/integration/test_gangs_owned.py, test_gangs_placed.py, test_serving.py.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from gang_world import NS, a_gang_world, an_lws, group_pod, lws_pod, pods_of

from tpfabric_operator import leadership
from tpfabric_operator.fabric_health import DegradedNode
from tpfabric_operator.gangs.sync import sync_gang

pytestmark = pytest.mark.unit

CHAT_1 = (NS, "chat-1")


def test_a_whole_lws_group_gets_its_record_then_its_status_then_is_settled() -> None:
    gangs, api, _ = a_gang_world()
    api.owners["LeaderWorkerSet", "chat"] = an_lws("chat")
    api.pods[CHAT_1] = pods_of(lws_pod("chat", 1, 0), lws_pod("chat", 1, 1))
    assert not sync_gang(gangs, CHAT_1)
    assert api.writes() == [("make record", "chat-1", 2), ("write status", "chat-1", "Waiting")]
    record = api.records[CHAT_1]
    assert record["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    assert record["status"]["ready"] == "0/2"
    api.calls.clear()
    assert sync_gang(gangs, CHAT_1), "nothing written, nothing missing"
    assert api.writes() == []
    assert ("get owner", "LeaderWorkerSet", "chat") not in api.calls, "the owner read once"


def test_pods_where_no_one_opted_in_are_told_so_and_get_no_record() -> None:
    gangs, api, _ = a_gang_world()
    api.opted.clear()
    api.pods[CHAT_1] = pods_of(lws_pod("chat", 1, 0), lws_pod("chat", 1, 1))
    assert not sync_gang(gangs, CHAT_1)
    (warned,) = api.writes()
    assert warned[:2] == ("warn pods", "NamespaceNotOptedIn")
    assert CHAT_1 not in api.records


def test_a_gang_whose_owner_is_gone_gets_no_record_and_its_pods_say_why() -> None:
    gangs, api, _ = a_gang_world()
    key = (NS, "train")
    pod = {
        "metadata": {
            "name": "train-w-0-0",
            "namespace": NS,
            "uid": "u0",
            "labels": {
                "tpfabric.io/gang": "train",
                "jobset.sigs.k8s.io/jobset-name": "train",
                "jobset.sigs.k8s.io/replicatedjob-name": "w",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": "0",
            },
        }
    }
    api.pods[key] = pods_of(pod)
    assert not sync_gang(gangs, key)
    said = "no Gang record: jobset.sigs.k8s.io/jobset-name: the JobSet 'train' does not give"
    assert api.writes() == [("warn pods", "NoGangRecord", f"{said} the size")]


def test_ranks_are_written_once_the_pod_group_is_whole() -> None:
    gangs, api, _ = a_gang_world()
    key = (NS, "grp")
    api.pods[key] = pods_of(group_pod("grp", "a"), group_pod("grp", "bb"))
    sync_gang(gangs, key)
    assert api.writes() == [("make record", "grp", 3), ("write status", "grp", "Pending")]
    api.calls.clear()
    api.pods[key] = pods_of(group_pod("grp", "a"), group_pod("grp", "bb"), group_pod("grp", "ccc"))
    assert not sync_gang(gangs, key)
    assert [c for c in api.writes() if c[0] == "label rank"] == [
        ("label rank", "a", 0),
        ("label rank", "bb", 1),
        ("label rank", "ccc", 2),
    ]


def test_a_pod_group_claimed_by_two_owners_gets_no_ranks_and_says_so() -> None:
    gangs, api, _ = a_gang_world()
    key = (NS, "grp")
    api.pods[key] = pods_of(
        group_pod("grp", "a"), group_pod("grp", "bb"), group_pod("grp", "ccc", job="other")
    )
    sync_gang(gangs, key)
    assert [c[0] for c in api.writes()] == ["make record", "write status"]
    status = api.records[key]["status"]
    assert status["phase"] == "Invalid"
    assert "claimed by pods of 2 owners" in status["problems"][0]


def test_a_record_outlives_its_pods_by_the_idle_time_then_goes() -> None:
    gangs, api, clock = a_gang_world(idle_seconds=5)
    key = (NS, "grp")
    api.pods[key] = pods_of(group_pod("grp", "a"), group_pod("grp", "bb"), group_pod("grp", "c"))
    sync_gang(gangs, key)
    api.pods[key] = []
    for _ in range(2):
        assert not sync_gang(gangs, key)
        clock.now += 4.9 / 2
    assert all(c[0] != "delete record" for c in api.calls), "4.9 s without pods: kept"
    clock.now += 0.1
    sync_gang(gangs, key)
    assert api.writes()[-1] == ("delete record", "grp", "uid-record-grp")
    assert key not in gangs.idle_since


def test_pods_back_before_the_idle_time_keep_the_record() -> None:
    gangs, api, clock = a_gang_world(idle_seconds=5)
    key = (NS, "grp")
    pods = pods_of(group_pod("grp", "a"), group_pod("grp", "bb"), group_pod("grp", "c"))
    api.pods[key] = pods
    sync_gang(gangs, key)
    api.pods[key] = []
    sync_gang(gangs, key)
    clock.now += 4
    api.pods[key] = pods
    sync_gang(gangs, key)
    api.pods[key] = []
    clock.now += 4
    sync_gang(gangs, key)
    assert key in api.records, "the idle time counts from the last time the pods went"


def degraded(*nodes: str) -> dict[str, list[DegradedNode]]:
    return {n: [DegradedNode(n, f"uid-{n}", ("symbol errors",), (), ())] for n in nodes}


def moving_world() -> tuple[Any, Any, Any]:
    gangs, api, clock = a_gang_world()
    api.owners["LeaderWorkerSet", "chat"] = an_lws("chat", move=True)
    api.pods[CHAT_1] = pods_of(
        lws_pod("chat", 1, 0, ready=True, node="n1"), lws_pod("chat", 1, 1, ready=True, node="n2")
    )
    sync_gang(gangs, CHAT_1)
    room = {"found": True, "degradedNodes": ["n1"], "message": "room on leaf l2"}
    api.records[CHAT_1]["status"]["placement"] = {"state": "Planned", "healthyRoom": room}
    gangs.on_record(CHAT_1, api.records[CHAT_1], deleted=False)  # the record's watch event
    gangs.keep_index(degraded("n1"))
    api.calls.clear()
    return gangs, api, clock


def test_a_degraded_ready_group_that_asks_to_move_loses_its_leader_once() -> None:
    gangs, api, _ = moving_world()
    assert not sync_gang(gangs, CHAT_1)
    assert api.writes() == [("delete pod", "chat-1"), ("write status", "chat-1", "Running")]
    assert gangs.moving[NS, "chat"].group == "chat-1"
    conditions = {c["type"]: c for c in api.records[CHAT_1]["status"]["conditions"]}
    assert conditions["Degraded"]["status"] == "True"
    assert conditions["Moving"]["status"] == "True"
    api.calls.clear()
    sync_gang(gangs, CHAT_1)
    assert ("delete pod", "chat-1") not in api.calls, "one delete per move"
    moving = {c["type"]: c for c in api.records[CHAT_1]["status"]["conditions"]}["Moving"]
    assert moving["status"] == "False"
    assert "being moved" in moving["message"]


def test_a_move_is_over_once_the_group_is_ready_again_without_its_old_pods() -> None:
    gangs, api, _ = moving_world()
    sync_gang(gangs, CHAT_1)
    made_again = pods_of(
        lws_pod("chat", 1, 0, ready=True, node="n3"), lws_pod("chat", 1, 1, ready=True, node="n4")
    )
    api.pods[CHAT_1] = [replace(p, uid=p.uid + "-new") for p in made_again]
    sync_gang(gangs, CHAT_1)
    assert (NS, "chat") not in gangs.moving
    assert CHAT_1 not in gangs.moved_back, "made again off the degraded node"


def test_a_group_placed_back_on_its_degraded_node_is_not_moved_again() -> None:
    gangs, api, _ = moving_world()
    sync_gang(gangs, CHAT_1)
    # made again (new pods), and placed back on n1: no healthy domain had room meanwhile
    api.pods[CHAT_1] = [replace(p, uid=p.uid + "-new") for p in api.pods[CHAT_1]]
    api.calls.clear()
    sync_gang(gangs, CHAT_1)
    assert gangs.moved_back[CHAT_1] == frozenset({"n1"})
    assert ("delete pod", "chat-1") not in api.calls
    moving = {c["type"]: c for c in api.records[CHAT_1]["status"]["conditions"]}["Moving"]
    assert "not moved again" in moving["message"]


def test_a_sync_reads_a_record_from_the_api_server_once_then_from_its_events() -> None:
    gangs, api, _ = a_gang_world()
    api.owners["LeaderWorkerSet", "chat"] = an_lws("chat")
    api.pods[CHAT_1] = pods_of(lws_pod("chat", 1, 0))
    sync_gang(gangs, CHAT_1)  # the gang's first pod: is there a record? (none: it is made)
    api.pods[CHAT_1] = pods_of(lws_pod("chat", 1, 0), lws_pod("chat", 1, 1))
    for _ in range(3):
        sync_gang(gangs, CHAT_1)
    assert api.calls.count(("get record", "chat-1")) == 1
    assert api.records[CHAT_1]["status"]["pods"] == 2, "the record kept is the one written"
    api.records[CHAT_1]["status"]["placement"] = {"state": "Planned", "nodes": ["n1", "n2"]}
    gangs.on_record(CHAT_1, api.records[CHAT_1], deleted=False)
    sync_gang(gangs, CHAT_1)
    assert api.calls.count(("get record", "chat-1")) == 1
    gangs.on_record(CHAT_1, None, deleted=True)
    assert gangs.record(CHAT_1) is None, "a deleted record is known gone without a read"


def test_a_follower_reads_and_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class Follower:
        def is_leader(self) -> bool:
            return False

    monkeypatch.setattr(leadership, "_elector", Follower())
    gangs, api, _ = a_gang_world()
    api.pods[CHAT_1] = pods_of(lws_pod("chat", 1, 0), lws_pod("chat", 1, 1))
    assert not sync_gang(gangs, CHAT_1)
    assert api.calls == []
