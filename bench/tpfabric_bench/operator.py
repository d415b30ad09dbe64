"""End-to-end throughput: a burst of gangs against the same pods as plain pods, in one run.

``tpfabric bench operator [--nodes 1000] [--jobs 100] [--max-workers 16] [--single-gang N]
[--scale large] [--no-baseline] [--seed 7] [--timeout 600] [--json FILE]``

One local control plane with N kwok nodes (``uniform_fabric``, 8 per leaf) runs, as the Helm chart
ships them: the extender/placer (``python -m tpfabric_scheduler``, INFO logging), the
``tpfabric-scheduler`` kube-scheduler with the chart's client QPS/burst, and the operator
(``python -m tpfabric_operator``). Two phases, same nodes, same worker resources (8 GPUs and 8 RDMA
devices a worker):

1. **baseline**: every worker of the job mix created as a plain pod under the cluster's default
   kube-scheduler (as fast as 8 client threads go); measured until each pod is bound or marked
   Unschedulable; then all deleted.
2. **tpfabric**: the same workers as TensorParallelJobs; measured until each job is ``Running``
   or ``Waiting`` with a reason in ``status.placement``.

The headline is the ratio of the two "settled" times (every pod/job has its answer). Per gang, a
watch (``EventClock``, ms stamps) breaks its time down: create call → all workers created
(operator) → ``Planned`` (placer) → all released (ungated) → all bound (kube-scheduler) →
``Running`` (kwok's kubelet and the operator's status), as percentiles over the jobs that ran.
Also measured: CPU seconds and peak RSS of every component (operator, extender/placer, both
kube-schedulers, API server, controller manager, etcd, kwok) per phase, and the API server's
request counters.

``--scale large`` is the 5,000-node run: 500 jobs of mixed sizes up to 256 workers.
``--single-gang 256`` measures one 256-worker gang (and 256 plain pods).

Numbers are wall-clock on whatever machine runs it and vary with its load. This module measures;
it must never be imported by the product, assert on timings, or bind anything but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import statistics
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from tpfabric_bench._harness import (
    EventClock,
    ProcessSampler,
    apiserver_metrics,
    environment,
    grown,
    histogram_totals,
    local_cluster,
    mean_ms_grown,
    placer_metrics_url,
    request_counts,
    request_seconds,
    scheduler_metrics,
    scheduling_seconds,
    start_components,
    summary,
    vm_hwm_mib,
    wait,
)
from tpfabric_bench._operator_run import COMPONENTS, NODES_PER_LEAF, SCHEDULER, STAGES
from tpfabric_bench._operator_tables import (
    breakdown_table,
    idle_table,
    process_table,
    requests_table,
    scheduler_time_table,
    server_time_table,
    summary_table,
)
from tpfabric_core.api import GROUP, PLURAL, VERSION, TensorParallelJob
from tpfabric_core.api.placement import placement_of_status
from tpfabric_core.fabric_description import FabricDescription, uniform_fabric
from tpfabric_core.timestamps import parse_rfc3339
from tpfabric_operator.jobs.children import JOB_LABEL, worker_pod
from tpfabric_scheduler.kube_scheduler_config import scheduler_configuration

__all__ = ["JobShape", "job_manifest", "job_mix", "main", "plain_pods", "run_operator"]

NAMESPACE = "bench-operator"
MIN_WORKERS, SMALL_MAX = 2, 16
OVERCOMMIT = 1.1  # the jobs' workers add up to 110% of the nodes
NEVER_FIT = 5  # required-leaf jobs larger than any leaf
LARGE_SHARE = 0.04  # with --max-workers > 16: this share of the jobs is large (32..max)
PLAIN_LABEL = "bench.tpfabric.io/plain"
#: the init image named in the plain twins (kwok runs no image; the operator's default)
TWIN_INIT_IMAGE = "tpfabric/rdma-init:0.1.0"
APISERVER = "kube-apiserver"
#: after the burst settled: a pause, then the window whose writes are counted
IDLE_SETTLE_S = 10.0
IDLE_WINDOW_S = 30.0
#: writes that are no job's: kwok's node heartbeats and every component's leader Lease
_INFRASTRUCTURE = ("leases",)
_WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


# -- the jobs (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobShape:
    """One job of the mix: its size and topology policy, and whether it can ever be placed."""

    name: str
    workers: int
    mode: str  # required | preferred (level is always leaf)
    never_fits: bool


def job_mix(jobs: int, nodes: int, seed: int, max_workers: int = SMALL_MAX) -> list[JobShape]:
    """Return ``jobs`` seeded job shapes whose workers add up to ``OVERCOMMIT`` x ``nodes`` or more.

    Sizes are drawn from 2..16 and raised one worker at a time (never past 16) until the total
    reaches the target (exactly, when the draw falls short of it). With ``max_workers`` above
    16, ``LARGE_SHARE`` of the jobs (at least one) are large instead: powers of two from 32 to
    ``max_workers``, one of them the largest, together at most half the target (the total may
    then exceed the target). ``NEVER_FIT`` of the jobs of 9..16 require a leaf (they
    wait with a reason forever); other jobs of at most a leaf require one with probability 0.6;
    the rest (large ones included) prefer a leaf and climb when it cannot hold them.
    """
    rng = random.Random(seed)  # noqa: S311 - a seeded mix, not cryptography
    target = math.ceil(nodes * OVERCOMMIT)
    workers = [rng.randint(MIN_WORKERS, SMALL_MAX) for _ in range(jobs)]
    large: set[int] = set()
    if max_workers > SMALL_MAX:
        sizes = [2**e for e in range(5, max_workers.bit_length()) if 2**e <= max_workers]
        wanted = max(1, round(jobs * LARGE_SHARE))
        budget = target // 2
        for k in rng.sample(range(jobs), min(wanted, jobs)):
            size = max_workers if not large else rng.choice(sizes)
            if size > budget:
                continue
            workers[k] = size
            budget -= size
            large.add(k)
    while sum(workers) < target:
        small = [k for k in range(jobs) if k not in large and workers[k] < SMALL_MAX]
        if not small:
            break
        workers[rng.choice(small)] += 1
    leaf_sized = [k for k, w in enumerate(workers) if NODES_PER_LEAF < w <= SMALL_MAX]
    never = set(rng.sample(leaf_sized, min(NEVER_FIT, len(leaf_sized))))
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


def plain_pods(
    shapes: list[JobShape], rdma_resource: str, twins: str = "same"
) -> list[dict[str, Any]]:
    """Return every worker of ``shapes`` as a plain pod of the default scheduler.

    ``twins="same"``: the very pod the operator creates for that worker (its containers, the
    RDMA init container, env, volumes, requests), less what makes it tpfabric's: no gate, the
    default scheduler, no tpfabric labels. The phases then differ only in the pipeline, not in
    what each pod costs the API server. ``twins="lean"``: one container with the same requests
    and nothing else (the comparison of the first measurements).
    """
    if twins not in ("same", "lean"):
        raise ValueError(f"twins: 'same' or 'lean', not {twins!r}")
    pods = []
    for shape in shapes:
        job = (
            TensorParallelJob.model_validate(job_manifest(shape, rdma_resource))
            if twins == "same"
            else None
        )
        for index in range(shape.workers):
            if job is not None:
                pod = worker_pod(job, shape.name, NAMESPACE, index, TWIN_INIT_IMAGE)
                spec = pod["spec"]
                spec.pop("schedulingGates", None)
                spec.pop("schedulerName", None)
            else:
                spec = {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.invalid/worker:1",
                            "command": ["sleep", "infinity"],
                            "resources": {
                                "limits": {"nvidia.com/gpu": "8", rdma_resource: "8"},
                            },
                        }
                    ],
                }
            spec["terminationGracePeriodSeconds"] = 0
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{shape.name}-plain-{index}",
                        "namespace": NAMESPACE,
                        "labels": {PLAIN_LABEL: shape.name},
                    },
                    "spec": spec,
                }
            )
    return pods


# -- predicates of the watches (pure) -------------------------------------------------------------


def _pod_bound(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _pod_ungated(pod: dict[str, Any]) -> bool:
    return not (pod.get("spec") or {}).get("schedulingGates")


def _pod_running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def _pod_unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _job_planned(job: dict[str, Any]) -> bool:
    placement = placement_of_status(job.get("status"))
    return placement.planned or bool(placement.planned_at)


def _job_running(job: dict[str, Any]) -> bool:
    return (job.get("status") or {}).get("phase") == "Running"


def settled(job: dict[str, Any]) -> str | None:
    """Return ``Running`` or ``Waiting`` (with a reason) when the job has settled, else None.

    ``Failed`` also ends the wait (it will not change by itself); the report counts it.
    """
    status = job.get("status") or {}
    phase = status.get("phase")
    placement = placement_of_status(status)
    if phase in ("Running", "Failed"):
        return str(phase)
    if phase == "Waiting" and placement.waiting and (placement.message or placement.reasons):
        return "Waiting"
    return None


def stage_ends(
    created: dict[str, float],
    jobs: dict[str, dict[str, float]],
    pods: dict[str, dict[str, float]],
    pod_job: dict[str, str],
) -> dict[str, dict[str, float]]:
    """Return, per job that ran, when each stage of ``STAGES`` ended: its last worker's mark.

    ``created``: job name -> its create call; ``jobs``: job name -> marks (``planned``,
    ``running``); ``pods``: pod key -> marks (``seen``, ``ungated``, ``bound``, ``running``);
    ``pod_job``: pod key -> job name.
    """
    members: dict[str, list[dict[str, float]]] = {}
    for key, marks in pods.items():
        if key in pod_job:
            members.setdefault(pod_job[key], []).append(marks)
    result: dict[str, dict[str, float]] = {}
    for name in created:
        marks = jobs.get(name, {})
        workers = members.get(name, [])
        if "running" not in marks or not workers:
            continue
        ends = {
            "created": max(m.get("seen", math.inf) for m in workers),
            "planned": marks.get("planned", math.inf),
            "released": max(m.get("ungated", math.inf) for m in workers),
            "bound": max(m.get("bound", math.inf) for m in workers),
            "pods_running": max(m.get("running", math.inf) for m in workers),
            "running": marks["running"],
        }
        if not any(math.isinf(v) for v in ends.values()):
            result[name] = ends
    return result


def gang_breakdown(
    created: dict[str, float], ends: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Return, per stage of ``STAGES``, the percentiles of its duration over the jobs that ran
    (``ends``: :func:`stage_ends`; ``created``: job name -> its create call). Also ``total``."""
    stages: dict[str, list[float]] = {name: [] for name, _ in (*STAGES, ("total", ""))}
    for name, end_of in ends.items():
        previous = created[name]
        for stage, _ in STAGES:
            end = max(end_of[stage], previous)  # a stage seen late never counts negative
            stages[stage].append(end - previous)
            previous = end
        stages["total"].append(end_of["running"] - created[name])
    return {stage: summary(values, (0.5, 0.9, 0.99)) for stage, values in stages.items()}


