"""Operator benchmark: 100 TensorParallelJobs applied at once on a 1,000-node kwok cluster.

``tpfabric bench operator [--nodes 1000] [--jobs 100] [--seed 7] [--timeout 600] [--json FILE]``

A local control plane with N kwok nodes (``uniform_fabric``, 8 per leaf), the real extender/placer
process (``python -m tpfabric_scheduler``), the ``tpfabric-scheduler`` kube-scheduler wired to it
and the operator (``python -m tpfabric_operator``), all as the Helm chart ships them: INFO logging
(``start_extender`` of the local cluster logs every filter/prioritize decision at DEBUG, which
would measure the logger), the operator's default reconcile interval, and kube-scheduler's default
client QPS (50/s, as the chart runs it: the time to Running is the product's, rate limiter
included; the bind window is reported so a reader sees when it was the limit).

Once the nodes are Ready and the components idle, this process creates a seeded mix of jobs as
fast as the API server takes them (2-16 workers, required or preferred leaf, a few required-leaf
jobs larger than a leaf that can never fit; the workers add up to more than the cluster's nodes,
so some jobs must wait for capacity). It polls the jobs from the watch cache every half second
until each is ``Running`` or ``Waiting`` with a reason in ``status.placement`` (bounded by
``--timeout``), then watches an idle window to show what 100 settled jobs cost per second.
Measured: time to settle, per-job time to Running and to Waiting (from its own create call, to
the poll that saw it; resolution 0.5 s), the CPU seconds (psutil ``cpu_times``, user + system) and
peak RSS (sampled every 0.2 s, and the kernel's ``VmHWM``, a lifetime peak) of the operator, the
extender/placer, the tpfabric kube-scheduler and the API server, and the API server's request
counters (``apiserver_request_total``) during the burst and the idle window.

Numbers are wall-clock on whatever machine runs it and vary with its load. This module measures;
it must never be imported by the product, assert on timings, or bind anything but 127.0.0.1. The
cluster is always torn down.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as dt
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil
from rich.console import Console
from rich.table import Table

from tpfabric_bench.extender import environment
from tpfabric_bench.placement import percentile
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.fabric_description import FabricDescription, uniform_fabric
from tpfabric_scheduler.config import scheduler_configuration

__all__ = ["JobShape", "job_manifest", "job_mix", "main", "run_operator"]

NAMESPACE = "bench-operator"
NODES_PER_LEAF = 8
MIN_WORKERS, MAX_WORKERS = 2, 16
OVERCOMMIT = 1.1  # the jobs' workers add up to 110% of the nodes
NEVER_FIT = 5  # required-leaf jobs larger than any leaf
POLL_SECONDS = 0.5
SAMPLE_SECONDS = 0.2
APISERVER = "kube-apiserver"
REQUEST_LINE = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
LABEL_PAIR = re.compile(r'(\w+)="([^"]*)"')


# -- the jobs (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobShape:
    """One job of the mix: its size and topology policy, and whether it can ever be placed."""

    name: str
    workers: int
    mode: str  # required | preferred (level is always leaf)
    never_fits: bool


def job_mix(jobs: int, nodes: int, seed: int) -> list[JobShape]:
    """Return ``jobs`` seeded job shapes whose workers add up to ``OVERCOMMIT`` x ``nodes``.

    Sizes are drawn from 2..16 and raised one worker at a time (never past 16) until the total
    reaches the target. ``NEVER_FIT`` of the jobs larger than a leaf require a leaf (they wait
    with a reason forever); other jobs of at most a leaf require one with probability 0.6; the
    rest prefer a leaf and climb when it cannot hold them.
    """
    rng = random.Random(seed)  # noqa: S311 - a seeded mix, not cryptography
    workers = [rng.randint(MIN_WORKERS, MAX_WORKERS) for _ in range(jobs)]
    target = math.ceil(nodes * OVERCOMMIT)
    while sum(workers) < target and min(workers) < MAX_WORKERS:
        k = rng.randrange(jobs)
        if workers[k] < MAX_WORKERS:
            workers[k] += 1
    large = [k for k, w in enumerate(workers) if w > NODES_PER_LEAF]
    never = set(rng.sample(large, min(NEVER_FIT, len(large))))
    shapes = []
    for k, count in enumerate(workers):
        small_required = count <= NODES_PER_LEAF and rng.random() < 0.6
        mode = "required" if k in never or small_required else "preferred"
        shapes.append(JobShape(f"tpj-{k:03d}", count, mode, k in never))
    return shapes


def job_manifest(shape: JobShape, rdma_resource: str) -> dict[str, Any]:
    """Return the TensorParallelJob object for ``shape`` (TP 8 inside each 8-GPU worker)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": shape.name, "namespace": NAMESPACE},
        "spec": {
            "workers": shape.workers,
            "gpusPerWorker": 8,
            "tensorParallelSize": 8,
            "topology": {"mode": shape.mode, "level": "leaf"},
            "rdma": {"resourceName": rdma_resource, "count": 8},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.invalid/worker:1",
                            "command": ["sleep", "infinity"],
                        }
                    ]
                }
            },
        },
    }


