"""An NVLink level (GB200 NVL72-like: 4 GPUs per node, 18 nodes per clique) never splits a
tensor-parallel group of 16 GPUs (4 workers)."""

from __future__ import annotations

from placement_builders import CLIQUE_KEY, JobBuilder, a_job, nvl72_snapshot, planned, waiting

from tpfabric_core.placement import (
    DEFAULT_LEVELS,
    CapacitySnapshot,
    GangPlan,
    LevelSpec,
    ReplacementOptions,
    plan_gang,
    replan_worker,
)


def tp16_job(workers: int) -> JobBuilder:
    return a_job(workers=workers).with_gpus(4).parallel(tp=16)


def groups_per_clique(snapshot: CapacitySnapshot, plan: GangPlan) -> list[set[str]]:
    topology = snapshot.topology
    return [
        {topology.domain_of(n, "nvlink").name for n in plan.nodes_by_rank[k : k + 4]}
        for k in range(0, len(plan.nodes_by_rank), 4)
    ]


def test_every_tensor_parallel_group_stays_inside_one_clique() -> None:
    snapshot = nvl72_snapshot(2)  # one leaf, two cliques of 18 nodes
    plan = planned(plan_gang(snapshot, tp16_job(32).requiring("leaf").build()))
    assert plan.level == "leaf"
    assert all(len(cliques) == 1 for cliques in groups_per_clique(snapshot, plan))


def test_a_plan_that_would_split_a_group_does_not_exist() -> None:
    # clique 0 has 15 free nodes (3 whole groups), clique 1 has 18 (4 groups): 28 < 32 workers
    snapshot = nvl72_snapshot(2, busy={0: 3})
    answer = waiting(plan_gang(snapshot, tp16_job(32).requiring("leaf").build()))
    assert answer.candidates[0].workers_fit == 28
    notes = [str(r) for r in answer.candidates[0].reasons]
    assert (
        "5 free worker slot(s) unusable: tensor-parallel groups of 4 workers stay inside one "
        "nvlink domain" in notes
    )


def test_without_a_group_keeping_level_the_same_gang_splits_a_group() -> None:
    levels = (*DEFAULT_LEVELS, LevelSpec("nvlink", CLIQUE_KEY))  # keep_tp_groups not set
    snapshot = nvl72_snapshot(2, busy={0: 3}, levels=levels)
    plan = planned(plan_gang(snapshot, tp16_job(32).requiring("leaf").build()))
    assert any(len(cliques) > 1 for cliques in groups_per_clique(snapshot, plan))


def test_a_gang_of_one_group_best_fits_a_clique() -> None:
    snapshot = nvl72_snapshot(2, busy={1: 14})  # clique 1 has exactly 4 nodes free
    plan = planned(plan_gang(snapshot, tp16_job(4).requiring("nvlink").build()))
    assert plan.level == "nvlink"
    assert plan.domain_labels == (
        ("topology.tpfabric.io/block", "block-0"),
        ("topology.tpfabric.io/spine", "spine-0"),
        ("topology.tpfabric.io/leaf", "leaf-0"),
        (CLIQUE_KEY, "clique-1"),
    )


def test_a_replacement_stays_in_its_groups_clique() -> None:
    snapshot = nvl72_snapshot(2)
    job = tp16_job(32).requiring("leaf").build()
    plan = planned(plan_gang(snapshot, job))
    snapshot.allocate(plan)
    topology = snapshot.topology
    home = topology.domain_of(plan.nodes_by_rank[0], "nvlink").name
    result = replan_worker(plan, 0, snapshot, job)
    assert isinstance(result, GangPlan)
    assert topology.domain_of(result.nodes_by_rank[0], "nvlink").name == home


def test_a_replacement_never_leaves_a_full_clique_even_when_the_leaf_has_room() -> None:
    snapshot = nvl72_snapshot(2, busy={1: 14})  # clique 1: 4 free nodes
    job = tp16_job(16).requiring("leaf").build()  # 4 groups: clique 0 only
    plan = planned(plan_gang(snapshot, job))
    snapshot.allocate(plan)
    topology = snapshot.topology
    # fill whatever is left in the plan's cliques so no node there has room
    for name in topology.node_names:
        if topology.domain_of(name, "nvlink").name in {
            topology.domain_of(n, "nvlink").name for n in plan.nodes_by_rank
        }:
            snapshot.free_gpus[topology.index_of[name]] = 0
    result = replan_worker(plan, 0, snapshot, job)
    assert isinstance(result, ReplacementOptions)
    assert result.level == "nvlink"
