"""The rich tables of ``tpfabric bench extender``'s result.

Each function takes (part of) the result dict the benchmark writes as JSON and returns one table;
nothing here measures or reads anything else.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

__all__ = [
    "ISSUE_P99_TARGET_MS",
    "ISSUE_THROUGHPUT_TARGET",
    "cluster_table",
    "decisions_table",
    "latency_table",
    "memory_table",
]

ISSUE_P99_TARGET_MS = 3.0
ISSUE_THROUGHPUT_TARGET = 0.8  # the extender may cost at most 20% of the scheduler's pods/s


def _cell(summary: dict[str, float], digits: int = 2) -> str:
    return " / ".join(f"{summary[key]:.{digits}f}" for key in ("p50", "p99", "max"))


def latency_table(results: list[dict[str, Any]]) -> Table:
    """Return the rich table of (a)."""
    table = Table(
        "nodes",
        "server",
        "case (filter names → prioritize names)",
        "filter ms p50/p99/max",
        "prioritize ms p50/p99/max",
        "filter+prioritize ms p50/p99/max",
        "answer (kept/failed/unres./scored)",
        title="(a) extender latency, client-side, sequential keep-alive requests (NodeNames only)",
    )
    for row in results:
        answer = row["answer"]
        table.add_row(
            f"{row['nodes']:,}",
            row["server"],
            row["case"],
            _cell(row["filter_ms"]),
            _cell(row["prioritize_ms"]),
            _cell(row["combined_ms"]),
            f"{answer['kept']}/{answer['failed']}/{answer['unresolvable']}/{answer['scored']}",
        )
    table.caption = (
        f"target: tpfabric filter+prioritize p99 <= {ISSUE_P99_TARGET_MS} ms at 5,000 nodes; "
        "trivial = aiohttp + orjson returning the names unchanged (the floor)"
    )
    return table


def cluster_table(result: dict[str, Any]) -> Table:
    """Return the rich table of (b)."""
    table = Table(
        "round",
        "phase",
        "pods",
        "pods/s (first→last bind)",
        "window s",
        "vs. without extender",
        title=(
            f"(b) kube-scheduler throughput on {result['nodes']:,} kwok nodes "
            f"(percentageOfNodesToScore 100, client QPS {result['client_qps']})"
        ),
    )
    for k, run in enumerate(result["rounds"]):
        plain = run["without_extender"]
        rows = [
            ("without extender", plain),
            ("with extender, pass-through pods", run["with_extender_pass_through"]),
        ]
        if run["with_extender_gangs"]:
            rows.append(("with extender, TPJ gang workers", run["with_extender_gangs"]))
        for name, phase in rows:
            ratio = phase["pods_per_s"] / plain["pods_per_s"] if plain["pods_per_s"] else 0.0
            table.add_row(
                str(k + 1),
                name,
                str(phase["pods"]),
                f"{phase['pods_per_s']:.1f}",
                f"{phase['window_s']:.2f}",
                f"{ratio:.2f}",
            )
    served = result.get("extender_server_side", {})
    table.caption = f"target: with/without >= {ISSUE_THROUGHPUT_TARGET}; " + ", ".join(
        f"extender {verb}: {v['requests']} requests, mean {v['mean_ms']} ms server-side"
        for verb, v in served.items()
    )
    return table


def _mib(value: float) -> str:
    return f"{value:,.1f} MiB"


def memory_table(result: dict[str, Any]) -> Table:
    """Return the rich table of (c): what listing the cluster costs the extender."""
    lists, rss, traced = result["lists"], result["rss"], result["tracemalloc"]
    table = Table(
        "measure",
        "value",
        title=(
            f"(c) extender memory: {result['pods']:,} pods, {result['nodes']:,} nodes, "
            f"{result['jobs']:,} TPJs through the real informer list path "
            f"(fake API server, pages of {result['page_size']}, one child process)"
        ),
    )
    for kind, label in (("pods", "pods"), ("nodes", "nodes"), ("tensorparalleljobs", "TPJs")):
        listed = lists[kind]
        table.add_row(
            f"list {label}",
            f"{listed['objects']:,} objects in {listed['pages']} pages, "
            f"{_mib(listed['json_mib'])} of JSON ({listed['mean_object_bytes']:,} B each): "
            f"{listed['informer_s']:.2f} s in the informer "
            f"(+ {listed['fake_api_s']:.2f} s building pages in the fake server)",
        )
    if "before_mib" in rss:
        table.add_row(
            "RSS (VmRSS)",
            f"{_mib(rss['before_mib'])} before → {_mib(rss['after_mib'])} after the lists "
            f"(+{_mib(rss['growth_mib'])})",
        )
        reset = "" if rss["hwm_reset"] else " (VmHWM could not be reset: includes start-up)"
        table.add_row(
            "RSS peak (VmHWM)", f"+{_mib(rss['peak_growth_mib'])} during the lists{reset}"
        )
        if "growth_after_trim_mib" in rss:
            table.add_row(
                "RSS after malloc_trim(0)",
                f"+{_mib(rss['growth_after_trim_mib'])} (glibc's free memory handed back; the "
                "rest: live objects and Python's partly used arenas)",
            )
    kinds = ", ".join(f"{k} {_mib(v['peak_mib'])}" for k, v in traced["kinds"].items())
    table.add_row("tracemalloc peak", f"{_mib(traced['peak_mib'])} ({kinds})")
    table.add_row(
        "store, steady (traced)",
        f"{_mib(traced['store_mib'])} ({traced['store_bytes_per_pod']:,} B per pod, nodes and "
        "jobs included)",
    )
    store = result["store"]
    table.add_row(
        "store content",
        f"{store['pods']:,} pods, {store['nodes']:,} nodes, {store['jobs']:,} jobs "
        f"({store['jobs_with_workers']:,} with worker pods), {store['reserved_nodes']} nodes "
        "reserved",
    )
    table.add_row("full gc.collect()", f"{result['gc_full_ms']:.1f} ms with the store loaded")
    table.caption = (
        "tracemalloc counts orjson's parse buffer at its reserved size (most of it never touched); "
        "VmHWM is what the kernel actually handed out"
    )
    return table


def decisions_table(result: dict[str, Any]) -> Table:
    """Return the rich table of (c)'s in-process decisions, loaded store beside nodes only."""
    table = Table(
        "case (filter names → prioritize names)",
        "store",
        "first filter ms",
        "filter ms p50/p99/max",
        "prioritize ms p50/p99/max",
        "filter+prioritize ms p50/p99/max",
        "answer (kept/failed/unres./scored)",
        title=(
            "(c) filter_nodes + prioritize_nodes in-process, under the store lock, "
            f"{result['nodes']:,} nodes (request parsed once, no HTTP)"
        ),
    )
    for row in result["decisions"]:
        answer = row["answer"]
        names = " → ".join(f"{n:,}" for n in row["names"])
        table.add_row(
            f"{row['case']} ({names})",
            f"{row['pods']:,} pods",
            f"{row['first_filter_ms']:.2f}",
            _cell(row["filter_ms"], 3),
            _cell(row["prioritize_ms"], 3),
            _cell(row["combined_ms"], 3),
            f"{answer['kept']}/{answer['failed']}/{answer['unresolvable']}/{answer['scored']}",
        )
    table.caption = (
        "first filter: the first decision after the load (fills the domain and reservation "
        "caches); the small store holds the nodes, the probed job and its 8 workers"
    )
    return table
