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

    syncer = GangSyncer(sync, list, every=60, threads=1)
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

    syncer = GangSyncer(sync, lambda: list(results), every=0.05, threads=2)
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
