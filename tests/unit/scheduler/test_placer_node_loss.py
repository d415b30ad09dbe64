"""Plans that name a node which left the cluster (``kubectl delete node``, a scale-down, a pulled
server): re-planned at once, for gated and released workers alike."""

from __future__ import annotations

from typing import Any

from placer_world import a_worker, gang, placement, two_leaves


def _restart_gang(writer: Any, name: str, workers: int, attempt: int) -> None:
    """Do what the operator does on a gang restart: every pod goes, the next attempt's come."""
    for index in range(workers):
        writer.delete_pod("ns", f"{name}-worker-{index}")
    job = writer.jobs[f"ns/{name}"]
    job.setdefault("status", {})["attempt"] = attempt
    writer.add_job(job)
    for index in range(workers):
        pod = a_worker(name, index, attempt=attempt)
        pod["metadata"]["name"] = f"{name}-worker-{index}-a{attempt}"
        pod["metadata"]["uid"] = f"uid-{name}-{index}-a{attempt}"
        pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "8"
        writer.add_pod(pod)


def test_a_gang_restarted_after_its_node_was_deleted_is_planned_again_at_once(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "job", 4)
    placer.run_cycle()
    first = placement(writer, "job")["nodes"]
    for index, node in enumerate(first):
        writer.bind(f"job-worker-{index}", node)
    with store.lock:
        store.delete_node(first[1])
    _restart_gang(writer, "job", 4, attempt=1)
    clock.now += 5
    placer.run_cycle()
    plan = placement(writer, "job")
    assert plan["state"] == "Planned"
    assert first[1] not in plan["nodes"], "the deleted node is planned no more"
    assert len(set(plan["nodes"])) == 4
    assert sorted(writer.released[-4:]) == [f"job-worker-{i}-a1" for i in range(4)]


def test_a_released_worker_whose_node_was_deleted_gets_another_node_of_its_domain_at_once(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "job", 2)
    placer.run_cycle()
    nodes = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", nodes[0])  # worker 1 is released and not bound yet
    with store.lock:
        store.delete_node(nodes[1])
    clock.now += 1  # well inside every bound
    placer.run_cycle()
    plan = placement(writer, "job")
    assert plan["state"] == "Planned"
    assert plan["nodes"][0] == nodes[0], "the bound rank stays"
    assert plan["nodes"][1] != nodes[1]
    assert plan["nodes"][1].startswith("leaf-a"), "inside the planned leaf"
    assert "rank 1 ->" in plan["message"]
    assert writer.deleted == []


def test_a_released_gang_whose_full_domain_lost_a_node_is_planned_again_whole_at_once(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    gang(writer, "job", 2)
    placer.run_cycle()
    nodes = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", nodes[0])
    with store.lock:
        store.delete_node(nodes[1])
    clock.now += 1
    placer.run_cycle()
    plan = placement(writer, "job")
    assert plan["state"] == "Replanning"
    assert "no node in leaf" in plan["message"]
    assert sorted(writer.deleted) == ["job-worker-0", "job-worker-1"]