# -- measuring processes --------------------------------------------------------------------------


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _vm_hwm_mib(pid: int) -> float | None:
    """Return the kernel's peak resident set (``VmHWM``) of ``pid`` in MiB, None if unreadable."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


class ProcessSampler:
    """Samples the RSS of some processes in a thread; reads their CPU seconds on demand."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak_rss: dict[str, int] = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        """Take one RSS sample of every process (a gone process keeps its last peak)."""
        for name, process in self.processes.items():
            with contextlib.suppress(psutil.Error):
                rss = int(process.memory_info().rss)
                self.peak_rss[name] = max(self.peak_rss[name], rss)

    def cpu(self) -> dict[str, float]:
        """Return the CPU seconds (user + system) of every process so far."""
        result = {}
        for name, process in self.processes.items():
            with contextlib.suppress(psutil.Error):
                result[name] = _cpu_seconds(process)
        return result

    def reset_peaks(self) -> None:
        """Forget the peaks seen so far (start-up is not the burst)."""
        self.peak_rss = dict.fromkeys(self.processes, 0)
        self.sample()

    def __enter__(self) -> ProcessSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


def apiserver_requests(api: Any) -> Counter[str]:
    """Return ``apiserver_request_total`` as ``VERB resource[/subresource] code`` -> count."""
    response = api.call_api("GET", api.configuration.host + "/metrics")
    text = response.read().decode()
    if response.status != 200:
        raise RuntimeError(f"the API server's /metrics answered {response.status}: {text[:200]}")
    counts: Counter[str] = Counter()
    for labels_text, value in REQUEST_LINE.findall(text):
        found = dict(LABEL_PAIR.findall(labels_text))
        resource = found.get("resource", "")
        if found.get("subresource"):
            resource += "/" + found["subresource"]
        counts[f"{found.get('verb', '')} {resource} {found.get('code', '')}"] += int(float(value))
    return counts


def _delta(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    """Return the counters that grew, largest first."""
    grown = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    return dict(sorted(grown.items(), key=lambda kv: -kv[1]))


# -- the run --------------------------------------------------------------------------------------


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


def _settled(job: dict[str, Any]) -> str | None:
    """Return ``Running`` or ``Waiting`` (with a reason) when the job has settled, else None.

    ``Failed`` also ends the wait (it will not change by itself); the report counts it.
    """
    status = job.get("status") or {}
    phase = status.get("phase")
    placement = status.get("placement") or {}
    if phase in ("Running", "Failed"):
        return str(phase)
    if (
        phase == "Waiting"
        and placement.get("state") == "Waiting"
        and (placement.get("message") or placement.get("reasons"))
    ):
        return "Waiting"
    return None


def _start_components(cluster: Any, reconcile_seconds: float | None) -> float:
    """Start the extender/placer (INFO), the tpfabric kube-scheduler and the operator; return
    the operator's reconcile interval."""
    from tpfabric_localcluster.cluster import free_ports  # noqa: PLC0415
    from tpfabric_localcluster.tpfabric import (  # noqa: PLC0415
        EXTENDER,
        TPFABRIC_SCHEDULER,
        install_crd,
        start_operator,
    )

    install_crd(cluster)
    (port,) = free_ports(1)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_scheduler",
        f"--kubeconfig={cluster.kubeconfig}",
        "--host=127.0.0.1",
        f"--port={port}",
        "--log-level=INFO",
    ]
    cluster.add_component(EXTENDER, argv, f"http://127.0.0.1:{port}/readyz", timeout=180)
    cluster.start_scheduler(
        TPFABRIC_SCHEDULER, scheduler_configuration(f"http://127.0.0.1:{port}"), timeout=120
    )
    if reconcile_seconds is None:
        from tpfabric_operator.handlers import RECONCILE_SECONDS  # noqa: PLC0415

        reconcile_seconds = RECONCILE_SECONDS
    start_operator(cluster, reconcile_seconds=reconcile_seconds)
    return reconcile_seconds


