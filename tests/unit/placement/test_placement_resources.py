"""Plans only where the pod can run: every resource it requests, its node selector/affinity."""

from __future__ import annotations

import pytest
from placement_builders import a_cluster, a_job, node_name, planned, waiting

from tpfabric_core.placement import CapacitySnapshot, NodeState, plan_gang, replan_worker
from tpfabric_core.placement.results import GangPlan

GI = 2**30


def test_a_node_short_of_cpu_takes_no_worker_and_the_shortfall_names_cpu() -> None:
    cluster = a_cluster().with_leaves(1, nodes=4).with_resources(cpu=64_000, pods=110)
    cluster.with_free(node_name(0, 0), "cpu", 8_000)
    job = a_job(workers=4).requiring("leaf").needing(cpu=16_000, pods=1).build()
    answer = waiting(plan_gang(cluster.snapshot(), job))
    (reason,) = answer.candidates[0].reasons
    assert answer.candidates[0].workers_fit == 3
    assert reason.kind == "capacity"
    assert str(reason) == (
        "1 node(s) without 8 free GPUs / 8 RDMA devices / 16 cpu / a pod slot (1 short of cpu)"
    )


def test_the_capacity_reason_counts_each_short_resource() -> None:
    cluster = a_cluster().with_leaves(1, nodes=4).with_resources(cpu=64_000, memory=512 * GI)
    cluster.with_free(node_name(0, 0), "memory", GI).busy(node_name(0, 1))
    cluster.with_free(node_name(0, 1), "memory", GI)
    job = a_job(workers=4).requiring("leaf").needing(cpu=16_000, memory=64 * GI).build()
    (reason,) = waiting(plan_gang(cluster.snapshot(), job)).candidates[0].reasons
    assert reason.nodes == 2
    assert "64Gi memory" in reason.detail
    assert "1 short of GPUs, 2 short of memory" in reason.detail


def test_a_node_without_a_requested_extended_resource_takes_no_worker() -> None:
    cluster = a_cluster().with_leaves(1, nodes=4)
    cluster.with_free(node_name(0, 1), "example.com/foo", 1)
    cluster.with_free(node_name(0, 3), "example.com/foo", 2)
    job = a_job(workers=2).needing_resource("example.com/foo", 1).build()
    plan = planned(plan_gang(cluster.snapshot(), job))
    assert set(plan.nodes_by_rank) == {node_name(0, 1), node_name(0, 3)}


def test_cpu_can_limit_how_many_workers_share_a_node() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2).with_resources(cpu=24_000)
    job = a_job(workers=2).with_gpus(4).needing(cpu=16_000).build()
    plan = planned(plan_gang(cluster.snapshot(), job))
    assert plan.nodes_by_rank == (node_name(0, 0), node_name(0, 1))


def test_a_node_without_a_pod_slot_takes_no_worker() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2).with_resources(pods=110)
    cluster.with_free(node_name(0, 0), "pods", 0)
    job = a_job(workers=2).requiring("leaf").needing(pods=1).build()
    (reason,) = waiting(plan_gang(cluster.snapshot(), job)).candidates[0].reasons
    assert "1 short of pod slots" in reason.detail


def test_only_eligible_nodes_take_workers() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).snapshot()
    job = a_job(workers=2).only_on(node_name(1, 0), node_name(1, 3)).build()
    plan = planned(plan_gang(snapshot, job))
    assert set(plan.nodes_by_rank) == {node_name(1, 0), node_name(1, 3)}


def test_nodes_the_selector_excludes_are_their_own_shortfall_kind() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=4).snapshot()
    job = a_job(workers=4).requiring("leaf").only_on(node_name(0, 0), node_name(0, 1)).build()
    (reason,) = waiting(plan_gang(snapshot, job)).candidates[0].reasons
    assert (reason.kind, reason.nodes) == ("selector", 2)
    assert "nodeSelector/affinity" in reason.detail


