from __future__ import annotations

import pytest
from placement_builders import a_cluster, a_job, node_name, planned, waiting

from tpfabric_core.errors import InputError
from tpfabric_core.placement import (
    CapacitySnapshot,
    GangPlan,
    GangRequest,
    Taint,
    Toleration,
    TopologyPolicy,
    plan_gang,
)


def test_a_gang_that_fits_one_leaf_goes_to_one_leaf() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=4).build()))
    assert plan.level == "leaf"
    assert plan.hops == 1
    assert plan.leaves_spanned == 1


def test_best_fit_picks_the_leaf_with_least_room_left() -> None:
    snapshot = a_cluster().with_leaves(3, nodes=4).busy_leaf(1, nodes=1).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=3).build()))
    assert plan.domain == "leaf-1"


def test_a_preferred_gang_too_big_for_any_leaf_climbs_to_a_spine() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=6).preferring("leaf").build()))
    assert plan.level == "spine"
    assert plan.hops == 3
    assert plan.leaves_spanned == 2


def test_a_spine_plan_uses_as_few_leaves_as_possible() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4, per_spine=2).busy_leaf(0, nodes=3).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=5).build()))
    assert plan.leaves_spanned == 2
    assert sum(1 for n in plan.nodes_by_rank if n.startswith("l01")) == 4


def test_a_required_leaf_gang_waits_and_lists_every_leaf_with_its_shortfall() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).busy_leaf(0, nodes=2).snapshot()
    answer = waiting(plan_gang(snapshot, a_job(workers=5).requiring("leaf").build()))
    assert answer.level == "leaf"
    assert [(c.domain, c.workers_fit) for c in answer.candidates] == [
        ("leaf-1", 4),
        ("leaf-0", 2),
    ]
    assert answer.candidates[1].reasons[0].kind == "capacity"
    assert "required" in answer.summary


def test_a_preferred_gang_with_a_max_wait_waits_before_relaxing() -> None:
    # every leaf could hold 4 workers, but each has one node busy now
    snapshot = a_cluster().with_leaves(2, nodes=4).busy(node_name(0, 0), node_name(1, 0)).snapshot()
    job = a_job(workers=4).preferring("leaf", max_wait=300).build()
    answer = waiting(plan_gang(snapshot, job, waited_seconds=100))
    assert "will consider a spine domain once it has waited 300 s" in answer.summary
    assert answer.relax_after_seconds == 300


def test_a_preferred_gang_relaxes_one_level_after_its_max_wait() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).busy(node_name(0, 0), node_name(1, 0)).snapshot()
    job = a_job(workers=4).preferring("leaf", max_wait=300).build()
    plan = planned(plan_gang(snapshot, job, waited_seconds=300))
    assert plan.level == "spine"
    assert any("relaxed to spine" in r for r in plan.reasons)


def test_a_gang_bigger_than_every_spine_spreads_as_a_last_resort() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=2, per_spine=2, spines_per_block=1).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=6).build()))
    assert plan.level == "cluster"


@pytest.mark.parametrize(
    ("make_unusable", "kind"),
    [
        (lambda c: c.cordoned(node_name(0, 0)), "cordoned"),
        (lambda c: c.not_ready(node_name(0, 0)), "not_ready"),
        (lambda c: c.tainted(node_name(0, 0), Taint("gpu", "NoSchedule")), "taint"),
        (lambda c: c.tainted(node_name(0, 0), Taint("gpu", "NoExecute")), "taint"),
        (lambda c: c.with_free_rdma(node_name(0, 0), 4), "capacity"),
    ],
)
def test_unusable_nodes_are_left_out_and_named_in_the_shortfall(make_unusable, kind) -> None:  # type: ignore[no-untyped-def]
    snapshot = make_unusable(a_cluster().with_leaves(1, nodes=4)).snapshot()
    answer = waiting(plan_gang(snapshot, a_job(workers=4).requiring("leaf").build()))
    assert answer.candidates[0].workers_fit == 3
    assert [r.kind for r in answer.candidates[0].reasons] == [kind]


def test_a_tolerated_taint_does_not_keep_the_gang_off() -> None:
    snapshot = (
        a_cluster().with_leaves(1, nodes=2).tainted(node_name(0, 0), Taint("gpu", "NoSchedule"))
    ).snapshot()
    job = a_job(workers=2).tolerating(Toleration("gpu", "Exists")).build()
    assert planned(plan_gang(snapshot, job)).level == "leaf"


def test_prefer_no_schedule_taints_are_ignored() -> None:
    snapshot = (
        a_cluster()
        .with_leaves(1, nodes=2)
        .tainted(node_name(0, 0), Taint("gpu", "PreferNoSchedule"))
        .snapshot()
    )
    assert isinstance(plan_gang(snapshot, a_job(workers=2).build()), GangPlan)


