"""Placement benchmark: what users feel when tpfabric or a baseline places their jobs.

``tpfabric bench placement [--trace small-jobs|huge-jobs|FILE.csv] [--nodes N] [--seed N]
[--json FILE] [--plot DIR]`` replays one job trace with every placer on the same simulated,
rail-optimized cluster (default 128 nodes: 4 leaves of 32 nodes, 2 per spine; a few degraded,
cordoned and miscabled nodes) in which a job's step time depends on where it runs
(:mod:`tpfabric_bench.sim`: compute, tensor-/pipeline-/data-parallel communication, uplink
contention). It prints one row per placer (mean and p95 job completion time, mean wait,
makespan, GPU utilisation, fragmentation, communication share of step time) and writes JSON;
``--plot DIR`` draws the JCT and communication-share CDFs as PNGs. ``--write-trace FILE``
writes the generated trace as CSV (the format ``--trace FILE`` reads) and stops. It also times
the planner for 32-worker gangs on a 4,096-node fabric (``--scale-nodes 0`` skips it).

``--oversubscription 1,2,3`` (leaf->spine) and ``--core-oversubscription 4,7`` (block->core)
sweep the fabric's uplink ratios (the figures and their sources are in
:mod:`tpfabric_bench.sim.constants`): the trace is replayed with every placer at every pair, one
table per sweep point; the JSON holds every point under ``sweep`` (``--plot`` draws the last).
Only the simulated fabric changes: every placer, tpfabric's planner included, is called as it
ships (the planner scores with its default cost model; it is not told the fabric's ratios).

``--scenario contention`` replays the trace with other tenants' traffic and bunched collectives
(:func:`tpfabric_bench.sim.constants.contended`: Crux's inter-job contention). ``--trace serving``
is a serving trace (405B groups of 2 nodes, TP 8 x PP 2, among training tenants:
:mod:`tpfabric_bench.sim.serving`); the table then shows the groups' modelled inter-token time.
``--link-faults RATE`` makes links degrade during the run; ``tpfabric`` restarts the jobs on them
elsewhere always, ``tpfabric-weighed`` only when that is expected to finish sooner
(the operator's ``restart-when-it-pays``: :mod:`tpfabric_core.fabric.restart_rule`),
``tpfabric-report`` never.

Every figure comes from a model (see the simulator's docstrings), not from a cluster; timings
are wall-clock on this machine and only compare placers run side by side. This module must never
be imported by the product or assert on timings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tpfabric_bench.sim.cluster import Cluster, build_cluster
from tpfabric_bench.sim.constants import (
    DEFAULT_CONSTANTS,
    SimConstants,
    contended,
    oversubscribed,
)
from tpfabric_bench.sim.engine import JobOutcome, PlaceFn, SimRun, simulate
from tpfabric_bench.sim.faults import (
    LOSSY_LINK_BANDWIDTH,
    MEAN_FAULT_HOURS,
    LinkFault,
    RestartCost,
    RestartRule,
    link_faults,
)
from tpfabric_bench.sim.serving import (
    is_serving,
    serving_trace,
    token_samples,
    weighted_percentile,
)
from tpfabric_bench.sim.trace import TRACE_KINDS, SimJob, generate_trace, read_trace, write_trace
from tpfabric_core.fabric_description import (
    FabricDescription,
    parse_fabric_description,
    uniform_fabric,
)
from tpfabric_core.placement import GangRequest, plan_gang
from tpfabric_core.placement.baselines import PLACERS, SearchTooLargeError, optimal
from tpfabric_core.placement.cost import DEFAULT_COST

UNIT_NODES = 32
TRACES = Path(__file__).parent / "traces"
POLICIES = (
    "tpfabric",
    "tpfabric-static",
    "kueue_bestfit",
    "kueue_unconstrained",
    "first_fit",
    "spread",
    "optimal",
)
ORACLE_BUDGET = 20_000
"""Allocations the oracle (exact search) may enumerate per gang before it is called intractable."""
RESTARTING = frozenset({"tpfabric", "tpfabric-static", "tpfabric-weighed"})
"""Placers whose jobs restart elsewhere when a link they use degrades (``restart-elsewhere``)."""
WEIGHED = frozenset({"tpfabric-weighed"})
"""Restarting placers that restart only when it is expected to pay (the weighed rule)."""
NO_FAULTS = " (no faults)"
"""What ``--ceiling`` appends to the names of the placers it replays without link faults."""
CEILING = "optimal" + NO_FAULTS
"""The oracle replayed without link faults: the ceiling ``--ceiling`` adds to a fault run."""
SCENARIOS = ("baseline", "contention")
SERVING = "serving"
"""The serving trace's name for ``--trace`` and ``--kind``."""
SCALE_TYPICAL_GPUS = 64
"""The typical gang the timed plans are given (8 workers x 8 GPUs: the fragment rule is on)."""


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values`` by nearest rank (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def placer(name: str, constants: SimConstants = DEFAULT_CONSTANTS) -> tuple[PlaceFn, bool]:
    """Return the simulation's call of placer ``name`` and whether it reads uplink load.

    ``tpfabric`` is the planner given the running jobs' uplink load; ``tpfabric-static`` the
    same planner without it; ``tpfabric-report`` the same as ``tpfabric`` but, under link faults,
    as with ``onDegradedLink: report``: no restarts (see :data:`RESTARTING`);
    ``tpfabric-told`` the same as ``tpfabric``, told the simulated fabric's oversubscription
    and background load (``constants``), as the placer's ``--oversubscription`` and
    ``--background-load`` tell it a real one's.
    """
    if name == "tpfabric-told":
        # the fabric's figures; a degraded link at the planner's own factor, as it ships
        factor = DEFAULT_COST.degraded_bandwidth_factor
        told = constants.cost.model_copy(update={"degraded_bandwidth_factor": factor})
        return (
            lambda s, r, w, u, t: plan_gang(
                s, r, waited_seconds=w, uplink_load=u, typical_gang_gpus=t, cost_config=told
            )
        ), True
    if name in ("tpfabric", "tpfabric-report", "tpfabric-weighed"):
        return (
            lambda s, r, w, u, t: plan_gang(
                s, r, waited_seconds=w, uplink_load=u, typical_gang_gpus=t
            )
        ), True
    if name == "tpfabric-static":
        return (
            lambda s, r, w, _u, t: plan_gang(s, r, waited_seconds=w, typical_gang_gpus=t)
        ), False
    if name == "optimal":
        return (
            lambda s, r, w, _u, _t: optimal(s, r, waited_seconds=w, max_allocations=ORACLE_BUDGET)
        ), False
    base = PLACERS[name]
    return (lambda s, r, w, _u, _t: base(s, r, waited_seconds=w)), False


def metrics(run: SimRun, cluster: Cluster) -> dict[str, Any]:
    """Return the JSON metrics of one placer's run."""
    done = run.outcomes
    jct = [o.end_s - o.arrival_s for o in done]
    comm = [o.comm_share for o in done]
    makespan = run.last_end_s - run.first_arrival_s
    return {
        "jobs_done": len(done),
        "jobs_unfinished": len(run.unfinished),
        "mean_jct_s": round(statistics.fmean(jct), 1) if jct else 0.0,
        "p95_jct_s": round(percentile(jct, 0.95), 1),
        "mean_wait_s": round(statistics.fmean(o.start_s - o.arrival_s for o in done), 1)
        if done
        else 0.0,
        "makespan_s": round(makespan, 1),
        "gpu_utilization": round(run.busy_gpu_s / (cluster.gpus * makespan), 4) if makespan else 0,
        "fragmentation": round(statistics.fmean(run.fragmentation), 4) if run.fragmentation else 0,
        "comm_share_mean": round(statistics.fmean(comm), 4) if comm else 0.0,
        "comm_share_p95": round(percentile(comm, 0.95), 4),
        "mean_stretch": round(statistics.fmean(o.stretch for o in done), 4) if done else 0.0,
        "mean_leaves_spanned": round(statistics.fmean(o.leaves for o in done), 3) if done else 0,
        "plan_ms_p50": round(percentile(run.plan_ms, 0.5), 3),
        "plan_ms_p99": round(percentile(run.plan_ms, 0.99), 3),
        "plan_calls": len(run.plan_ms),
        "affected_jobs": len(hit := [o for o in done if o.affected]),
        "mean_jct_affected_s": round(statistics.fmean(o.end_s - o.arrival_s for o in hit), 1)
        if hit
        else 0.0,
        "stretch_affected": round(statistics.fmean(o.stretch for o in hit), 4) if hit else 0.0,
        "restarts": sum(o.restarts for o in done),
        **serving_metrics(done),
    }


def serving_metrics(done: Sequence[JobOutcome]) -> dict[str, Any]:
    """Return the serving groups' inter-token figures (time-weighted), none without groups."""
    groups = [o for o in done if is_serving(o.name)]
    if not groups:
        return {}
    samples = [s for o in groups for s in token_samples(o.pp_links)]
    tokens = [(itl, seconds) for itl, _, seconds in samples]
    fabric = [(hop, seconds) for _, hop, seconds in samples]
    training = [o.end_s - o.arrival_s for o in done if not is_serving(o.name)]
    return {
        "serving_groups": len(groups),
        "groups_spanning_leaves": sum(o.leaves > 1 for o in groups),
        "token_ms_p50": round(weighted_percentile(tokens, 0.5) * 1e3, 4),
        "token_ms_p99": round(weighted_percentile(tokens, 0.99) * 1e3, 4),
        "fabric_us_p50": round(weighted_percentile(fabric, 0.5) * 1e6, 2),
        "fabric_us_p99": round(weighted_percentile(fabric, 0.99) * 1e6, 2),
        "group_wait_s": round(statistics.fmean(o.start_s - o.arrival_s for o in groups), 1),
        "training_mean_jct_s": round(statistics.fmean(training), 1) if training else 0.0,
    }


def affected_anywhere(results: dict[str, dict[str, Any]], runs: dict[str, SimRun]) -> None:
    """Return nothing; add each placer's mean JCT over the jobs that met a fault under any placer.

    Each placer's own affected jobs differ (they depend on where it put them); this set is the
    same for every placer, so the means compare like with like.
    """
    met = {o.name for run in runs.values() for o in run.outcomes if o.affected}
    if not met:
        return
    for name, run in runs.items():
        jct = [o.end_s - o.arrival_s for o in run.outcomes if o.name in met]
        results[name]["jobs_met_anywhere"] = len(jct)
        results[name]["mean_jct_met_anywhere_s"] = round(statistics.fmean(jct), 1) if jct else 0.0


def comparison(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Return tpfabric against kueue_bestfit and spread: JCT gain, comm-share ratio, frag gap."""
    ours = results.get("tpfabric")
    out: dict[str, float] = {}
    if not ours or "infeasible" in ours:
        return out
    kueue = results.get("kueue_bestfit")
    if kueue and "infeasible" not in kueue and kueue["mean_jct_s"]:
        out["mean_jct_gain_vs_kueue"] = round(1 - ours["mean_jct_s"] / kueue["mean_jct_s"], 4)
        out["fragmentation_minus_kueue"] = round(ours["fragmentation"] - kueue["fragmentation"], 4)
        if ours.get("mean_jct_affected_s") and kueue.get("mean_jct_affected_s"):
            out["affected_jct_gain_vs_kueue"] = round(
                1 - ours["mean_jct_affected_s"] / kueue["mean_jct_affected_s"], 4
            )
        if ours.get("token_ms_p99") and kueue.get("token_ms_p99"):
            out["token_p99_gain_vs_kueue"] = round(
                1 - ours["token_ms_p99"] / kueue["token_ms_p99"], 6
            )
    spread = results.get("spread")
    if spread and "infeasible" not in spread and spread["comm_share_mean"]:
        out["comm_share_vs_spread"] = round(ours["comm_share_mean"] / spread["comm_share_mean"], 4)
    return out


def _fabric(nodes: int) -> FabricDescription:
    """Return the generated fabric: 32-node leaves; 2x2 leaves per spine/block up to 256 nodes."""
    fan = 2 if nodes <= 256 else 4
    return uniform_fabric(
        nodes,
        nodes_per_leaf=UNIT_NODES,
        leaves_per_spine=fan,
        spines_per_block=fan,
        name=f"fabric-{nodes}",
    )


def scale_benchmark(nodes: int, samples: int, seed: int) -> dict[str, Any]:
    """Return planner timings for 32-worker gangs on a partly busy ``nodes``-node fabric."""
    start = time.perf_counter()
    cluster = build_cluster(_fabric(nodes), seed)
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
        place, _ = placer(name)
        times = []
        for k in range(samples):
            request = GangRequest(
                name=f"big-{k}", workers=32, tp_size=8, pp_size=rng.choice((1, 2, 4))
            )
            start = time.perf_counter()
            place(snapshot, request, 0.0, None, SCALE_TYPICAL_GPUS)
            times.append((time.perf_counter() - start) * 1e3)
        result[name] = {
            "workers": 32,
            "samples": samples,
            "plan_ms_p50": round(percentile(times, 0.5), 3),
            "plan_ms_p99": round(percentile(times, 0.99), 3),
        }
    return result


COLUMNS = (
    ("jobs_done", "done"),
    ("mean_jct_s", "mean JCT s"),
    ("p95_jct_s", "p95 JCT s"),
    ("mean_wait_s", "mean wait s"),
    ("makespan_s", "makespan s"),
    ("gpu_utilization", "GPU util"),
    ("fragmentation", "fragmentation"),
    ("comm_share_mean", "comm share"),
    ("comm_share_p95", "comm p95"),
    ("mean_stretch", "stretch"),
    ("plan_ms_p99", "plan p99 ms"),
)


FAULT_COLUMNS = (
    ("affected_jobs", "affected"),
    ("mean_jct_affected_s", "affected JCT s"),
    ("stretch_affected", "affected stretch"),
    ("restarts", "restarts"),
)
"""Shown when some job met a link that degraded during the run."""

ANYWHERE_COLUMNS = (
    ("jobs_met_anywhere", "met anywhere"),
    ("mean_jct_met_anywhere_s", "their JCT s"),
)
"""The jobs that met a fault under any placer: the same set for every placer."""

SERVING_COLUMNS = (
    ("serving_groups", "groups"),
    ("groups_spanning_leaves", "spanning"),
    ("token_ms_p50", "token p50 ms"),
    ("token_ms_p99", "token p99 ms"),
    ("fabric_us_p50", "fabric p50 us"),
    ("fabric_us_p99", "fabric p99 us"),
    ("group_wait_s", "group wait s"),
    ("training_mean_jct_s", "training JCT s"),
)
"""Shown when the trace holds serving groups."""


def columns_of(results: dict[str, dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """Return the table's columns: fault and serving columns too when the run has them."""
    columns: tuple[tuple[str, str], ...] = COLUMNS
    if any(values.get("affected_jobs") for values in results.values()):
        columns += FAULT_COLUMNS
    if any(values.get("jobs_met_anywhere") for values in results.values()):
        columns += ANYWHERE_COLUMNS
    if any(values.get("serving_groups") for values in results.values()):
        columns += SERVING_COLUMNS
    return columns


def print_table(console: Console, title: str, results: dict[str, dict[str, Any]]) -> None:
    """Print one row per placer."""
    columns = columns_of(results)
    table = Table(title=title)
    table.add_column("placer")
    for _, header in columns:
        table.add_column(header, justify="right")
    for policy, values in results.items():
        if "infeasible" in values:
            table.add_row(policy, *(["n/a"] * len(columns)))
            continue
        table.add_row(policy, *(str(values.get(key, "")) for key, _ in columns))
    console.print(table)


def markdown_table(results: dict[str, dict[str, Any]]) -> str:
    """Return the table as Markdown (what docs/benchmarks.md shows)."""
    columns = columns_of(results)
    lines = [
        "| placer | " + " | ".join(h for _, h in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for policy, values in results.items():
        cells = (
            ["n/a"] * len(columns)
            if "infeasible" in values
            else [str(values.get(k, "")) for k, _ in columns]
        )
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_plots(directory: Path, title: str, runs: dict[str, SimRun]) -> list[Path]:
    """Return the PNGs written: JCT CDFs, communication-share CDFs, and both side by side."""
    import matplotlib  # noqa: PLC0415 - only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    shown = {name: run for name, run in runs.items() if run.outcomes}
    panels: dict[str, tuple[str, Callable[[SimRun], list[float]]]] = {
        "jct_cdf": (
            "job completion time (hours, log scale)",
            lambda run: [(o.end_s - o.arrival_s) / 3600 for o in run.outcomes],
        ),
        "comm_share": (
            "communication share of step time",
            lambda run: [o.comm_share for o in run.outcomes],
        ),
    }

    def draw(ax: Any, key: str) -> None:
        label, values = panels[key]
        for name, run in shown.items():
            data = sorted(values(run))
            ys = [(k + 1) / len(data) for k in range(len(data))]
            ax.step(
                data,
                ys,
                where="post",
                label=f"{name} (mean {statistics.fmean(data):.3g})",
                linewidth=2.2 if name == "tpfabric" else 1.2,
            )
        if key == "jct_cdf":
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")

    written = []
    for key in panels:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        draw(ax, key)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        path = directory / f"{key}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key in zip(axes, panels, strict=True):
        draw(ax, key)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = directory / "summary.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
    return written


def scenario_of(results: dict[str, dict[str, Any]], scenario: str) -> str | None:
    """Return the scenario a picture is drawn for: serving, degraded, contention, or none."""
    if any(values.get("serving_groups") for values in results.values()):
        return "serving"
    if any(values.get("jobs_met_anywhere") for values in results.values()):
        return "degraded"
    return "contention" if scenario == "contention" else None


def write_scenario_plot(
    path: Path, kind: str, title: str, results: dict[str, dict[str, Any]], runs: dict[str, SimRun]
) -> Path:
    """Return ``path``, a PNG of the scenario's figure per placer.

    serving: the CDF of the fabric's share of the inter-token time (time-weighted over every
    group); degraded: mean JCT of all jobs and of the jobs that met a fault under any placer;
    contention: mean JCT and stretch.
    """
    import matplotlib  # noqa: PLC0415 - only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    shown = {n: v for n, v in results.items() if "infeasible" not in v}
    if kind == "serving":
        for name, run in runs.items():
            samples = sorted(
                (hop * 1e6, seconds)
                for o in run.outcomes
                if is_serving(o.name)
                for _, hop, seconds in token_samples(o.pp_links)
            )
            total = math.fsum(w for _, w in samples) or 1.0
            xs, ys, acc = [], [], 0.0
            for value, weight in samples:
                acc += weight
                xs.append(value)
                ys.append(acc / total)
            p99 = shown[name]["token_ms_p99"]
            ax.step(xs, ys, where="post", label=f"{name} (token p99 {p99:.3f} ms)")
        ax.set_xscale("log")
        ax.set_xlabel("fabric time per token, µs (stage hop + tokens back)")
        ax.set_ylabel("fraction of serving time")
        ax.legend(fontsize=7, loc="lower right")
    else:
        names = list(shown)
        xs = list(range(len(names)))
        if kind == "degraded":
            pairs = (
                ("mean_jct_s", "all jobs"),
                ("mean_jct_met_anywhere_s", "jobs that met a fault"),
            )
        else:
            pairs = (("mean_jct_s", "mean JCT"), ("p95_jct_s", "p95 JCT"))
        width = 0.38
        for k, (key, label) in enumerate(pairs):
            values = [shown[n].get(key, 0.0) / 3600 for n in names]
            ax.bar([x + (k - 0.5) * width for x in xs], values, width, label=label)
        ax.set_xticks(xs, names, rotation=20, fontsize=7)
        ax.set_ylabel("hours")
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(textwrap.fill(title, 90), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def resolve_trace(args: argparse.Namespace, nodes: int) -> tuple[str, list[SimJob]]:
    """Return (trace label, jobs): a shipped trace by kind, a CSV file, or a generated one."""
    if args.trace is None and args.kind == SERVING:
        jobs = serving_trace(nodes=nodes, seed=args.seed, training_jobs=args.jobs)
        return f"generated {SERVING} (seed {args.seed})", jobs
    if args.trace is None:
        jobs = generate_trace(args.kind, jobs=args.jobs, nodes=nodes, seed=args.seed)
        return f"generated {args.kind} (seed {args.seed})", jobs
    if args.trace in (*TRACE_KINDS, SERVING):
        path = TRACES / f"{args.trace}-{nodes}.csv"
        if not path.exists():
            shipped = ", ".join(sorted(p.name for p in TRACES.glob("*.csv")))
            raise SystemExit(
                f"no shipped {args.trace} trace for {nodes} nodes (shipped: {shipped}); "
                f"generate one with --kind {args.trace} --jobs N"
            )
        return args.trace, read_trace(path)
    return str(args.trace), read_trace(Path(args.trace))


def ratios(text: str) -> tuple[float, ...]:
    """Return the oversubscription ratios of ``text`` ("1,2,3"); ArgumentTypeError if not >= 1."""
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: ratios are numbers, e.g. 1,2,3") from err
    if not values or min(values) < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: ratios are 1 (1:1) or more, e.g. 1,2,3")
    return values


def sweep_points(args: argparse.Namespace) -> list[tuple[float | None, float | None]]:
    """Return the (leaf->spine, block->core) pairs to run; ``None`` keeps the model's ratio."""
    leaf: Sequence[float | None] = args.oversubscription or (None,)
    core: Sequence[float | None] = args.core_oversubscription or (None,)
    return [(a, b) for a in leaf for b in core]


def run_placers(
    console: Console,
    cluster: Cluster,
    trace: Sequence[SimJob],
    policies: Sequence[str],
    constants: SimConstants,
    *,
    faults: Sequence[LinkFault] = (),
    restart: RestartCost | None = None,
    expected_fault_s: float = MEAN_FAULT_HOURS * 3600.0,
) -> tuple[dict[str, dict[str, Any]], dict[str, SimRun]]:
    """Return every placer's metrics and run on ``trace`` (the oracle's may say infeasible).

    With ``faults``, the :data:`RESTARTING` placers restart a job that meets one at
    ``restart``'s cost (``onDegradedLink: restart-elsewhere``), the :data:`WEIGHED` ones only when
    it is expected to pay over a fault lasting ``expected_fault_s``; the others keep it running
    slow. Serving groups' stage hops are recorded when the trace holds any.
    """
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, SimRun] = {}
    serving = any(is_serving(job.name) for job in trace)
    for name in policies:
        place, aware = placer(name, constants)
        started = time.perf_counter()
        try:
            run = simulate(
                cluster,
                trace,
                place,
                constants=constants,
                uplink_aware=aware,
                faults=faults,
                restart=restart if name in RESTARTING else None,
                restart_rule=RestartRule("weighed", expected_fault_s) if name in WEIGHED else None,
                record_pp_links=serving,
            )
        except SearchTooLargeError as err:
            results[name] = {"infeasible": f"{err} (budget {ORACLE_BUDGET} per gang)"}
        else:
            runs[name] = run
            results[name] = metrics(run, cluster)
        console.log(f"{name}: simulated in {time.perf_counter() - started:.1f} s")
    if faults:
        affected_anywhere(results, runs)
    return results, runs


def ceiling(
    console: Console,
    cluster: Cluster,
    trace: Sequence[SimJob],
    constants: SimConstants,
    *,
    results: dict[str, dict[str, Any]],
    runs: dict[str, SimRun],
) -> None:
    """Return nothing; add Kueue TAS's and the oracle's replays without link faults.

    Over the jobs that met a fault under any placer, ``kueue_bestfit (no faults)`` tells what
    the faults cost the baseline, and :data:`CEILING` what those jobs would take had no link of
    theirs degraded and had every gang been placed at its least modelled all-reduce time: a
    ceiling on what avoiding faults, restarting and placing can win on them (not a strict bound:
    the queue's order can still move a mean by chance).
    """
    replayed = ["kueue_bestfit", "optimal"]
    extra, extra_runs = run_placers(console, cluster, trace, replayed, constants)
    for name, values in extra.items():
        results[name + NO_FAULTS] = values
    for name, run in extra_runs.items():
        runs[name + NO_FAULTS] = run
    affected_anywhere(results, runs)


def _ratio_label(constants: SimConstants) -> str:
    """Return the sweep point as the title shows it (leaf->spine, spine->block, block->core)."""
    ratios = constants.cost.oversubscription
    return ", ".join(
        f"{name} {ratios.get(level, 1.0):g}:1"
        for name, level in (
            ("leaf-spine", "spine"),
            ("spine-block", "block"),
            ("block-core", "cluster"),
        )
    )


def fault_process(
    args: argparse.Namespace, cluster: Cluster, trace: Sequence[SimJob]
) -> tuple[list[LinkFault], RestartCost | None]:
    """Return the seeded link faults of ``--link-faults`` (over the arrivals and a day after)."""
    if not args.link_faults:
        return [], None
    horizon = max((job.arrival_s for job in trace), default=0.0) + 86400.0
    faults = link_faults(
        len(cluster.topology),
        horizon,
        per_node_hour=args.link_faults,
        mean_hours=args.fault_hours,
        seed=args.seed,
    )
    return faults, RestartCost(args.checkpoint_minutes * 60.0, args.restore_minutes * 60.0)


def run_sweep(
    console: Console,
    args: argparse.Namespace,
    cluster: Cluster,
    trace: Sequence[SimJob],
    label: str,
) -> tuple[list[dict[str, Any]], dict[str, SimRun], str]:
    """Return every sweep point's results, the last point's runs and its table title.

    Prints one table per point (one point, at the model's ratios, without a sweep).
    """
    base = dataclasses.replace(DEFAULT_CONSTANTS, flow_activity=args.flow_activity)
    if args.scenario == "contention":
        base = contended(base)
    if args.degraded_bandwidth is not None:
        if not 0.0 < args.degraded_bandwidth <= 1.0:
            raise SystemExit(
                f"--degraded-bandwidth {args.degraded_bandwidth}: a share of the link, in (0, 1]"
            )
        cost = base.cost.model_copy(update={"degraded_bandwidth_factor": args.degraded_bandwidth})
        base = dataclasses.replace(base, cost=cost)
    sweeping = bool(args.oversubscription or args.core_oversubscription)
    nodes = len(cluster.topology)
    points: list[dict[str, Any]] = []
    runs: dict[str, SimRun] = {}
    title = ""
    faults, restart = fault_process(args, cluster, trace)
    for leaf_spine, block_core in sweep_points(args):
        constants = oversubscribed(base, leaf_spine=leaf_spine, block_core=block_core)
        results, runs = run_placers(
            console,
            cluster,
            trace,
            args.policies.split(","),
            constants,
            faults=faults,
            restart=restart,
            expected_fault_s=args.fault_hours * 3600.0,
        )
        if args.ceiling and faults:
            ceiling(console, cluster, trace, constants, results=results, runs=runs)
        title = (
            f"{label}: {len(trace)} jobs on {nodes} nodes "
            f"({len(cluster.topology.domains[0])} leaf domains), seed {args.seed}"
        )
        if sweeping:
            title += f"; {_ratio_label(constants)}"
        if args.scenario != "baseline":
            title += f"; scenario {args.scenario}"
        print_table(console, title, results)
        versus = comparison(results)
        if versus:
            console.print(
                "tpfabric vs baselines: " + ", ".join(f"{k} {v}" for k, v in versus.items())
            )
        if args.markdown:
            console.print(markdown_table(results), markup=False, highlight=False, soft_wrap=True)
        points.append(
            {
                "oversubscription": dict(constants.cost.oversubscription),
                "policies": results,
                "tpfabric_vs": versus,
            }
        )
    return points, runs, title


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(prog="tpfabric bench placement", description=__doc__)
    parser.add_argument("--fabric", type=Path, help="fabric description YAML (else generated)")
    parser.add_argument("--nodes", type=int, default=128, help="generated fabric size")
    parser.add_argument(
        "--trace",
        help=f"a shipped trace ({', '.join((*TRACE_KINDS, SERVING))}, for 128 nodes) or a CSV file",
    )
    parser.add_argument(
        "--kind", choices=(*TRACE_KINDS, SERVING), default="small-jobs", help="to generate"
    )
    parser.add_argument("--jobs", type=int, default=400, help="jobs in a generated trace")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write-trace", type=Path, help="write the generated trace here, stop")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--plot", type=Path, help="write PNG plots into this folder")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help="comma-separated placers to compare"
    )
    parser.add_argument(
        "--flow-activity",
        type=float,
        default=DEFAULT_CONSTANTS.flow_activity,
        help="scale each flow's uplink load (its duty cycle x this; above 1: bursts bunch up)",
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="baseline",
        help="contention: other tenants' background load and bunched collectives (Crux)",
    )
    parser.add_argument(
        "--degraded-bandwidth",
        type=float,
        help="bandwidth left on a link with a degraded endpoint (default: the cost model's 0.5; "
        f"a lossy transceiver: {LOSSY_LINK_BANDWIDTH})",
    )
    parser.add_argument(
        "--oversubscription",
        type=ratios,
        help="leaf->spine ratios to sweep, comma-separated (2 is 2:1; default: the cost model's)",
    )
    parser.add_argument(
        "--core-oversubscription",
        type=ratios,
        help="block->core ratios to sweep, comma-separated (default: the cost model's 4:1)",
    )
    restart = RestartCost()
    parser.add_argument(
        "--link-faults",
        type=float,
        default=0.0,
        help="links degrading per node-hour during the run (Llama 3: about 1.6e-5); 0: none",
    )
    parser.add_argument("--fault-hours", type=float, default=MEAN_FAULT_HOURS)
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help=f"with --link-faults, also replay the oracle without faults ({CEILING!r}): a "
        "ceiling on what any placer and restart rule can win on the jobs that met a fault",
    )
    parser.add_argument(
        "--checkpoint-minutes", type=float, default=restart.checkpoint_interval_s / 60
    )
    parser.add_argument("--restore-minutes", type=float, default=restart.restore_s / 60)
    parser.add_argument("--scale-nodes", type=int, default=4096, help="0 skips the scale run")
    parser.add_argument("--scale-samples", type=int, default=300)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the process exit status."""
    args = parse_args(argv)
    console = Console(width=170)
    if args.fabric:
        fabric = parse_fabric_description(args.fabric.read_text(), str(args.fabric))
    else:
        fabric = _fabric(args.nodes)
    cluster = build_cluster(fabric, args.seed)
    nodes = len(cluster.topology)
    label, trace = resolve_trace(args, nodes)
    if args.write_trace:
        args.write_trace.write_text(write_trace(trace))
        console.print(f"wrote {len(trace)} jobs to {args.write_trace}")
        return 0
    sweeping = bool(args.oversubscription or args.core_oversubscription)
    points, runs, title = run_sweep(console, args, cluster, trace, label)
    output: dict[str, Any] = {
        "fabric": {"name": cluster.name, "nodes": nodes, "gpus": cluster.gpus},
        "trace": {"name": label, "jobs": len(trace), "seed": args.seed},
        "flow_activity": args.flow_activity,
        "scenario": args.scenario,
    }
    if args.link_faults:
        output["link_faults"] = {
            "per_node_hour": args.link_faults,
            "mean_hours": args.fault_hours,
            "checkpoint_minutes": args.checkpoint_minutes,
            "restore_minutes": args.restore_minutes,
        }
    if sweeping:
        output["sweep"] = points
    else:
        output["policies"] = points[0]["policies"]
        output["tpfabric_vs"] = points[0]["tpfabric_vs"]
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
        for path in write_plots(args.plot, title, runs):
            console.print(f"wrote {path}")
        last = points[-1]["policies"] if points else {}
        kind = scenario_of(last, args.scenario)
        if kind:
            path = write_scenario_plot(args.plot / f"{kind}.png", kind, title, last, runs)
            console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
