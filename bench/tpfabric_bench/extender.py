"""Extender benchmark: request latency of filter+prioritize, and kube-scheduler pods/s with it.

``tpfabric bench extender [--nodes 1000,5000] [--requests 500] [--memory-pods 50000]
[--skip-cluster] [--skip-relist] [--sizing] [--json FILE]``

(a) **Latency.** For each node count, the real extender app (``tpfabric_scheduler.server.make_app``
served by aiohttp exactly as ``python -m tpfabric_scheduler`` serves it, ``access_log=None``) runs
in a child process on 127.0.0.1 with a :class:`ClusterStore` filled with that many fake GPU nodes,
some bound pods and one TensorParallelJob whose plan is persisted; no informers, no API server.
Beside it, in its own child process, a trivial aiohttp + orjson extender answers the same requests
(filter returns the names unchanged, prioritize scores every name 0): the floor of Python + HTTP.
This process is the load generator: one keep-alive ``http.client`` connection, requests sent one
after the other the way kube-scheduler does per pod (one filter, then one prioritize), bodies
encoded up front, wall time measured client-side from send to the last byte of the answer.
Prioritize gets the names filter kept, as kube-scheduler sends them. Cases, per node count N:

- floor: the trivial server, N names each way;
- a pod that is not a worker: N names (``nodeCacheCapable``), passed through;
- a worker of the planned job as kube-scheduler sends it: the placer narrowed the worker's node
  affinity to its planned domain, so the scheduler's own filters leave only the domain's names;
- the worst case: a worker with all N names to both verbs (as if its affinity were not narrowed),
  which walks every name against the domain and answers 5,000 reasons and scores.

(b) **Throughput** (skipped with ``--skip-cluster``). A local control plane with N (1,000) kwok
nodes, the real extender/placer process (``python -m tpfabric_scheduler``, INFO logging) and two
extra kube-schedulers with the same profile (``percentageOfNodesToScore: 100``, client QPS raised
so the rate limiter is not what is measured): ``bench-plain-scheduler`` without the extender and
``tpfabric-scheduler`` with it. Each phase creates its pods while its scheduler is stopped, then
starts the scheduler and times first to last binding (the ``eventTime`` of each pod's Scheduled
event, microseconds, stamped by the scheduler), so pod creation and scheduler start-up are not
part of the rate. Phases: K plain 8-GPU pods without the extender;
the same K pods through the extender (pass-through); TensorParallelJob gangs (gated workers,
released by the placer before the scheduler starts; the placer's time is reported separately).

(c) **Memory** (skipped with ``--memory-pods 0``; run right after (a), before the cluster of (b)).
The extender's real informer list path (``Informer.relist``: pages of 25 pods, each cut down before
the next) fed by a fake API server with 50,000 pods of 5-10 KB of JSON (managedFields, env,
volumes, status; TensorParallelJob workers and other pods), 5,000 nodes and the workers' jobs, in
a child process: RSS growth (``VmRSS``/``VmHWM``), tracemalloc peak, list time, the store's
steady size, and the filter/prioritize decision times with that store loaded, beside a store of
the nodes and the probed job alone. See :mod:`tpfabric_bench._memory`.

(d) **Relist** (after (c), skipped with ``--skip-relist``): /filter latency while the extender
relists the ``--memory-pods`` pods and runs the placer cycle that wakes, beside before and after;
see :mod:`tpfabric_bench._relist`.

(e) **Sizing** (opt-in, ``--sizing``): the memory of the real extender process and of tpfabric's
kube-scheduler started on a local control plane that already holds ``--sizing-nodes`` nodes and
``--sizing-pods`` pods: the figures behind the chart's memory requests and limits; see
:mod:`tpfabric_bench._sizing`.

Numbers are wall-clock on whatever machine runs it and vary with its load. This module measures;
it must never be imported by the product, assert on timings, or bind anything but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web
from rich.console import Console

from tpfabric_bench._extender_tables import (
    cluster_table,
    decisions_table,
    latency_table,
    memory_table,
)
from tpfabric_bench._harness import (
    environment,
    local_cluster,
    placer_metrics_url,
    start_placer,
    tail,
    wait,
)
from tpfabric_bench._memory import run_memory
from tpfabric_bench._relist import relist_table, run_relist
from tpfabric_bench._sizing import run_sizing, sizing_table
from tpfabric_core.api import (
    GANG_GATE,
    GROUP,
    JOB_LABEL,
    PLURAL,
    VERSION,
    WORKER_INDEX_LABEL,
    Placement,
)
from tpfabric_core.api.placement import PLANNED, stored_status
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_scheduler.kube_scheduler_config import SCHEDULER_NAME, scheduler_configuration
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.server import make_app
from tpfabric_scheduler.store import ClusterStore

__all__ = ["main", "run_cluster", "run_latency", "run_memory"]

NAMESPACE = "bench"
JOB_NAME = "bench-job"
JOB_WORKERS = 8
WORKER_INDEX = 3
PLAIN_SCHEDULER = "bench-plain-scheduler"
PLAIN_COMPONENT = "kube-scheduler-bench-plain"
TPFABRIC_COMPONENT = "kube-scheduler-tpfabric"
PHASE_LABEL = "tpfabric.io/bench-phase"
CASE_FLOOR = "floor: N names, echoed"
CASE_OTHER = "pass-through pod: N names"
CASE_WORKER = "worker: its domain's names"
CASE_WORST = "worker: all N names (worst)"


# -- (a) the servers, run in a child process ------------------------------------------------------


def node_object(name: str, node_labels: dict[str, str]) -> dict[str, Any]:
    """Return a Ready 8-GPU Node object (a dict as the API returns it)."""
    allocatable = {"cpu": "128", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **node_labels}},
        "spec": {},
        "status": {
            "allocatable": {**allocatable, "rdma/ib": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_object(name: str, *, worker: bool, node: str | None = None) -> dict[str, Any]:
    """Return a pending 8-GPU pod the way kube-scheduler sends it (no managedFields)."""
    pod_labels = {"app": "bench"}
    if worker:
        pod_labels |= {JOB_LABEL: JOB_NAME, WORKER_INDEX_LABEL: str(WORKER_INDEX)}
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": pod_labels,
            "annotations": {"kubectl.kubernetes.io/default-container": "w"},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": SCHEDULER_NAME,
            "containers": [
                {
                    "name": "w",
                    "image": "registry.invalid/worker:1",
                    "command": ["python", "-m", "serve"],
                    "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "8", "rdma/ib": "8"},
                        "requests": {"nvidia.com/gpu": "8", "rdma/ib": "8", "cpu": "4"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for taint in ("not-ready", "unreachable")
            ],
        },
        "status": {"phase": "Running" if node else "Pending", "qosClass": "Burstable"},
    }


def build_store(nodes: int) -> ClusterStore:
    """Return a store of ``nodes`` nodes (leaves of 8), every third node busy, one planned job.

    The job's 8 workers are planned on the first leaf, which is free; the benchmark's worker pod
    is rank ``WORKER_INDEX`` of it.
    """
    fabric = uniform_fabric(nodes)
    store = ClusterStore()
    store.replace_nodes([node_object(n.name, fabric.node_labels(n)) for n in fabric.nodes])
    store.replace_pods(
        [
            pod_object(f"busy-{k}", worker=False, node=n.name)
            for k, n in enumerate(fabric.nodes)
            if k % 3 == 2 and k >= JOB_WORKERS
        ]
    )
    planned = [n.name for n in fabric.nodes[:JOB_WORKERS]]
    store.upsert_job(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TensorParallelJob",
            "metadata": {"name": JOB_NAME, "namespace": NAMESPACE, "uid": "job-uid"},
            "spec": {
                "workers": JOB_WORKERS,
                "tensorParallelSize": 8,
                "topology": {"mode": "required", "level": "leaf"},
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
            "status": stored_status(
                Placement(
                    state=PLANNED, level="leaf", domain=fabric.nodes[0].leaf, nodes=planned, hops=1
                )
            ),
        }
    )
    return store


def trivial_app() -> web.Application:
    """Return the floor: an aiohttp + orjson extender that returns the names it is given."""

    async def handle_filter(request: web.Request) -> web.Response:
        names = orjson.loads(await request.read())["NodeNames"]
        body = {"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def handle_prioritize(request: web.Request) -> web.Response:
        names = orjson.loads(await request.read())["NodeNames"]
        body = [{"Host": name, "Score": 0} for name in names]
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/filter", handle_filter)
    app.router.add_post("/prioritize", handle_prioritize)
    return app


def serve(kind: str, nodes: int) -> int:
    """Serve ``kind`` (tpfabric or trivial) on a free 127.0.0.1 port until killed.

    Prints ``PORT n`` on stdout once listening (the parent waits for that line).
    """
    if kind == "tpfabric":
        app = make_app(build_store(nodes), Metrics(), lambda: True)
    else:
        app = trivial_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))

    async def run() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        await asyncio.Event().wait()  # until SIGTERM

    asyncio.run(run())
    return 0


@contextlib.contextmanager
def server_process(kind: str, nodes: int) -> Iterator[int]:
    """Yield the port of a child process serving ``kind``; stop it afterwards."""
    with tempfile.TemporaryFile() as errors:
        argv = [sys.executable, "-m", "tpfabric_bench.extender", "--serve", kind]
        proc = subprocess.Popen(
            [*argv, "--nodes", str(nodes)], stdout=subprocess.PIPE, stderr=errors
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()
            if not line.startswith("PORT "):
                proc.wait(10)
                errors.seek(0)
                tail = errors.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{kind} server did not start: {tail}")
            yield int(line.split()[1])
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- (a) the load generator ---------------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """Client-side wall times of one case, in milliseconds, one entry per pod."""

    filter_ms: list[float]
    prioritize_ms: list[float]

    @property
    def combined_ms(self) -> list[float]:
        """Return filter + prioritize per pod (what one scheduling cycle waits for)."""
        return [f + p for f, p in zip(self.filter_ms, self.prioritize_ms, strict=True)]


def extender_args(pod: dict[str, Any], names: list[str]) -> bytes:
    """Return the ExtenderArgs body kube-scheduler sends with ``nodeCacheCapable``."""
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> bytes:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {data[:300]!r}")
    return data


def time_requests(port: int, bodies: tuple[bytes, bytes], pods: int, warmup: int) -> Timings:
    """Return the timings of ``pods`` sequential filter+prioritize pairs (after a warm-up)."""
    filter_body, prioritize_body = bodies
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    filter_ms: list[float] = []
    prioritize_ms: list[float] = []
    clock = time.perf_counter
    try:
        for k in range(warmup + pods):
            start = clock()
            _post(conn, "/filter", filter_body)
            middle = clock()
            _post(conn, "/prioritize", prioritize_body)
            end = clock()
            if k >= warmup:
                filter_ms.append((middle - start) * 1e3)
                prioritize_ms.append((end - middle) * 1e3)
    finally:
        conn.close()
    return Timings(filter_ms, prioritize_ms)


def answer_shape(port: int, bodies: tuple[bytes, bytes]) -> dict[str, int]:
    """Return how many names the filter kept and prioritize scored (a sanity check)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        filtered = orjson.loads(_post(conn, "/filter", bodies[0]))
        scored = orjson.loads(_post(conn, "/prioritize", bodies[1]))
        return {
            "kept": len(filtered.get("NodeNames") or []),
            "failed": len(filtered.get("FailedNodes") or {}),
            "unresolvable": len(filtered.get("FailedAndUnresolvableNodes") or {}),
            "scored": len(scored),
            "filter_response_bytes": len(orjson.dumps(filtered)),
        }
    finally:
        conn.close()