def _bind_window(core: Any) -> dict[str, Any]:
    """Return how many worker pods are bound and the span of their PodScheduled transitions."""
    response = core.list_namespaced_pod(NAMESPACE, _preload_content=False)
    pods = orjson.loads(response.data)["items"]
    stamps = [
        dt.datetime.fromisoformat(condition["lastTransitionTime"])
        for pod in pods
        for condition in pod.get("status", {}).get("conditions") or []
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True"
    ]
    span = (max(stamps) - min(stamps)).total_seconds() if stamps else 0.0
    return {
        "pods": len(pods),
        "bound": len(stamps),
        "gated": sum(1 for p in pods if p["spec"].get("schedulingGates")),
        "bind_window_s": span,
        "binds_per_s": round((len(stamps) - 1) / span, 1) if span else 0.0,
    }


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0, "p50": 0.0, "p90": 0.0, "max": 0.0}
    return {
        "count": len(values),
        "p50": round(percentile(values, 0.5), 2),
        "p90": round(percentile(values, 0.9), 2),
        "max": round(max(values), 2),
    }


def _burst(
    custom: Any, fabric: FabricDescription, shapes: list[JobShape]
) -> tuple[float, dict[str, float], float]:
    """Create every job at once (8 client threads); return t0, each job's create start, span."""
    started: dict[str, float] = {}

    def create(shape: JobShape) -> None:
        started[shape.name] = time.perf_counter()
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, job_manifest(shape, fabric.rdma_resource)
        )

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(create, shape) for shape in shapes]:
            future.result()
    return t0, started, time.perf_counter() - t0


def _poll_until_settled(
    custom: Any, started: dict[str, float], timeout: float, log: Callable[[str], None]
) -> tuple[dict[str, tuple[str, float]], dict[str, Any]]:
    """Poll until every job settled; return (name -> (state, seconds since its create), last
    objects by name). TimeoutError lists the jobs that did not settle, by phase."""
    seen: dict[str, tuple[str, float]] = {}
    jobs: dict[str, Any] = {}
    deadline = time.perf_counter() + timeout
    last_log = 0.0
    while True:
        response = custom.list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, resource_version="0", _preload_content=False
        )
        now = time.perf_counter()
        jobs = {j["metadata"]["name"]: j for j in orjson.loads(response.data)["items"]}
        for name, job in jobs.items():
            state = _settled(job)
            if state is None:
                seen.pop(name, None)  # not settled any more (counted again when it is)
            elif name not in seen or seen[name][0] != state:
                seen[name] = (state, now - started[name])
        if len(seen) == len(started):
            return seen, jobs
        if now > deadline:
            phases = Counter(
                str((j.get("status") or {}).get("phase")) for n, j in jobs.items() if n not in seen
            )
            raise TimeoutError(
                f"{len(started) - len(seen)} of {len(started)} jobs not Running or Waiting with "
                f"a reason after {timeout:.0f}s; their phases: {dict(phases)}"
            )
        if now - last_log > 10:
            last_log = now
            counts = Counter(state for state, _ in seen.values())
            log(f"settled {len(seen)}/{len(started)}: {dict(counts)}")
        time.sleep(POLL_SECONDS)


