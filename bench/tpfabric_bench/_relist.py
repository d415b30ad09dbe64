"""The extender's answers while it relists every pod: latency during a full relist.

:func:`run_relist` starts this module as a child process (``python -m tpfabric_bench._relist``) that
holds what a production extender holds: the store loaded by the product's informers
(``Informer.relist``, fed by :class:`~tpfabric_bench._fake_apiserver.FakeList` with the 5-10 KB pods
of :class:`~tpfabric_bench._fake_apiserver.ClusterShape`), a
:class:`~tpfabric_scheduler.placer.GangPlacer` (its writes go nowhere) and the real aiohttp app of
``make_app`` on 127.0.0.1, with the interpreter's switch interval the extender's process sets. The
parent is the load generator, as kube-scheduler is: one keep-alive connection, one ``/filter``
request after the other for the probe job's released worker (its domain's names, as kube-scheduler
sends them once the placer narrowed the worker's affinity), each timed from send to the last byte of
the answer. After ``quiet_s`` of plain serving the child relists every pod in a thread, as an
informer does after a ``410 Gone`` (the pages are built beforehand, as a response arrives off the
wire), runs the placer cycle the relist wakes, serves ``quiet_s`` more and reports when the relist
started, when its list was in and when the cycle ended. Requests sent while the relist read its
pages, during the placer cycle after it, and outside both are reported apart.

This module measures; it must never be imported by the product, assert on a number, or bind
anything but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from rich.table import Table

from tpfabric_bench._fake_apiserver import KINDS, ClusterShape, fake_lists
from tpfabric_bench._harness import summary
from tpfabric_bench._memory import informers_reading
from tpfabric_bench._rss import proc_status_kib
from tpfabric_scheduler.__main__ import SWITCH_INTERVAL_S
from tpfabric_scheduler.kube import POD_PAGE_SIZE
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.server import make_app
from tpfabric_scheduler.store import ClusterStore

__all__ = ["SLOW_MS", "relist_table", "run_relist"]

#: a request slower than this is counted (the issue's bound: none over 50 ms)
SLOW_MS = 50.0


class _NoWrites:
    """The placer's writer in the child: every write succeeds and goes nowhere."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _filter_body(shape: ClusterShape) -> bytes:
    """Return the /filter request kube-scheduler sends for the probe job's released worker."""
    return orjson.dumps({"Pod": shape.probe_pod(), "NodeNames": shape.leaves[0]})


async def _serve(
    store: ClusterStore, placer: GangPlacer, lists: Any, informers: Any, quiet_s: float
) -> dict[str, Any]:
    app = make_app(store, Metrics(), lambda: True)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # the load generator runs
    await asyncio.sleep(quiet_s)
    timings: dict[str, float] = {}

    def relist() -> None:
        timings["start"] = time.time()
        started = time.perf_counter()
        informers["pods"].relist()
        timings["list_s"] = time.perf_counter() - started
        timings["listed"] = time.time()
        started = time.perf_counter()
        placer.run_cycle()  # what the relist's change wakes
        timings["cycle_s"] = time.perf_counter() - started
        timings["end"] = time.time()

    await loop.run_in_executor(None, relist)
    await asyncio.sleep(quiet_s)
    await runner.cleanup()
    return timings


def child(pods: int, nodes: int, quiet_s: float) -> dict[str, Any]:
    """Return the relist's timings and the child's RSS (this process is the child)."""
    shape = ClusterShape(pods, nodes)
    lists = fake_lists(shape)
    store = ClusterStore()
    informers = informers_reading(store, lists)
    for kind in KINDS:
        informers[kind].relist()
    placer = GangPlacer(store, _NoWrites(), Metrics())  # type: ignore[arg-type]
    placer.run_cycle()  # the cycle after start-up: plans what waits, before any timing
    lists["pods"].prebuild(POD_PAGE_SIZE)  # the relist's pages arrive off the wire
    timings = asyncio.run(_serve(store, placer, lists, informers, quiet_s))
    rss = proc_status_kib()
    return {
        "relist": {k: round(v, 3) for k, v in timings.items()},
        "rss_mib": round(rss.get("VmRSS", 0) / 1024, 1),
        "hwm_mib": round(rss.get("VmHWM", 0) / 1024, 1),
        "store_pods": len(store.pods),
    }