def run_latency(
    node_counts: Sequence[int], pods: int, warmup: int, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Return one result per (node count, server, pod kind) with p50/p99/max per verb in ms."""
    results: list[dict[str, Any]] = []
    for nodes in node_counts:
        names = [n.name for n in uniform_fabric(nodes).nodes]
        worker = pod_object(f"{JOB_NAME}-worker-{WORKER_INDEX}", worker=True)
        other = pod_object("web-0", worker=False)
        planned = names[:JOB_WORKERS]
        # (filter names, prioritize names): kube-scheduler sends prioritize what filter kept
        cases: dict[str, tuple[str, tuple[bytes, bytes]]] = {
            CASE_FLOOR: ("trivial", (extender_args(other, names), extender_args(other, names))),
            CASE_OTHER: ("tpfabric", (extender_args(other, names), extender_args(other, names))),
            CASE_WORKER: (
                "tpfabric",
                (extender_args(worker, planned), extender_args(worker, [planned[WORKER_INDEX]])),
            ),
            CASE_WORST: ("tpfabric", (extender_args(worker, names), extender_args(worker, names))),
        }
        for server in ("trivial", "tpfabric"):
            with server_process(server, nodes) as port:
                for case, (_, bodies) in ((c, v) for c, v in cases.items() if v[0] == server):
                    log(f"{nodes} nodes: {server} server, {case}, {pods} pods")
                    timings = time_requests(port, bodies, pods, warmup)
                    results.append(
                        {
                            "nodes": nodes,
                            "server": server,
                            "case": case,
                            "pods": pods,
                            "request_bytes": [len(b) for b in bodies],
                            "answer": answer_shape(port, bodies),
                            "filter_ms": tail(timings.filter_ms),
                            "prioritize_ms": tail(timings.prioritize_ms),
                            "combined_ms": tail(timings.combined_ms),
                        }
                    )
    return results


# -- (b) kube-scheduler throughput on a local cluster --------------------------------------------


def _rate(times: list[float]) -> float:
    """Return bindings per second between the first and the last binding."""
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (len(times) - 1) / (times[-1] - times[0])


def _bench_pod(name: str, scheduler: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {PHASE_LABEL: phase}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "w",
                    "image": "registry.invalid/w:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/ib": "8"}},
                }
            ],
        },
    }


def _worker_pod(job: str, index: int, phase: str) -> dict[str, Any]:
    pod = _bench_pod(f"{job}-worker-{index}", SCHEDULER_NAME, phase)
    pod["metadata"]["labels"] |= {JOB_LABEL: job, WORKER_INDEX_LABEL: str(index)}
    pod["spec"]["schedulingGates"] = [{"name": GANG_GATE}]
    return pod


def _job(name: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
    }


def _create_all(create: Callable[[dict[str, Any]], Any], objects: list[dict[str, Any]]) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(create, obj) for obj in objects]:
            future.result()


def _start_scheduler(
    cluster: Any, component: str, config: dict[str, Any], qps: int, timeout: float = 120.0
) -> None:
    """Start a kube-scheduler component with ``config`` and client QPS ``qps``.

    ``LocalCluster.start_scheduler`` keeps the client's default QPS (50 binds/s at most), which
    would make both schedulers measure the rate limiter; this sets it, and nothing else differs.
    """
    from tpfabric_localcluster.cluster import free_ports  # noqa: PLC0415

    kubeconfig = str(cluster.folder / "scheduler.kubeconfig")
    config = {
        **config,
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": qps, "burst": 2 * qps},
    }
    path = cluster.folder / f"{component}-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    (port,) = free_ports(1)
    argv = [
        str(cluster.toolchain.path("kube-scheduler")),
        f"--config={path}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cluster.folder / 'pki' / component}",
        "--v=1",
    ]
    cluster.add_component(component, argv, f"https://127.0.0.1:{port}/healthz", timeout)


def _extender_seconds(url: str) -> dict[str, dict[str, float]]:
    """Return the extender's own request count and mean seconds per verb (its /metrics at
    ``url``)."""
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own loopback URL
        text = response.read().decode()
    result: dict[str, dict[str, float]] = {}
    pattern = r'^tpfabric_extender_request_seconds_(sum|count)\{verb="(\w+)"\} (\S+)$'
    for kind, verb, value in re.findall(pattern, text, re.MULTILINE):
        result.setdefault(verb, {})[kind] = float(value)
    return {
        verb: {
            "requests": int(v.get("count", 0)),
            "mean_ms": round(1e3 * v.get("sum", 0) / v["count"], 3) if v.get("count") else 0.0,
        }
        for verb, v in result.items()
    }


class ClusterRun:
    """The phases of (b) on one local cluster; every phase leaves no pods behind."""

    def __init__(self, cluster: Any, api: Any, qps: int, log: Callable[[str], None]) -> None:
        from kubernetes import client  # noqa: PLC0415

        self.cluster = cluster
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.api = api
        self.qps = qps
        self.log = log
        self.extender_url = ""

    def start_extender(self) -> int:
        """Start the extender/placer as the chart runs it (INFO logging)."""
        port = start_placer(self.cluster, timeout=120)
        self.extender_url = f"http://127.0.0.1:{port}"
        return port

    def scheduler_config(self, with_extender: bool) -> dict[str, Any]:
        """Return the tpfabric profile, with its extender or (renamed) without."""
        if with_extender:
            return scheduler_configuration(self.extender_url)
        config = scheduler_configuration("http://127.0.0.1:1", scheduler_name=PLAIN_SCHEDULER)
        del config["extenders"]
        return config

    def measure(self, component: str, with_extender: bool, phase: str, count: int) -> list[float]:
        """Start the scheduler, wait until the ``count`` pods of ``phase`` are bound, stop it;
        return the bind times (sorted, seconds)."""
        selector = f"{PHASE_LABEL}={phase}"
        _start_scheduler(self.cluster, component, self.scheduler_config(with_extender), self.qps)
        try:
            wait(lambda: self.bound(selector) >= count, 300, f"{count} pods of {phase} bound")
        except TimeoutError as err:
            log = self.cluster.folder / "logs" / f"{component}.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise TimeoutError(f"{err}; {component} log tail:\n{tail}") from err
        deadline = time.monotonic() + 30
        times = self.scheduled_times(phase)
        while len(times) < count and time.monotonic() < deadline:
            time.sleep(0.5)  # events are sent asynchronously after each binding
            times = self.scheduled_times(phase)
        self.cluster.stop_component(component)
        return times

    def bound(self, selector: str) -> int:
        """Return how many pods matching ``selector`` have a node (from the watch cache)."""
        response = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=selector, resource_version="0", _preload_content=False
        )
        return sum(1 for pod in orjson.loads(response.data)["items"] if pod["spec"].get("nodeName"))

    def scheduled_times(self, phase: str) -> list[float]:
        """Return the sorted ``eventTime`` (microseconds, stamped by the scheduler right after
        each binding) of the Scheduled events of ``phase``'s pods, in epoch seconds.

        Server-side stamps: a watch read in this process would lag behind a burst of bindings
        on a small machine (the API server even closes a watcher that falls behind).
        """
        response = self.core.list_namespaced_event(NAMESPACE, _preload_content=False)
        times = {
            event["involvedObject"]["name"]: dt.datetime.fromisoformat(event["eventTime"])
            for event in orjson.loads(response.data)["items"]
            if event.get("reason") == "Scheduled"
            and event.get("eventTime")
            and event["involvedObject"].get("name", "").startswith(f"{phase}-")
        }
        return sorted(t.timestamp() for t in times.values())

    def clean(self, phase: str) -> None:
        """Delete the pods (and jobs) of ``phase`` and wait until the pods are gone."""
        selector = f"{PHASE_LABEL}={phase}"
        self.core.delete_collection_namespaced_pod(
            NAMESPACE, label_selector=selector, grace_period_seconds=0
        )
        self.custom.delete_collection_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, label_selector=selector
        )
        wait(
            lambda: not self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items,
            120,
            f"the pods of {phase} to be deleted",
        )

    def plain_pods(self, phase: str, count: int, with_extender: bool) -> dict[str, Any]:
        """Return the rate of ``count`` 8-GPU pods that are not workers."""
        scheduler = SCHEDULER_NAME if with_extender else PLAIN_SCHEDULER
        component = TPFABRIC_COMPONENT if with_extender else PLAIN_COMPONENT
        pods = [_bench_pod(f"{phase}-{k}", scheduler, phase) for k in range(count)]
        _create_all(lambda pod: self.core.create_namespaced_pod(NAMESPACE, pod), pods)
        self.log(f"{phase}: {count} pods pending; starting {component}")
        times = self.measure(component, with_extender, phase, count)
        self.clean(phase)
        return {
            "pods": count,
            "timed": len(times),
            "pods_per_s": round(_rate(times), 1),
            "window_s": _span(times),
        }

    def gangs(self, phase: str, jobs: int, workers: int) -> dict[str, Any]:
        """Return the placer's release time and the binding rate of ``jobs`` gangs."""
        started = time.perf_counter()
        for j in range(jobs):
            name = f"{phase}-job-{j}"
            body = _job(name, workers)
            body["metadata"]["labels"] = {PHASE_LABEL: phase}
            self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
            pods = [_worker_pod(name, i, phase) for i in range(workers)]
            _create_all(lambda pod: self.core.create_namespaced_pod(NAMESPACE, pod), pods)
        created = time.perf_counter()
        selector = f"{PHASE_LABEL}={phase}"

        def released() -> bool:
            items = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
            return len(items) == jobs * workers and not any(p.spec.scheduling_gates for p in items)

        wait(released, 300, f"the placer to release the {jobs} gangs of {phase}")
        placer_s = time.perf_counter() - started
        self.log(f"{phase}: {jobs} gangs planned and released in {placer_s:.1f} s")
        times = self.measure(TPFABRIC_COMPONENT, True, phase, jobs * workers)
        self.clean(phase)
        return {
            "jobs": jobs,
            "workers": workers,
            "pods": jobs * workers,
            "timed": len(times),
            "create_s": round(created - started, 2),
            "create_to_released_s": round(placer_s, 2),
            "pods_per_s": round(_rate(times), 1),
            "window_s": _span(times),
        }


