"""Placement benchmark: tpfabric's planner against the baselines on a seeded job trace.

``python -m tpfabric_bench.placement [--fabric FILE] [--trace FILE] [--seed N] [--json FILE]
[--plot DIR] [--nodes N] [--jobs N]`` replays one trace of arrivals and departures (gangs of
2-32 workers, mixed tensor/pipeline parallelism) against every placer on the same rail-optimized
cluster (default 4 units x 32 nodes x 8 GPUs, a few degraded, cordoned and miscabled nodes), prints
a table and writes JSON; ``--plot DIR`` writes a placement-map snapshot and the metrics as PNGs.
It also times the planner for 32-worker gangs on a 4,096-node fabric.

The modelled all-reduce figures come from the cost model (scoring, not measurement). Timings are
wall-clock on this machine and only compare placers run side by side. This module must never be
imported by the product or assert on timings.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from tpfabric_core import labels
from tpfabric_core.fabric_description import (
    FabricDescription,
    parse_fabric_description,
    uniform_fabric,
)
from tpfabric_core.placement import (
    CapacitySnapshot,
    ClusterTopology,
    GangPlan,
    GangRequest,
    NodeState,
    TopologyPolicy,
    modelled_allreduce,
)
from tpfabric_core.placement.baselines import PLACERS, Placer, SearchTooLargeError

UNIT_NODES = 32
SIZES = (2, 4, 4, 8, 8, 8, 16, 16, 24, 32)
TARGET_LOAD = 0.85


@dataclass(frozen=True)
class TraceJob:
    """One gang of the trace: when it arrives, how long it runs, what it asks for."""

    name: str
    arrival: float
    duration: float
    workers: int
    gpus_per_worker: int
    tp_size: int
    pp_size: int
    mode: str
    level: str
    max_wait_seconds: float | None

    def request(self) -> GangRequest:
        """Return the engine's request for this job."""
        return GangRequest(
            name=self.name,
            workers=self.workers,
            gpus_per_worker=self.gpus_per_worker,
            rdma_per_worker=self.gpus_per_worker,
            tp_size=self.tp_size,
            pp_size=self.pp_size,
            policy=TopologyPolicy(
                mode="required" if self.mode == "required" else "preferred",
                level=self.level,
                max_wait_seconds=self.max_wait_seconds,
            ),
        )


@dataclass
class Cluster:
    """The benchmark cluster: topology, the initial snapshot and its GPU count."""

    name: str
    topology: ClusterTopology
    snapshot: CapacitySnapshot
    gpus: int


@dataclass
class PolicyRun:
    """What happened to the trace under one placer."""

    placed: int = 0
    waiting: int = 0
    optimal_domain: int = 0
    leaves: list[int] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    plan_ms: list[float] = field(default_factory=list)
    busy_gpu_seconds: float = 0.0
    fragmentation: list[float] = field(default_factory=list)
    snapshot_map: list[int] = field(default_factory=list)
    infeasible: str = ""