def _measure(
    api: Any,
    *,
    pids: dict[str, int],
    fabric: FabricDescription,
    shapes: list[JobShape],
    timeout: float,
    idle_seconds: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Return the measurements of one burst of ``shapes`` and the idle window after it."""
    from kubernetes import client  # noqa: PLC0415

    custom = client.CustomObjectsApi(api)
    with ProcessSampler(pids) as sampler:
        sampler.reset_peaks()
        cpu_before = sampler.cpu()
        requests_before = apiserver_requests(api)
        log(f"creating {len(shapes)} jobs ({sum(s.workers for s in shapes)} workers) at once")
        t0, created, create_span = _burst(custom, fabric, shapes)
        seen, objects = _poll_until_settled(custom, created, timeout, log)
        settle_s = time.perf_counter() - t0
        cpu_settled = sampler.cpu()
        requests_settled = apiserver_requests(api)
        pods = _bind_window(client.CoreV1Api(api))
        log(f"all {len(shapes)} jobs settled in {settle_s:.1f} s; idle for {idle_seconds:.0f} s")
        time.sleep(idle_seconds)
        cpu_idle = sampler.cpu()
        requests_idle = apiserver_requests(api)
        peaks = dict(sampler.peak_rss)
    states = [state for state, _ in seen.values()]
    return {
        "create_span_s": round(create_span, 2),
        "settle_s": round(settle_s, 2),
        "running": states.count("Running"),
        "waiting": states.count("Waiting"),
        "failed": states.count("Failed"),
        "time_to_running_s": _summary([t for s, t in seen.values() if s == "Running"]),
        "time_to_waiting_s": _summary([t for s, t in seen.values() if s == "Waiting"]),
        "waiting_reasons": _waiting_reasons(objects, shapes),
        "after_idle_phases": _poll_final(custom),
        "pods": pods,
        "failures": _failures(objects),
        "idle_s": idle_seconds,
        "processes": {
            name: {
                "pid": pid,
                "cpu_s_burst": round(cpu_settled[name] - cpu_before[name], 2),
                "cpu_s_per_s_idle": round((cpu_idle[name] - cpu_settled[name]) / idle_seconds, 3)
                if idle_seconds
                else 0.0,
                "peak_rss_mib": round(peaks[name] / 2**20, 1),
                "vm_hwm_mib": _vm_hwm_mib(pid),
            }
            for name, pid in pids.items()
        },
        "api_requests_burst": _delta(requests_settled, requests_before),
        "api_requests_idle": _delta(requests_idle, requests_settled),
    }


def run_operator(
    *,
    nodes: int,
    jobs: int,
    seed: int,
    timeout: float,
    idle_seconds: float,
    reconcile_seconds: float | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Return the measurements of one burst on a fresh local cluster (always torn down)."""
    from kubernetes import client  # noqa: PLC0415

    from tpfabric_localcluster.cluster import LocalCluster, api_client  # noqa: PLC0415
    from tpfabric_localcluster.nodes import apply_fake_nodes, wait_ready  # noqa: PLC0415
    from tpfabric_localcluster.tpfabric import (  # noqa: PLC0415
        EXTENDER,
        OPERATOR,
        TPFABRIC_SCHEDULER,
    )

    fabric = uniform_fabric(nodes, nodes_per_leaf=NODES_PER_LEAF)
    shapes = job_mix(jobs, nodes, seed)
    state_root = Path(tempfile.mkdtemp(prefix="tpfabric-bench-"))
    cluster = LocalCluster(f"bench-{uuid.uuid4().hex[:6]}", state_root=state_root, log=log)
    result: dict[str, Any] = {
        "nodes": nodes,
        "leaves": math.ceil(nodes / NODES_PER_LEAF),
        "jobs": jobs,
        "seed": seed,
        "workers_total": sum(s.workers for s in shapes),
        "mix": {
            "required_leaf": sum(1 for s in shapes if s.mode == "required"),
            "preferred_leaf": sum(1 for s in shapes if s.mode == "preferred"),
            "never_fit": sum(1 for s in shapes if s.never_fits),
        },
    }
    kept_logs: Path | None = None
    try:
        started = time.perf_counter()
        cluster.up()
        result["cluster_up_s"] = round(time.perf_counter() - started, 1)
        with api_client(cluster.kubeconfig) as api:
            started = time.perf_counter()
            wait_ready(api, apply_fake_nodes(api, fabric), timeout=900)
            result["nodes_ready_s"] = round(time.perf_counter() - started, 1)
            log(f"{nodes} kwok nodes Ready in {result['nodes_ready_s']} s")
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            _wait(
                lambda: bool(core.list_namespaced_service_account(NAMESPACE).items),
                60,
                "the default service account",
            )
            result["reconcile_seconds"] = _start_components(cluster, reconcile_seconds)
            state = cluster.state()
            assert state is not None
            pids = {
                name: state.components[name].pid
                for name in (OPERATOR, EXTENDER, TPFABRIC_SCHEDULER, APISERVER)
            }
            time.sleep(5)  # let the informers' first lists and kopf's start-up settle
            result |= _measure(
                api,
                pids=pids,
                fabric=fabric,
                shapes=shapes,
                timeout=timeout,
                idle_seconds=idle_seconds,
                log=log,
            )
    except BaseException:
        kept_logs = Path(tempfile.mkdtemp(prefix="tpfabric-bench-operator-logs-"))
        log(f"failed; the components' logs are kept in {kept_logs}")
        raise
    finally:
        cluster.down(keep_logs=kept_logs)
        shutil.rmtree(state_root, ignore_errors=True)
    return result


def _poll_final(custom: Any) -> dict[str, int]:
    """Return the jobs' phases now (after the idle window: did anything change?)."""
    response = custom.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, _preload_content=False
    )
    items = orjson.loads(response.data)["items"]
    return dict(Counter(str((j.get("status") or {}).get("phase")) for j in items))


