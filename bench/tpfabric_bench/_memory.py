"""The extender's memory with many pods: its real informer list path, fed by a fake API server.

:func:`run_memory` starts this module twice as a child process (``python -m
tpfabric_bench._memory``), so nothing of the parent's heap is counted:

- **measured**: after its imports the child reads ``VmRSS`` from ``/proc/self/status`` and resets
  the kernel's high-water mark (``VmHWM``, by writing 5 to ``/proc/self/clear_refs``); it lists
  nodes, TensorParallelJobs and pods through ``Informer.relist``, the product's own list function
  (``list_pages`` in pages of each kind's size, every object cut down and made a record as its
  page arrives, the store's view built outside the lock and installed under it in one step), and
  reads ``VmHWM`` and ``VmRSS`` again. Then, with the store loaded, it times
  the extender's decisions in-process (``filter_nodes`` + ``prioritize_nodes`` under the store
  lock, the request parsed once beforehand) for a released worker pod, beside the same decisions
  on a store that holds only the nodes and that worker's job (what the latency benchmark's
  servers hold), and one full ``gc.collect()``: the pause an automatic full collection costs
  (the list moved the records into the collector's permanent generation, so it traverses only
  what came after).
- **traced**: the same load under ``tracemalloc`` (which slows Python down and costs memory of
  its own, so it never shares a process with the RSS and timing figures): the peak of Python's
  allocations during each kind's list, and what stays allocated afterwards (the store).

The cluster and its objects come from :mod:`tpfabric_bench._fake_apiserver`, whose list calls
build a page's body only when it is asked for it, so the measured child holds what a real client
holds: one response body at a time. The time spent building pages is measured and kept out of the
informer's list time. (The traced child builds every page before tracing starts and hands out
copies: tracing the fake server's own work would only take minutes.)

The RSS figures (read by :mod:`tpfabric_bench._rss`) include what the allocators keep after the
raw pages are freed; after everything else, the measured child calls glibc's ``malloc_trim(0)``
and reads ``VmRSS`` once more, which tells that from memory Python still holds.

This module measures; it must never be imported by the product, assert on a number, or open a
network connection.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson

from tpfabric_bench._fake_apiserver import (
    JOB_WORKERS,
    KINDS,
    ClusterShape,
    FakeList,
    api_job,
    api_node,
    api_pod,
    fake_lists,
)
from tpfabric_bench._harness import tail
from tpfabric_bench._rss import malloc_trim, proc_status_kib, reset_peak_rss
from tpfabric_scheduler.extender import filter_nodes, prioritize_nodes
from tpfabric_scheduler.kube import POD_PAGE_SIZE, Informer, informer_kinds
from tpfabric_scheduler.protocol import ExtenderArgs, parse_extender_args
from tpfabric_scheduler.store import ClusterStore

__all__ = [
    "CASE_ALL",
    "CASE_DOMAIN",
    "informers_reading",
    "measure",
    "measure_traced",
    "run_memory",
]

CASE_DOMAIN = "worker: its domain's names"
CASE_ALL = "worker: all N names (worst)"
_MIB = 1024 * 1024


def informers_reading(store: ClusterStore, lists: dict[str, FakeList]) -> dict[str, Informer]:
    """Return the product's informers of the three kinds, reading ``lists`` (never started)."""
    kinds = informer_kinds(store, dict(lists))
    return {kind.name: Informer(kind, store, lambda: None) for kind in kinds}


