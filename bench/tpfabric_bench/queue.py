"""``tpfabric bench queue``: the gang placer with a deep queue on a big, busy fabric.

Each configuration (``--nodes`` x ``--waiting``) runs in a child process of its own (``python -m
tpfabric_bench.queue --child``), so its CPU and memory are its own. The child loads the placer's
store with :mod:`tpfabric_bench._queue_cluster`'s cluster (every node busy with a running gang,
daemon pods, finished gangs, and a backlog of ``waiting`` gangs of 8 workers that require one
leaf, which cannot fit) and runs the real :class:`~tpfabric_scheduler.placer.GangPlacer` under the
real :class:`~tpfabric_scheduler.loop.PlacerLoop`, its writes applied back into the store as the
watches would (statuses persist, released workers bind at once). Then:

1. **warm-up**: no churn, until every backlog gang has been told it waits (or
   ``--warmup-seconds``): what a placer does after it takes the lease.
2. **steady state**, ``--seconds`` long: ``--completions`` running workers per second succeed,
   anywhere in the fabric (a random running worker each time), and a stream of new gangs
   arrives that fit into what they freed: gangs of 1, 2, 1 and 4 workers in turn, ``preferred``
   leaf (they climb at once), each created whole (job and every worker, gated) as soon as the
   completions since the last one freed as many nodes.
3. **drain**: up to ``--drain-seconds`` without churn, for the stream's last gangs.

It reports, over the steady state: every placer cycle's wall time (p50/p99/max) and the placer
thread's CPU time per cycle (p50/p99: what a cycle costs, whatever else shares the CPU); the time
from a stream gang's last worker in the store to its Planned placement written (p50/p99/max; a
gang not planned by the end of the drain counts as never, and the quantiles say so); plan attempts
(``tpfabric_placer_plan_seconds``'s count) per second; the placer's CPU (the thread time of its
cycles) and the whole process's (the placer, its write pool and the fake API server's work:
parsing each write back, as the informers do) per second of wall time; the process's resident
memory after loading and its peak during the run (``VmHWM``, reset before the warm-up); status
writes and Events. The load average is read before and after each configuration.

This module measures; it must never be imported by the product or assert on a number.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tpfabric_bench._harness import environment, summary
from tpfabric_bench._queue_cluster import AppliedWrites, QueueShape, load_cluster
from tpfabric_bench._rss import proc_status_kib, reset_peak_rss
from tpfabric_scheduler.loop import PlacerLoop
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer

__all__ = ["STREAM_SIZES", "main", "parse_args", "queue_table", "run_child", "stream_latency"]

#: the workers of the stream's gangs, in turn
STREAM_SIZES = (1, 2, 1, 4)
_STREAM_TOPOLOGY = {"mode": "preferred", "level": "leaf"}
#: the backlog must not reach the head of the line during a run: a head-of-line gang holds its
#: domain from younger gangs, which is what holds are for, and would keep the stream out
_HEAD_OF_LINE_SECONDS = 86_400.0


def _plan_attempts(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("tpfabric_placer_plan_seconds_count") or 0.0


def stream_latency(
    arrived: dict[str, float], planned: dict[str, float]
) -> dict[str, float | int | None]:
    """Return p50/p99/max seconds from each stream gang's last worker to its plan, over every
    gang that arrived; a gang never planned counts as infinitely late (a quantile it reaches is
    None)."""
    late = sorted(planned[key] - at if key in planned else math.inf for key, at in arrived.items())
    result: dict[str, float | int | None] = {
        "arrived": len(late),
        "planned": sum(1 for v in late if v != math.inf),
    }
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        if not late:
            result[name] = 0.0
            continue
        value = late[min(len(late) - 1, max(0, math.ceil(q * len(late)) - 1))]
        result[name] = None if value == math.inf else round(value, 3)
    return result


class _TimedCycles:
    """Times each of ``placer``'s cycles (wall and thread CPU time), and profiles them with
    cProfile while ``profiling`` when given a ``path`` to write to."""

    def __init__(self, placer: GangPlacer, path: Path | None) -> None:
        #: (start, wall s, thread CPU s) of each cycle
        self.cycles: list[tuple[float, float, float]] = []
        self._run_cycle = placer.run_cycle
        self._path = path
        self._profile = cProfile.Profile() if path is not None else None
        self.profiling = False
        placer.run_cycle = self.cycle  # type: ignore[method-assign]

    def cycle(self) -> bool:
        """Run one placer cycle, timed (and profiled while profiling)."""
        profile = self._profile if self.profiling else None
        started, cpu = time.perf_counter(), time.thread_time()
        if profile is not None:
            profile.enable()
        try:
            return self._run_cycle()
        finally:
            if profile is not None:
                profile.disable()
            self.cycles.append((started, time.perf_counter() - started, time.thread_time() - cpu))

    def stop_profiling(self) -> None:
        """Stop profiling and write what was profiled."""
        self.profiling = False
        if self._profile is not None and self._path is not None:
            self._profile.dump_stats(self._path)


async def _drive(
    writes: AppliedWrites, placer: GangPlacer, args: argparse.Namespace, waiting: int
) -> dict[str, Any]:
    """Run the warm-up, the steady state and the drain (see the module); return the numbers."""
    loop = asyncio.get_running_loop()
    placer_loop = PlacerLoop(writes.store, lambda: placer, lambda: True, lambda: True)

    def wake() -> None:
        loop.call_soon_threadsafe(placer_loop.changed.set)

    writes.wake = wake
    timed = _TimedCycles(placer, args.profile)
    cycles = timed.cycles
    stop = asyncio.Event()
    runner = asyncio.create_task(placer_loop.run(stop))
    placer_loop.changed.set()
    warm_start = time.perf_counter()
    while (
        len(writes.backlog_waiting) < waiting
        and time.perf_counter() - warm_start < args.warmup_seconds
    ):
        await asyncio.sleep(0.2)
    warm = {
        "seconds": round(time.perf_counter() - warm_start, 2),
        "backlog_told": len(writes.backlog_waiting),
        "cycles": len(cycles),
    }
    rng = random.Random(args.seed)  # noqa: S311 - a seeded benchmark, not cryptography
    arrived: dict[str, float] = {}
    attempts, writes_before = _plan_attempts(placer.metrics), writes.status_writes
    events_before = writes.events
    cpu_before, started = time.process_time(), time.perf_counter()
    first_cycle = len(cycles)
    timed.profiling = True
    period = 1.0 / args.completions
    freed, k, tick = 0, 0, 0
    while (now := time.perf_counter()) - started < args.seconds:
        await asyncio.sleep(max(0.0, started + tick * period - now))
        tick += 1
        if writes.complete(rng.randrange) is not None:
            freed += 1
        while freed >= (size := STREAM_SIZES[k % len(STREAM_SIZES)]):
            name = f"fit-{k:05d}"
            arrived[f"stream/{name}"] = writes.add_gang(name, size, _STREAM_TOPOLOGY)
            freed -= size
            k += 1
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    timed.stop_profiling()
    # a cycle still running when the warm-up ended (its writes told the backlog) began before
    steady = [c for c in cycles[first_cycle:] if started <= c[0] < started + wall]
    evaluated = _plan_attempts(placer.metrics) - attempts
    status_writes, events = writes.status_writes - writes_before, writes.events - events_before
    drain_start = time.perf_counter()
    while (
        any(key not in writes.planned_at for key in arrived)
        and time.perf_counter() - drain_start < args.drain_seconds
    ):
        await asyncio.sleep(0.1)
    stop.set()
    placer_loop.changed.set()
    await runner
    return {
        "warmup": warm,
        "steady_seconds": round(wall, 2),
        "completions": tick,
        "cycles": summary([c[1] for c in steady], (0.5, 0.99), 3),
        #: the placer thread's CPU seconds per cycle: what a cycle costs whatever else runs
        "cycle_cpu": summary([c[2] for c in steady], (0.5, 0.99), 3),
        "plan_latency_s": stream_latency(arrived, writes.planned_at),
        #: backlog gangs planned during the run (a leaf whose every node came free)
        "backlog_planned": sum(1 for key in writes.planned_at if key.startswith("backlog/")),
        "plan_attempts": int(evaluated),
        "evaluated_per_s": round(evaluated / wall, 1),
        "placer_cpu_cores": round(sum(c[2] for c in steady) / wall, 3),
        "process_cpu_cores": round(cpu / wall, 3),
        "status_writes": status_writes,
        "events": events,
    }


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    """Return the numbers of one configuration (this process is the child)."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    shape = QueueShape(args.nodes, args.waiting, finished=args.finished)
    writes = load_cluster(shape, time.time())
    load_s = time.perf_counter() - started
    rss = proc_status_kib()
    placer = GangPlacer(
        writes.store,
        writes,  # type: ignore[arg-type]
        Metrics(),
        head_of_line_seconds=_HEAD_OF_LINE_SECONDS,
    )
    peak_reset = reset_peak_rss()
    result = asyncio.run(_drive(writes, placer, args, args.waiting))
    after = proc_status_kib()
    return {
        "nodes": args.nodes,
        "waiting": args.waiting,
        "completions_per_s": args.completions,
        "pods": len(writes.store.pods),
        "jobs": len(writes.store.jobs),
        "load_s": round(load_s, 1),
        "rss_loaded_mib": round(rss.get("VmRSS", 0) / 1024, 1),
        "rss_peak_mib": round(after.get("VmHWM", 0) / 1024, 1) if peak_reset else None,
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **result,
    }


