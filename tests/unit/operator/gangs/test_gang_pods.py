"""The gang pods' watch and the syncer: every change marks its gang, each gang is synced once per
batch of changes, and the tick looks again only at gangs a sync did not find settled."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tpfabric_operator.gangs.pods import GangKey, GangPods, GangSyncer, gang_pod

pytestmark = pytest.mark.unit


def pod(name: str, gang: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "labels": {
            "tpfabric.io/gang": gang,
            "tpfabric.io/gang-name": gang,
            "tpfabric.io/gang-size": "2",
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    return {"metadata": meta, "spec": {}, "status": {"phase": "Pending"}}


def watched() -> tuple[GangPods, list[GangKey]]:
    changed: list[GangKey] = []
    return GangPods(None, gang_pod, changed.append), changed  # type: ignore[arg-type]


def test_a_list_keeps_each_gangs_pods_and_marks_every_gang() -> None:
    cache, changed = watched()
    cache._replace(
        [cache._slim(pod("a-0", "a")), cache._slim(pod("a-1", "a")), cache._slim(pod("b-0", "b"))]
    )
    assert sorted(p.name for p in cache.pods(("ns", "a"))) == ["a-0", "a-1"]
    assert sorted(changed) == [("ns", "a"), ("ns", "b")]
    assert sorted(cache.gangs()) == [("ns", "a"), ("ns", "b")]


def test_an_event_marks_the_gang_a_pod_left_and_the_one_it_joined() -> None:
    cache, changed = watched()
    cache._event("ns/x", pod("x", "a"))
    cache._event("ns/x", pod("x", "b"))  # relabelled (a record made again under a new name)
    assert changed[0] == ("ns", "a")
    assert sorted(changed[1:]) == [("ns", "a"), ("ns", "b")]
    assert cache.pods(("ns", "a")) == []
    assert [p.name for p in cache.pods(("ns", "b"))] == ["x"]


def test_a_terminating_pod_still_marks_its_gang_but_is_no_live_pod() -> None:
    cache, changed = watched()
    cache._event("ns/x", pod("x", "a"))
    cache._event("ns/x", pod("x", "a", deleting=True))
    assert cache.pods(("ns", "a")) == []
    assert cache.gangs() == [("ns", "a")], "known until the pod is gone"
    cache._event("ns/x", None)
    assert cache.gangs() == []
    assert changed == [("ns", "a")] * 3


def wait_until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_burst_of_changes_costs_one_sync_per_gang_not_one_per_change() -> None:
    release = threading.Event()
    synced: list[GangKey] = []

    def sync(key: GangKey) -> bool:
        release.wait(5)
        synced.append(key)
        return True

    syncer = GangSyncer(sync, list, every=60, threads=1, batch=0)
    syncer.start()
    try:
        syncer.dirty(("ns", "first"))  # taken at once: its sync waits
        wait_until(lambda: not syncer._dirty)
        for _ in range(50):
            syncer.dirty(("ns", "a"))
            syncer.dirty(("ns", "b"))
        release.set()
        wait_until(lambda: len(synced) == 3)
        time.sleep(0.1)
        assert synced == [("ns", "first"), ("ns", "a"), ("ns", "b")]
        assert syncer.settled(("ns", "a"))
    finally:
        syncer.stop()


def test_the_tick_looks_again_only_at_gangs_not_found_settled() -> None:
    results = {("ns", "made"): True, ("ns", "no-record"): False}
    synced: list[GangKey] = []

    def sync(key: GangKey) -> bool:
        synced.append(key)
        return results[key]

    syncer = GangSyncer(sync, lambda: list(results), every=0.05, threads=2, batch=0)
    syncer.start()
    try:
        wait_until(lambda: synced.count(("ns", "no-record")) >= 3)
        assert synced.count(("ns", "made")) == 1, "settled: not looked at again"
        syncer.dirty(("ns", "made"))  # a change: looked at again
        wait_until(lambda: synced.count(("ns", "made")) == 2)
    finally:
        syncer.stop()


def test_a_sync_that_raises_leaves_its_gang_unsettled() -> None:
    def sync(key: GangKey) -> bool:
        raise RuntimeError("the API server is away")

    syncer = GangSyncer(sync, list, every=60, threads=1)
    syncer.start()
    try:
        syncer.dirty(("ns", "a"))
        wait_until(lambda: not syncer._dirty)
        time.sleep(0.05)
        assert not syncer.settled(("ns", "a"))
        assert syncer.is_alive()
    finally:
        syncer.stop()


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_changes_within_the_batch_after_a_sync_wait_for_it_and_make_one_sync() -> None:
    """A gang's first change is synced at once; its changes within ``batch`` seconds of that
    sync wait until the batch is over and then make one sync (a LeaderWorkerSet group's pods
    created and made ready one after another: one status write a second at most)."""
    clock = Clock()
    synced: list[tuple[GangKey, float]] = []

    def sync(key: GangKey) -> bool:
        synced.append((key, clock.now))
        return True

    syncer = GangSyncer(sync, list, every=60, threads=1, batch=1.0, clock=clock)
    syncer.start()
    try:
        syncer.dirty(("ns", "a"))
        wait_until(lambda: len(synced) == 1)
        assert synced == [(("ns", "a"), 100.0)], "a first change is synced at once"
        for _ in range(20):  # within the batch: held back, not synced
            syncer.dirty(("ns", "a"))
        syncer.dirty(("ns", "b"))  # another gang is not held back by this one's batch
        wait_until(lambda: len(synced) == 2)
        time.sleep(0.1)
        assert synced[1] == (("ns", "b"), 100.0)
        assert not syncer.settled(("ns", "a")), "a change waits: the gang is not settled"
        clock.now = 100.5
        with syncer._cond:
            syncer._cond.notify_all()
        time.sleep(0.1)
        assert len(synced) == 2, "still within the batch"
        clock.now = 101.0
        with syncer._cond:
            syncer._cond.notify_all()
        wait_until(lambda: len(synced) == 3)
        time.sleep(0.1)
        assert synced[2] == (("ns", "a"), 101.0), "the twenty changes made one sync"
        assert syncer.settled(("ns", "a"))
        clock.now = 103.0  # quiet for longer than the batch: the next change is synced at once
        syncer.dirty(("ns", "a"))
        wait_until(lambda: len(synced) == 4)
        assert synced[3] == (("ns", "a"), 103.0)
    finally:
        syncer.stop()


def test_a_held_back_change_is_synced_when_its_batch_ends_on_the_real_clock() -> None:
    synced: list[float] = []

    def sync(key: GangKey) -> bool:
        synced.append(time.monotonic())
        return True

    syncer = GangSyncer(sync, list, every=60, threads=2, batch=0.2)
    syncer.start()
    try:
        syncer.dirty(("ns", "a"))
        wait_until(lambda: len(synced) == 1)
        syncer.dirty(("ns", "a"))
        wait_until(lambda: len(synced) == 2)
        assert synced[1] - synced[0] >= 0.19, "no sooner than the batch after the last sync"
    finally:
        syncer.stop()
