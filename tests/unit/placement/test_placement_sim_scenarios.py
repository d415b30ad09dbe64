"""The simulator's scenarios: contention between tenants, the weighed restart rule, serving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpfabric_bench.placement import main
from tpfabric_bench.sim.cluster import Cluster, build_cluster
from tpfabric_bench.sim.constants import (
    CONTENTION_BACKGROUND,
    CONTENTION_FLOW_ACTIVITY,
    DEFAULT_CONSTANTS,
    contended,
)
from tpfabric_bench.sim.engine import simulate
from tpfabric_bench.sim.faults import LinkFault, RestartCost, RestartRule
from tpfabric_bench.sim.serving import (
    LLAMA_405B,
    fabric_token_s,
    inter_token_s,
    is_serving,
    serving_trace,
    weighted_percentile,
)
from tpfabric_bench.sim.trace import SimJob
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_core.placement import (
    CapacitySnapshot,
    GangPlan,
    GangRequest,
    Unschedulable,
    plan_gang,
)
from tpfabric_core.placement.cost import UplinkLoad


def a_cluster(nodes: int = 16) -> Cluster:
    fabric = uniform_fabric(nodes, nodes_per_leaf=4, leaves_per_spine=2, spines_per_block=2)
    return build_cluster(fabric, seed=1, anomalies=False)


def test_the_contention_scenario_raises_background_and_bunches_collectives() -> None:
    busy = contended(DEFAULT_CONSTANTS)
    assert dict(busy.cost.background_load) == CONTENTION_BACKGROUND
    assert busy.flow_activity == CONTENTION_FLOW_ACTIVITY
    assert busy.cost.oversubscription == DEFAULT_CONSTANTS.cost.oversubscription
    for level, share in CONTENTION_BACKGROUND.items():
        assert share > DEFAULT_CONSTANTS.cost.background_load[level]


def test_a_full_background_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        contended(DEFAULT_CONSTANTS, background={"spine": 1.0})


def test_an_unknown_restart_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="weighed"):
        RestartRule("sometimes")


def _one_job_end(rule: RestartRule | None, restore_s: float) -> tuple[float, int]:
    cluster = a_cluster()
    job = SimJob("a", 0.0, 4, 8, 13.0, 8, 1, 8, 4000)

    used: list[int] = []

    def place(
        s: CapacitySnapshot, r: GangRequest, w: float, u: UplinkLoad | None, t: int | None
    ) -> GangPlan | Unschedulable:
        result = plan_gang(s, r, waited_seconds=w, uplink_load=u, typical_gang_gpus=t)
        if isinstance(result, GangPlan) and not used:
            used.extend(cluster.topology.index_of[n] for n in result.nodes_by_rank)
        return result

    healthy = simulate(cluster, [job], place).outcomes[0]
    faults = [LinkFault(used[0], healthy.end_s / 10, 1e12)]
    run = simulate(
        cluster,
        [job],
        place,
        faults=faults,
        restart=RestartCost(1e-6, restore_s),
        restart_rule=rule,
    )
    return run.outcomes[0].end_s, run.outcomes[0].restarts


def test_the_weighed_rule_restarts_when_it_pays_and_stays_when_it_does_not() -> None:
    # the operator's weighing: the job's remaining time unknown, so a fault expected to last
    # 10^6 s weighs about that much slow running against the restore
    weighed = RestartRule("weighed", expected_fault_s=1e6)
    _, cheap = _one_job_end(weighed, restore_s=1.0)
    _, dear = _one_job_end(weighed, restore_s=1e7)
    _, always = _one_job_end(None, restore_s=1e7)
    assert cheap == 1
    assert dear == 0
    assert always == 1


def test_the_fabric_part_of_a_token_grows_with_latency_and_a_narrower_link() -> None:
    fast = fabric_token_s(3e-6, 400e9)
    assert fabric_token_s(7e-6, 400e9) > fast
    assert fabric_token_s(3e-6, 200e9) > fast
    assert inter_token_s(3e-6, 200e9) - inter_token_s(3e-6, 400e9) == pytest.approx(
        fabric_token_s(3e-6, 200e9) - fast
    )
    # decode is memory-bound: tens of ms per token, the fabric microseconds
    assert 0.01 < inter_token_s(3e-6, 400e9) < 0.1
    assert fast < 1e-4


def test_weighted_percentiles_weigh_by_duration() -> None:
    samples = [(1.0, 98.0), (5.0, 1.0), (9.0, 1.0)]
    assert weighted_percentile(samples, 0.5) == 1.0
    assert weighted_percentile(samples, 0.99) == 5.0
    assert weighted_percentile(samples, 1.0) == 9.0
    assert weighted_percentile([], 0.5) == 0.0


def test_the_serving_trace_mixes_two_node_groups_with_training_tenants() -> None:
    trace = serving_trace(nodes=64, seed=3, training_jobs=60)
    groups = [job for job in trace if is_serving(job.name)]
    assert groups
    assert len(groups) < len(trace)
    assert all((g.workers, g.gpus_per_worker, g.tp, g.pp) == (2, 8, 8, 2) for g in groups)
    assert all(g.params_b == LLAMA_405B.params_b for g in groups)
    assert [j.arrival_s for j in trace] == sorted(j.arrival_s for j in trace)
    assert trace == serving_trace(nodes=64, seed=3, training_jobs=60)


def test_the_benchmark_reports_inter_token_times_per_placer(tmp_path: Path) -> None:
    out = tmp_path / "serving.json"
    argv = ["--nodes", "64", "--kind", "serving", "--jobs", "40"]
    argv += ["--policies", "tpfabric,kueue_bestfit", "--scale-nodes", "0"]
    assert main([*argv, "--json", str(out), "--plot", str(tmp_path)]) == 0
    result = json.loads(out.read_text())
    for name in ("tpfabric", "kueue_bestfit"):
        metrics = result["policies"][name]
        assert metrics["serving_groups"] > 0
        assert metrics["token_ms_p99"] >= metrics["token_ms_p50"] > 0
        assert metrics["fabric_us_p99"] >= metrics["fabric_us_p50"] > 0
    assert (tmp_path / "serving.png").stat().st_size > 0


def test_the_benchmark_compares_restart_rules_on_the_same_jobs(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    argv = ["--nodes", "64", "--jobs", "20", "--link-faults", "0.05", "--scale-nodes", "0"]
    argv += ["--policies", "tpfabric,tpfabric-weighed,tpfabric-report,kueue_bestfit"]
    assert main([*argv, "--json", str(out), "--plot", str(tmp_path)]) == 0
    result = json.loads(out.read_text())["policies"]
    met = {values["jobs_met_anywhere"] for values in result.values()}
    assert len(met) == 1
    assert met.pop() > 0
    assert result["tpfabric-weighed"]["restarts"] <= result["tpfabric"]["restarts"]
    assert (tmp_path / "degraded.png").stat().st_size > 0


def test_the_contention_scenario_runs_and_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "contention.json"
    argv = ["--nodes", "64", "--jobs", "20", "--scenario", "contention", "--scale-nodes", "0"]
    argv += ["--policies", "tpfabric,kueue_bestfit"]
    assert main([*argv, "--json", str(out), "--plot", str(tmp_path)]) == 0
    result = json.loads(out.read_text())
    assert result["scenario"] == "contention"
    assert result["policies"]["tpfabric"]["jobs_done"] == 20
    assert (tmp_path / "contention.png").stat().st_size > 0