def test_degraded_nodes_are_avoided_under_avoid() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=4).degraded(node_name(0, 0)).snapshot()
    answer = waiting(plan_gang(snapshot, a_job(workers=4).degraded_nodes("avoid").build()))
    assert answer.candidates[0].reasons[0].kind == "health"


def test_penalize_prefers_a_healthy_leaf_over_a_degraded_one() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).degraded(node_name(0, 0)).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=4).degraded_nodes("penalize").build()))
    assert plan.domain == "leaf-1"
    assert plan.degraded_nodes == ()


def test_penalize_uses_a_degraded_node_when_no_healthy_placement_exists() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=4).degraded(node_name(0, 0)).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=4).degraded_nodes("penalize").build()))
    assert plan.degraded_nodes == (node_name(0, 0),)


def test_penalize_weighs_a_degraded_leaf_against_a_healthy_spine_in_the_cost_model() -> None:
    snapshot = (
        a_cluster()
        .with_leaves(2, nodes=4)
        .degraded(node_name(0, 0))
        .busy(node_name(1, 0), node_name(1, 1))
        .snapshot()
    )
    plan = planned(plan_gang(snapshot, a_job(workers=4).degraded_nodes("penalize").build()))
    assert any("policy penalize" in r for r in plan.reasons)


def test_a_miscabled_node_counts_as_degraded_for_a_rail_aligned_gang() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=3).miscabled(node_name(0, 2), 3, 9).snapshot()
    job = a_job(workers=3).degraded_nodes("avoid").build()
    answer = waiting(plan_gang(snapshot, job))
    assert answer.candidates[0].reasons[0].kind == "rail"


def test_a_miscabled_node_is_usable_when_rail_alignment_is_off() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=3).miscabled(node_name(0, 2), 3, 9).snapshot()
    job = a_job(workers=3).degraded_nodes("avoid").rail_aligned(False).build()
    assert planned(plan_gang(snapshot, job)).hops == 3


def test_tensor_parallel_groups_of_two_workers_are_not_split_across_leaves() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=3).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=4).parallel(tp=16).build()))
    leaves = [name[:3] for name in plan.nodes_by_rank]
    assert leaves[0] == leaves[1]
    assert leaves[2] == leaves[3]


def test_workers_sharing_a_node_get_consecutive_ranks() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=2).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=4).with_gpus(4).build()))
    assert plan.nodes_by_rank == (
        node_name(0, 0),
        node_name(0, 0),
        node_name(0, 1),
        node_name(0, 1),
    )
    assert plan.hops == 1


def test_half_free_nodes_are_filled_before_whole_ones_are_broken() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=2).with_free_gpus(node_name(0, 1), 4).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=1).with_gpus(4).parallel(tp=4).build()))
    assert plan.nodes_by_rank == (node_name(0, 1),)


def test_the_plan_explains_itself_and_calls_its_cost_a_model() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=4).snapshot()
    text = planned(plan_gang(snapshot, a_job(workers=2).build())).explain()
    assert "smallest level that fits" in text
    assert "not a measurement" in text


def test_an_unknown_policy_level_names_the_known_levels() -> None:
    snapshot = a_cluster().with_leaves(1).snapshot()
    with pytest.raises(InputError, match="leaf, spine, block, cluster") as caught:
        plan_gang(snapshot, a_job(workers=1).requiring("rack").build())
    assert caught.value.where == "topologyPolicy.level"


def test_parallel_sizes_must_divide_the_world_size() -> None:
    with pytest.raises(InputError, match="does not divide the world size"):
        GangRequest(name="j", workers=3, tp_size=8, pp_size=2)


def test_a_negative_max_wait_is_rejected() -> None:
    with pytest.raises(InputError, match=r"topologyPolicy\.maxWaitSeconds"):
        TopologyPolicy(max_wait_seconds=-1)


def test_a_plan_names_the_label_of_every_level_down_to_its_own() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4).busy_leaf(0).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=4).build()))
    assert plan.domain_labels == (
        ("topology.tpfabric.io/block", "block-0"),
        ("topology.tpfabric.io/spine", "spine-0"),
        ("topology.tpfabric.io/leaf", "leaf-1"),
    )
    wide = planned(plan_gang(snapshot, a_job(workers=9).build()))
    assert (wide.level, wide.domain_labels) == (
        "block",
        (("topology.tpfabric.io/block", "block-0"),),
    )


# -- fragments: leaves cut below what a typical gang needs -------------------------------------


def leaves_of_seven_and_eight() -> CapacitySnapshot:
    """leaf-0 has a cordoned node (7 usable), leaf-1 is whole (8)."""
    return a_cluster().with_leaves(2, nodes=8).cordoned(node_name(0, 7)).snapshot()


def test_best_fit_alone_cuts_the_smaller_leaf_down_to_a_fragment() -> None:
    plan = planned(plan_gang(leaves_of_seven_and_eight(), a_job(workers=6).build()))
    assert plan.domain == "leaf-0"  # 1 slot left there: no 2-worker gang can use it