def _decisions(
    store: ClusterStore, filter_args: ExtenderArgs, all_names: bool, samples: int, warmup: int
) -> dict[str, Any]:
    """Return the timings (ms) of ``samples`` filter + prioritize decisions for one worker.

    Prioritize gets the names the filter kept (as kube-scheduler sends them), or every name with
    ``all_names`` (the worst case). The first filter is timed apart: it fills the store's caches
    (domain members, reservations) after a load.
    """
    clock = time.perf_counter
    started = clock()
    with store.lock:
        first, _ = filter_nodes(store, filter_args)
    first_ms = (clock() - started) * 1e3
    names = filter_args.node_names if all_names else first.node_names
    prioritize_args = ExtenderArgs(pod=filter_args.pod, node_names=names)
    filter_ms: list[float] = []
    prioritize_ms: list[float] = []
    for k in range(warmup + samples):
        start = clock()
        with store.lock:
            filter_nodes(store, filter_args)
        middle = clock()
        with store.lock:
            scores = prioritize_nodes(store, prioritize_args)
        end = clock()
        if k >= warmup:
            filter_ms.append((middle - start) * 1e3)
            prioritize_ms.append((end - middle) * 1e3)
    return {
        "names": [len(filter_args.node_names), len(names)],
        "answer": {
            "kept": len(first.node_names),
            "failed": len(first.failed),
            "unresolvable": len(first.failed_unresolvable),
            "scored": len(scores),
        },
        "first_filter_ms": round(first_ms, 3),
        "filter_ms": tail(filter_ms, 4),
        "prioritize_ms": tail(prioritize_ms, 4),
        "combined_ms": tail([f + p for f, p in zip(filter_ms, prioritize_ms, strict=True)], 4),
    }


