"""Links that degrade during a run: who slows down, who restarts elsewhere, at what cost."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tpfabric_bench.placement import CEILING, main
from tpfabric_bench.sim.cluster import Cluster, build_cluster
from tpfabric_bench.sim.engine import JobOutcome, PlaceFn, simulate
from tpfabric_bench.sim.faults import LinkFault, RestartCost, link_faults
from tpfabric_bench.sim.trace import SimJob
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_core.placement import CapacitySnapshot, GangPlan, GangRequest, Unschedulable
from tpfabric_core.placement import plan_gang as planner
from tpfabric_core.placement.cost import UplinkLoad

RESTORE = RestartCost(checkpoint_interval_s=1e9, restore_s=50.0)


def a_cluster(nodes: int = 16) -> Cluster:
    fabric = uniform_fabric(nodes, nodes_per_leaf=4, leaves_per_spine=2, spines_per_block=2)
    return build_cluster(fabric, seed=1, anomalies=False)


def a_job(workers: int = 4) -> SimJob:
    return SimJob("a", 0.0, workers, 8, 13.0, 8, 1, 8, 2000)


class Recording:
    """The planner, remembering the node indices of every plan it made."""

    def __init__(self, cluster: Cluster) -> None:
        self.index_of = cluster.topology.index_of
        self.plans: list[set[int]] = []

    def __call__(
        self, s: CapacitySnapshot, r: GangRequest, w: float, u: UplinkLoad | None, t: int | None
    ) -> GangPlan | Unschedulable:
        result = planner(s, r, waited_seconds=w, uplink_load=u, typical_gang_gpus=t)
        if isinstance(result, GangPlan):
            self.plans.append({self.index_of[n] for n in result.nodes_by_rank})
        return result


def only(
    cluster: Cluster,
    place: PlaceFn,
    faults: Sequence[LinkFault] = (),
    restart: RestartCost | None = None,
) -> JobOutcome:
    run = simulate(cluster, [a_job()], place, faults=faults, restart=restart)
    assert len(run.outcomes) == 1
    return run.outcomes[0]


def test_faults_are_seeded_sorted_and_inside_the_horizon() -> None:
    faults = link_faults(100, 1e6, per_node_hour=1e-3, seed=4)
    assert faults == link_faults(100, 1e6, per_node_hour=1e-3, seed=4)
    assert [f.start_s for f in faults] == sorted(f.start_s for f in faults)
    assert all(0 <= f.start_s < 1e6 and f.end_s > f.start_s for f in faults)
    assert 10 < len(faults) < 60  # 100 nodes x 278 h x 1e-3, less the time spent degraded
    assert link_faults(100, 1e6, per_node_hour=0.0) == []


def test_a_job_whose_link_degrades_runs_slower_and_counts_as_affected() -> None:
    cluster = a_cluster()
    place = Recording(cluster)
    healthy = only(cluster, place)
    node = min(place.plans[0])
    fault = LinkFault(node, healthy.end_s / 2, 1e9)
    hit = only(cluster, Recording(cluster), faults=[fault])
    assert hit.affected
    assert not healthy.affected
    assert hit.end_s > healthy.end_s
    assert hit.restarts == 0


def test_a_fault_that_ends_before_the_job_starts_leaves_it_alone() -> None:
    cluster = a_cluster()
    place = Recording(cluster)
    late = SimJob("a", 100.0, 4, 8, 13.0, 8, 1, 8, 2000)
    faults = [LinkFault(i, 0.0, 50.0) for i in range(len(cluster.topology))]
    run = simulate(cluster, [late], place, faults=faults)
    assert not run.outcomes[0].affected


def test_restart_elsewhere_moves_the_job_and_charges_the_restore() -> None:
    cluster = a_cluster()
    place = Recording(cluster)
    healthy = only(cluster, place)
    node = min(place.plans[0])
    moving = Recording(cluster)
    fault = LinkFault(node, healthy.end_s / 2, 1e9)
    moved = only(cluster, moving, faults=[fault], restart=RESTORE)
    assert moved.restarts == 1
    assert moved.affected
    assert node not in moving.plans[-1]
    assert moved.end_s >= healthy.end_s + RESTORE.restore_s


def test_a_restart_redoes_the_steps_since_the_last_checkpoint() -> None:
    cluster = a_cluster()
    place = Recording(cluster)
    healthy = only(cluster, place)
    node = min(place.plans[0])
    fault = [LinkFault(node, healthy.end_s / 2, 1e9)]
    often = only(cluster, Recording(cluster), faults=fault, restart=RestartCost(1e-6, 0.0))
    never = only(cluster, Recording(cluster), faults=fault, restart=RestartCost(1e9, 0.0))
    assert often.end_s < never.end_s  # never checkpointed: half the run is redone


def test_without_room_elsewhere_the_job_keeps_running_slow() -> None:
    cluster = a_cluster(4)  # one leaf, the job takes all of it
    degraded_all = [LinkFault(i, 10.0, 1e9) for i in range(4)]
    outcome = only(cluster, Recording(cluster), faults=degraded_all, restart=RESTORE)
    assert outcome.restarts == 0
    assert outcome.affected


def test_a_job_without_room_moves_once_room_frees() -> None:
    """As the operator does with the placer's healthy-room answer: a job the fault met with no
    room elsewhere runs slow until another job ends, then moves there."""
    cluster = a_cluster(8)  # two leaves of four
    place = Recording(cluster)
    long, short = (
        SimJob("a", 0.0, 4, 8, 13.0, 8, 1, 8, 2000),
        SimJob("b", 0.0, 4, 8, 13.0, 8, 1, 8, 200),
    )
    run = simulate(cluster, [long, short], place)
    first, other = place.plans[0], place.plans[1]
    short_end = next(o.end_s for o in run.outcomes if o.name == "b")
    fault = LinkFault(min(first), 10.0, 1e9)  # under "a" before "b" ends, never healed
    assert short_end > fault.start_s
    moving = Recording(cluster)
    run = simulate(cluster, [long, short], moving, faults=[fault], restart=RESTORE)
    outcome = {o.name: o for o in run.outcomes}
    assert outcome["a"].restarts == 1
    assert moving.plans[-1] == other  # where "b" ran
    assert outcome["a"].end_s > short_end


def test_the_benchmark_reports_the_affected_jobs(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    argv = ["--nodes", "64", "--jobs", "20", "--policies", "tpfabric,tpfabric-report,kueue_bestfit"]
    assert main([*argv, "--link-faults", "0.05", "--scale-nodes", "0", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["link_faults"]["per_node_hour"] == 0.05
    for name in ("tpfabric", "kueue_bestfit"):
        metrics = result["policies"][name]
        assert metrics["affected_jobs"] > 0
        assert metrics["mean_jct_affected_s"] > 0
    assert result["policies"]["kueue_bestfit"]["restarts"] == 0
    assert result["policies"]["tpfabric-report"]["restarts"] == 0


def test_the_ceiling_replays_the_oracle_without_faults_on_the_same_jobs(tmp_path: Path) -> None:
    out = tmp_path / "ceiling.json"
    argv = ["--nodes", "64", "--jobs", "20", "--policies", "tpfabric-report,kueue_bestfit"]
    argv += ["--link-faults", "0.05", "--scale-nodes", "0", "--ceiling", "--json", str(out)]
    assert main(argv) == 0
    policies = json.loads(out.read_text())["policies"]
    ceiling = policies[CEILING]
    assert ceiling["affected_jobs"] == 0  # no link of its own degraded
    assert ceiling["restarts"] == 0
    met = policies["kueue_bestfit"]["jobs_met_anywhere"]
    assert met > 0
    assert ceiling["jobs_met_anywhere"] == met == policies["tpfabric-report"]["jobs_met_anywhere"]
    assert ceiling["mean_jct_met_anywhere_s"] > 0
    unharmed = policies["kueue_bestfit (no faults)"]
    assert unharmed["affected_jobs"] == 0
    assert unharmed["jobs_met_anywhere"] == met


def test_the_ceiling_needs_faults_to_mean_anything(tmp_path: Path) -> None:
    out = tmp_path / "plain.json"
    argv = ["--nodes", "64", "--jobs", "10", "--policies", "kueue_bestfit", "--ceiling"]
    assert main([*argv, "--scale-nodes", "0", "--json", str(out)]) == 0
    assert list(json.loads(out.read_text())["policies"]) == ["kueue_bestfit"]