def _span(times: list[float]) -> float:
    return round(times[-1] - times[0], 3) if times else 0.0


def run_cluster(
    *,
    nodes: int,
    pods: int,
    jobs: int,
    workers: int,
    rounds: int,
    qps: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Return the pods/s of each phase on a fresh local cluster (always torn down)."""
    result: dict[str, Any] = {"nodes": nodes, "client_qps": qps, "rounds": []}
    with local_cluster(uniform_fabric(nodes), NAMESPACE, log, result) as (cluster, api):
        run = ClusterRun(cluster, api, qps, log)
        run.start_extender()
        for k in range(rounds):
            plain = run.plain_pods(f"plain-{k}", pods, with_extender=False)
            through = run.plain_pods(f"extender-{k}", pods, with_extender=True)
            gangs = run.gangs(f"gangs-{k}", jobs, workers) if jobs else None
            ratio = through["pods_per_s"] / plain["pods_per_s"] if plain["pods_per_s"] else 0
            result["rounds"].append(
                {
                    "without_extender": plain,
                    "with_extender_pass_through": through,
                    "with_extender_gangs": gangs,
                    "pass_through_ratio": round(ratio, 3),
                }
            )
        result["extender_server_side"] = _extender_seconds(placer_metrics_url(cluster))
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench extender",
        description=(
            "(a) Extender latency at 1,000/5,000 nodes, (b) kube-scheduler pods/s with it, "
            "(c) its memory and decision times with 50,000 pods listed, (d) its latency while "
            "it relists them, (e) with --sizing, the memory of it and kube-scheduler at scale."
        ),
    )
    parser.add_argument(
        "--nodes", default="1000,5000", help="comma-separated node counts for (a) latency"
    )
    parser.add_argument("--requests", type=int, default=500, help="pods (filter+prioritize) each")
    parser.add_argument("--warmup", type=int, default=50, help="untimed pods before each case")
    parser.add_argument("--skip-cluster", action="store_true", help="skip (b), the local cluster")
    parser.add_argument("--cluster-nodes", type=int, default=1000, help="kwok nodes for (b)")
    parser.add_argument("--pods", type=int, default=300, help="(b) 8-GPU pods per phase")
    parser.add_argument("--jobs", type=int, default=16, help="(b) gangs (0 skips that phase)")
    parser.add_argument("--workers", type=int, default=8, help="(b) workers per gang")
    parser.add_argument("--rounds", type=int, default=2, help="(b) rounds of all phases")
    parser.add_argument("--qps", type=int, default=1000, help="(b) schedulers' client QPS")
    parser.add_argument(
        "--memory-pods",
        type=int,
        default=50_000,
        metavar="N",
        help="(c) pods the fake API server lists to the extender's informers, for its memory "
        "and decision times with them loaded (0 skips (c); default 50000)",
    )
    parser.add_argument(
        "--memory-nodes", type=int, default=5_000, metavar="N", help="(c) nodes listed with them"
    )
    parser.add_argument(
        "--skip-relist",
        action="store_true",
        help="skip (d), /filter latency while the extender relists --memory-pods pods",
    )
    parser.add_argument(
        "--sizing",
        action="store_true",
        help="(e): a local control plane with --sizing-nodes kwok nodes and --sizing-pods pods, "
        "and the memory of the extender and kube-scheduler started on it (minutes; opt-in)",
    )
    parser.add_argument("--sizing-nodes", type=int, default=5_000, metavar="N")
    parser.add_argument("--sizing-pods", type=int, default=50_000, metavar="N")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    parser.add_argument("--serve", choices=("tpfabric", "trivial"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.requests < 1 or args.pods < 2 or args.rounds < 1 or args.workers < 1:
        parser.error("--requests, --rounds and --workers must be >= 1, --pods >= 2")
    if args.memory_pods and (args.memory_pods < 100 or args.memory_nodes < 16):
        parser.error("--memory-pods must be 0 (skip) or >= 100, --memory-nodes >= 16")
    if args.pods > args.cluster_nodes or args.jobs * args.workers > args.cluster_nodes:
        parser.error("each phase must fit: --pods and --jobs x --workers <= --cluster-nodes")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line ``argv``; return the exit code."""
    args = parse_args(argv)
    node_counts = [int(n) for n in args.nodes.split(",") if n.strip()]
    if args.serve:
        return serve(args.serve, node_counts[0])
    console = Console(highlight=False, width=170)
    output: dict[str, Any] = {"benchmark": "extender", "environment": environment()}
    output["latency"] = run_latency(node_counts, args.requests, args.warmup, console.log)
    console.print(latency_table(output["latency"]))
    if args.memory_pods:
        output["memory"] = run_memory(
            pods=args.memory_pods,
            nodes=args.memory_nodes,
            samples=args.requests,
            warmup=args.warmup,
            log=console.log,
        )
        console.print(memory_table(output["memory"]))
        console.print(decisions_table(output["memory"]))
        if not args.skip_relist:
            output["relist"] = run_relist(
                pods=args.memory_pods, nodes=args.memory_nodes, quiet_s=2.0, log=console.log
            )
            console.print(relist_table(output["relist"]))
    if args.sizing:
        output["sizing"] = run_sizing(
            nodes=args.sizing_nodes, pods=args.sizing_pods, log=console.log
        )
        console.print(sizing_table(output["sizing"]))
    if not args.skip_cluster:
        output["cluster"] = run_cluster(
            nodes=args.cluster_nodes,
            pods=args.pods,
            jobs=args.jobs,
            workers=args.workers,
            rounds=args.rounds,
            qps=args.qps,
            log=console.log,
        )
        console.print(cluster_table(output["cluster"]))
    output["environment"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json is not None:
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
