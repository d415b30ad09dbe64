"""Gang records (pods another controller made) planned by the same engine as TensorParallelJobs:
found by their ``tpfabric.io/gang`` label, ranked by ``tpfabric.io/rank``, written back to the
Gang's status, and never confused with a TensorParallelJob of the same name."""

from __future__ import annotations

import json
from typing import Any

from placer_world import RecordingWriter, a_worker, gang, placement, two_leaves

from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_scheduler.extender import worker_view
from tpfabric_scheduler.protocol import parse_extender_args
from tpfabric_scheduler.store import GANG_GATE


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


def gang_placement(writer: RecordingWriter, name: str) -> dict[str, Any]:
    return dict(writer.jobs[f"ns/gang:{name}"].get("status", {}).get("placement") or {})


def test_a_gang_record_is_planned_whole_into_one_leaf_and_its_pods_released(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    writer.add_job(a_gang_record("vllm-0", 4))
    for rank in range(3):
        writer.add_pod(gang_pod("vllm-0", rank))
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
    writer.add_job(a_gang_record("same", 4))
    for rank in range(4):
        writer.add_pod(gang_pod("same", rank))
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
    writer.add_job(a_gang_record("vllm-1", 2))
    for rank in range(2):
        writer.add_pod(gang_pod("vllm-1", rank))
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
