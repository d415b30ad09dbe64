"""The communication-aware simulator: step times follow placement, contention and health."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import a_cluster, node_name

from tpfabric_bench.sim.cluster import Cluster, build_cluster, stranded_fraction
from tpfabric_bench.sim.constants import DEFAULT_CONSTANTS
from tpfabric_bench.sim.engine import simulate
from tpfabric_bench.sim.model import (
    Collective,
    JobTraffic,
    ModelShape,
    ideal_traffic,
    placed_traffic,
)
from tpfabric_bench.sim.trace import SimJob, generate_trace, read_trace, write_trace
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_core.placement import (
    CapacitySnapshot,
    ClusterTopology,
    GangPlan,
    GangRequest,
    Unschedulable,
    plan_gang,
)
from tpfabric_core.placement.baselines import spread
from tpfabric_core.placement.cost import UplinkLoad

SHAPE = ModelShape(params_b=70, tp=8, pp=2, micro_batches=8)


def throttled(bps: float) -> Callable[[JobTraffic, Collective], float]:
    return lambda _traffic, _collective: bps


def topology_of(leaves: int, per_spine: int = 2) -> ClusterTopology:
    return a_cluster().with_leaves(leaves, nodes=4, per_spine=per_spine).topology()


def ranks_on(topology: ClusterTopology, *nodes: tuple[int, int]) -> list[int]:
    return [topology.index_of[node_name(leaf, k)] for leaf, k in nodes]


def test_the_model_shape_follows_the_parameter_count() -> None:
    assert SHAPE.hidden() == 9088
    assert SHAPE.layers() == 71
    assert SHAPE.data_parallel(64) == 4
    with pytest.raises(ValueError, match="does not divide"):
        SHAPE.data_parallel(24)


def test_tensor_parallelism_inside_a_node_rides_nvlink_and_crosses_no_uplink() -> None:
    traffic = ideal_traffic(SHAPE, workers=4, gpus_per_worker=8)
    tp = next(c for c in traffic.collectives if c.kind == "tp")
    assert tp.local_bps == DEFAULT_CONSTANTS.cost.nvlink_gbytes_per_s * 8e9
    assert not tp.uplinks
    assert {c.kind for c in traffic.collectives} == {"tp", "pp", "dp"}


def test_a_gang_across_spines_crosses_uplinks_and_one_on_a_leaf_does_not() -> None:
    topology = topology_of(4)
    healthy = [False] * len(topology)
    packed = placed_traffic(
        topology, SHAPE, ranks_on(topology, (0, 0), (0, 1), (0, 2), (0, 3)), 8, healthy
    )
    split = placed_traffic(
        topology, SHAPE, ranks_on(topology, (0, 0), (0, 1), (3, 0), (3, 1)), 8, healthy
    )
    assert not packed.flows
    assert split.flows
    assert packed.alone() == pytest.approx(split.alone(), rel=1e-3)  # latency only
    slow_step, slow_comm = split.step(throttled(50e9))
    fast_step, fast_comm = packed.step(throttled(50e9))
    assert slow_step > fast_step
    assert slow_comm / slow_step > fast_comm / fast_step


def test_a_degraded_endpoint_slows_the_rings_through_it() -> None:
    topology = topology_of(2)
    ranks = ranks_on(topology, (0, 0), (0, 1), (0, 2), (0, 3))
    healthy = placed_traffic(topology, SHAPE, ranks, 8, [False] * len(topology))
    sick = [i == ranks[1] for i in range(len(topology))]
    assert placed_traffic(topology, SHAPE, ranks, 8, sick).alone() > healthy.alone()


@settings(max_examples=60, deadline=None)
@given(
    params=st.sampled_from((7.0, 13.0, 70.0, 175.0)),
    tp=st.sampled_from((1, 2, 4, 8)),
    pp=st.sampled_from((1, 2, 4)),
    workers=st.sampled_from((2, 4, 8)),
    bps=st.floats(min_value=1e9, max_value=400e9),
)
def test_less_uplink_bandwidth_never_makes_a_step_shorter(
    params: float, tp: int, pp: int, workers: int, bps: float
) -> None:
    if (workers * 8) % (tp * pp):
        return
    topology = topology_of(4)
    shape = ModelShape(params, tp, pp, max(8, 2 * pp))
    nodes = [(leaf, k) for k in range(4) for leaf in (0, 3)][:workers]
    ranks = ranks_on(topology, *nodes)
    traffic = placed_traffic(topology, shape, ranks, 8, [False] * len(topology))
    step, comm = traffic.step(throttled(bps))
    assert step >= traffic.alone() >= traffic.compute_s > 0
    assert 0 <= comm < step
    assert traffic.step(throttled(bps / 2))[0] >= step


def small_cluster() -> Cluster:
    fabric = uniform_fabric(16, nodes_per_leaf=4, leaves_per_spine=2, spines_per_block=2)
    return build_cluster(fabric, seed=1, anomalies=False)


def job(name: str, arrival: float, workers: int, steps: int = 100) -> SimJob:
    return SimJob(name, arrival, workers, 8, 13.0, 8, 1, 8, steps)


def tpfabric(
    s: CapacitySnapshot, r: GangRequest, w: float, u: UplinkLoad | None, t: int | None
) -> GangPlan | Unschedulable:
    return plan_gang(s, r, waited_seconds=w, uplink_load=u, typical_gang_gpus=t)


def spreading(
    s: CapacitySnapshot, r: GangRequest, w: float, _u: UplinkLoad | None, _t: int | None
) -> GangPlan | Unschedulable:
    return spread(s, r, waited_seconds=w)


def test_every_job_of_a_trace_finishes_no_sooner_than_it_could_alone() -> None:
    cluster = small_cluster()
    trace = [job(f"j{k}", 10.0 * k, workers) for k, workers in enumerate((4, 8, 2, 16, 4))]
    run = simulate(cluster, trace, tpfabric, uplink_aware=True)
    assert not run.unfinished
    assert len(run.outcomes) == len(trace)
    for outcome in run.outcomes:
        assert outcome.start_s >= outcome.arrival_s
        assert outcome.stretch >= 1 - 1e-9
        assert 0 < outcome.comm_share < 1


def test_a_replay_is_deterministic() -> None:
    cluster = small_cluster()
    trace = generate_trace("small-jobs", jobs=20, nodes=16, seed=3)
    first = simulate(cluster, trace, spreading)
    second = simulate(cluster, trace, spreading)
    assert first.outcomes == second.outcomes


def test_a_gang_waits_for_room_and_starts_when_one_ends() -> None:
    cluster = small_cluster()
    trace = [job("big", 0.0, 16, steps=50), job("next", 1.0, 8, steps=10)]
    run = simulate(cluster, trace, tpfabric)
    ends = {o.name: o for o in run.outcomes}
    assert ends["next"].start_s == pytest.approx(ends["big"].end_s)


def test_jobs_sharing_a_narrow_uplink_slow_each_other_down() -> None:
    cluster = small_cluster()
    narrow = dataclasses.replace(
        DEFAULT_CONSTANTS,
        cost=DEFAULT_CONSTANTS.cost.model_copy(update={"oversubscription": {"spine": 64.0}}),
    )
    alone = simulate(cluster, [job("a", 0.0, 8)], spreading, constants=narrow)
    shared = simulate(cluster, [job("a", 0.0, 8), job("b", 0.0, 8)], spreading, constants=narrow)
    a_alone = alone.outcomes[0]
    a_shared = next(o for o in shared.outcomes if o.name == "a")
    assert a_shared.end_s > a_alone.end_s


def test_free_gpus_in_a_leaf_too_small_for_the_median_gang_count_as_stranded() -> None:
    cluster = small_cluster()
    snapshot = cluster.snapshot.copy()
    leaf = cluster.topology.domains[0][0]
    for i in range(leaf.start, leaf.end - 1):
        snapshot.free_gpus[i] = 0
    # 1 free node of 8 GPUs stranded out of 13 free nodes
    assert stranded_fraction(cluster, snapshot, median_workers=2) == pytest.approx(1 / 13)
    assert stranded_fraction(cluster, snapshot, median_workers=1) == 0.0


def test_a_trace_survives_a_round_trip_through_csv(tmp_path: Path) -> None:
    trace = generate_trace("huge-jobs", jobs=120, nodes=128, seed=5)
    path = tmp_path / "trace.csv"
    path.write_text(write_trace(trace))
    assert read_trace(path) == trace
    assert max(j.workers for j in trace) >= 32


def test_a_bad_trace_row_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    header = "name,arrival_s,workers,gpus_per_worker,params_b,tp,pp,micro_batches,steps\n"
    path.write_text(header + "ok,0,2,8,7,8,1,8,10\nbad,1,3,8,7,8,2,8,10\n")
    with pytest.raises(ValueError, match=r"trace.csv:3: .*does not divide"):
        read_trace(path)
    path.write_text("name,workers\nx,1\n")
    with pytest.raises(ValueError, match="missing column"):
        read_trace(path)


@pytest.mark.parametrize(
    ("kind", "nodes", "jobs"),
    [
        ("small-jobs", 128, 400),
        ("huge-jobs", 128, 400),
        ("small-jobs", 4096, 2000),
        ("huge-jobs", 4096, 2000),
    ],
)
def test_the_shipped_traces_are_what_the_generator_makes(kind: str, nodes: int, jobs: int) -> None:
    import tpfabric_bench  # noqa: PLC0415

    shipped = Path(tpfabric_bench.__file__).parent / "traces" / f"{kind}-{nodes}.csv"
    generated = write_trace(generate_trace(kind, jobs=jobs, nodes=nodes, seed=7))
    assert shipped.read_text() == generated, (
        f"regenerate: tpfabric bench placement --kind {kind} --nodes {nodes} --jobs {jobs} "
        f"--write-trace {shipped}"
    )


def test_the_placer_is_told_the_median_gpus_of_the_jobs_arrived_so_far() -> None:
    cluster = small_cluster()
    told: dict[str, int | None] = {}

    def recording(
        s: CapacitySnapshot, r: GangRequest, w: float, u: UplinkLoad | None, t: int | None
    ) -> GangPlan | Unschedulable:
        told.setdefault(r.name, t)
        return tpfabric(s, r, w, u, t)

    trace = [job("a", 0.0, 2), job("b", 10.0, 8), job("c", 20.0, 4), job("d", 30.0, 16)]
    simulate(cluster, trace, recording)
    # GPUs 16, 64, 32, 128: the median of what has arrived when each job is first tried
    assert told == {"a": 16, "b": 40, "c": 32, "d": 48}
