"""The rich tables of ``tpfabric bench operator``'s result (also used by ``tpfabric bench gangs``).

Each function takes the result dict the benchmark writes as JSON and returns one table; nothing
here measures or reads anything else.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tpfabric_bench._operator_run import COMPONENTS, NODES_PER_LEAF, SCHEDULER, STAGES

#: the phases (arms) a result may hold, in the order their columns show (``wired``: the gangs
#: benchmark's pods wired by hand)
PHASES = ("baseline", "wired", "tpfabric")

__all__ = [
    "breakdown_table",
    "idle_table",
    "process_table",
    "requests_table",
    "scheduler_time_table",
    "server_time_table",
    "summary_table",
]


def _p(s: dict[str, float]) -> str:
    if not s["count"]:
        return "-"
    return f"{s['p50']:.1f} / {s['p90']:.1f} / {s['p99']:.1f} / {s['max']:.1f}"


def summary_table(result: dict[str, Any]) -> Table:
    """Return the rich table of both phases side by side."""
    mix = result["mix"]
    table = Table(
        "measure",
        "plain pods (default scheduler)",
        "TensorParallelJobs (tpfabric)",
        title=(
            f"{result['jobs']} jobs / {result['workers_total']:,} workers (largest "
            f"{result['largest_job']}; required leaf {mix['required_leaf']}, preferred "
            f"{mix['preferred_leaf']}, {mix['never_fit']} never fit) on {result['nodes']:,} "
            f"kwok nodes ({result['leaves']} leaves of {NODES_PER_LEAF})"
        ),
    )
    base = result.get("baseline")
    tpf = result["tpfabric"]
    if base:
        table.columns[1].header = (
            "plain pods (default scheduler)"
            if base.get("twins", "lean") == "lean"
            else "the same pods, plain (default scheduler)"
        )

    def cell(value: str) -> str:
        return value if base else "(skipped)"

    table.add_row(
        "create calls (8 threads)",
        cell(f"{base['create_s']:.1f} s") if base else "(skipped)",
        f"{tpf['create_s']:.1f} s",
    )
    table.add_row(
        "settled: every pod/job has its answer",
        cell(f"{base['settle_s']:.1f} s") if base else "(skipped)",
        f"{tpf['settle_s']:.1f} s"
        + (f"  ({result['settle_ratio']:.2f}x)" if "settle_ratio" in result else ""),
    )
    table.add_row(
        "last one Running (from the first create)",
        cell(f"{base['all_running_s']:.1f} s") if base else "(skipped)",
        f"{tpf['all_running_s']:.1f} s",
    )
    table.add_row(
        "Running",
        cell(f"{base['running']:,} pods ({base['unschedulable']} Unschedulable)")
        if base
        else "(skipped)",
        f"{tpf['running']} jobs = {tpf['workers_running']:,} workers "
        f"({tpf['waiting']} Waiting, {tpf['failed']} Failed)",
    )
    table.add_row(
        "time to Running s p50 / p90 / p99 / max",
        cell(f"{_p(base['pod_time_to_running_s'])} (per pod)") if base else "(skipped)",
        f"{_p(tpf['job_time_to_running_s'])} (per job)",
    )
    if base:
        table.add_row("default scheduler binds/s", f"{base['binds_per_s']}", "")
    rounds = result.get("rounds") or []
    if len(rounds) > 1:
        table.add_row(
            f"settled, each of {len(rounds)} rounds (this table: the last)",
            ", ".join(f"{r['baseline_settle_s']} s" for r in rounds) if base else "(skipped)",
            ", ".join(f"{r['tpfabric_settle_s']} s" for r in rounds)
            + (
                f"  (median {result['settle_ratio_median']:.2f}x)"
                if result.get("settle_ratio_median") is not None
                else ""
            ),
        )
    table.caption = (
        f"cluster up {result['cluster_up_s']} s, nodes Ready {result['nodes_ready_s']} s; "
        f"tpfabric kube-scheduler client {result['tpfabric_scheduler_client']}"
    )
    return table


def breakdown_table(result: dict[str, Any]) -> Table:
    """Return the rich table of where a gang's time goes."""
    table = Table(
        "stage of a gang (ends when its last worker got there)",
        "s p50",
        "s p90",
        "s p99",
        "s max",
        "last job s",
        title=f"where a gang's time goes ({result['tpfabric']['running']} jobs that ran)",
        caption="last job s: when the last job got there, from the first create call",
    )
    breakdown = result["tpfabric"]["breakdown_s"]
    last = result["tpfabric"].get("last_stage_end_s", {})
    for stage, words in (*STAGES, ("total", "create call → Running")):
        s = breakdown[stage]
        end = last.get("running" if stage == "total" else stage)
        table.add_row(
            words,
            *(f"{s[k]:.2f}" for k in ("p50", "p90", "p99", "max")),
            "-" if end is None else f"{end:.1f}",
        )
    return table


