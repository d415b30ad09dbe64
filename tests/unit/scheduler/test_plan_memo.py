"""What the store remembers of each job's plan (plan_memo.py) holds only while the records it was
read from stand: the plans that hold nodes and the ranks they reserve follow every bind, every
dropped, suspended or finished plan and every fresh write, in the store and in each of its views
(which share the memo); a fresh plan the watch caught up with is forgotten by every read."""

from __future__ import annotations

import copy

from builders import a_job, a_node, a_worker

from tpfabric_scheduler.store import ClusterStore

PLAN = ("leaf", "leaf-a", ["n0", "n1"])


def planned_fabric() -> ClusterStore:
    """Job ``job`` planned on n0 and n1, its two workers not bound yet."""
    store = ClusterStore()
    for name in ("n0", "n1"):
        store.upsert_node(a_node(name, "leaf-a"))
    store.upsert_job(a_job("job", 2, plan=PLAN))
    for rank in range(2):
        store.upsert_pod(a_worker("job", rank, gated=False))
    return store


def reserved(store: ClusterStore) -> dict[str, tuple[tuple[str, int], ...]]:
    return store.reservations()


def test_each_bind_gives_up_its_rank_s_node_in_the_store_and_its_views() -> None:
    store = planned_fabric()
    assert reserved(store) == {"n0": (("ns/job", 0),), "n1": (("ns/job", 1),)}
    assert reserved(store.view()) == reserved(store)
    store.upsert_pod(a_worker("job", 0, node="n0", gated=False))
    assert reserved(store.view()) == {"n1": (("ns/job", 1),)}
    store.upsert_pod(a_worker("job", 1, node="n1", gated=False))
    assert reserved(store) == {}


def test_a_plan_dropped_suspended_or_finished_holds_nothing() -> None:
    for change in ("dropped", "suspended", "finished"):
        store = planned_fabric()
        assert [key for key, _, _ in store.view().holding_plans()] == ["ns/job"]
        job = a_job("job", 2, plan=None if change == "dropped" else PLAN)
        if change == "suspended":
            job["spec"]["suspend"] = True
        if change == "finished":
            job["status"]["phase"] = "Succeeded"
        store.upsert_job(job)
        assert list(store.view().holding_plans()) == [], change
        assert reserved(store.view()) == {}, change


def test_a_fresh_plan_holds_at_once_and_is_forgotten_once_the_watch_caught_up() -> None:
    store = planned_fabric()
    store.upsert_job(a_job("job", 2))  # no plan yet
    job = store.jobs["ns/job"]
    store.record_plan(job, {"state": "Planned", "level": "leaf", "nodes": ["n1", "n0"]})
    assert [list(p.nodes) for _, _, p in store.view().holding_plans()] == [["n1", "n0"]]
    assert reserved(store.view()) == {"n1": (("ns/job", 0),), "n0": (("ns/job", 1),)}
    store.upsert_job(a_job("job", 2, plan=("leaf", "leaf-a", ["n1", "n0"])))  # the watch
    for view in (store.view(), store.view(), store):  # each read forgets it, the memo's too
        assert "uid-job" in view.fresh_plans
        assert [list(p.nodes) for _, _, p in view.holding_plans()] == [["n1", "n0"]]
        assert "uid-job" not in view.fresh_plans


def test_a_later_fresh_plan_replaces_what_was_remembered_of_the_stored_one() -> None:
    store = planned_fabric()
    assert reserved(store.view()) == {"n0": (("ns/job", 0),), "n1": (("ns/job", 1),)}
    store.upsert_node(a_node("n2", "leaf-a"))
    job = store.jobs["ns/job"]
    store.record_plan(job, copy.deepcopy({"state": "Planned", "nodes": ["n2", "n0"]}))
    assert reserved(store.view()) == {"n2": (("ns/job", 0),), "n0": (("ns/job", 1),)}


def test_a_job_suspended_before_the_watch_delivers_its_fresh_plan_holds_nothing() -> None:
    store = planned_fabric()
    store.upsert_job(a_job("job", 2))
    store.record_plan(store.jobs["ns/job"], {"state": "Planned", "nodes": ["n0", "n1"]})
    assert [key for key, _, _ in store.view().holding_plans()] == ["ns/job"]
    suspended = a_job("job", 2)
    suspended["spec"]["suspend"] = True
    store.upsert_job(suspended)  # its fresh plan stays until the placer drops it
    assert list(store.view().holding_plans()) == []