def _load(port: int, body: bytes, stop: threading.Event, sent: list[tuple[float, float]]) -> None:
    """Send /filter requests one after the other until ``stop`` (or the child closes); append
    (wall time sent, ms) of each answered one to ``sent``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    try:
        while not stop.is_set():
            wall = time.time()
            started = time.perf_counter()
            conn.request("POST", "/filter", body=body, headers=headers)
            conn.getresponse().read()
            sent.append((wall, (time.perf_counter() - started) * 1e3))
    except (ConnectionError, http.client.HTTPException):
        pass  # the child stopped serving: the run is over
    finally:
        conn.close()


def run_relist(
    *, pods: int, nodes: int, quiet_s: float, log: Callable[[str], None], timeout: float = 1200
) -> dict[str, Any]:
    """Return the latency of /filter during a full relist of ``pods`` pods and outside it."""
    log(f"relist: {pods:,} pods on {nodes:,} nodes, /filter timed during a full relist")
    command = [
        sys.executable,
        "-m",
        "tpfabric_bench._relist",
        "--pods",
        str(pods),
        "--nodes",
        str(nodes),
        "--quiet-seconds",
        str(quiet_s),
    ]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            first = proc.stdout.readline()
            if not first.startswith("PORT "):
                raise RuntimeError(f"relist child failed: {first}{proc.stderr.read()[-3000:]}")
            port = int(first.split()[1])
            body = _filter_body(ClusterShape(pods, nodes))
            stop = threading.Event()
            requests: list[tuple[float, float]] = []
            loader = threading.Thread(target=_load, args=(port, body, stop, requests), daemon=True)
            loader.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            result_line = ""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                result_line = line
            stop.set()
            loader.join(30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if not result_line.startswith("{"):
            raise RuntimeError(f"relist child failed: {proc.stderr.read()[-3000:]}")
    result: dict[str, Any] = json.loads(result_line)
    start, listed, end = (result["relist"][k] for k in ("start", "listed", "end"))
    windows: dict[str, list[float]] = {"list": [], "cycle": [], "outside": []}
    for wall, ms in requests:
        if start <= wall < listed:
            windows["list"].append(ms)
        elif listed <= wall <= end:
            windows["cycle"].append(ms)
        else:
            windows["outside"].append(ms)
    result |= {
        "pods": pods,
        "nodes": nodes,
        **{
            name: summary(times, (0.5, 0.99), 3) | {"over_50ms": sum(ms > SLOW_MS for ms in times)}
            for name, times in windows.items()
        },
        #: (seconds after the relist started, ms) of every request over SLOW_MS
        "slow": [(round(wall - start, 2), round(ms, 1)) for wall, ms in requests if ms > SLOW_MS],
    }
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the child: serve, relist on the parent's word, print the timings as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tpfabric_bench._relist")
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--quiet-seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as the extender's process runs
    print(json.dumps(child(args.pods, args.nodes, args.quiet_seconds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def relist_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the relist run."""
    relist = result["relist"]
    table = Table(
        "window",
        "requests",
        "ms p50",
        "ms p99",
        "ms max",
        f"over {SLOW_MS:g} ms",
        title=(
            f"(d) /filter while the extender relists {result['pods']:,} pods on "
            f"{result['nodes']:,} nodes (list {relist['list_s']:.1f} s, then the placer cycle "
            f"it wakes {relist['cycle_s']:.1f} s), client-side, sequential keep-alive requests"
        ),
    )
    for window, label in (
        ("list", "reading the relist's pages"),
        ("cycle", "the placer cycle after it"),
        ("outside", "before and after"),
    ):
        row = result[window]
        table.add_row(
            label,
            f"{row['count']:,}",
            f"{row['p50']:.2f}",
            f"{row['p99']:.2f}",
            f"{row['max']:.2f}",
            str(row["over_50ms"]),
        )
    table.caption = (
        f"target: p99 <= 5 ms, none over {SLOW_MS:g} ms; the child's RSS after the relist "
        f"{result['rss_mib']:.0f} MiB (peak {result['hwm_mib']:.0f} MiB) holds the fake API "
        "server's pre-built pages too: the extender's own memory is (c) and (e)"
    )
    return table