def process_table(result: dict[str, Any]) -> Table:
    """Return the rich table of every component's CPU and peak memory per phase."""
    phases = [p for p in PHASES if p in result]
    columns = [f"{p}: CPU s / peak RSS MiB" for p in phases]
    table = Table("component", *columns, "VmHWM MiB", title="CPU (user+system) and memory")
    for name in COMPONENTS:
        cells = []
        for phase in phases:
            proc = result[phase]["processes"].get(name, {})
            cells.append(f"{proc.get('cpu_s', 0):.1f} / {proc.get('peak_rss_mib', 0):.0f}")
        hwm = result["vm_hwm_mib"].get(name)
        table.add_row(name, *cells, "-" if hwm is None else f"{hwm:.0f}")
    return table


def requests_table(result: dict[str, Any], top: int = 10) -> Table:
    """Return the rich table of the API server's busiest request kinds per phase."""
    phases = [p for p in PHASES if p in result]
    table = Table("request (verb resource code)", *phases, title="API server requests")
    counts = [result[p]["api_requests"] for p in phases]
    keys = sorted(set().union(*counts), key=lambda k: -sum(c.get(k, 0) for c in counts))
    for key in keys[:top]:
        table.add_row(key, *(str(c.get(key, 0)) for c in counts))
    return table


def server_time_table(result: dict[str, Any], top: int = 8) -> Table:
    """Return the rich table of the API server's mean time per request of the busiest kinds."""
    phases = [p for p in PHASES if p in result]
    table = Table(
        "request (verb resource)",
        *(f"{p}: count / mean ms" for p in phases),
        title="API server time per request (server side)",
    )
    times = [result[p].get("api_server_ms", {}) for p in phases]
    keys = sorted(
        set().union(*times), key=lambda k: -sum(t.get(k, {}).get("requests", 0) for t in times)
    )
    for key in keys[:top]:
        cells = []
        for t in times:
            row = t.get(key)
            cells.append("-" if row is None else f"{row['requests']:.0f} / {row['mean_ms']:.1f}")
        table.add_row(key, *cells)
    client = [result[p].get("placer_release_write") for p in phases]
    if any(client):
        table.add_row(
            "placer's wait per release write (client side)",
            *("-" if c is None else f"{c['requests']:.0f} / {c['mean_ms']:.1f}" for c in client),
        )
    return table


def scheduler_time_table(result: dict[str, Any]) -> Table:
    """Return the rich table of each phase's kube-scheduler's own mean time per pod."""
    phases = [p for p in PHASES if p in result]
    table = Table(
        "kube-scheduler's own time",
        *(f"{p} ({SCHEDULER[p]}): pods / mean ms" for p in phases),
        title="kube-scheduler time per pod (its own metrics)",
    )
    times = [result[p].get("scheduler_ms", {}) for p in phases]
    for key in dict.fromkeys(k for t in times for k in t):
        cells = []
        for t in times:
            row = t.get(key)
            cells.append("-" if row is None else f"{row['requests']:.0f} / {row['mean_ms']:.2f}")
        table.add_row(key, *cells)
    return table


def idle_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the writes while every job sat settled (leases left out)."""
    idle = result.get("idle") or {"window_s": 0, "writes": {}, "writes_per_s": 0}
    table = Table(
        "write (verb resource code)",
        "count",
        title=f"idle: {idle['window_s']:.0f} s after every job settled, "
        f"{idle['writes_per_s']} writes/s (leases left out)",
    )
    for key, count in sorted(idle["writes"].items(), key=lambda kv: -kv[1]):
        table.add_row(key, str(count))
    return table
