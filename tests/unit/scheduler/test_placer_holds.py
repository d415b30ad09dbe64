"""Head-of-line holds and the wait clock.

Only a gang that could fit in its domain once running work ends holds that domain; a gang that
can never fit as asked holds nothing and says so; a gang kept out by a hold is told which job
holds the domain and since when; a plan dropped before the gang ever ran keeps the gang's first
wait.
"""

from __future__ import annotations

from typing import Any

import pytest
from placer_world import NOW, a_worker, gang, make_workers, placement, two_leaves

from tpfabric_core.timestamps import rfc3339


def _busy(store: Any, *nodes: str) -> None:
    """Fill ``nodes`` with bound pods of another tenant."""
    with store.lock:
        for k, node in enumerate(nodes):
            store.upsert_pod(a_worker(f"tenant-{k}", 0, node=node, gated=False))


def _never_by_workers(writer: Any) -> None:
    gang(writer, "never", 9, topology={"mode": "preferred"}, created=rfc3339(NOW - 1000))


def _never_by_level(writer: Any) -> None:
    gang(writer, "never", 5, created=rfc3339(NOW - 1000))  # required leaf, leaves of 4 nodes


def _never_by_selector(writer: Any) -> None:
    gang(writer, "never", 2, created=rfc3339(NOW - 1000))
    for index in range(2):
        writer.pods[f"ns/never-worker-{index}"]["spec"]["nodeSelector"] = {"pool": "typo"}
        writer.add_pod(writer.pods[f"ns/never-worker-{index}"])


@pytest.mark.parametrize(
    "never", [_never_by_workers, _never_by_level, _never_by_selector], ids=lambda f: f.__name__
)
def test_a_gang_that_can_never_fit_holds_no_domain_when_it_is_head_of_line(
    world: Any, never: Any
) -> None:
    store, writer, placer, clock = world
    placer.head_of_line_seconds = 60
    two_leaves(store)
    _busy(store, "leaf-b-n0", "leaf-b-n1", "leaf-b-n2")  # only leaf-a has room for 2
    never(writer)
    placer.run_cycle()
    assert placement(writer, "never")["state"] == "Waiting"
    clock.now += 61
    gang(writer, "small", 2, created=rfc3339(clock.now))
    placer.run_cycle()
    waiting = placement(writer, "never")
    assert waiting["state"] == "Waiting"
    assert "holds no domain" in waiting["message"]
    small = placement(writer, "small")
    assert small["state"] == "Planned", small["message"]
    assert all(node.startswith("leaf-a") for node in small["nodes"])


def test_a_gang_blocked_by_a_hold_is_told_which_job_holds_the_domain_and_since_when(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    placer.head_of_line_seconds = 60
    two_leaves(store)
    _busy(store, "leaf-a-n3", "leaf-b-n2", "leaf-b-n3")  # leaf-a: 3 free, leaf-b: 2 free
    gang(writer, "big", 4, created=rfc3339(NOW - 1000))
    placer.run_cycle()
    since = placement(writer, "big")["waitingSince"]
    clock.now += 61
    gang(writer, "small", 3, created=rfc3339(clock.now))  # only leaf-a could take it
    placer.run_cycle()
    assert "holds leaf 'leaf-a'" in placement(writer, "big")["message"]
    small = placement(writer, "small")
    assert small["state"] == "Waiting"
    assert (
        f"leaf 'leaf-a' is held for head-of-line job ns/big (waiting since {since})"
        in (small["message"])
    )


def test_a_plan_dropped_before_the_gang_ran_keeps_its_first_wait(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "slow", 2)
    placer.run_cycle()
    first = placement(writer, "slow")
    assert first["state"] == "Planned"
    clock.now += 61  # the released workers never bound (bind bound 60 s)
    placer.run_cycle()
    dropped = placement(writer, "slow")
    assert dropped["state"] == "Replanning"
    assert dropped["waitingSince"] == rfc3339(NOW), "the wait counts from the first one"
    make_workers(writer, "slow", 2)  # the operator makes the gang again, gated
    clock.now += 1
    placer.run_cycle()
    again = placement(writer, "slow")
    assert again["state"] == "Planned"
    clock.now += 61
    placer.run_cycle()
    assert placement(writer, "slow")["waitingSince"] == rfc3339(NOW)


def test_each_gated_worker_of_a_waiting_gang_is_told_once_why_it_waits(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "big", 5)  # required leaf of 4 nodes: waits
    placer.run_cycle()
    message = placement(writer, "big")["message"]
    told = sorted(writer.pod_events)
    assert [name for name, _, _ in told] == [f"big-worker-{i}" for i in range(5)]
    assert all(reason == "GangWaiting" for _, reason, _ in told)
    assert all("TensorParallelJob big" in words and message in words for _, _, words in told)
    clock.now += 31
    _busy(store, "leaf-b-n0")  # the wait's words change: the status is rewritten, pods not
    placer.run_cycle()
    assert len(writer.pod_events) == 5