def _failures(objects: dict[str, Any]) -> dict[str, str]:
    """Return the Failed condition's message of every failed job (what went wrong)."""
    return {
        name: str(condition.get("message") or "")
        for name, job in sorted(objects.items())
        for condition in (job.get("status") or {}).get("conditions") or []
        if condition.get("type") == "Failed" and condition.get("status") == "True"
    }


def _waiting_reasons(objects: dict[str, Any], shapes: list[JobShape]) -> list[dict[str, Any]]:
    """Return each waiting job's shape and placement message (what a user would read)."""
    by_name = {s.name: s for s in shapes}
    result = []
    for name, job in sorted(objects.items()):
        if _settled(job) != "Waiting":
            continue
        shape = by_name[name]
        placement = (job.get("status") or {}).get("placement") or {}
        result.append(
            {
                "job": name,
                "workers": shape.workers,
                "mode": shape.mode,
                "never_fits": shape.never_fits,
                "message": placement.get("message", ""),
                "domain_reasons": len(placement.get("reasons") or []),
            }
        )
    return result


# -- report -------------------------------------------------------------------------------------


def _times(summary: dict[str, float]) -> str:
    if not summary["count"]:
        return "-"
    return f"{summary['p50']:.1f} / {summary['p90']:.1f} / {summary['max']:.1f}"


def summary_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the burst."""
    table = Table(
        "measure",
        "value",
        title=(
            f"{result['jobs']} TensorParallelJobs at once on {result['nodes']:,} kwok nodes "
            f"({result['leaves']} leaves of {NODES_PER_LEAF}), seed {result['seed']}"
        ),
    )
    mix = result["mix"]
    pods = result["pods"]
    rows = [
        (
            "jobs / workers asked",
            (
                f"{result['jobs']} / {result['workers_total']:,} "
                f"(required leaf {mix['required_leaf']}, preferred leaf {mix['preferred_leaf']}, "
                f"{mix['never_fit']} larger than a leaf and required)"
            ),
        ),
        ("create calls (8 threads)", f"{result['create_span_s']:.2f} s"),
        ("time until all Running or Waiting with a reason", f"{result['settle_s']:.1f} s"),
        (
            "Running / Waiting / Failed",
            f"{result['running']} / {result['waiting']} / {result['failed']}",
        ),
        ("time to Running s p50 / p90 / max", _times(result["time_to_running_s"])),
        ("time to Waiting s p50 / p90 / max", _times(result["time_to_waiting_s"])),
        (
            "worker pods bound / gated / all (at settle)",
            f"{pods['bound']} / {pods['gated']} / {pods['pods']}",
        ),
        (
            "bind window (PodScheduled, 1 s stamps)",
            f"{pods['bind_window_s']:.0f} s, {pods['binds_per_s']} binds/s",
        ),
        ("phases after the idle window", str(result["after_idle_phases"])),
    ]
    for name, value in rows:
        table.add_row(name, value)
    table.caption = (
        "times from each job's create call to the poll that saw it (0.5 s polls); "
        f"cluster up {result['cluster_up_s']} s, nodes Ready {result['nodes_ready_s']} s"
    )
    return table


def process_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the processes' CPU and memory."""
    idle = result["idle_s"]
    table = Table(
        "process",
        "CPU s (create → settled)",
        f"CPU s/s idle ({idle:.0f} s after)",
        "peak RSS MiB (sampled)",
        "VmHWM MiB (lifetime)",
        title="CPU (user+system) and memory",
    )
    for name, p in result["processes"].items():
        table.add_row(
            name,
            f"{p['cpu_s_burst']:.1f}",
            f"{p['cpu_s_per_s_idle']:.3f}",
            f"{p['peak_rss_mib']:.0f}",
            "-" if p["vm_hwm_mib"] is None else f"{p['vm_hwm_mib']:.0f}",
        )
    return table