def test_a_leaf_is_not_cut_below_a_typical_gang_while_another_leaf_fits_without_that() -> None:
    plan = planned(
        plan_gang(leaves_of_seven_and_eight(), a_job(workers=6).build(), typical_gang_gpus=16)
    )
    assert plan.domain == "leaf-1"  # leaves 2 slots: a typical 2 x 8-GPU gang still fits
    note = next(r for r in plan.reasons if "fragment" in r)
    assert "leaf 'leaf-0'" in note
    assert "leave 1 worker slot(s)" in note
    assert "typical gang of 16 GPUs" in note


def test_when_every_fitting_leaf_becomes_a_fragment_best_fit_decides() -> None:
    plan = planned(
        plan_gang(leaves_of_seven_and_eight(), a_job(workers=6).build(), typical_gang_gpus=24)
    )
    assert plan.domain == "leaf-0"  # 1 or 2 slots left: both below 3
    assert not any("fragment" in r for r in plan.reasons)


def test_a_leaf_that_is_a_fragment_already_is_filled_first() -> None:
    snapshot = (
        a_cluster()
        .with_leaves(2, nodes=4)
        .busy(node_name(0, 0))  # leaf-0: 3 free, below a typical 4-worker gang
        .snapshot()
    )
    plan = planned(plan_gang(snapshot, a_job(workers=2).build(), typical_gang_gpus=32))
    assert plan.domain == "leaf-0"  # cutting leaf-1 to 2 would make a second fragment


def test_a_gang_that_fills_a_leaf_exactly_leaves_no_fragment() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=8).busy_leaf(0, nodes=2).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=6).build(), typical_gang_gpus=16))
    assert plan.domain == "leaf-0"


def test_the_typical_gang_is_counted_in_this_gangs_worker_slots() -> None:
    # 4-GPU workers: 2 per node; a typical gang of 16 GPUs needs 4 such slots
    snapshot = a_cluster().with_leaves(2, nodes=4).cordoned(node_name(0, 3)).snapshot()
    job = a_job(workers=4).with_gpus(4, rdma=4).build()
    assert planned(plan_gang(snapshot, job)).domain == "leaf-0"  # 6 slots - 4 = 2 left
    assert planned(plan_gang(snapshot, job, typical_gang_gpus=16)).domain == "leaf-1"  # 4 left


# -- a gang made again returns where it ran ------------------------------------------------------


def test_a_gang_made_again_returns_to_its_previous_leaf_and_nodes() -> None:
    # best fit alone picks leaf-1 (one node busy); the gang ran on leaf-2 before
    snapshot = a_cluster().with_leaves(3, nodes=4).busy_leaf(1, nodes=1).snapshot()
    before = [node_name(2, 1), node_name(2, 3), node_name(2, 0)]
    assert planned(plan_gang(snapshot, a_job(workers=3).build())).domain == "leaf-1"
    plan = planned(plan_gang(snapshot, a_job(workers=3).returning_from(*before).build()))
    assert plan.domain == "leaf-2"
    assert sorted(plan.nodes_by_rank) == sorted(before)
    assert any("back in leaf 'leaf-2', where it ran before: 3 of its 3" in r for r in plan.reasons)


def test_a_gang_whose_previous_leaf_is_full_now_is_placed_afresh_and_says_so() -> None:
    snapshot = a_cluster().with_leaves(3, nodes=4).busy_leaf(2, nodes=2).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=3).returning_from(node_name(2, 0)).build()))
    assert plan.domain == "leaf-0"
    assert any("previous node(s) are in no leaf domain that fits now" in r for r in plan.reasons)


def test_the_previous_domain_is_preferred_only_among_domains_of_the_smallest_level() -> None:
    # the gang ran across a spine; now a leaf fits it: the leaf wins (fewer hops), and the leaf
    # holding its previous nodes is that leaf
    snapshot = a_cluster().with_leaves(4, nodes=4, per_spine=2).snapshot()
    before = [node_name(3, 0), node_name(3, 1), node_name(2, 0)]
    plan = planned(plan_gang(snapshot, a_job(workers=3).returning_from(*before).build()))
    assert plan.level == "leaf"
    assert plan.domain == "leaf-3"
    assert set(before[:2]) <= set(plan.nodes_by_rank)


def test_a_previous_node_now_degraded_goes_after_the_healthy_ones() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).degraded(node_name(1, 0)).snapshot()
    before = [node_name(1, 0), node_name(1, 1)]
    plan = planned(plan_gang(snapshot, a_job(workers=2).returning_from(*before).build()))
    assert plan.domain == "leaf-1"
    assert node_name(1, 0) not in plan.nodes_by_rank
    assert node_name(1, 1) in plan.nodes_by_rank


def test_previous_nodes_outside_the_cluster_are_ignored() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).busy_leaf(1, nodes=1).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=3).returning_from("gone-node").build()))
    assert plan.domain == "leaf-1"
