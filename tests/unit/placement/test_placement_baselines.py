from __future__ import annotations

import pytest
from placement_builders import a_cluster, a_job, node_name

from tpfabric_core.placement import GangPlan, Unschedulable, plan_gang
from tpfabric_core.placement.baselines import (
    SearchTooLargeError,
    first_fit,
    kueue_bestfit,
    optimal,
    spread,
)


def test_spread_scatters_a_small_gang_over_leaves_on_an_idle_cluster() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=8).snapshot()
    plan = spread(snapshot, a_job(workers=8).build())
    assert isinstance(plan, GangPlan)
    assert plan.leaves_spanned > 1


def test_first_fit_takes_nodes_in_name_order() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=2).busy(node_name(0, 0)).snapshot()
    plan = first_fit(snapshot, a_job(workers=2).build())
    assert isinstance(plan, GangPlan)
    assert plan.nodes_by_rank == (node_name(0, 1), node_name(1, 0))


def test_kueue_bestfit_takes_the_tightest_domain_that_fits_at_the_requested_level() -> None:
    snapshot = a_cluster().with_leaves(3, nodes=4).busy_leaf(2, nodes=1).snapshot()
    plan = kueue_bestfit(snapshot, a_job(workers=3).requiring("leaf").build())
    assert isinstance(plan, GangPlan)
    assert plan.domain == "leaf-2"


def test_kueue_bestfit_fails_a_required_level_that_nothing_fits() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=2).snapshot()
    assert isinstance(
        kueue_bestfit(snapshot, a_job(workers=3).requiring("leaf").build()), Unschedulable
    )


def test_kueue_bestfit_best_fits_at_the_requested_level_not_below_it() -> None:
    # spine 0 has 3 + 3 free (tightest spine for 4 workers, but no leaf fits); spine 1 has 4 + 4
    snapshot = (
        a_cluster()
        .with_leaves(4, nodes=4, per_spine=2)
        .busy(node_name(0, 0), node_name(1, 0))
        .snapshot()
    )
    job = a_job(workers=4).preferring("spine").build()
    kueue = kueue_bestfit(snapshot, job)
    ours = plan_gang(snapshot, job)
    assert isinstance(kueue, GangPlan)
    assert isinstance(ours, GangPlan)
    assert (kueue.domain, kueue.leaves_spanned) == ("spine-0", 2)
    assert ours.level == "leaf"


def test_optimal_finds_the_same_level_as_the_planner() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4).busy_leaf(0, nodes=2).snapshot()
    job = a_job(workers=5).build()
    exact = optimal(snapshot, job)
    ours = plan_gang(snapshot, job)
    assert isinstance(exact, GangPlan)
    assert isinstance(ours, GangPlan)
    assert exact.level == ours.level
    assert exact.cost.best_s <= ours.cost.best_s


def test_optimal_refuses_searches_beyond_its_budget() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=8, per_spine=4, spines_per_block=1).snapshot()
    with pytest.raises(SearchTooLargeError):
        optimal(snapshot, a_job(workers=20).build(), max_allocations=10)