def _child_argv(args: argparse.Namespace, nodes: int, waiting: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tpfabric_bench.queue",
        "--child",
        "--nodes",
        str(nodes),
        "--waiting",
        str(waiting),
        "--completions",
        str(args.completions),
        "--seconds",
        str(args.seconds),
        "--warmup-seconds",
        str(args.warmup_seconds),
        "--drain-seconds",
        str(args.drain_seconds),
        "--seed",
        str(args.seed),
        *(["--finished", str(args.finished)] if args.finished is not None else []),
        *(["--profile", str(args.profile)] if args.profile is not None else []),
    ]


def _cpu(cpu: dict[str, Any] | None) -> str:
    if not cpu or not cpu.get("count"):
        return ""
    return f"{cpu['p50']:.3f} / {cpu['p99']:.3f}"


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.3f}"


def queue_table(results: list[dict[str, Any]]) -> Table:
    """Return the rich table of every configuration's numbers."""
    table = Table(
        "nodes",
        "waiting",
        "cycles",
        "cycle s p50 / p99 / max",
        "cycle CPU s p50 / p99",
        "stream planned",
        "last pod -> plan s p50 / p99 / max",
        "gangs evaluated/s",
        "placer CPU cores",
        "process CPU cores",
        "peak RSS MiB",
        "load avg before -> after",
        title="the placer with a deep queue: steady state",
    )
    for r in results:
        cycles, late = r["cycles"], r["plan_latency_s"]
        table.add_row(
            f"{r['nodes']:,}",
            f"{r['waiting']:,}",
            f"{cycles['count']:,}",
            f"{cycles['p50']:.3f} / {cycles['p99']:.3f} / {cycles['max']:.3f}",
            _cpu(r.get("cycle_cpu")),
            f"{late['planned']}/{late['arrived']}",
            " / ".join(_seconds(late[q]) for q in ("p50", "p99", "max")),
            f"{r['evaluated_per_s']:.1f}",
            f"{r['placer_cpu_cores']:.2f}",
            f"{r['process_cpu_cores']:.2f}",
            "" if r["rss_peak_mib"] is None else f"{r['rss_peak_mib']:.0f}",
            f"{r['load_average_before'][0]:.1f} -> {r['load_average_after'][0]:.1f}",
        )
    if results:
        first = results[0]
        table.caption = (
            f"{first['completions_per_s']:g} completions/s for {first['steady_seconds']:.0f} s "
            "after a warm-up; the stream's gangs fit as they arrive. Warm-up (s, backlog told, "
            "cycles): "
            + "; ".join(
                f"{r['nodes']:,}/{r['waiting']:,}: {r['warmup']['seconds']:.0f} s, "
                f"{r['warmup']['backlog_told']}, {r['warmup']['cycles']}"
                for r in results
            )
        )
    return table


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from err
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(prog="tpfabric bench queue", description=__doc__)
    parser.add_argument("--nodes", type=_ints, default=[5000, 16000], help="e.g. 5000,16000")
    parser.add_argument("--waiting", type=_ints, default=[100, 1000], help="e.g. 100,1000")
    parser.add_argument("--completions", type=float, default=10.0, help="per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="steady state")
    parser.add_argument("--warmup-seconds", type=float, default=180.0)
    parser.add_argument("--drain-seconds", type=float, default=10.0)
    parser.add_argument("--finished", type=int, help="finished gangs (default: nodes / 8)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument(
        "--profile",
        type=Path,
        help="profile the placer's steady-state cycles (cProfile) into this file; one "
        "configuration only (read it with python -m pstats)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.completions <= 0 or args.seconds <= 0:
        parser.error("--completions and --seconds must be > 0")
    if args.profile is not None and len(args.nodes) * len(args.waiting) > 1 and not args.child:
        parser.error("--profile takes one configuration: give one --nodes and one --waiting")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every configuration in a child process; print the table, write the JSON."""
    args = parse_args(argv)
    if args.child:
        logging.basicConfig(level=logging.WARNING)
        args.nodes, args.waiting = args.nodes[0], args.waiting[0]
        print(json.dumps(run_child(args)), flush=True)
        return 0
    console = Console(width=200)
    results = []
    for nodes in args.nodes:
        for waiting in args.waiting:
            console.print(f"queue: {nodes:,} nodes, {waiting:,} waiting gangs ...")
            done = subprocess.run(
                _child_argv(args, nodes, waiting), capture_output=True, text=True, check=False
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                console.print(f"[red]child failed[/red]: {done.stderr[-3000:]}")
                return 1
            results.append(json.loads(lines[-1]))
            console.print(queue_table(results[-1:]))
    if len(results) > 1:
        console.print(queue_table(results))
    if args.json:
        output = {"environment": environment(), "results": results}
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
