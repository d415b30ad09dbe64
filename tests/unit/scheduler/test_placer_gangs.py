"""Gang records (pods another controller made) planned by the same engine as TensorParallelJobs:
found by their ``tpfabric.io/gang`` label, ranked by ``tpfabric.io/rank``, written back to the
Gang's status, and never confused with a TensorParallelJob of the same name."""

from __future__ import annotations

import json
from typing import Any

from placer_world import RecordingWriter, a_node, a_worker, gang, placement, two_leaves

from tpfabric_core import labels
from tpfabric_core.api import ATTEMPT_LABEL, GANG_GATE
from tpfabric_core.api.placement import replanning as replanning_placement
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.rail_ports import (
    PLAN_LEVEL_ANNOTATION,
    RAIL_PORTS_ANNOTATION,
    RAILS_ANNOTATION,
    format_rail_ports,
    parse_rail_ports,
)
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.extender import worker_view
from tpfabric_scheduler.policy.returning import RETURN_GRACE_SECONDS
from tpfabric_scheduler.protocol import parse_extender_args


def a_gang_record(name: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "tpfabric.io/v1alpha1",
        "kind": "Gang",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-gang-{name}", "generation": 1},
        "spec": {
            "owner": {"kind": "LeaderWorkerSet", "name": name.rsplit("-", 1)[0]},
            "workers": workers,
            "gpusPerWorker": 8,
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
        },
        "status": {},
    }


def gang_pod(gang_name: str, rank: int | None) -> dict[str, Any]:
    """A pod of an LWS group, as the webhook leaves it: gated, labelled with its gang."""
    pod = a_worker("x", 0, attempt=None)
    labels = {GANG_LABEL: gang_name, "leaderworkerset.sigs.k8s.io/name": "vllm"}
    if rank is not None:
        labels[RANK_LABEL] = str(rank)
    pod["metadata"].update(name=f"{gang_name}-{rank}", uid=f"uid-{gang_name}-{rank}", labels=labels)
    pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "8"
    return pod


def add_gang(writer: RecordingWriter, name: str, workers: int, pods: int | None = None) -> None:
    """A Gang record of ``workers`` and the first ``pods`` (default all) of its pods, ranked."""
    writer.add_job(a_gang_record(name, workers))
    for rank in range(workers if pods is None else pods):
        writer.add_pod(gang_pod(name, rank))


def gang_placement(writer: RecordingWriter, name: str) -> dict[str, Any]:
    return dict(writer.jobs[f"ns/gang:{name}"].get("status", {}).get("placement") or {})


