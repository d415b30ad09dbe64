"""Invariants of the planner on random small clusters (hypothesis)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import ClusterBuilder, a_cluster, node_name

from tpfabric_core.placement import (
    CapacitySnapshot,
    ClusterTopology,
    GangPlan,
    GangRequest,
    Taint,
    TopologyPolicy,
    Unschedulable,
    order_ranks,
    plan_gang,
    replan_worker,
)
from tpfabric_core.placement._capacity import worker_slots
from tpfabric_core.placement.baselines import optimal
from tpfabric_core.placement.planner import allowed_depth

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LEVELS = ("leaf", "spine", "block", "cluster")


@dataclass
class Case:
    cluster: ClusterBuilder
    request: GangRequest
    waited: float


@st.composite
def cases(draw: st.DrawFn, max_nodes: int = 12) -> Case:
    leaves = draw(st.integers(1, 4))
    nodes = draw(st.integers(1, max(1, min(4, max_nodes // leaves))))
    cluster = a_cluster().with_leaves(
        leaves,
        nodes=nodes,
        per_spine=draw(st.integers(1, 2)),
        spines_per_block=draw(st.integers(1, 2)),
    )
    for name in cluster.node_names():
        cluster.with_free_gpus(name, draw(st.sampled_from([0, 4, 8, 8, 8])))
        trouble = draw(st.sampled_from(["none"] * 8 + ["cordoned", "not_ready", "taint", "sick"]))
        if trouble == "cordoned":
            cluster.cordoned(name)
        elif trouble == "not_ready":
            cluster.not_ready(name)
        elif trouble == "taint":
            cluster.tainted(name, Taint("maintenance", "NoSchedule"))
        elif trouble == "sick":
            cluster.degraded(name)
    gpus = draw(st.sampled_from([4, 8]))
    workers = draw(st.integers(1, 8))
    tp = draw(st.sampled_from([t for t in (4, 8, 16) if (workers * gpus) % t == 0] or [gpus]))
    if tp > gpus and tp % gpus:
        tp = gpus
    policy = TopologyPolicy(
        mode=draw(st.sampled_from(["required", "preferred"])),
        level=draw(st.sampled_from(LEVELS)),
        avoid_degraded=draw(st.sampled_from(["avoid", "penalize", "ignore"])),
        max_wait_seconds=draw(st.sampled_from([None, 0.0, 60.0])),
    )
    request = GangRequest(
        name="j",
        workers=workers,
        gpus_per_worker=gpus,
        rdma_per_worker=gpus,
        tp_size=tp,
        policy=policy,
    )
    return Case(cluster, request, draw(st.sampled_from([0.0, 30.0, 90.0])))


def usable_slots(case: Case, snapshot: CapacitySnapshot) -> list[int]:
    return worker_slots(
        snapshot, case.request, use_degraded=case.request.policy.avoid_degraded != "avoid"
    )


@SETTINGS
@given(cases())
def test_plans_never_overcommit_a_node(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if isinstance(result, GangPlan):
        slots = usable_slots(case, snapshot)
        for node, workers in Counter(result.nodes_by_rank).items():
            assert workers <= slots[snapshot.topology.index_of[node]]
        snapshot.allocate(result)  # raises on overcommit
        assert min(snapshot.free_gpus) >= 0


@SETTINGS
@given(cases())
def test_a_gang_is_placed_whole_or_not_at_all(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if isinstance(result, GangPlan):
        assert len(result.nodes_by_rank) == case.request.workers
    else:
        assert isinstance(result, Unschedulable)
        assert result.candidates
        assert all(c.workers_fit < c.workers_needed for c in result.candidates)


@SETTINGS
@given(cases())
def test_a_required_level_is_never_exceeded(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if isinstance(result, GangPlan) and case.request.policy.mode == "required":
        topology = snapshot.topology
        assert topology.depth_of(result.level) <= topology.depth_of(case.request.policy.level)


@SETTINGS
@given(cases(), st.randoms(use_true_random=False))
def test_the_same_input_gives_the_same_plan(case: Case, rng: random.Random) -> None:
    first = plan_gang(case.cluster.snapshot(), case.request, waited_seconds=case.waited)
    node_labels = list(case.cluster.node_labels().items())
    rng.shuffle(node_labels)
    topology = ClusterTopology.from_node_labels(dict(node_labels))
    states = [case.cluster._state(name) for name in case.cluster.node_names()]
    rng.shuffle(states)
    again = plan_gang(
        CapacitySnapshot.from_node_states(topology, states),
        case.request,
        waited_seconds=case.waited,
    )
    assert again == first


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 4)), max_size=10))
def test_rank_order_is_a_permutation_with_each_node_contiguous(
    picks: list[tuple[int, int]],
) -> None:
    ranks = order_ranks(picks)
    expected: Counter[int] = Counter()
    for node, workers in picks:
        expected[node] += workers
    assert Counter(ranks) == expected
    runs = [node for node, _ in itertools.groupby(ranks)]
    assert len(runs) == len(set(runs))


@SETTINGS
@given(cases(), st.data())
def test_a_replacement_stays_in_the_domain_when_it_has_room(
    case: Case, data: st.DataObject
) -> None:
    snapshot = case.cluster.snapshot()
    plan = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if not isinstance(plan, GangPlan):
        return
    snapshot.allocate(plan)
    rank = data.draw(st.integers(0, len(plan.nodes_by_rank) - 1))
    failed = snapshot.topology.index_of[plan.nodes_by_rank[rank]]
    snapshot.ready[failed] = False
    topology = snapshot.topology
    domain = next(
        d for d in topology.domains[topology.depth_of(plan.level)] if d.path == plan.domain_path
    )
    slots = usable_slots(case, snapshot)
    room = any(slots[i] for i in range(domain.start, domain.end))
    result = replan_worker(plan, rank, snapshot, case.request)
    assert isinstance(result, GangPlan) == room
    if isinstance(result, GangPlan):
        moved = topology.index_of[result.nodes_by_rank[rank]]
        assert domain.start <= moved < domain.end
        assert moved != failed
        assert [n for k, n in enumerate(result.nodes_by_rank) if k != rank] == [
            n for k, n in enumerate(plan.nodes_by_rank) if k != rank
        ]


def brute_force_min_depth(case: Case, snapshot: CapacitySnapshot) -> int | None:
    """The lowest depth of any whole placement, by trying every node multiset."""
    topology = snapshot.topology
    slots = usable_slots(case, snapshot)
    usable = [i for i, s in enumerate(slots) if s]
    best: int | None = None
    limit = allowed_depth(topology, case.request.policy, case.waited)
    for counts in itertools.product(*(range(slots[i] + 1) for i in usable)):
        if sum(counts) != case.request.workers:
            continue
        chosen = [i for i, k in zip(usable, counts, strict=True) if k]
        depth = topology.span_depth(chosen)
        if depth <= limit and (best is None or depth < best):
            best = depth
    return best


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_nodes=8))
def test_on_small_instances_the_plan_level_is_the_exact_optimum(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    topology = snapshot.topology
    if case.request.policy.avoid_degraded == "penalize":
        # the optimum trades degraded nodes against levels in the cost model
        exact = optimal(snapshot, case.request, waited_seconds=case.waited)
        if isinstance(exact, GangPlan):
            assert isinstance(result, GangPlan)
            assert result.level == exact.level
        else:
            assert isinstance(result, Unschedulable)
        return
    depth = brute_force_min_depth(case, snapshot)
    if depth is None:
        assert isinstance(result, Unschedulable)
    else:
        assert isinstance(result, GangPlan)
        assert topology.depth_of(result.level) == depth


def test_brute_force_oracle_agrees_on_a_hand_made_case() -> None:
    cluster = a_cluster().with_leaves(2, nodes=2).busy(node_name(0, 0))
    request = GangRequest(name="j", workers=2)
    case = Case(cluster, request, 0.0)
    assert brute_force_min_depth(case, cluster.snapshot()) == 0