def last_stage_ends(ends: dict[str, dict[str, float]], t0: float) -> dict[str, float]:
    """Return, per stage, when the last job that ran got there (seconds from ``t0``; ``ends``:
    :func:`stage_ends`): which stage's tail sets the phase's time (the last worker Running vs
    the last status that says so)."""
    values = ends.values()
    return {stage: round(max(e[stage] for e in values) - t0, 2) for stage, _ in STAGES if values}


# -- the phases -----------------------------------------------------------------------------------


RELEASE_WRITE = "tpfabric_placer_release_write_seconds"
EXTENDER_FILTER = "extender /filter: its handler (tpfabric's metrics)"


def placer_times(url: str) -> dict[str, tuple[float, int]]:
    """Return the placer's release writes and the extender's filter answers so far, as
    (seconds, count) each (its /metrics at ``url``)."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own loopback URL
        return placer_time_totals(response.read().decode())


def placer_time_totals(text: str) -> dict[str, tuple[float, int]]:
    """Return ``RELEASE_WRITE`` and ``EXTENDER_FILTER`` of a Prometheus text exposition."""
    release = histogram_totals(text, RELEASE_WRITE, lambda _: RELEASE_WRITE)
    answers = histogram_totals(
        text,
        "tpfabric_extender_request_seconds",
        lambda found: EXTENDER_FILTER if found.get("verb") == "filter" else None,
    )
    return {
        RELEASE_WRITE: release.get(RELEASE_WRITE, (0.0, 0)),
        EXTENDER_FILTER: answers.get(EXTENDER_FILTER, (0.0, 0)),
    }


def _create(
    objects: list[dict[str, Any]], create: Callable[[dict[str, Any]], Any]
) -> dict[str, float]:
    """Create ``objects`` with 8 client threads; return name -> the start of its create call."""
    started: dict[str, float] = {}

    def one(obj: dict[str, Any]) -> None:
        started[obj["metadata"]["name"]] = time.perf_counter()
        create(obj)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(one, obj) for obj in objects]:
            future.result()
    return started


def idle_writes(requests: dict[str, int], seconds: float) -> dict[str, Any]:
    """Return the writes of an idle window (the target: none from settled jobs) by request,
    without the infrastructure's (leases), and their rate."""
    writes = {
        key: count
        for key, count in requests.items()
        if key.split(" ")[0] in _WRITE_VERBS and key.split(" ")[1] not in _INFRASTRUCTURE
    }
    total = sum(writes.values())
    return {"window_s": seconds, "writes": writes, "writes_per_s": round(total / seconds, 3)}


