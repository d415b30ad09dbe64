"""Plans kube-scheduler can bind: the placer models the cheap filters that
limit a gang to one worker per node (host ports, required pod anti-affinity within the gang) and
remembers the nodes kube-scheduler's own filters refused, so a plan it cannot bind is not
rebuilt identically after every bind bound."""

from __future__ import annotations

from typing import Any

from placer_world import NOW, a_worker, half_node_gang, make_workers, placement, two_leaves

from tpfabric_core.api import JOB_LABEL
from tpfabric_core.timestamps import rfc3339

PORTS_REFUSED = (
    "0/8 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 7 node(s) didn't "
    "match Pod's node affinity/selector."
)


def test_workers_that_take_a_host_port_go_one_per_node(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    half_node_gang(writer, "ported", 2)
    for pod in writer.pods.values():
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 29500, "hostPort": 29500}]
        writer.add_pod(pod)
    placer.run_cycle()
    nodes = placement(writer, "ported")["nodes"]
    assert len(set(nodes)) == 2, "two pods with one host port never share a node"


def test_a_node_whose_host_port_is_taken_is_left_out(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    with store.lock:  # a pod of another tenant holds the port on leaf-a-n0
        other = a_worker("tenant", 0, node="leaf-a-n0", gated=False, gpus=0)
        other["spec"]["containers"][0]["ports"] = [{"containerPort": 1, "hostPort": 29500}]
        store.upsert_pod(other)
    half_node_gang(writer, "ported", 1)
    pod = writer.pods["ns/ported-worker-0"]
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 29500, "hostPort": 29500}]
    writer.add_pod(pod)
    placer.run_cycle()
    assert placement(writer, "ported")["nodes"] != ["leaf-a-n0"]


def test_required_anti_affinity_within_the_gang_keeps_its_workers_one_per_node(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {JOB_LABEL: "apart"}},
                }
            ]
        }
    }
    half_node_gang(writer, "apart", 2, affinity=apart)
    placer.run_cycle()
    nodes = placement(writer, "apart")["nodes"]
    assert len(set(nodes)) == 2


def test_a_node_kube_scheduler_refused_is_left_out_of_the_next_plan_and_named(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    half_node_gang(writer, "job", 2)
    for pod in writer.pods.values():  # 8-GPU workers again: one per node
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
        writer.add_pod(pod)
    writer.jobs["ns/job"]["spec"].update(gpusPerWorker=8, tensorParallelSize=8)
    writer.add_job(writer.jobs["ns/job"])
    placer.run_cycle()
    first = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", first[0])
    refused = writer.pods["ns/job-worker-1"]  # kube-scheduler tried it and could not bind it
    refused["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": PORTS_REFUSED,
        }
    ]
    writer.add_pod(refused)
    clock.now += 61
    placer.run_cycle()
    dropped = placement(writer, "job")
    assert dropped["state"] == "Replanning"
    assert f"kube-scheduler refused node(s) {first[1]}" in dropped["message"]
    assert [r["node"] for r in dropped["refusedNodes"]] == [first[1]]
    assert "anti-affinity" in dropped["refusedNodes"][0]["reason"]
    make_workers(writer, "job", 2)  # the operator makes the gang again, gated
    clock.now += 1
    placer.run_cycle()
    again = placement(writer, "job")
    assert again["state"] == "Planned"
    assert first[1] not in again["nodes"], "not the node kube-scheduler refused"
    assert [r["node"] for r in again["refusedNodes"]] == [first[1]], "still shown"


def test_a_refusal_is_forgotten_after_ten_minutes(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=1)  # leaf-a-n0 and leaf-b-n0
    half_node_gang(writer, "old", 1)
    half_node_gang(writer, "new", 1)
    for name, age in (("old", 601), ("new", 599)):
        job = writer.jobs[f"ns/{name}"]
        refused = {"node": "leaf-a-n0", "reason": PORTS_REFUSED, "since": rfc3339(NOW - age)}
        job["status"] = {"placement": {"state": "Waiting", "refusedNodes": [refused]}}
        job["metadata"]["creationTimestamp"] = rfc3339(NOW - age)  # the old one goes first
        writer.add_job(job)
    placer.run_cycle()
    assert placement(writer, "old")["nodes"] == ["leaf-a-n0"], "best fit, refusal expired"
    assert "refusedNodes" not in placement(writer, "old")
    assert placement(writer, "new")["nodes"] == ["leaf-b-n0"]