def build_cluster(fabric: FabricDescription, seed: int, *, anomalies: bool = True) -> Cluster:
    """Return the cluster of ``fabric`` with a few seeded degraded/cordoned/miscabled nodes."""
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    node_labels = {node.name: fabric.node_labels(node) for node in fabric.nodes}
    names = sorted(node_labels)
    per_node = fabric.node.gpus
    degraded: set[str] = set()
    cordoned: set[str] = set()
    if anomalies:
        n = len(names)
        picks = rng.sample(names, min(n, max(1, n // 64) * 2 + max(1, n // 128)))
        degraded = set(picks[: max(1, n // 64)])
        cordoned = set(picks[max(1, n // 64) : max(1, n // 64) * 2])
        for name in picks[max(1, n // 64) * 2 :]:
            other = rng.choice(names)
            node_labels[name][labels.rail_key(3)] = node_labels[other][labels.LEAF] + "-rail-x"
    topology = ClusterTopology.from_node_labels(node_labels)
    states = [
        NodeState(
            name,
            free_gpus=per_node,
            free_rdma=fabric.node.rdma,
            schedulable=name not in cordoned,
            health="degraded" if name in degraded else "ok",
        )
        for name in names
    ]
    snapshot = CapacitySnapshot.from_node_states(topology, states)
    return Cluster(fabric.name, topology, snapshot, per_node * (len(names) - len(cordoned)))


def generate_trace(cluster: Cluster, jobs: int, seed: int) -> list[TraceJob]:
    """Return a seeded trace of ``jobs`` gangs arriving at about 85% offered GPU load."""
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    drafts: list[tuple[str, float, int, int, int, int, str, str, float | None]] = []
    for k in range(jobs):
        workers = rng.choice(SIZES)
        gpus = 8 if rng.random() < 0.85 else 4
        tp = rng.choice((8, 16) if gpus == 8 else (4, 8))
        pp = rng.choice([p for p in (1, 2, 4) if (workers * gpus) % (tp * p) == 0])
        roll = rng.random()
        mode, level = "preferred", "leaf"
        wait: float | None = 1800.0
        if roll < 0.2:
            mode, wait = "required", None
        elif roll < 0.3:
            level, wait = "spine", None
        duration = rng.lognormvariate(math.log(3600), 0.8)
        drafts.append((f"job-{k:04d}", duration, workers, gpus, tp, pp, mode, level, wait))
    mean_work = statistics.fmean(d[1] * d[2] * d[3] for d in drafts)
    rate = TARGET_LOAD * cluster.gpus / mean_work
    clock = 0.0
    trace = []
    for name, duration, workers, gpus, tp, pp, mode, level, wait in drafts:
        clock += rng.expovariate(rate)
        trace.append(TraceJob(name, clock, duration, workers, gpus, tp, pp, mode, level, wait))
    return trace


def load_trace(path: Path) -> list[TraceJob]:
    """Return the trace in a YAML or JSON file (a list of TraceJob fields)."""
    data = yaml.safe_load(path.read_text())
    return [TraceJob(**item) for item in data]


def ever_depth(cluster: Cluster, request: GangRequest) -> int:
    """Return the lowest depth that could hold ``request`` on the idle cluster (healthy nodes)."""
    topology = cluster.topology
    snapshot = cluster.snapshot
    per_node = [
        0
        if not snapshot.schedulable[i] or snapshot.degraded[i] or topology.rail_anomaly[i]
        else snapshot.free_gpus[i] // request.gpus_per_worker
        for i in range(len(topology))
    ]
    for depth, domains in enumerate(topology.domains):
        if any(sum(per_node[d.start : d.end]) >= request.workers for d in domains):
            return depth
    return topology.cluster_depth


def median_workers(trace: Sequence[TraceJob]) -> int:
    """Return the median gang size of the trace, in workers."""
    return int(statistics.median(job.workers for job in trace))


def stranded_fraction(cluster: Cluster, snapshot: CapacitySnapshot, median: int) -> float:
    """Return the share of free healthy GPUs in leaf domains that cannot hold a median gang.

    Cordoned, degraded and miscabled nodes are left out: their GPUs are held back by health,
    not stranded by placement (counting them would reward placers that use sick nodes).
    """
    total = 0
    stranded = 0
    anomaly = cluster.topology.rail_anomaly
    for leaf in cluster.topology.domains[0]:
        free = [
            snapshot.free_gpus[i]
            if snapshot.schedulable[i] and not snapshot.degraded[i] and not anomaly[i]
            else 0
            for i in range(leaf.start, leaf.end)
        ]
        gpus = sum(free)
        total += gpus
        if sum(f // 8 for f in free) < median:
            stranded += gpus
    return stranded / total if total else 0.0


class _Replay:
    """One replay of the trace with one placer: the event loop and its bookkeeping."""

    def __init__(self, cluster: Cluster, trace: Sequence[TraceJob], placer: Placer) -> None:
        self.cluster = cluster
        self.topology = cluster.topology
        self.placer = placer
        self.snapshot = cluster.snapshot.copy()
        self.run = PolicyRun()
        self.median = median_workers(trace)
        self.jobs = {job.name: job for job in trace}
        self.requests = {job.name: job.request() for job in trace}
        self.job_ids = {job.name: k for k, job in enumerate(trace)}
        self.events: list[tuple[float, int, str, str]] = []
        self.seq = 0
        self.waiting: list[str] = []
        self.running: dict[str, GangPlan] = {}
        self.allocated_gpus = 0
        for job in trace:
            self.push(job.arrival, "arrive", job.name)

    def push(self, when: float, kind: str, name: str) -> None:
        """Return nothing; schedule event ``kind`` for job ``name`` at ``when``."""
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, name))

    def attempt(self, name: str, now: float) -> bool:
        """Return whether job ``name`` was placed at ``now`` (and account for it)."""
        job = self.jobs[name]
        request = self.requests[name]
        start = time.perf_counter()
        result = self.placer(self.snapshot, request, waited_seconds=now - job.arrival)
        self.run.plan_ms.append((time.perf_counter() - start) * 1e3)
        if not isinstance(result, GangPlan):
            return False
        self.snapshot.allocate(result)
        self.running[name] = result
        self.allocated_gpus += job.workers * job.gpus_per_worker
        run = self.run
        run.placed += 1
        run.waits.append(now - job.arrival)
        run.leaves.append(result.leaves_spanned)
        depth = self.topology.depth_of(result.level)
        run.optimal_domain += depth <= ever_depth(self.cluster, request)
        reference = modelled_allreduce(
            self.topology, result.nodes_by_rank, request.gpus_per_worker, as_one_leaf=True
        )
        run.ratios.append(result.cost.best_s / reference.best_s)
        self.push(now + job.duration, "depart", name)
        return True

    def replay(self, horizon: float) -> PolicyRun:
        """Return the run after processing every event up to ``horizon``."""
        run = self.run
        last = 0.0
        while self.events:
            now, _, kind, name = heapq.heappop(self.events)
            if now > horizon:
                break
            run.busy_gpu_seconds += self.allocated_gpus * (now - last)
            last = now
            if not run.snapshot_map and now >= horizon / 2:
                run.snapshot_map = _placement_map(self.topology, self.running, self.job_ids)
            if kind == "arrive":
                run.fragmentation.append(
                    stranded_fraction(self.cluster, self.snapshot, self.median)
                )
                if not self.attempt(name, now):
                    self.waiting.append(name)
                    wait = self.jobs[name].max_wait_seconds
                    for step in range(1, self.topology.cluster_depth + 1) if wait else ():
                        self.push(now + step * (wait or 0) + 1e-6, "retry", name)
            elif kind == "retry":
                if name in self.waiting and self.attempt(name, now):
                    self.waiting.remove(name)
            else:
                plan = self.running.pop(name)
                self.snapshot.release(plan)
                self.allocated_gpus -= len(plan.nodes_by_rank) * plan.gpus_per_worker
                self.waiting = [n for n in self.waiting if not self.attempt(n, now)]
        run.busy_gpu_seconds += self.allocated_gpus * max(0.0, horizon - last)
        run.waiting = len(self.waiting)
        return run


def simulate(
    cluster: Cluster, trace: Sequence[TraceJob], placer: Placer, horizon: float
) -> PolicyRun:
    """Return the outcome of replaying ``trace`` with ``placer`` until ``horizon``."""
    return _Replay(cluster, trace, placer).replay(horizon)


def _placement_map(
    topology: ClusterTopology, running: dict[str, GangPlan], job_ids: dict[str, int]
) -> list[int]:
    """Return per node index the id of the job on it (-1 when free)."""
    owner = [-1] * len(topology)
    for name, plan in running.items():
        for node in plan.nodes_by_rank:
            owner[topology.index_of[node]] = job_ids[name]
    return owner


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values`` by nearest rank (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def metrics(run: PolicyRun, cluster: Cluster, horizon: float) -> dict[str, Any]:
    """Return the JSON metrics of one policy's run."""
    if run.infeasible:
        return {"infeasible": run.infeasible}
    return {
        "jobs_placed": run.placed,
        "jobs_waiting": run.waiting,
        "optimal_domain_fraction": round(run.optimal_domain / run.placed, 4) if run.placed else 0,
        "mean_leaves_spanned": round(statistics.fmean(run.leaves), 3) if run.leaves else 0,
        "modelled_allreduce_ratio": round(statistics.fmean(run.ratios), 4) if run.ratios else 0,
        "gpu_utilization": round(run.busy_gpu_seconds / (cluster.gpus * horizon), 4),
        "fragmentation": round(statistics.fmean(run.fragmentation), 4) if run.fragmentation else 0,
        "mean_wait_s": round(statistics.fmean(run.waits), 1) if run.waits else 0,
        "plan_ms_p50": round(percentile(run.plan_ms, 0.5), 3),
        "plan_ms_p99": round(percentile(run.plan_ms, 0.99), 3),
        "plan_calls": len(run.plan_ms),
    }


def scale_benchmark(nodes: int, samples: int, seed: int) -> dict[str, Any]:
    """Return planner timings for 32-worker gangs on a partly busy ``nodes``-node fabric."""
    fabric = uniform_fabric(
        nodes, nodes_per_leaf=UNIT_NODES, leaves_per_spine=4, spines_per_block=4, name="scale"
    )
    start = time.perf_counter()
    cluster = build_cluster(fabric, seed)
    build_ms = (time.perf_counter() - start) * 1e3
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    snapshot = cluster.snapshot
    for leaf in cluster.topology.domains[0]:
        busy = rng.choice((0.3, 0.5, 0.7, 0.9, 1.0))
        for i in range(leaf.start, leaf.end):
            if rng.random() < busy:
                snapshot.free_gpus[i] = 0
                snapshot.free_rdma[i] = 0
    result: dict[str, Any] = {"nodes": nodes, "topology_build_ms": round(build_ms, 1)}
    for name in ("tpfabric", "kueue_bestfit"):
        placer = PLACERS[name]
        times = []
        for k in range(samples):
            request = GangRequest(
                name=f"big-{k}", workers=32, tp_size=8, pp_size=rng.choice((1, 2, 4))
            )
            start = time.perf_counter()
            placer(snapshot, request)
            times.append((time.perf_counter() - start) * 1e3)
        result[name] = {
            "workers": 32,
            "samples": samples,
            "plan_ms_p50": round(percentile(times, 0.5), 3),
            "plan_ms_p99": round(percentile(times, 0.99), 3),
        }
    return result


def print_table(console: Console, title: str, results: dict[str, dict[str, Any]]) -> None:
    """Print one row per policy."""
    columns = (
        ("jobs_placed", "placed"),
        ("jobs_waiting", "waiting"),
        ("optimal_domain_fraction", "opt. domain"),
        ("mean_leaves_spanned", "leaves"),
        ("modelled_allreduce_ratio", "all-reduce ratio"),
        ("gpu_utilization", "GPU util"),
        ("fragmentation", "fragmentation"),
        ("mean_wait_s", "wait s"),
        ("plan_ms_p50", "plan p50 ms"),
        ("plan_ms_p99", "plan p99 ms"),
    )
    table = Table(title=title)
    table.add_column("policy")
    for _, header in columns:
        table.add_column(header, justify="right")
    for policy, values in results.items():
        if "infeasible" in values:
            table.add_row(policy, *(["n/a"] * len(columns)))
            continue
        table.add_row(policy, *(str(values[key]) for key, _ in columns))
    console.print(table)


def write_plots(
    directory: Path,
    cluster: Cluster,
    runs: dict[str, PolicyRun],
    results: dict[str, dict[str, Any]],
) -> list[Path]:
    """Return the PNGs written: the placement map at mid-trace and the metrics per policy."""
    import matplotlib  # noqa: PLC0415 - only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    leaves = cluster.topology.domains[0]
    width = max(leaf.size for leaf in leaves)
    shown = [name for name, run in runs.items() if run.snapshot_map]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 1 + 0.35 * len(leaves) * len(shown)))
    for ax, name in zip([axes] if len(shown) == 1 else list(axes), shown, strict=True):
        grid = [[math.nan] * width for _ in leaves]
        for row, leaf in enumerate(leaves):
            for col, i in enumerate(range(leaf.start, leaf.end)):
                owner = runs[name].snapshot_map[i]
                grid[row][col] = math.nan if owner < 0 else owner % 20
        ax.imshow(grid, cmap="tab20", aspect="auto", interpolation="nearest")
        ax.set_title(f"{name}: nodes by leaf domain at mid-trace (colour = job, blank = free)")
        ax.set_yticks(range(len(leaves)), [leaf.name for leaf in leaves], fontsize=6)
        ax.set_xticks([])
    fig.tight_layout()
    map_path = directory / "placement_map.png"
    fig.savefig(map_path, dpi=110)
    plt.close(fig)
    keys = (
        "optimal_domain_fraction",
        "mean_leaves_spanned",
        "modelled_allreduce_ratio",
        "gpu_utilization",
        "fragmentation",
        "plan_ms_p99",
    )
    feasible = {k: v for k, v in results.items() if "infeasible" not in v}
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    for ax, key in zip(axes.flat, keys, strict=True):
        ax.bar(list(feasible), [feasible[p][key] for p in feasible], color="tab:blue")
        ax.set_title(key)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    metrics_path = directory / "metrics.png"
    fig.savefig(metrics_path, dpi=110)
    plt.close(fig)
    return [map_path, metrics_path]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(prog="tpfabric bench placement", description=__doc__)
    parser.add_argument("--fabric", type=Path, help="fabric description YAML (else generated)")
    parser.add_argument("--trace", type=Path, help="job trace YAML/JSON (else generated)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--plot", type=Path, help="write PNG plots into this folder")
    parser.add_argument("--nodes", type=int, help="generate a fabric of N nodes (e.g. 4096)")
    parser.add_argument("--units", type=int, default=4, help="default fabric: units of 32 nodes")
    parser.add_argument("--jobs", type=int, default=400, help="jobs in a generated trace")
    parser.add_argument(
        "--policies", default=",".join(PLACERS), help="comma-separated placers to compare"
    )
    parser.add_argument("--scale-nodes", type=int, default=4096, help="0 skips the scale run")
    parser.add_argument("--scale-samples", type=int, default=300)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the process exit status."""
    args = parse_args(argv)
    console = Console(width=150)
    if args.fabric:
        fabric = parse_fabric_description(args.fabric.read_text(), str(args.fabric))
    elif args.nodes:
        fabric = uniform_fabric(
            args.nodes, nodes_per_leaf=UNIT_NODES, leaves_per_spine=4, spines_per_block=4
        )
    else:
        fabric = uniform_fabric(
            args.units * UNIT_NODES,
            nodes_per_leaf=UNIT_NODES,
            leaves_per_spine=2,
            spines_per_block=2,
            name="default",
        )
    cluster = build_cluster(fabric, args.seed)
    trace = load_trace(args.trace) if args.trace else generate_trace(cluster, args.jobs, args.seed)
    horizon = max(job.arrival for job in trace)
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, PolicyRun] = {}
    for name in args.policies.split(","):
        placer = PLACERS[name]
        started = time.perf_counter()
        try:
            run = simulate(cluster, trace, placer, horizon)
        except SearchTooLargeError as err:
            run = PolicyRun(infeasible=str(err))
        runs[name] = run
        results[name] = metrics(run, cluster, horizon)
        console.log(f"{name}: simulated in {time.perf_counter() - started:.1f} s")
    nodes = len(cluster.topology)
    title = (
        f"placement on {nodes} nodes ({len(cluster.topology.domains[0])} leaf domains), "
        f"{len(trace)} jobs, seed {args.seed}"
    )
    print_table(console, title, results)
    output: dict[str, Any] = {
        "fabric": {"name": cluster.name, "nodes": nodes, "gpus": cluster.gpus},
        "trace": {"jobs": len(trace), "seed": args.seed, "horizon_s": round(horizon, 1)},
        "policies": results,
    }
    if args.scale_nodes:
        scale = scale_benchmark(args.scale_nodes, args.scale_samples, args.seed)
        output["scale"] = scale
        console.print(
            f"{scale['nodes']} nodes, 32-worker gangs: tpfabric plan_ms p50 "
            f"{scale['tpfabric']['plan_ms_p50']} / p99 {scale['tpfabric']['plan_ms_p99']} "
            f"(kueue_bestfit p99 {scale['kueue_bestfit']['plan_ms_p99']}); topology build "
            f"{scale['topology_build_ms']} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    if args.plot:
        for path in write_plots(args.plot, cluster, runs, results):
            console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
