"""Invariants of the planner on random small clusters (hypothesis)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import ClusterBuilder, a_cluster, node_name, nvl72_snapshot

from tpfabric_core import labels
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
from tpfabric_core.placement.planner import policy_reach

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LEVELS = ("leaf", "spine", "block", "cluster")
CPU_PER_NODE = 64_000


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
    cluster.with_resources(cpu=CPU_PER_NODE, pods=110)
    for name in cluster.node_names():
        cluster.with_free_gpus(name, draw(st.sampled_from([0, 4, 8, 8, 8])))
        cluster.with_free(name, "cpu", draw(st.sampled_from([CPU_PER_NODE] * 3 + [8_000, 0])))
        trouble = draw(
            st.sampled_from(["none"] * 8 + ["cordoned", "not_ready", "taint", "sick", "unlabelled"])
        )
        if trouble == "cordoned":
            cluster.cordoned(name)
        elif trouble == "not_ready":
            cluster.not_ready(name)
        elif trouble == "taint":
            cluster.tainted(name, Taint("maintenance", "NoSchedule"))
        elif trouble == "sick":
            cluster.degraded(name)
        elif trouble == "unlabelled":
            cluster.unlabelled(name, draw(st.sampled_from([labels.LEAF, labels.SPINE])))
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
    names = cluster.node_names()
    eligible = draw(st.one_of(st.none(), st.frozensets(st.sampled_from(names))))
    request = GangRequest(
        name="j",
        workers=workers,
        gpus_per_worker=gpus,
        rdma_per_worker=gpus,
        tp_size=tp,
        policy=policy,
        other_resources=(("cpu", draw(st.sampled_from([0, 16_000, 32_000]))), ("pods", 1)),
        eligible_nodes=eligible,
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
        assert min(snapshot.free_other["cpu"]) >= 0
        assert min(snapshot.free_other["pods"]) >= 0


@SETTINGS
@given(cases())
def test_a_gang_is_placed_whole_or_not_at_all(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if isinstance(result, GangPlan):
        assert len(result.nodes_by_rank) == case.request.workers
    else:
        assert isinstance(result, Unschedulable)
        # no candidate only when no labelled domain of that level exists
        assert result.candidates or "there is no" in result.summary
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
    limit = policy_reach(snapshot, case.request, case.waited).depth
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


@SETTINGS
@given(cases())
def test_workers_only_go_where_the_pod_may_run(case: Case) -> None:
    result = plan_gang(case.cluster.snapshot(), case.request, waited_seconds=case.waited)
    if isinstance(result, GangPlan) and case.request.eligible_nodes is not None:
        assert set(result.nodes_by_rank) <= case.request.eligible_nodes


@SETTINGS
@given(cases())
def test_nodes_outside_the_labelled_fabric_only_serve_cluster_wide_plans(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if not isinstance(result, GangPlan):
        return
    topology = snapshot.topology
    uses_outside = any(topology.index_of[n] in topology.outside for n in result.nodes_by_rank)
    if result.level != "cluster":
        assert not uses_outside
    if uses_outside:
        assert result.level == "cluster"


@SETTINGS
@given(cases())
def test_the_domain_labels_select_exactly_the_plans_nodes_domain(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if not isinstance(result, GangPlan):
        return
    topology = snapshot.topology
    node_labels = case.cluster.node_labels()
    depth = topology.depth_of(result.level)
    assert len(result.domain_labels) == topology.cluster_depth - depth
    assert tuple(v for _, v in result.domain_labels) == result.domain_path
    selected = {
        name
        for name, node in node_labels.items()
        if all(node.get(key) == value for key, value in result.domain_labels)
    }
    if depth < topology.cluster_depth:
        domain = topology.domain_at(result.level, result.domain_path)
        # a node outside the fabric may still carry the upper levels' labels (not a lower one)
        outside = {topology.node_names[i] for i in topology.outside}
        assert selected - outside == set(topology.node_names[domain.start : domain.end])
    assert set(result.nodes_by_rank) <= selected


@SETTINGS
@given(cases(), st.floats(0.0, 0.999))
def test_a_waiting_summary_does_not_change_while_nothing_changes(case: Case, part: float) -> None:
    snapshot = case.cluster.snapshot()
    first = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    if not isinstance(first, Unschedulable):
        return
    step = case.request.policy.max_wait_seconds or 60.0
    later = (case.waited // step + part) * step  # same relaxation step, another second
    again = plan_gang(snapshot, case.request, waited_seconds=later)
    assert isinstance(again, Unschedulable)
    assert again.summary == first.summary
    assert again.relax_after_seconds == first.relax_after_seconds
    if first.relax_after_seconds is not None:
        assert first.relax_after_seconds > case.waited


@SETTINGS
@given(cases())
def test_a_preferred_gang_never_waits_at_a_level_that_could_never_hold_it(case: Case) -> None:
    snapshot = case.cluster.snapshot()
    result = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    reach = policy_reach(snapshot, case.request, case.waited)
    preferred = case.request.policy.mode == "preferred"
    if isinstance(result, Unschedulable) and preferred and reach.ever_depth is not None:
        assert snapshot.topology.depth_of(result.level) >= reach.ever_depth


@SETTINGS
@given(
    racks=st.integers(1, 4),
    busy=st.lists(st.integers(0, 18), min_size=4, max_size=4),
    groups=st.integers(1, 8),
    level=st.sampled_from(["nvlink", "leaf", "spine", "cluster"]),
    mode=st.sampled_from(["required", "preferred"]),
)
def test_an_nvlink_level_never_splits_a_tensor_parallel_group(
    racks: int, busy: list[int], groups: int, level: str, mode: str
) -> None:
    snapshot = nvl72_snapshot(racks, busy=dict(enumerate(busy)))
    request = GangRequest(
        name="j",
        workers=4 * groups,
        gpus_per_worker=4,
        rdma_per_worker=4,
        tp_size=16,
        policy=TopologyPolicy(mode=mode, level=level),  # type: ignore[arg-type]
    )
    result = plan_gang(snapshot, request)
    topology = snapshot.topology
    free_groups = sum(
        (18 - min(18, busy[rack])) // 4 for rack in range(racks)
    )  # whole groups per clique
    if isinstance(result, GangPlan):
        for start in range(0, request.workers, 4):
            group = result.nodes_by_rank[start : start + 4]
            assert len({topology.domain_of(n, "nvlink").path for n in group}) == 1
    elif level == "cluster" or mode == "preferred":
        assert free_groups < groups


@SETTINGS
@given(cases(), st.sampled_from([8, 16, 32, 64, 128]))
def test_the_fragment_rule_only_chooses_among_leaves_that_fit(case: Case, typical: int) -> None:
    snapshot = case.cluster.snapshot()
    plain = plan_gang(snapshot, case.request, waited_seconds=case.waited)
    ruled = plan_gang(snapshot, case.request, waited_seconds=case.waited, typical_gang_gpus=typical)
    assert isinstance(ruled, GangPlan) == isinstance(plain, GangPlan)
    if isinstance(plain, GangPlan) and isinstance(ruled, GangPlan):
        assert ruled.level == plain.level  # never a higher level to spare a leaf
        slots = usable_slots(case, snapshot)
        for node, workers in Counter(ruled.nodes_by_rank).items():
            assert workers <= slots[snapshot.topology.index_of[node]]