class Phase:
    """One measured phase: CPU and peak RSS of every component, API requests, wall time, and
    the own time of ``scheduler`` (a kube-scheduler component of ``cluster``) when given."""

    def __init__(
        self,
        api: Any,
        sampler: ProcessSampler,
        placer_port: int | None = None,
        *,
        cluster: Any = None,
        scheduler: str | None = None,
    ) -> None:
        self.api, self.sampler, self.cluster, self.scheduler = api, sampler, cluster, scheduler
        #: the placer's /metrics (``placer_port``: a placer of ``cluster`` is measured)
        self.placer_url = placer_metrics_url(cluster) if placer_port is not None else None

    def __enter__(self) -> Phase:
        self.sampler.reset_peaks()
        self.cpu = self.sampler.cpu()
        if self.placer_url is not None:
            self.placer = placer_times(self.placer_url)
        if self.scheduler is not None:
            self.scheduling = scheduling_seconds(scheduler_metrics(self.cluster, self.scheduler))
        metrics = apiserver_metrics(self.api)
        self.requests, self.request_time = request_counts(metrics), request_seconds(metrics)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        cpu = self.sampler.cpu()
        metrics = apiserver_metrics(self.api)
        self.result: dict[str, Any] = {
            "processes": {
                name: {
                    "cpu_s": round(cpu.get(name, 0.0) - self.cpu.get(name, 0.0), 2),
                    "peak_rss_mib": round(peak / 2**20, 1),
                }
                for name, peak in self.sampler.peak_rss.items()
            },
            "api_requests": grown(request_counts(metrics), self.requests),
            # the API server's own time per request (its handler, not the client's wait)
            "api_server_ms": mean_ms_grown(request_seconds(metrics), self.request_time),
        }
        if self.scheduler is not None:
            after = scheduling_seconds(scheduler_metrics(self.cluster, self.scheduler))
            self.result["scheduler_ms"] = mean_ms_grown(after, self.scheduling)
        if self.placer_url is not None:
            grew = mean_ms_grown(placer_times(self.placer_url), self.placer)
            self.result["placer_release_write"] = grew.get(
                RELEASE_WRITE, {"requests": 0, "mean_ms": 0.0}
            )
            if EXTENDER_FILTER in grew and "scheduler_ms" in self.result:
                # the part of kube-scheduler's algorithm time the extender spent answering
                self.result["scheduler_ms"][EXTENDER_FILTER] = grew[EXTENDER_FILTER]


