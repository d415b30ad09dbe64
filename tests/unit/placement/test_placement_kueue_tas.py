"""The Kueue TAS baseline places as Kueue v0.17.0's tas_flavor_snapshot.go does."""

from __future__ import annotations

from placement_builders import a_cluster, a_job, node_name, planned

from tpfabric_core.placement import CapacitySnapshot, GangPlan, Unschedulable
from tpfabric_core.placement.baselines import PLACERS, kueue_bestfit, kueue_unconstrained


def leaves_of(plan: GangPlan) -> list[str]:
    return [node.split("-n")[0] for node in plan.nodes_by_rank]


def groups(ranks: tuple[str, ...] | list[str], size: int) -> list[set[str]]:
    return [set(ranks[k : k + size]) for k in range(0, len(ranks), size)]


def half_full_leaf() -> CapacitySnapshot:
    """Leaf 0: one node with room for two 4-GPU workers, three with room for one; leaf 1 idle."""
    builder = a_cluster().with_leaves(2, nodes=4)
    for k in (1, 2, 3):
        builder = builder.with_free_gpus(node_name(0, k), 4).with_free_rdma(node_name(0, k), 4)
    return builder.snapshot()


def test_a_tensor_parallel_group_of_two_workers_is_a_slice_kept_on_one_node() -> None:
    # leaf 0 has room for 5 workers but for one whole group only; Kueue without slices would
    # best-fit the gang there and split a group over two nodes
    job = a_job(workers=4).with_gpus(4).parallel(tp=8).build()
    plan = planned(kueue_bestfit(half_full_leaf(), job))
    assert all(len(group) == 1 for group in groups(plan.nodes_by_rank, 2))
    assert set(leaves_of(plan)) == {"l01"}
    assert any("slices of 2 workers, each in one node" in reason for reason in plan.reasons)


def test_workers_that_each_hold_their_group_ask_no_slices() -> None:
    job = a_job(workers=4).with_gpus(4).parallel(tp=4).build()
    plan = planned(kueue_bestfit(half_full_leaf(), job))
    assert set(leaves_of(plan)) == {"l00"}  # the tightest leaf that fits 4 workers
    assert not any("slices" in reason for reason in plan.reasons)


def test_a_group_larger_than_a_node_is_a_slice_kept_in_one_leaf() -> None:
    # spine 0: 3 + 1 free nodes (one whole 2-node group); spine 1: 2 + 2 (two groups)
    snapshot = (
        a_cluster()
        .with_leaves(4, nodes=4, per_spine=2)
        .busy(node_name(0, 0), node_name(1, 0), node_name(1, 1), node_name(1, 2))
        .busy(node_name(2, 0), node_name(2, 1), node_name(3, 0), node_name(3, 1))
        .snapshot()
    )
    job = a_job(workers=4).parallel(tp=16).preferring("spine").build()
    plan = planned(kueue_bestfit(snapshot, job))
    assert plan.domain == "spine-1"
    assert all(len(group) == 1 for group in groups(leaves_of(plan), 2))
    assert any("each in one leaf domain" in reason for reason in plan.reasons)


def test_best_fit_packs_the_largest_nodes_first_and_best_fits_the_last() -> None:
    job = a_job(workers=3).with_gpus(4).parallel(tp=4).requiring("leaf").build()
    plan = planned(kueue_bestfit(half_full_leaf(), job))
    assert plan.nodes_by_rank == (node_name(0, 0), node_name(0, 0), node_name(0, 1))


def test_unconstrained_fills_the_fullest_nodes_first() -> None:
    job = a_job(workers=3).with_gpus(4).parallel(tp=4).build()
    plan = planned(kueue_unconstrained(half_full_leaf(), job))
    assert sorted(plan.nodes_by_rank) == [node_name(0, k) for k in (1, 2, 3)]
    assert plan.policy == "kueue_unconstrained"
    assert any("LeastFreeCapacity" in reason for reason in plan.reasons)


def test_unconstrained_takes_the_fullest_node_that_holds_the_whole_gang() -> None:
    job = a_job(workers=2).with_gpus(4).parallel(tp=4).build()
    plan = planned(kueue_unconstrained(half_full_leaf(), job))
    assert plan.nodes_by_rank == (node_name(0, 0), node_name(0, 0))


def test_unconstrained_spans_leaves_that_best_fit_keeps_whole() -> None:
    # one free slot in each leaf's first node, two in every other node
    builder = a_cluster().with_leaves(2, nodes=4)
    for leaf in (0, 1):
        node = node_name(leaf, 0)
        builder = builder.with_free_gpus(node, 4).with_free_rdma(node, 4)
    snapshot = builder.snapshot()
    job = a_job(workers=3).with_gpus(4).parallel(tp=4).build()
    assert len(set(leaves_of(planned(kueue_unconstrained(snapshot, job))))) == 2
    assert len(set(leaves_of(planned(kueue_bestfit(snapshot, job))))) == 1


def test_a_required_slice_request_that_nothing_holds_waits() -> None:
    job = a_job(workers=4).with_gpus(4).parallel(tp=8).requiring("leaf").build()
    snapshot = a_cluster().with_leaves(1, nodes=4)
    for k in range(4):
        snapshot = snapshot.with_free_gpus(node_name(0, k), 4).with_free_rdma(node_name(0, k), 4)
    assert isinstance(kueue_bestfit(snapshot.snapshot(), job), Unschedulable)


def test_the_benchmark_knows_both_kueue_profiles() -> None:
    assert PLACERS["kueue_bestfit"] is kueue_bestfit
    assert PLACERS["kueue_unconstrained"] is kueue_unconstrained