def requests_table(result: dict[str, Any], top: int = 12) -> Table:
    """Return the rich table of the API server's busiest request kinds."""
    idle = result["idle_s"]
    table = Table(
        "request (verb resource code)",
        "during the burst",
        f"per s idle ({idle:.0f} s)",
        title="API server requests (apiserver_request_total, every client, this poller included)",
    )
    burst, quiet = result["api_requests_burst"], result["api_requests_idle"]
    keys = sorted(set(burst) | set(quiet), key=lambda k: -(burst.get(k, 0) + quiet.get(k, 0)))
    for key in keys[:top]:
        per_s = quiet.get(key, 0) / idle if idle else 0.0
        table.add_row(key, str(burst.get(key, 0)), f"{per_s:.1f}")
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench operator",
        description="100 TPJs at once on a 1,000-node kwok cluster: time to settle, CPU, memory.",
    )
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (8 per leaf)")
    parser.add_argument("--jobs", type=int, default=100, help="TensorParallelJobs at once")
    parser.add_argument("--seed", type=int, default=7, help="seed of the job mix")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for all to settle")
    parser.add_argument("--idle", type=float, default=30, help="seconds watched after settling")
    parser.add_argument(
        "--reconcile-seconds",
        type=float,
        default=None,
        help="operator timer interval (default: the operator's own default, as shipped)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    args = parser.parse_args(argv)
    if args.nodes < NODES_PER_LEAF or args.jobs < 1 or args.timeout <= 0 or args.idle < 0:
        parser.error("--nodes >= 8, --jobs >= 1, --timeout > 0 and --idle >= 0")
    if args.jobs * MAX_WORKERS < args.nodes * OVERCOMMIT:
        parser.error(f"{args.jobs} jobs of at most {MAX_WORKERS} cannot overcommit the nodes")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line ``argv``; return the exit code."""
    from importlib.metadata import version  # noqa: PLC0415

    args = parse_args(argv)
    console = Console(highlight=False, width=150)
    output: dict[str, Any] = {"benchmark": "operator", "environment": environment()}
    output["environment"]["kopf"] = version("kopf")
    output["environment"]["kubernetes_client"] = version("kubernetes")
    try:
        output["result"] = run_operator(
            nodes=args.nodes,
            jobs=args.jobs,
            seed=args.seed,
            timeout=args.timeout,
            idle_seconds=args.idle,
            reconcile_seconds=args.reconcile_seconds,
            log=console.log,
        )
    except TimeoutError as err:
        console.print(f"[red]operator benchmark failed:[/red] {err}")
        return 1
    result = output["result"]
    console.print(summary_table(result))
    console.print(process_table(result))
    console.print(requests_table(result))
    output["environment"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json is not None:
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    if result["failed"]:
        first, message = next(iter(result["failures"].items()), ("", ""))
        console.print(
            f"[red]{result['failed']} job(s) Failed instead of Running or Waiting[/red] "
            f"(first: {first}: {message[:300]})"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