def _baseline(
    api: Any,
    fabric: FabricDescription,
    shapes: list[JobShape],
    timeout: float,
    log: Any,
    *,
    twins: str = "same",
) -> dict[str, Any]:
    """Create every worker as a plain pod; measure until each is bound or Unschedulable."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(api)
    pods = plain_pods(shapes, fabric.rdma_resource, twins)
    clock = EventClock(
        api,
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {"bound": _pod_bound, "running": _pod_running, "unschedulable": _pod_unschedulable},
    ).start()
    try:
        log(f"baseline: {len(pods)} plain pods under the default scheduler")
        t0 = time.perf_counter()
        started = _create(pods, lambda pod: core.create_namespaced_pod(NAMESPACE, pod))
        create_s = time.perf_counter() - t0

        def answered() -> bool:
            stamps, _ = clock.snapshot()
            done = sum(1 for m in stamps.values() if "running" in m or ("unschedulable" in m))
            return done >= len(pods)

        wait(answered, timeout, "every plain pod Running or Unschedulable", step=0.1)
        settle_s = time.perf_counter() - t0
    finally:
        clock.stop()
    stamps, _ = clock.snapshot()
    running = [
        m["running"] - started[k.split("/", 1)[1]] for k, m in stamps.items() if "running" in m
    ]
    bound = sorted(m["bound"] for m in stamps.values() if "bound" in m)
    result = {
        "pods": len(pods),
        "create_s": round(create_s, 2),
        "settle_s": round(settle_s, 2),
        "bound": len(bound),
        "running": len(running),
        "unschedulable": sum(
            1 for m in stamps.values() if "unschedulable" in m and "bound" not in m
        ),
        "all_running_s": round(max(m["running"] for m in stamps.values() if "running" in m) - t0, 2)
        if running
        else 0.0,
        "pod_time_to_running_s": summary(running, (0.5, 0.9, 0.99)),
        "binds_per_s": round((len(bound) - 1) / (bound[-1] - bound[0]), 1)
        if len(bound) > 1 and bound[-1] > bound[0]
        else 0.0,
    }
    log(f"baseline settled in {settle_s:.1f} s; deleting the plain pods")
    core.delete_collection_namespaced_pod(
        NAMESPACE, label_selector=PLAIN_LABEL, grace_period_seconds=0
    )
    wait(
        lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=PLAIN_LABEL).items,
        300,
        "the plain pods gone",
    )
    return result


def _gangs(
    api: Any, fabric: FabricDescription, shapes: list[JobShape], timeout: float, log: Any
) -> dict[str, Any]:
    """Create every job at once; measure until each is Running or Waiting with a reason."""
    from kubernetes import client  # noqa: PLC0415

    custom = client.CustomObjectsApi(api)
    pods = EventClock(
        api,
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "seen": lambda _: True,
            "ungated": _pod_ungated,
            "bound": _pod_bound,
            "running": _pod_running,
        },
    ).start()
    jobs = EventClock(
        api,
        f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}",
        {"planned": _job_planned, "running": _job_running, "settled": lambda j: bool(settled(j))},
    ).start()
    try:
        manifests = [job_manifest(s, fabric.rdma_resource) for s in shapes]
        log(f"tpfabric: {len(shapes)} jobs ({sum(s.workers for s in shapes)} workers) at once")
        t0 = time.perf_counter()
        started = _create(
            manifests,
            lambda job: custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, job
            ),
        )
        create_s = time.perf_counter() - t0
        last_log = [t0]

        def all_settled() -> bool:
            _, objects = jobs.snapshot()
            states = [settled(j) for j in objects.values()]
            now = time.perf_counter()
            if now - last_log[0] > 10:
                last_log[0] = now
                log(f"settled {sum(1 for s in states if s)}/{len(shapes)}: {Counter(states)}")
            return len(states) == len(shapes) and all(states)

        wait(all_settled, timeout, "every job Running or Waiting with a reason", step=0.1)
        settle_s = time.perf_counter() - t0
    finally:
        pods.stop()
        jobs.stop()
    job_stamps, objects = jobs.snapshot()
    pod_stamps, pod_objects = pods.snapshot()
    by_job = {
        key: (obj.get("metadata", {}).get("labels") or {}).get(JOB_LABEL, "")
        for key, obj in pod_objects.items()
    }
    job_marks = {k.split("/", 1)[1]: v for k, v in job_stamps.items()}
    final = {k.split("/", 1)[1]: settled(j) for k, j in objects.items()}
    running = [
        job_marks[n]["running"] - t for n, t in started.items() if "running" in job_marks.get(n, {})
    ]
    ends = stage_ends(started, job_marks, pod_stamps, by_job)
    return {
        "create_s": round(create_s, 2),
        "settle_s": round(settle_s, 2),
        "running": sum(1 for s in final.values() if s == "Running"),
        "waiting": sum(1 for s in final.values() if s == "Waiting"),
        "failed": sum(1 for s in final.values() if s == "Failed"),
        "workers_running": sum(s.workers for s in shapes if final.get(s.name) == "Running"),
        "all_running_s": round(
            max(job_marks[n]["running"] for n in started if "running" in job_marks.get(n, {})) - t0,
            2,
        )
        if running
        else 0.0,
        "job_time_to_running_s": summary(running, (0.5, 0.9, 0.99)),
        "breakdown_s": gang_breakdown(started, ends),
        "last_stage_end_s": last_stage_ends(ends, t0),
        # every gang's stage ends from the first create call: which gang is last, and why
        "stage_end_s": {
            name: {"create_call": round(started[name] - t0, 2)}
            | {stage: round(t - t0, 2) for stage, t in end_of.items()}
            for name, end_of in sorted(ends.items())
        },
        "last_worker_created_server_s": _server_span(objects, pod_objects),
        "waiting_messages": {
            n: placement_of_status(j.get("status")).message[:160]
            for n, j in ((k.split("/", 1)[1], j) for k, j in objects.items())
            if final.get(n) == "Waiting"
        },
    }


def _server_span(jobs: dict[str, Any], pods: dict[str, Any]) -> float | None:
    """Return the API server's own time (1 s steps) from the first job's creation to the last
    worker's: the creation rate without the benchmark's watch in between."""
    first = [parse_rfc3339(j["metadata"].get("creationTimestamp")) for j in jobs.values()]
    last = [parse_rfc3339(p["metadata"].get("creationTimestamp")) for p in pods.values()]
    starts = [t for t in first if t is not None]
    ends = [t for t in last if t is not None]
    return round(max(ends) - min(starts), 1) if starts and ends else None


def _clear_jobs(api: Any, timeout: float, log: Callable[[str], None]) -> None:
    """Delete every job of the benchmark and wait until its jobs, pods and Services are gone."""
    from kubernetes import client  # noqa: PLC0415

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    log("deleting the jobs before the next round")
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)

    def gone() -> bool:
        jobs = custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]
        return not (
            jobs
            or core.list_namespaced_pod(NAMESPACE).items
            or core.list_namespaced_service(NAMESPACE).items
        )

    wait(gone, timeout, "the jobs, their pods and Services gone")


def median_ratio(rounds: list[dict[str, Any]]) -> float | None:
    """Return the median settle ratio of the rounds that had a baseline (None: none had)."""
    ratios = [r["settle_ratio"] for r in rounds if r.get("settle_ratio") is not None]
    return statistics.median(ratios) if ratios else None


def run_operator(
    *,
    nodes: int,
    shapes: list[JobShape],
    baseline: bool,
    timeout: float,
    log: Callable[[str], None],
    twins: str = "same",
    rounds: int = 1,
) -> dict[str, Any]:
    """Return the measurements of both phases on a fresh local cluster (always torn down).

    With ``rounds`` > 1 the two phases run that many times on the same cluster (the jobs are
    deleted in between); the tables show the last round, ``rounds`` every round's settle times.
    """
    fabric = uniform_fabric(nodes, nodes_per_leaf=NODES_PER_LEAF)
    result: dict[str, Any] = {
        "nodes": nodes,
        "leaves": math.ceil(nodes / NODES_PER_LEAF),
        "jobs": len(shapes),
        "workers_total": sum(s.workers for s in shapes),
        "largest_job": max(s.workers for s in shapes),
        "mix": {
            "required_leaf": sum(1 for s in shapes if s.mode == "required"),
            "preferred_leaf": sum(1 for s in shapes if s.mode == "preferred"),
            "never_fit": sum(1 for s in shapes if s.never_fits),
        },
        "tpfabric_scheduler_client": scheduler_configuration("http://x")["clientConnection"],
    }
    with local_cluster(fabric, NAMESPACE, log, result) as (cluster, api):
        port = start_components(cluster)
        state = cluster.state()
        assert state is not None
        pids = {name: state.components[name].pid for name in COMPONENTS}
        time.sleep(5)  # let the informers' first lists and kopf's start-up settle
        with ProcessSampler(pids) as sampler:
            result["rounds"] = []
            for n in range(rounds):
                if n:
                    _clear_jobs(api, timeout, log)
                    time.sleep(3)
                if baseline:
                    with Phase(
                        api, sampler, cluster=cluster, scheduler=SCHEDULER["baseline"]
                    ) as phase:
                        result["baseline"] = _baseline(
                            api, fabric, shapes, timeout, log, twins=twins
                        )
                    result["baseline"] |= phase.result | {"twins": twins}
                    time.sleep(3)
                with Phase(
                    api, sampler, port, cluster=cluster, scheduler=SCHEDULER["tpfabric"]
                ) as phase:
                    result["tpfabric"] = _gangs(api, fabric, shapes, timeout, log)
                result["tpfabric"] |= phase.result
                result["rounds"].append(_round(result, baseline))
                log(f"round {n + 1} of {rounds}: {result['rounds'][-1]}")
            result["settle_ratio_median"] = median_ratio(result["rounds"])
            time.sleep(IDLE_SETTLE_S)  # the last status writes of the burst land
            log(f"idle: {IDLE_WINDOW_S:.0f} s with every job settled")
            with Phase(api, sampler) as phase:
                time.sleep(IDLE_WINDOW_S)
            result["idle"] = idle_writes(phase.result["api_requests"], IDLE_WINDOW_S)
        result["vm_hwm_mib"] = {name: vm_hwm_mib(pid) for name, pid in pids.items()}
    if result["rounds"][-1]["settle_ratio"] is not None:
        result["settle_ratio"] = result["rounds"][-1]["settle_ratio"]
    return result


def _round(result: dict[str, Any], baseline: bool) -> dict[str, Any]:
    """Return one round's settle times (and ratio) from the phases just measured."""
    ours = result["tpfabric"]["settle_s"]
    plain = result["baseline"]["settle_s"] if baseline else None
    return {
        "baseline_settle_s": plain,
        "tpfabric_settle_s": ours,
        "settle_ratio": round(ours / plain, 2) if plain else None,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench operator",
        description="A burst of TPJs vs the same workers as plain pods, on kwok nodes.",
    )
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (8 per leaf)")
    parser.add_argument("--jobs", type=int, default=100, help="TensorParallelJobs at once")
    parser.add_argument(
        "--max-workers", type=int, default=SMALL_MAX, help="largest job (above 16: a few large)"
    )
    parser.add_argument(
        "--single-gang", type=int, metavar="N", help="one job of N workers instead of the mix"
    )
    parser.add_argument(
        "--scale",
        choices=("default", "large"),
        default="default",
        help="large: 5,000 nodes, 500 jobs up to 256 workers",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain-pods phase")
    parser.add_argument(
        "--twins",
        choices=("same", "lean"),
        default="same",
        help="plain pods: the workers' own pods (default) or one bare container each",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run both phases this many times on one cluster; report every ratio and the median",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the job mix")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for a phase")
    parser.add_argument("--json", type=argparse.FileType("w"), metavar="FILE")
    args = parser.parse_args(argv)
    if args.scale == "large":
        args.nodes, args.jobs, args.max_workers = 5000, 500, 256
    if args.nodes < NODES_PER_LEAF or args.jobs < 1 or args.timeout <= 0 or args.rounds < 1:
        parser.error("--nodes >= 8, --jobs >= 1, --rounds >= 1 and --timeout > 0")
    if args.single_gang is not None and not 1 <= args.single_gang <= args.nodes:
        parser.error("--single-gang N: 1 <= N <= --nodes")
    if args.single_gang is None and args.jobs * max(args.max_workers, 1) < args.nodes * OVERCOMMIT:
        parser.error(f"{args.jobs} jobs of at most {args.max_workers} cannot overcommit the nodes")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line ``argv``; return the exit code."""
    from importlib.metadata import version  # noqa: PLC0415

    args = parse_args(argv)
    console = Console(highlight=False, width=160)
    if args.single_gang is not None:
        shapes = [JobShape("tpj-000", args.single_gang, "preferred", never_fits=False)]
    else:
        shapes = job_mix(args.jobs, args.nodes, args.seed, args.max_workers)
    output: dict[str, Any] = {"benchmark": "operator", "environment": environment()}
    output["environment"] |= {"kopf": version("kopf"), "kubernetes_client": version("kubernetes")}
    try:
        output["result"] = run_operator(
            nodes=args.nodes,
            shapes=shapes,
            baseline=not args.no_baseline,
            timeout=args.timeout,
            log=console.log,
            twins=args.twins,
            rounds=args.rounds,
        )
    except TimeoutError as err:
        console.print(f"[red]operator benchmark failed:[/red] {err}")
        return 1
    result = output["result"]
    for table in (
        summary_table,
        breakdown_table,
        process_table,
        requests_table,
        server_time_table,
        scheduler_time_table,
        idle_table,
    ):
        console.print(table(result))
    output["environment"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json is not None:
        json.dump(output, args.json, indent=2)
        args.json.write("\n")
    if result["tpfabric"]["failed"]:
        console.print(f"[red]{result['tpfabric']['failed']} job(s) Failed[/red]")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
