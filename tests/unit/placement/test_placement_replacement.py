from __future__ import annotations

from placement_builders import a_cluster, a_job, node_name

from tpfabric_core.placement import GangPlan, ReplacementOptions, plan_gang, replan_worker


def placed(snapshot, job):  # type: ignore[no-untyped-def]
    plan = plan_gang(snapshot, job)
    assert isinstance(plan, GangPlan)
    snapshot.allocate(plan)
    return plan


def test_a_failed_worker_moves_to_a_free_node_of_the_same_leaf() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=4).snapshot()
    job = a_job(workers=3).build()
    plan = placed(snapshot, job)
    result = replan_worker(plan, 1, snapshot, job)
    assert isinstance(result, GangPlan)
    assert result.domain == plan.domain
    assert result.nodes_by_rank[1] not in plan.nodes_by_rank


def test_in_a_spine_wide_plan_the_replacement_stays_in_the_failed_workers_leaf() -> None:
    snapshot = a_cluster().with_leaves(3, nodes=4, per_spine=3).snapshot()
    job = a_job(workers=6).build()
    plan = placed(snapshot, job)
    assert plan.level == "spine"
    assert plan.nodes_by_rank[4:] == (node_name(1, 0), node_name(1, 1))
    snapshot.ready[snapshot.topology.index_of[node_name(1, 0)]] = False
    result = replan_worker(plan, 4, snapshot, job)
    assert isinstance(result, GangPlan)
    assert result.nodes_by_rank[4] == node_name(1, 2)


def test_a_full_domain_answers_with_the_options_elsewhere() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=2).snapshot()
    job = a_job(workers=2).requiring("leaf").build()
    plan = placed(snapshot, job)
    result = replan_worker(plan, 0, snapshot, job)
    assert isinstance(result, ReplacementOptions)
    assert result.options[0].level == "spine"
    assert not result.options[0].within_required_level
    assert "breaks the required leaf level" in result.summary
