"""Ranks on degraded nodes: the job's Degraded condition, its words, and restart-elsewhere."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_lifecycle import NOW, RUNNING, a_job, gang

from tpfabric_core.api.models import HealthyRoom
from tpfabric_core.api.placement import read_placement
from tpfabric_core.fabric.link_publish import RailDetail
from tpfabric_operator.fabric_health import DegradedNode, RankOnDegradedNode, straggler_message
from tpfabric_operator.jobs.decide import decide
from tpfabric_operator.jobs.degraded_links import (
    degraded_condition_words,
    ranks_on_degraded_nodes,
    still_degraded,
    workers_to_move,
)
from tpfabric_operator.jobs.job_state import Intent, Memory
from tpfabric_operator.jobs.job_status import Outcome, job_status

REASON = "symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)"


def answer(**stored: Any) -> HealthyRoom | None:
    """Return the placer's answer as stored (``status.placement.healthyRoom``), read typed."""
    return read_placement({"healthyRoom": stored}).healthy_room


#: the placer's answer: room for the whole gang off n1 and n2
ROOM = answer(found=True, degradedNodes=["n1", "n2"], message="leaf 'l2' has room")


def sick(name: str) -> DegradedNode:
    return DegradedNode(name, "uid", (REASON,), (RailDetail(3, "mlx5_3", "degraded"),), ())


def test_only_active_ranks_on_degraded_nodes_are_named_by_rank() -> None:
    pods = gang("Running", "Running", "Succeeded")
    index = {"n1": [sick("n1")], "n2": [sick("n2")]}
    found = ranks_on_degraded_nodes(pods, index)
    assert found == [RankOnDegradedNode(1, "n1", (REASON,))]
    assert straggler_message(found) == f"straggler risk: rank 1 on node n1: {REASON}"


def test_workers_move_only_when_the_job_asks_to_restart_elsewhere() -> None:
    ranks = [RankOnDegradedNode(1, "n1", (REASON,))]
    assert workers_to_move(a_job(), ranks) == ({}, "")
    job = a_job(topology={"onDegradedLink": "restart-elsewhere"})
    assert workers_to_move(job, ranks, room=ROOM) == (
        {1: f"node n1 is degraded ({REASON}); moving it elsewhere"},
        "",
    )


def test_a_job_put_back_on_the_nodes_it_left_is_not_restarted_again() -> None:
    job = a_job(topology={"onDegradedLink": "restart-elsewhere", "avoidDegraded": "penalize"})
    ranks = [RankOnDegradedNode(1, "n1", (REASON,)), RankOnDegradedNode(2, "n2", (REASON,))]
    move, words = workers_to_move(job, ranks, moved_off=frozenset({"n1", "n2", "n9"}))
    assert move == {}
    assert words == (
        "kept running: restarted once away from n1, n2, it was placed back (no healthy room "
        "elsewhere); it is not restarted again while those nodes stay degraded"
    )
    # one degraded node it never left: judged afresh, every rank on a degraded node moves
    move, _ = workers_to_move(job, ranks, moved_off=frozenset({"n1"}), room=ROOM)
    assert sorted(move) == [1, 2]
    # the weighed rule does not weigh a job that was put back either
    move, words = workers_to_move(_paying_job(0.9), ranks[:1], moved_off=frozenset({"n1"}))
    assert move == {}
    assert words.endswith("while that node stays degraded")


def test_a_job_moves_only_into_room_the_placer_found_for_its_degraded_nodes() -> None:
    job = a_job(topology={"onDegradedLink": "restart-elsewhere"})
    ranks = [RankOnDegradedNode(1, "n1", (REASON,))]
    assert workers_to_move(job, ranks) == (
        {},
        "kept running: the placer has not looked for healthy room elsewhere yet",
    )
    # an answer for other nodes is no answer for these
    other = answer(found=True, degradedNodes=["n7"], message="leaf 'l2' has room")
    assert workers_to_move(job, ranks, room=other)[0] == {}
    none = answer(
        found=False,
        degradedNodes=["n1"],
        message="no healthy room for the whole gang: leaf l2 has 3 of 4 nodes free",
    )
    assert workers_to_move(job, ranks, room=none) == (
        {},
        "kept running: no healthy room for the whole gang: leaf l2 has 3 of 4 nodes free",
    )
    assert sorted(workers_to_move(job, ranks, room=ROOM)[0]) == [1]
    # a restart that pays says so, and why it does not happen
    ranks = [RankOnDegradedNode(1, "n1", ("rate",), bandwidth=0.5)]
    move, words = workers_to_move(_paying_job(0.9), ranks, room=none)
    assert move == {}
    assert words.startswith("restart pays: running slow (steps 90.0% slower)")
    assert words.endswith(
        "; kept running: no healthy room for the whole gang: leaf l2 has 3 of 4 nodes free"
    )