def test_allocate_and_release_move_every_resource_of_the_plan() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2).with_resources(cpu=64_000, pods=110)
    snapshot = cluster.snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=2).needing(cpu=16_000, pods=1).build()))
    assert plan.other_resources == (("cpu", 16_000), ("pods", 1))
    snapshot.allocate(plan)
    assert snapshot.free_other["cpu"] == [48_000, 48_000]
    assert snapshot.free_other["pods"] == [109, 109]
    snapshot.release(plan)
    assert snapshot.free_other["cpu"] == [64_000, 64_000]
    assert snapshot.free_gpus == [8, 8]


def test_an_overcommitting_allocation_takes_nothing() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2).with_resources(cpu=64_000)
    snapshot = cluster.snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=2).needing(cpu=16_000).build()))
    snapshot.free_other["cpu"][1] = 1_000
    with pytest.raises(ValueError, match="overcommits"):
        snapshot.allocate(plan)
    assert snapshot.free_other["cpu"] == [64_000, 1_000]
    assert snapshot.free_gpus == [8, 8]


def test_a_node_state_round_trips_through_the_snapshot() -> None:
    cluster = a_cluster().with_leaves(1, nodes=1).with_resources(cpu=1_000)
    snapshot = cluster.snapshot()
    state = snapshot.node_state(node_name(0, 0))
    assert state.free == {"cpu": 1_000}
    assert (state.allocatable_gpus, state.allocatable_rdma) == (8, 8)
    again = CapacitySnapshot.from_node_states(snapshot.topology, [state])
    assert again.node_state(node_name(0, 0)) == state


def test_old_callers_get_allocatable_equal_to_free() -> None:
    topology = a_cluster().with_leaves(1, nodes=1).topology()
    snapshot = CapacitySnapshot.from_node_states(
        topology, [NodeState(node_name(0, 0), free_gpus=4, free_rdma=2)]
    )
    assert (snapshot.alloc_gpus, snapshot.alloc_rdma) == ([4], [2])


def test_a_replacement_respects_resources_and_eligibility() -> None:
    cluster = a_cluster().with_leaves(1, nodes=4).with_resources(cpu=64_000)
    cluster.with_free(node_name(0, 2), "cpu", 0)
    snapshot = cluster.snapshot()
    job = (
        a_job(workers=2)
        .needing(cpu=16_000)
        .only_on(node_name(0, 0), node_name(0, 1), node_name(0, 2))
        .build()
    )
    plan = planned(plan_gang(snapshot, job))
    snapshot.allocate(plan)
    result = replan_worker(plan, 0, snapshot, job)
    # n02 lacks cpu, n03 is not eligible: nothing inside the leaf can take the rank
    assert not isinstance(result, GangPlan)
    assert "16 cpu" in result.summary


def test_one_worker_s_demand_is_taken_and_given_back_on_its_node() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2).with_resources(cpu=64_000)
    snapshot = cluster.snapshot()
    node = node_name(0, 1)
    i = snapshot.topology.index_of[node]
    demand = {"nvidia.com/gpu": 8, "cpu": 16_000, "example.com/untracked": 1}
    snapshot.take(node, demand, gpus="nvidia.com/gpu")
    assert (snapshot.free_gpus[i], snapshot.free_other["cpu"][i]) == (0, 48_000)
    snapshot.take(node, demand, gpus="nvidia.com/gpu")  # may overcommit: the node holds none
    assert snapshot.free_gpus[i] == -8
    snapshot.give_back(node, demand, gpus="nvidia.com/gpu")
    snapshot.give_back(node, demand, gpus="nvidia.com/gpu")
    snapshot.give_back("not-in-the-fabric", demand, gpus="nvidia.com/gpu")
    assert (snapshot.free_gpus[i], snapshot.free_other["cpu"][i]) == (8, 64_000)
    assert "example.com/untracked" not in snapshot.free_other