def _time_decisions(
    shape: ClusterShape, loaded: ClusterStore, samples: int, warmup: int
) -> list[dict[str, Any]]:
    """Return the decision timings on the loaded store and on a store of nodes + the probe job."""
    small = ClusterStore()
    small.replace_nodes([api_node(shape, k) for k in range(shape.nodes)])
    small.replace_jobs([api_job(shape, 0)])
    small.replace_pods([api_pod(shape, k) for k in range(JOB_WORKERS)])  # the probe's workers
    pod = shape.probe_pod()
    domain = shape.leaves[shape.job_leaf(0)]
    cases = {
        CASE_DOMAIN: (parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": domain})), False),
        CASE_ALL: (
            parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": shape.node_names})),
            True,
        ),
    }
    stores = {f"{len(loaded.pods):,} pods": loaded, f"{len(small.pods):,} pods": small}
    results = []
    for case, (args, all_names) in cases.items():
        for label, store in stores.items():
            timings = _decisions(store, args, all_names, samples, warmup)
            results.append({"case": case, "store": label, "pods": len(store.pods), **timings})
    return results


def _load(informers: dict[str, Informer], lists: dict[str, FakeList]) -> dict[str, Any]:
    """List every kind through its informer; return per kind: objects, pages, bytes, seconds."""
    result = {}
    for kind in KINDS:
        started = time.perf_counter()
        informers[kind].relist()
        total = time.perf_counter() - started
        fake = lists[kind]
        result[kind] = {
            "objects": fake.count,
            "pages": len(fake.served),
            "json_mib": round(fake.body_bytes / _MIB, 1),
            "mean_object_bytes": round(fake.body_bytes / fake.count) if fake.count else 0,
            "total_s": round(total, 3),
            "fake_api_s": round(fake.serve_s, 3),
            "informer_s": round(total - fake.serve_s, 3),
        }
    return result


def _store_counts(store: ClusterStore) -> dict[str, int]:
    return {
        "nodes": len(store.nodes),
        "pods": len(store.pods),
        "jobs": len(store.jobs),
        "jobs_with_workers": len(store.workers),
        "reserved_nodes": len(store.reservations()),
    }


def measure(pods: int, nodes: int, samples: int, warmup: int) -> dict[str, Any]:
    """Return RSS, list times and decision timings of one load (this process is the child)."""
    shape = ClusterShape(pods, nodes)
    lists = fake_lists(shape)
    store = ClusterStore()
    informers = informers_reading(store, lists)
    shape.fabric  # noqa: B018 - built before the baseline: the fake server's, not the store's
    gc.collect()
    before = proc_status_kib()
    reset = reset_peak_rss()
    lists_result = _load(informers, lists)
    peak = proc_status_kib()
    gc.collect()
    after = proc_status_kib()
    started = time.perf_counter()
    gc.collect()
    gc_ms = (time.perf_counter() - started) * 1e3
    decisions = _time_decisions(shape, store, samples, warmup)
    gc.collect()
    trimmed = proc_status_kib() if malloc_trim() else {}
    rss: dict[str, Any] = {"hwm_reset": reset}
    if before and after:
        rss |= {
            "before_mib": round(before["VmRSS"] / 1024, 1),
            "after_mib": round(after["VmRSS"] / 1024, 1),
            "growth_mib": round((after["VmRSS"] - before["VmRSS"]) / 1024, 1),
            "peak_growth_mib": round((peak["VmHWM"] - before["VmRSS"]) / 1024, 1),
        }
    if before and trimmed:
        rss["growth_after_trim_mib"] = round((trimmed["VmRSS"] - before["VmRSS"]) / 1024, 1)
    return {
        "pods": pods,
        "nodes": nodes,
        "jobs": shape.jobs,
        "page_size": POD_PAGE_SIZE,
        "lists": lists_result,
        "store": _store_counts(store),
        "rss": rss,
        "gc_full_ms": round(gc_ms, 1),
        "decisions": decisions,
    }


def measure_traced(pods: int, nodes: int) -> dict[str, Any]:
    """Return the tracemalloc peak of each kind's list and what the store keeps (child).

    The fake server's pages are built before tracing starts; each list call then allocates only
    its copy of one page's body, as a client reading it off the wire does.
    """
    shape = ClusterShape(pods, nodes)
    lists = fake_lists(shape)
    store = ClusterStore()
    informers = informers_reading(store, lists)
    for kind, fake in lists.items():  # tracing the fake server's work would take minutes
        fake.prebuild(informers[kind].kind.page_size)
    gc.collect()
    tracemalloc.start()
    kinds: dict[str, dict[str, float]] = {}
    peak = 0
    for kind in KINDS:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        informers[kind].relist()
        _, kind_peak = tracemalloc.get_traced_memory()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
        peak = max(peak, kind_peak)
        kinds[kind] = {
            "peak_mib": round(kind_peak / _MIB, 1),
            "transient_mib": round((kind_peak - after) / _MIB, 1),
            "kept_mib": round((after - before) / _MIB, 1),
        }
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "peak_mib": round(peak / _MIB, 1),
        "store_mib": round(current / _MIB, 1),
        "store_bytes_per_pod": round(current / max(1, pods)),
        "kinds": kinds,
    }


# -- the parent ---------------------------------------------------------------------------------


def _child(argv: list[str], timeout: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "tpfabric_bench._memory", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory child {argv} failed: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_memory(
    *,
    pods: int,
    nodes: int,
    samples: int,
    warmup: int,
    log: Callable[[str], None],
    timeout: float = 1200.0,
) -> dict[str, Any]:
    """Return the memory of ``pods`` pods and ``nodes`` nodes listed by the extender's informers,
    and its decision times with them loaded (two child processes; see the module docstring)."""
    argv = ["--pods", str(pods), "--nodes", str(nodes)]
    log(f"memory: listing {pods:,} pods, {nodes:,} nodes and their jobs (child process)")
    result = _child([*argv, "--samples", str(samples), "--warmup", str(warmup)], timeout)
    log("memory: the same load under tracemalloc (child process)")
    result["tracemalloc"] = _child([*argv, "--trace"], timeout)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run one child measurement and print its JSON on one line."""
    parser = argparse.ArgumentParser(prog="python -m tpfabric_bench._memory")
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args(argv)
    if args.trace:
        result = measure_traced(args.pods, args.nodes)
    else:
        result = measure(args.pods, args.nodes, args.samples, args.warmup)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