def test_the_nodes_a_job_left_are_forgotten_once_they_heal() -> None:
    index = {"n1": [sick("n1")], "n3": [sick("n3")]}
    assert still_degraded(["n1", "n2", 7], index) == frozenset({"n1"})  # type: ignore[list-item]
    assert still_degraded(None, index) == frozenset()


def _paying_job(share: float) -> Any:
    return a_job(
        topology={
            "onDegradedLink": "restart-when-it-pays",
            "restartCost": {
                "interNodeCommShare": share,
                "checkpointIntervalSeconds": 1800,
                "restoreSeconds": 600,
            },
        }
    )


def test_a_half_rate_link_under_a_job_that_talks_little_keeps_it_running() -> None:
    # 10% of a step across nodes at half the rate: steps 10% slower; over 4 h that loses
    # 4 h / 1.1 x 0.1 = 21.8 min, less than 10 min restore + 15 min redone
    ranks = [RankOnDegradedNode(1, "n1", ("rate 200 Gb/s, expected 400",), bandwidth=0.5)]
    move, words = workers_to_move(_paying_job(0.1), ranks, room=ROOM, expected_repair_s=4 * 3600.0)
    assert move == {}
    assert words == (
        "kept running: running slow (steps 10.0% slower) is expected to lose 21.8 min, a "
        "restart costs 25.0 min (10.0 min restore + 15.0 min redone since the last checkpoint)"
    )


def test_the_same_link_under_a_job_that_talks_more_moves_it() -> None:
    ranks = [RankOnDegradedNode(1, "n1", ("rate 200 Gb/s, expected 400",), bandwidth=0.5)]
    move, words = workers_to_move(_paying_job(0.3), ranks, room=ROOM, expected_repair_s=4 * 3600.0)
    assert words.startswith("restart pays: running slow (steps 30.0% slower) is expected to lose")
    assert move == {
        1: f"node n1 is degraded (rate 200 Gb/s, expected 400); {words}; moving it elsewhere"
    }


def test_the_slowest_rank_sets_the_pace_and_an_unmeasured_link_takes_the_setting() -> None:
    measured = RankOnDegradedNode(1, "n1", ("rate",), bandwidth=0.5)
    unmeasured = RankOnDegradedNode(2, "n2", (REASON,))
    job = _paying_job(0.1)
    # errors only: taken to keep a tenth; 10% of the step 10x longer: 1.9x slower
    move, words = workers_to_move(job, [measured, unmeasured], room=ROOM, unmeasured_bandwidth=0.1)
    assert "steps 90.0% slower" in words
    assert sorted(move) == [1, 2]
    _, words = workers_to_move(job, [measured, unmeasured], unmeasured_bandwidth=1.0)
    assert "steps 10.0% slower" in words


def test_a_rail_that_is_down_always_pays_and_a_measured_rail_is_indexed() -> None:
    down = DegradedNode("n1", "u", ("down",), (RailDetail(0, "mlx5_0", "down"),), ())
    slow = DegradedNode(
        "n2", "u", ("rate",), (RailDetail(1, "mlx5_1", "degraded", bandwidth=0.25),), ()
    )
    pods = gang("Running", "Running", "Running")
    found = ranks_on_degraded_nodes(pods, {"n1": [down], "n2": [slow]})
    assert [(r.rank, r.bandwidth) for r in found] == [(1, 0.0), (2, 0.25)]
    move, words = workers_to_move(_paying_job(0.01), found[:1], room=ROOM)
    assert sorted(move) == [1]
    assert "unbounded time" in words


def test_restart_elsewhere_is_an_uncharged_incident_through_the_restart_path() -> None:
    job = a_job(topology={"onDegradedLink": "restart-elsewhere"})
    pods = gang("Running", "Running", "Running")
    intent = decide(job, pods, RUNNING, now=NOW, move={1: "node n1 is degraded"})
    assert intent.failure is not None
    assert (intent.failure.worker, intent.failure.reason) == (1, "DegradedLink")
    assert intent.charged == 0
    assert intent.fail is None
    assert intent.attempt == 1
    assert intent.restarting == {0, 1, 2}  # RecreateGang: the whole gang


def remembered(intent: Intent, at: float) -> Memory:
    """Return what the status remembers once the reconcile's patch of ``intent`` landed."""
    return replace(
        RUNNING,
        attempt=intent.attempt,
        restarts=intent.charged,
        restarting=frozenset(intent.restarting),
        last_failure=at,
    )