def test_a_gang_record_is_planned_whole_into_one_leaf_and_its_pods_released(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    add_gang(writer, "vllm-0", 4, pods=3)
    placer.run_cycle()
    assert gang_placement(writer, "vllm-0").get("state") != "Planned", "3 of 4 pods exist"
    writer.add_pod(gang_pod("vllm-0", 3))
    placer.run_cycle()
    plan = gang_placement(writer, "vllm-0")
    assert plan["state"] == "Planned"
    assert len({node.split("-n")[0] for node in plan["nodes"]}) == 1, "one leaf"
    assert sorted(writer.released) == [f"vllm-0-{r}" for r in range(4)]
    released = writer.pods["ns/vllm-0-2"]
    assert not [g for g in released["spec"]["schedulingGates"] if g["name"] == GANG_GATE]
    # the extender steers each rank to its planned node
    args = parse_extender_args(json.dumps({"Pod": released, "NodeNames": plan["nodes"]}).encode())
    with store.lock:
        view = worker_view(store, args)
    assert view is not None
    assert view.planned_node == plan["nodes"][2]
    placer.run_cycle()
    assert writer.deleted == [], "its own released pods are never taken for orphans"


def test_a_gang_whose_pods_have_no_ranks_yet_is_not_planned(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    writer.add_job(a_gang_record("grp", 2))
    for rank in (None, 1):
        pod = gang_pod("grp", rank)
        pod["metadata"]["name"] = f"grp-{rank or 'x'}"
        writer.add_pod(pod)
    placer.run_cycle()
    assert gang_placement(writer, "grp") == {}
    assert writer.released == []


def test_a_gang_and_a_job_of_one_name_are_two_gangs(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    gang(writer, "same", 4)  # a TensorParallelJob "same" and its four workers
    add_gang(writer, "same", 4)
    placer.run_cycle()
    job_plan, gang_plan = placement(writer, "same"), gang_placement(writer, "same")
    assert job_plan["state"] == gang_plan["state"] == "Planned"
    assert not set(job_plan["nodes"]) & set(gang_plan["nodes"]), "each leaf holds one of them"
    assert sorted(writer.released) == sorted(
        [*(f"same-worker-{i}" for i in range(4)), *(f"same-{r}" for r in range(4))]
    )


def test_a_dropped_gangs_pods_are_deleted_by_their_gang_label(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=4)
    add_gang(writer, "vllm-1", 2)
    placer.run_cycle()
    assert gang_placement(writer, "vllm-1")["state"] == "Planned"
    clock.now += 61  # released, never bound: the bind bound drops the plan
    placer.run_cycle()
    assert gang_placement(writer, "vllm-1")["state"] == "Replanning"
    assert sorted(writer.deleted) == ["vllm-1-0", "vllm-1-1"]  # its owner makes them again


def test_released_pods_an_earlier_record_left_are_deleted_not_waited_for_forever(
    world: Any,
) -> None:
    """A Gang deleted and made again while its owner made its pods again: the new record has no
    plan, two pods were released under the old one and never bound (the extender refuses a pod
    without a plan). The placer deletes the gang's pods; its owner makes them again, gated."""
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=4)
    writer.add_job(a_gang_record("vllm-2", 4))
    for rank in range(4):
        pod = gang_pod("vllm-2", rank)
        if rank < 2:
            pod["spec"]["schedulingGates"] = []  # released under the earlier record
        writer.add_pod(pod)
    placer.run_cycle()
    assert sorted(writer.deleted) == [f"vllm-2-{r}" for r in range(4)]
    for rank in range(4):  # the owner makes the group again, gated by the webhook
        writer.add_pod(gang_pod("vllm-2", rank))
    clock.now += 2
    placer.run_cycle()
    assert gang_placement(writer, "vllm-2")["state"] == "Planned"


# -- a group made again returns where it ran ------------------------------------------------------


def _occupy(writer: RecordingWriter, node: str) -> None:
    """Another tenant's pod of 8 GPUs, bound to ``node``."""
    pod = a_worker("tenant", 0, node=node, gated=False, attempt=None)
    pod["metadata"].update(name=f"tenant-{node}", uid=f"uid-tenant-{node}", labels={})
    writer.add_pod(pod)


def _planned_and_bound(writer: RecordingWriter, placer: Any, name: str) -> list[str]:
    writer.add_job(a_gang_record(name, 2))
    for rank in range(2):
        writer.add_pod(gang_pod(name, rank))
    placer.run_cycle()
    nodes = list(gang_placement(writer, name)["nodes"])
    for rank, node in enumerate(nodes):
        writer.bind(f"{name}-{rank}", node)
    return nodes


def _the_other_leaf_fits_best(writer: RecordingWriter, nodes: list[str]) -> str:
    """Make best fit alone choose the leaf the gang did not run on; return that leaf."""
    other = "leaf-b" if nodes[0].startswith("leaf-a") else "leaf-a"
    _occupy(writer, f"{other}-n2")  # three nodes a leaf: two left there, an exact fit
    return other


def _made_again(writer: RecordingWriter, name: str, now: float) -> None:
    """The owner deletes the group of two (its pods terminate, still bound) and makes it again:
    new pods, gated."""
    for rank in range(2):
        old = writer.pods[f"ns/{name}-{rank}"]
        old["metadata"]["deletionTimestamp"] = rfc3339(now)
        writer.add_pod(old)
        new = gang_pod(name, rank)
        new["metadata"].update(
            name=f"{name}-{rank}-again",
            uid=f"uid-{name}-{rank}-again",
            creationTimestamp=rfc3339(now + 1),
        )
        writer.add_pod(new)


def test_a_group_made_again_waits_for_its_old_pods_then_returns_to_its_nodes(world: Any) -> None:
    """Its leaf has no room beside its old pods (one node free for two ranks): rather than go
    where best fit alone would send it, it waits for them and returns."""
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=3)
    nodes = _planned_and_bound(writer, placer, "vllm-3")
    _the_other_leaf_fits_best(writer, nodes)
    _made_again(writer, "vllm-3", clock.now)
    clock.now += 2
    released = len(writer.released)
    placer.run_cycle()
    assert writer.deleted == [], "the new pods are not taken for a broken plan"
    assert len(writer.released) == released, "it waits for its old pods to leave"
    for rank in range(2):  # the old pods are gone
        writer.delete_pod("ns", f"vllm-3-{rank}")
    clock.now += 2
    placer.run_cycle()
    plan = gang_placement(writer, "vllm-3")
    assert plan["state"] == "Planned"
    assert sorted(plan["nodes"]) == sorted(nodes), "back on its nodes, not where best fit goes"
    assert sorted(writer.released[released:]) == ["vllm-3-0-again", "vllm-3-1-again"]


def test_a_group_whose_old_pods_never_leave_is_planned_after_the_grace(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=3)
    nodes = _planned_and_bound(writer, placer, "vllm-4")
    _made_again(writer, "vllm-4", clock.now)
    clock.now += 2
    placer.run_cycle()
    assert not any(name.endswith("-again") for name in writer.released)
    clock.now += RETURN_GRACE_SECONDS
    placer.run_cycle()
    plan = gang_placement(writer, "vllm-4")
    assert plan["state"] == "Planned"
    leaf = nodes[0].rsplit("-n", 1)[0]
    assert not any(n.startswith(leaf) for n in plan["nodes"]), "its leaf is still taken"
    assert any("placed afresh" in r["reason"] for r in plan["reasons"])


def test_a_dropped_plan_keeps_its_nodes_as_the_next_plans_preference(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=3)
    add_gang(writer, "vllm-5", 2)
    placer.run_cycle()
    nodes = list(gang_placement(writer, "vllm-5")["nodes"])
    other = _the_other_leaf_fits_best(writer, nodes)
    clock.now += 61  # released, never bound: the plan is dropped and its pods deleted
    placer.run_cycle()
    dropped = gang_placement(writer, "vllm-5")
    assert dropped["state"] == "Replanning"
    assert dropped["previousNodes"] == nodes
    for rank in range(2):  # the owner makes them again
        writer.add_pod(gang_pod("vllm-5", rank))
    clock.now += 2
    placer.run_cycle()
    plan = gang_placement(writer, "vllm-5")
    assert plan["state"] == "Planned"
    assert sorted(plan["nodes"]) == sorted(nodes), f"not {other}, where best fit alone goes"
    assert plan.get("previousNodes") is None, "a plan carries no previous nodes"
    assert any("where it ran before" in r["reason"] for r in plan["reasons"])


def test_a_waiting_gangs_pods_are_told_to_describe_the_gang_record(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    writer.add_job(a_gang_record("big-0", 3))  # required leaf: no leaf holds 3
    for rank in range(3):
        writer.add_pod(gang_pod("big-0", rank))
    placer.run_cycle()
    assert gang_placement(writer, "big-0")["state"] == "Waiting"
    told = [words for _, reason, words in writer.pod_events if reason == "GangWaiting"]
    assert len(told) == 3
    assert all("Gang big-0 (kubectl describe gang big-0)" in words for words in told)


def test_a_record_made_again_while_its_gang_runs_gets_back_where_the_gang_runs(
    world: Any,
) -> None:
    """The record was deleted by hand while its pods ran; the operator made it again without a
    placement. Nothing is planned or moved: the placement is read back from the running pods."""
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    for rank, node in enumerate(["leaf-b-n1", "leaf-b-n3"]):
        pod = gang_pod("vllm-6", rank)
        pod["spec"]["schedulingGates"] = []
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        writer.add_pod(pod)
    writer.add_job(a_gang_record("vllm-6", 2))
    placer.run_cycle()
    plan = gang_placement(writer, "vllm-6")
    assert plan["state"] == "Planned"
    assert plan["nodes"] == ["leaf-b-n1", "leaf-b-n3"]
    assert (plan["level"], plan["domain"]) == ("leaf", "leaf-b")
    assert "read back from the 2 running pods" in plan["reasons"][0]["reason"]
    assert writer.released == []
    assert writer.deleted == []
    assert ("vllm-6", "PlacementRecovered") in [(name, why) for name, why, _ in writer.events]
    writes = len(writer.status_writes)
    placer.run_cycle()
    assert len(writer.status_writes) == writes, "written once"


def test_a_record_of_a_gang_only_partly_running_is_not_read_back(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    pod = gang_pod("vllm-7", 0)
    pod["spec"].update(schedulingGates=[], nodeName="leaf-a-n0")
    writer.add_pod(pod)
    writer.add_pod(gang_pod("vllm-7", 1))  # gated still
    writer.add_job(a_gang_record("vllm-7", 2))
    placer.run_cycle()
    assert not any(why == "PlacementRecovered" for _, why, _ in writer.events)


def test_a_gang_whose_record_names_problems_is_not_planned(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    record = a_gang_record("grp", 2)
    record["status"] = {"phase": "Invalid", "problems": ["tpfabric.io/gang-name: two owners"]}
    writer.add_job(record)
    for rank in range(2):
        writer.add_pod(gang_pod("grp", rank))
    placer.run_cycle()
    assert gang_placement(writer, "grp") == {}
    assert writer.released == []


def test_a_gang_part_running_part_gated_under_no_plan_is_made_again_not_left_waiting(
    world: Any,
) -> None:
    """The leader was released under the earlier record's plan and bound; the record went (by
    hand), the owner made the workers again, gated, and the operator the record without a plan.
    No plan could take the gated ones beside a pod it never placed: the gang's pods are deleted
    and its owner makes them again, gated."""
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=4)
    writer.add_job(a_gang_record("redo-0", 3))
    leader = gang_pod("redo-0", 0)
    leader["spec"].update(schedulingGates=[], nodeName="leaf-a-n0")
    writer.add_pod(leader)
    for rank in (1, 2):
        writer.add_pod(gang_pod("redo-0", rank))
    placer.run_cycle()
    assert sorted(writer.deleted) == ["redo-0-0", "redo-0-1", "redo-0-2"]
    for rank in range(3):  # the owner makes the group again, gated by the webhook
        writer.add_pod(gang_pod("redo-0", rank))
    clock.now += 2
    placer.run_cycle()
    assert gang_placement(writer, "redo-0")["state"] == "Planned"


def test_a_group_replaced_in_place_keeps_its_nodes_from_a_younger_surge_group(world: Any) -> None:
    """An LWS rollout replaces a group in place (its plan dropped, its pods made again one by
    one) while a surge group of the same rollout waits for room: the surge group, younger, may
    not take the nodes the group returns to within RETURN_GRACE_SECONDS, else the group would
    land elsewhere (seen with the real LWS controller before this rule)."""
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    for i in range(2):
        _occupy(writer, f"leaf-b-n{i}")  # the only other room is taken
    record = a_gang_record("vllm-3", 2)
    record["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    nodes = ["leaf-a-n0", "leaf-a-n1"]
    record["status"] = {
        "placement": replanning_placement("its pods went", clock.now) | {"previousNodes": nodes}
    }
    writer.add_job(record)
    leader = gang_pod("vllm-3", 0)  # the leader is made again first; the worker follows
    writer.add_pod(leader)
    surge = a_gang_record("vllm-4", 2)
    surge["metadata"]["creationTimestamp"] = "2026-01-01T00:05:00Z"
    writer.add_job(surge)
    for rank in range(2):
        writer.add_pod(gang_pod("vllm-4", rank))
    clock.now += 2
    placer.run_cycle()
    assert gang_placement(writer, "vllm-4")["state"] == "Waiting", "the returning group's nodes"
    writer.add_pod(gang_pod("vllm-3", 1))
    clock.now += 2
    placer.run_cycle()
    plan = gang_placement(writer, "vllm-3")
    assert plan["state"] == "Planned"
    assert sorted(plan["nodes"]) == nodes, "back on its nodes"
    clock.now += RETURN_GRACE_SECONDS
    placer.run_cycle()
    assert gang_placement(writer, "vllm-4")["state"] == "Waiting"


def test_a_returning_groups_nodes_are_kept_only_for_the_grace(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    for i in range(2):
        _occupy(writer, f"leaf-b-n{i}")
    record = a_gang_record("vllm-3", 2)
    record["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    record["status"] = {
        "placement": replanning_placement("its pods went", clock.now)
        | {"previousNodes": ["leaf-a-n0", "leaf-a-n1"]}
    }
    writer.add_job(record)
    writer.add_pod(gang_pod("vllm-3", 0))  # its worker never comes back
    surge = a_gang_record("vllm-4", 2)
    surge["metadata"]["creationTimestamp"] = "2026-01-01T00:05:00Z"
    writer.add_job(surge)
    for rank in range(2):
        writer.add_pod(gang_pod("vllm-4", rank))
    clock.now += RETURN_GRACE_SECONDS + 1
    placer.run_cycle()
    assert gang_placement(writer, "vllm-4")["state"] == "Planned"


def test_a_group_whose_released_leader_has_not_bound_is_never_split_by_a_fresh_plan(
    world: Any,
) -> None:
    """An LWS rollout makes the leader again, then the worker. The leader is released (under
    the group's plan) and has not bound when the worker comes and the worker's node is taken.
    A fresh plan for the gang would release the worker elsewhere while the leader binds where
    the plan sent it (seen in `tpfabric bench fleet`: a group across two spines, its leader
    outside its own plan). The plan is dropped instead: the owner makes the group again,
    whole."""
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    writer.add_job(a_gang_record("vllm-6", 2))
    for rank in range(2):
        writer.add_pod(gang_pod("vllm-6", rank))
    placer.run_cycle()
    nodes = list(gang_placement(writer, "vllm-6")["nodes"])
    for rank, node in enumerate(nodes):
        writer.bind(f"vllm-6-{rank}", node)
    clock.now += 10
    for rank in range(2):
        writer.delete_pod("ns", f"vllm-6-{rank}")
    leader = gang_pod("vllm-6", 0)  # made again and released onto its node, not bound yet
    leader["metadata"].update(
        name="vllm-6-0-new", uid="uid-vllm-6-0-new", creationTimestamp=rfc3339(clock.now)
    )
    leader["spec"]["schedulingGates"] = []
    writer.add_pod(leader)
    _occupy(writer, nodes[1])  # the worker's node is taken meanwhile
    worker = gang_pod("vllm-6", 1)
    worker["metadata"].update(
        name="vllm-6-1-new", uid="uid-vllm-6-1-new", creationTimestamp=rfc3339(clock.now)
    )
    writer.add_pod(worker)
    clock.now += 1
    placer.run_cycle()
    placement = gang_placement(writer, "vllm-6")
    assert placement["state"] == "Replanning", placement.get("message")
    assert "vllm-6-1-new" not in writer.released, "never released apart from its leader"


def _one_made_again(writer: RecordingWriter, name: str, rank: int) -> None:
    """The owner deletes a pod and makes it again: same name, new uid, created in the second of
    the plan (kwok-fast clusters do it; creationTimestamp has whole seconds)."""
    writer.delete_pod("ns", f"{name}-{rank}")
    again = gang_pod(name, rank)
    again["metadata"]["uid"] = f"uid-{name}-{rank}-again"
    again["metadata"]["creationTimestamp"] = gang_placement(writer, name)["plannedAt"]
    writer.add_pod(again)


def test_a_gang_pod_made_again_goes_back_to_its_planned_node(world: Any) -> None:
    """An LWS group replaced in place: its leader made again returns to the node it left."""
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    nodes = _planned_and_bound(writer, placer, "chat-0")
    _one_made_again(writer, "chat-0", 0)
    placer.run_cycle()
    plan = gang_placement(writer, "chat-0")
    assert plan["nodes"] == nodes
    assert not plan.get("replacedRanks")
    assert writer.released.count("chat-0-0") == 2
    assert writer.deleted == ["chat-0-0"], "nothing else deleted"


def test_a_gang_pod_made_again_moves_off_a_planned_node_gone_degraded(world: Any) -> None:
    """A group moved off a degraded node (the operator deletes its leader, LWS makes it again
    within the second of its plan): the pod whose planned node turned degraded is not sent back
    onto it; with no other node in the leaf the group is planned whole elsewhere (a CI failure of
    tests/integration/test_serving.py sent it back onto the degraded node)."""
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    nodes = _planned_and_bound(writer, placer, "chat-0")
    with store.lock:
        node = a_node(nodes[1], nodes[1].split("-n")[0])
        node["metadata"]["labels"][labels.HEALTH] = "degraded"
        store.upsert_node(node)
    _one_made_again(writer, "chat-0", 0)
    writer.delete_pod("ns", "chat-0-1")
    again = gang_pod("chat-0", 1)
    again["metadata"]["uid"] = "uid-chat-0-1-again"
    writer.add_pod(again)
    placer.run_cycle()
    plan = gang_placement(writer, "chat-0")
    assert plan["state"] == "Planned", plan
    assert nodes[1] not in plan["nodes"], "off the degraded node"
    assert len({n.split("-n")[0] for n in plan["nodes"]}) == 1, "whole in the other leaf"
    assert sorted(writer.released[-2:]) == ["chat-0-0", "chat-0-1"]


def test_a_gang_pod_made_again_waits_for_its_old_pod_to_leave_its_node(world: Any) -> None:
    """A new worker StatefulSet's pod while the old worker still terminates on rank 1's node:
    it is not released onto that node, nothing is deleted, and it returns there once the old
    pod is gone."""
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    nodes = _planned_and_bound(writer, placer, "chat-0")
    old = writer.pods["ns/chat-0-1"]
    old["metadata"]["deletionTimestamp"] = rfc3339(clock.now)
    writer.add_pod(old)
    again = gang_pod("chat-0", 1)
    again["metadata"].update(name="chat-0-1b", uid="uid-chat-0-1b")
    writer.add_pod(again)
    placer.run_cycle()
    assert "chat-0-1b" not in writer.released, "not onto the node its old pod still holds"
    assert writer.deleted == [], "the leader keeps running"
    writer.delete_pod("ns", "chat-0-1")
    clock.now += 2
    placer.run_cycle()
    assert "chat-0-1b" in writer.released
    plan = gang_placement(writer, "chat-0")
    assert plan["state"] == "Planned"
    assert plan["nodes"] == nodes, "back on its own node"


def test_a_gang_record_in_a_namespace_that_has_not_opted_in_is_never_planned(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    with store.lock:
        store.install_gang_namespaces(frozenset({"elsewhere"}))  # "ns" has not opted in
    add_gang(writer, "vllm-0", 2)
    placer.run_cycle()
    assert gang_placement(writer, "vllm-0").get("state") != "Planned"
    assert writer.released == []
    with store.lock:
        store.put_gang_namespace("ns")  # the namespace is labelled tpfabric.io/gangs=enabled
    placer.run_cycle()
    assert gang_placement(writer, "vllm-0")["state"] == "Planned"
    assert sorted(writer.released) == ["vllm-0-0", "vllm-0-1"]


def test_a_gang_whose_pods_ask_no_rdma_is_planned_on_nodes_without_any(world: Any) -> None:
    """The demand is what the pods ask: a record's ``spec.rdma`` (which an older CRD defaulted
    to 8 devices) adds no RDMA device the pods do not ask for."""
    store, writer, placer, _ = world
    for name in two_leaves(store, per_leaf=2):
        with store.lock:
            node = a_node(name, name.split("-n")[0])
            del node["status"]["allocatable"]["rdma/ib"]  # a TCP-only GPU pool
            store.upsert_node(node)
    record = a_gang_record("tcp", 2)
    record["spec"]["rdma"] = {"resourceName": "rdma/ib", "count": 8}  # as the old CRD filled it
    writer.add_job(record)
    for rank in range(2):
        pod = gang_pod("tcp", rank)
        del pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"]
        writer.add_pod(pod)
    placer.run_cycle()
    assert gang_placement(writer, "tcp")["state"] == "Planned"
    assert sorted(writer.released) == ["tcp-0", "tcp-1"]


def rail_mapped_node(name: str, leaf: str) -> dict[str, Any]:
    """A DGX node labelled from a dump: two rails, each with its port GUID."""
    node = a_node(name, leaf)
    node["metadata"]["labels"].update({labels.rail_key(0): "ib5", labels.rail_key(1): "ib6"})
    guid = sum(map(ord, name))
    node["metadata"]["annotations"] = {
        RAIL_PORTS_ANNOTATION: format_rail_ports({0: f"{guid:016x}", 1: f"{guid + 1:016x}"})
    }
    return node


def test_released_pods_are_told_their_rails_by_port_guid_and_the_plans_level(world: Any) -> None:
    store, writer, placer, _ = world
    for leaf in ("leaf-a", "leaf-b"):
        for i in range(2):
            with store.lock:
                store.upsert_node(rail_mapped_node(f"{leaf}-n{i}", leaf))
    add_gang(writer, "rails", 2)
    placer.run_cycle()
    plan = gang_placement(writer, "rails")
    assert plan["state"] == "Planned"
    for rank in range(2):
        pod = writer.pods[f"ns/rails-{rank}"]
        node = store.nodes[plan["nodes"][rank]]
        ports, _ = parse_rail_ports(
            rail_mapped_node(node.name, "x")["metadata"]["annotations"][RAIL_PORTS_ANNOTATION]
        )
        annotations = pod["metadata"]["annotations"]
        assert annotations[RAILS_ANNOTATION] == ",".join(f"{r}=0x{g}" for r, g in ports.items())
        assert annotations[PLAN_LEVEL_ANNOTATION] == "leaf"


def test_a_pod_on_a_node_without_a_rail_map_gets_its_rails_by_index(world: Any) -> None:
    store, writer, placer, _ = world
    for name in two_leaves(store, per_leaf=2):
        with store.lock:
            node = a_node(name, name.split("-n")[0])
            node["metadata"]["labels"].update({labels.rail_key(i): f"r{i}" for i in range(8)})
            store.upsert_node(node)
    add_gang(writer, "bare", 2)
    placer.run_cycle()
    annotations = writer.pods["ns/bare-0"]["metadata"]["annotations"]
    assert annotations[RAILS_ANNOTATION] == "0,1,2,3,4,5,6,7"


# -- pods numbered by the gang webhook: planned from the first, replacements told apart --------


def numbered(pod: dict[str, Any], attempt: int) -> dict[str, Any]:
    """``pod`` as the gang webhook numbers it (its rank known at admission: an LWS pod)."""
    pod["metadata"]["labels"][ATTEMPT_LABEL] = str(attempt)
    return pod


def test_a_gang_whose_pods_are_numbered_is_planned_from_its_first_pod(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    writer.add_job(a_gang_record("chat-0", 4))
    writer.add_pod(numbered(gang_pod("chat-0", 0), 0))  # the leader alone
    placer.run_cycle()
    plan = gang_placement(writer, "chat-0")
    assert plan["state"] == "Planned"
    assert plan["attempt"] == 0
    assert len(plan["nodes"]) == 4, "every rank planned, the later ones born onto it"
    assert writer.released == ["chat-0-0"]
    # a later pod of the attempt that came before the webhook saw the plan: released onto it
    writer.add_pod(numbered(gang_pod("chat-0", 2), 0))
    placer.run_cycle()
    assert writer.released == ["chat-0-0", "chat-0-2"]
    assert gang_placement(writer, "chat-0")["nodes"] == plan["nodes"], "nothing moved"


def test_a_numbered_replacement_returns_to_its_planned_node(world: Any) -> None:
    """A pod of a later attempt (the webhook saw its rank already) is one its owner made
    again: it returns to its rank's planned node, as any Gang pod made again does."""
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    writer.add_job(a_gang_record("chat-0", 2))
    for rank in range(2):
        writer.add_pod(numbered(gang_pod("chat-0", rank), 0))
    placer.run_cycle()
    nodes = gang_placement(writer, "chat-0")["nodes"]
    writer.delete_pod("ns", "chat-0-1")
    again = numbered(gang_pod("chat-0", 1), 1)
    again["metadata"]["uid"] = "uid-chat-0-1-again"
    writer.add_pod(again)
    placer.run_cycle()
    plan = gang_placement(writer, "chat-0")
    assert plan["nodes"] == nodes
    assert not plan.get("replacedRanks"), "returned, not moved"
    assert writer.released.count("chat-0-1") == 2