def test_a_move_is_written_down_before_its_workers_stop() -> None:
    """The move's reason is where its workers run: stopped first, an operator that died before
    writing the move down would find them lost for no reason and charge it."""
    job = a_job(topology={"onDegradedLink": "restart-elsewhere"})
    pods = gang("Running", "Running", "Running")
    recorded = decide(job, pods, RUNNING, now=NOW, move={1: "node n1 is degraded"})
    assert (recorded.delete, recorded.keep, recorded.create) == ([], [], [])

    # the next reconcile (this operator's or a restarted one's) stops the older attempt
    memory = remembered(recorded, NOW)
    stopping = decide(job, pods, memory, now=NOW + 1, move={1: "node n1 is degraded"})
    assert stopping.failure is None  # not a second incident
    assert (stopping.charged, stopping.attempt) == (0, 1)
    assert sorted(stopping.delete) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert stopping.create == []

    # once they are gone and the backoff passed, the new attempt is created
    backoff = job.spec.failure_policy.backoff_seconds
    created = decide(job, [], memory, now=NOW + backoff + 1)
    assert (created.create, created.attempt, created.charged) == ([0, 1, 2], 1, 0)


def test_a_replaced_worker_is_moved_the_same_way() -> None:
    job = a_job(
        topology={"onDegradedLink": "restart-elsewhere"},
        failurePolicy={"restartStrategy": "ReplaceWorker"},
        launcher={"rendezvous": "c10d"},
    )
    pods = gang("Running", "Running", "Running")
    recorded = decide(job, pods, RUNNING, now=NOW, move={1: "node n1 is degraded"})
    assert (recorded.delete, recorded.restarting, recorded.attempt) == ([], {1}, 1)

    memory = remembered(recorded, NOW)
    stopping = decide(job, pods, memory, now=NOW + 1, move={1: "node n1 is degraded"})
    assert (stopping.failure, stopping.delete, stopping.create) == (None, ["j-worker-1"], [])

    backoff = job.spec.failure_policy.backoff_seconds
    rest = [p for p in pods if p.index != 1]
    created = decide(job, rest, memory, now=NOW + backoff + 1)
    assert (created.create, created.attempt, created.delete) == ([1], 1, [])


def test_a_move_that_fails_the_job_stops_it_at_once() -> None:
    """A rule that charges the move past maxRestarts fails the job: its phase is its record."""
    job = a_job(
        topology={"onDegradedLink": "restart-elsewhere"},
        failurePolicy={
            "maxRestarts": 0,
            "rules": [{"action": "Restart", "onPodConditions": ["DisruptionTarget"]}],
        },
    )
    pods = gang("Running", "Running", "Running")
    intent = decide(job, pods, RUNNING, now=NOW, move={1: "node n1 is degraded"})
    assert intent.fail is not None
    assert sorted(intent.delete) == ["j-worker-0", "j-worker-1", "j-worker-2"]


def test_a_worker_already_restarting_is_not_moved_again() -> None:
    job = a_job(topology={"onDegradedLink": "restart-elsewhere"})
    memory = replace(RUNNING, restarting=frozenset({1}), attempt=1)
    pods = gang("Running", "Running", "Running", attempt=1)
    intent = decide(job, pods, memory, now=NOW, move={1: "x"})
    assert intent.failure is None


def test_the_job_shows_degraded_with_the_straggler_words() -> None:
    message = f"straggler risk: rank 1 on node n1: {REASON}"
    status = job_status(
        a_job(),
        gang("Running", "Running", "Running"),
        placement={"state": "Planned"},
        previous_conditions=[],
        outcome=Outcome(degraded_links=message),
        generation=1,
        now=NOW,
    )
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True",
        "DegradedLink",
        message,
    )
    healthy = job_status(
        a_job(),
        gang("Running", "Running", "Running"),
        placement={"state": "Planned"},
        previous_conditions=[],
        outcome=Outcome(),
        generation=1,
        now=NOW,
    )
    assert next(c for c in healthy["conditions"] if c["type"] == "Degraded")["status"] == "False"


def test_the_condition_says_the_straggler_then_the_weighing_and_nothing_when_ignored() -> None:
    ranks = [RankOnDegradedNode(1, "n1", (REASON,), bandwidth=0.5)]
    _, weighing = workers_to_move(_paying_job(0.1), ranks, expected_repair_s=4 * 3600.0)
    words = degraded_condition_words(_paying_job(0.1), ranks, weighing)
    assert words == f"straggler risk: rank 1 on node n1: {REASON}; {weighing}"
    assert words.endswith("15.0 min redone since the last checkpoint)")
    assert degraded_condition_words(a_job(), ranks, "") == straggler_message(ranks)
    ignoring = a_job(topology={"onDegradedLink": "ignore"})
    assert degraded_condition_words(ignoring, ranks, "") == ""
    assert degraded_condition_words(a_job(), [], "") == ""
