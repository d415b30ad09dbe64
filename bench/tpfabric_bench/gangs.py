"""A LeaderWorkerSet burst: the same groups plain, wired by hand and with tpfabric, in one run.

``tpfabric bench gangs [--nodes 1000] [--groups 100] [--size 8] [--sets 1] [--timeout 900]
[--json FILE]``

One local control plane with N kwok nodes (``uniform_fabric``, 8 per leaf, labelled as for
``tpfabric bench operator``) runs the real LeaderWorkerSet controller (v0.9.0, its own webhooks on
loopback) beside tpfabric as a cluster runs it for gangs of other controllers: the gang webhook
(its configuration applied), the operator (gang records), the extender/placer and the
``tpfabric-scheduler`` kube-scheduler. Three arms, same nodes, same LeaderWorkerSet manifest
(nothing of tpfabric in it; each pod asks for 8 GPUs, a whole node):

1. **without tpfabric**: created in a namespace that is not opted in, so the gang webhook never
   sees its pods and the default kube-scheduler places them one by one;
2. **wired by hand**: the same, with the RDMA wiring the gang webhook gives each pod written into
   the pod template by hand (:func:`wired_manifests`: core's ``wire_rdma``, so the rdma-init init
   container, its volumes and environment, 8 RDMA devices beside the 8 GPUs, the
   ``tpfabric.io/rdma`` annotation) and nothing else of tpfabric: no gate, no gang, no Gang
   record, the default kube-scheduler. What every pod that rides the fabric carries costs the
   control plane by itself (a larger pod on every write, watch and decode of every component);
   this arm tells that cost from tpfabric's machinery;
3. **with tpfabric**: created in a namespace labelled ``tpfabric.io/gangs=enabled``: every pod is
   gated and wired by the webhook, each group gets a Gang record, the placer plans it whole and
   the tpfabric-scheduler binds it.

Each arm is timed from the first create call to the last pod ``Running`` (a watch stamps every
pod in ms: created, ungated, bound, Running) and deleted before the next. Reported per arm: time to
all Running (the headline is the ratio to the first arm, target <= 1.3x; beside it the ratio to
the second, tpfabric's machinery alone), time to each group Running, and how many
groups have pods under more than one leaf switch. The webhook's admission latency (target p99 <=
10 ms) comes from its own ``/metrics`` histogram (the handler's time) over the burst, and, as the
client sees it, from kube-apiserver's ``apiserver_admission_webhook_admission_duration_seconds``
(the round trip, TLS and queueing included); both are bucket estimates.

Why one LeaderWorkerSet of G replicas by default (``--sets K`` splits the groups over K): that is
how a served model scales (one LWS, a replica a group), one create call starts the clock, and the
fan-out is the controllers' own (LWS -> the leader StatefulSet -> a worker StatefulSet per group),
not the benchmark's client threads.

The times are wall-clock seconds of the machine the run is on, loaded as it happens to be. Only a
benchmark: nothing of the product may import it, it asserts nothing about timings, and every
process it starts listens on 127.0.0.1 alone.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from tpfabric_bench._harness import (
    EventClock,
    ProcessSampler,
    apiserver_metrics,
    environment,
    histogram_totals,
    local_cluster,
    metric_labels,
    start_gang_components,
    summary,
    vm_hwm_mib,
    wait,
)
from tpfabric_bench._operator_run import COMPONENTS, NODES_PER_LEAF, SCHEDULER
from tpfabric_bench._operator_tables import scheduler_time_table, server_time_table
from tpfabric_bench.operator import Phase
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.api.models import GROUP, VERSION
from tpfabric_core.api.placement import placement_of_status
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_core.pod_wiring import NCCL_CONF_ENV, RdmaWiring, wire_rdma
from tpfabric_core.rdma_default import (
    NODES_OFFER,
    RDMA_ANNOTATION,
    RdmaDecision,
    with_rdma_devices,
)

__all__ = [
    "admission_latency",
    "bucket_quantile",
    "burst_result",
    "group_of",
    "histogram_buckets",
    "leaf_spread",
    "lws_manifests",
    "main",
    "run_gangs",
    "summary_table",
    "webhook_table",
    "wired_manifests",
]

#: the arms, in the order they run: (key, namespace, opted in to the gang webhook)
ARMS = (
    ("baseline", "bench-gangs-plain", False),
    ("wired", "bench-gangs-wired", False),
    ("tpfabric", "bench-gangs-tpfabric", True),
)
ARM_TITLES = {
    "baseline": "without tpfabric (default scheduler)",
    "wired": "wired by hand, no tpfabric (default scheduler)",
    "tpfabric": "with tpfabric (webhook, placer, tpfabric-scheduler)",
}
#: the rdma-init image the local cluster's gang webhook writes (never pulled: kwok runs no image)
INIT_IMAGE = "tpfabric/rdma-init:dev"
RDMA_RESOURCE = "rdma/ib"
LWS_API = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
GPUS_PER_POD = 8
RATIO_TARGET = 1.3
P99_TARGET_MS = 10.0
WEBHOOK_HISTOGRAM = "tpfabric_webhook_admission_seconds"
APISERVER_HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds"
WEBHOOK_COLUMNS = (
    "gang webhook, tpfabric arm",
    "reviews",
    "p50 ms",
    "p99 ms",
    "mean ms",
    "<= 10 ms",
)
#: every process of the cluster: the LWS controller and the gang webhook, then the operator bench's
PROCESSES = ("lws-controller", "tpfabric-gang-webhook", *COMPONENTS)


# -- the LeaderWorkerSets (pure) ------------------------------------------------------------------


def lws_manifests(groups: int, size: int, sets: int = 1) -> list[dict[str, Any]]:
    """Return ``sets`` LeaderWorkerSets whose replicas add up to ``groups`` (as even as can be),
    each group ``size`` pods of 8 GPUs; plain: nothing of tpfabric in them.

    One set is named ``serve``, several ``serve-0``...; a pod's grace period is 0 so that the
    arm's deletion does not wait on kwok.
    """
    if not 1 <= sets <= groups or size < 1:
        raise ValueError(f"need 1 <= sets <= groups and size >= 1 (sets {sets}, size {size})")
    container = {
        "name": "main",
        "image": "registry.invalid/vllm:1",
        "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_POD), "cpu": "1"}},
    }
    template = {"spec": {"containers": [container], "terminationGracePeriodSeconds": 0}}
    share, extra = divmod(groups, sets)
    group, version, _ = LWS_API
    return [
        {
            "apiVersion": f"{group}/{version}",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve" if sets == 1 else f"serve-{k}"},
            "spec": {
                "replicas": share + (1 if k < extra else 0),
                "leaderWorkerTemplate": {"size": size, "workerTemplate": template},
            },
        }
        for k in range(sets)
    ]


def wired_manifests(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``manifests`` (:func:`lws_manifests`) with the RDMA wiring the gang webhook gives
    each pod written into their pod template: core's ``wire_rdma`` (the rdma-init init container,
    the shared and downward-API volumes, the NCCL environment), 8 RDMA devices on each container
    that takes GPUs (``with_rdma_devices``, as the webhook) and the ``tpfabric.io/rdma``
    annotation; nothing else (no gate, no gang label, the default scheduler). New dicts."""
    wiring = RdmaWiring(
        init_image=INIT_IMAGE,
        gpus=GPUS_PER_POD,
        rdma_resource=RDMA_RESOURCE,
        rdma_count=GPUS_PER_POD,
    )
    decision = RdmaDecision(
        resource=RDMA_RESOURCE,
        count=GPUS_PER_POD,
        reason=NODES_OFFER,
        message=f"{GPUS_PER_POD} {RDMA_RESOURCE} per pod, written into the template by hand",
    )
    wired = []
    for manifest in manifests:
        template = manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        containers = with_rdma_devices(template["spec"]["containers"], RDMA_RESOURCE, GPUS_PER_POD)
        spec = wire_rdma(
            {**template["spec"], "containers": containers}, wiring, [dict(NCCL_CONF_ENV)]
        )
        meta = {"annotations": {RDMA_ANNOTATION: decision.annotation()}}
        lws = manifest["spec"]["leaderWorkerTemplate"]
        wired.append(
            {
                **manifest,
                "spec": {
                    **manifest["spec"],
                    "leaderWorkerTemplate": {
                        **lws,
                        "workerTemplate": {"metadata": meta, "spec": spec},
                    },
                },
            }
        )
    return wired


def group_of(pod: Mapping[str, Any]) -> str | None:
    """Return the LWS group of ``pod`` as ``<lws>-<group index>`` (the leader's name and, with
    tpfabric, its Gang record's), None for a pod of no LWS group."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    name, index = labels.get(LWS_NAME_LABEL), labels.get(GROUP_INDEX_LABEL)
    return f"{name}-{index}" if name and index is not None else None


def leaf_spread(pods: Iterable[Mapping[str, Any]], leaf_of: Mapping[str, str]) -> dict[str, Any]:
    """Return how many LWS groups have bound pods under more than one leaf
    (``groups_spanning_leaves``) and how many groups span each number of leaves
    (``leaves_per_group``: "1" -> groups, ...). Unbound pods and pods of no group count for
    nothing; a node missing from ``leaf_of`` is a leaf of its own."""
    leaves: dict[str, set[str]] = {}
    for pod in pods:
        group = group_of(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if group is not None and node:
            leaves.setdefault(group, set()).add(leaf_of.get(node, node))
    spans = Counter(len(found) for found in leaves.values())
    return {
        "groups_spanning_leaves": sum(n for width, n in spans.items() if width > 1),
        "leaves_per_group": {str(width): spans[width] for width in sorted(spans)},
    }


# -- one arm's numbers (pure) ---------------------------------------------------------------------


def burst_result(
    stamps: Mapping[str, Mapping[str, float]],
    pods: Mapping[str, Mapping[str, Any]],
    t0: float,
    *,
    expected: int,
    size: int,
    leaf_of: Mapping[str, str],
) -> dict[str, Any]:
    """Return one arm's numbers from its pod watch: ``stamps`` (pod key -> mark -> when, marks
    ``seen``, ``ungated``, ``bound``, ``running``) and ``pods`` (pod key -> its latest object),
    in seconds from ``t0``.

    ``all_<mark>_s``: when the last of the ``expected`` pods got there (None unless all did);
    ``group_running_s``: percentiles, over the groups whose ``size`` pods all run, of when the
    last one did; the leaf spread of the pods as they are last seen; which scheduler each pod
    named (the webhook's work shows there).
    """
    members: dict[str, list[str]] = {}
    for key, pod in pods.items():
        group = group_of(pod)
        if group is not None:
            members.setdefault(group, []).append(key)

    def last(mark: str, keys: Iterable[str]) -> float | None:
        times = [stamps.get(key, {}).get(mark) for key in keys]
        if not times or None in times:
            return None
        return max(t for t in times if t is not None) - t0

    everything = [key for keys in members.values() for key in keys]
    running = sum(1 for key in everything if "running" in stamps.get(key, {}))
    ends = {
        f"all_{mark}_s": None if len(everything) < expected else last(mark, everything)
        for mark in ("seen", "ungated", "bound", "running")
    }
    groups = [last("running", keys) for keys in members.values() if len(keys) == size]
    done = [t for t in groups if t is not None]
    schedulers = Counter(
        str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")
        for pod in pods.values()
    )
    return {
        "pods": len(everything),
        "pods_running": running,
        "complete": running >= expected,
        **{key: None if t is None else round(t, 2) for key, t in ends.items()},
        "groups_running": len(done),
        "group_running_s": summary(done, (0.5, 0.9, 0.99)),
        "schedulers": dict(schedulers.most_common()),
        **leaf_spread(pods.values(), leaf_of),
    }


# -- admission latency from histograms (pure) -----------------------------------------------------


def histogram_buckets(
    metrics: str, name: str, keep: Callable[[dict[str, str]], bool] = lambda _: True
) -> dict[float, float]:
    """Return the cumulative buckets of histogram ``name`` in a /metrics text, upper bound
    (``+Inf`` as ``math.inf``) -> observations, summed over the series ``keep`` accepts."""
    buckets: dict[float, float] = {}
    head = name + "_bucket{"
    for line in filter(lambda text: text.startswith(head), metrics.splitlines()):
        series, value = line[len(head) :].rsplit("} ", 1)
        found = metric_labels(series)
        if "le" in found and keep(found):
            bound = float(found["le"])
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
    return buckets


def bucket_quantile(buckets: Mapping[float, float], q: float) -> float | None:
    """Return the ``q`` quantile of cumulative ``buckets`` as Prometheus' ``histogram_quantile``
    estimates it: linear inside the bucket it falls in (the first from 0), the largest finite
    bound when it falls above it; None without observations."""
    bounds = sorted(buckets)
    total = max(buckets.values(), default=0.0)
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def admission_latency(
    before: str,
    after: str,
    name: str,
    keep: Callable[[dict[str, str]], bool] = lambda _: True,
) -> dict[str, Any]:
    """Return the observations of histogram ``name`` between two /metrics texts: ``reviews``,
    ``p50_ms`` and ``p99_ms`` (bucket estimates), ``mean_ms`` (exact) and ``within_10ms`` (the
    share at or under 10 ms, exact when 0.01 is a bucket bound, else None) and the buckets."""
    old = histogram_buckets(before, name, keep)
    new = histogram_buckets(after, name, keep)
    buckets = {bound: count - old.get(bound, 0.0) for bound, count in new.items()}

    def key(found: dict[str, str]) -> str | None:
        return "all" if keep(found) else None

    seconds, count = histogram_totals(after, name, key).get("all", (0.0, 0))
    old_seconds, old_count = histogram_totals(before, name, key).get("all", (0.0, 0))
    reviews = count - old_count

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1e3, 3)

    within = buckets.get(P99_TARGET_MS / 1e3)
    return {
        "reviews": reviews,
        "p50_ms": ms(bucket_quantile(buckets, 0.5)),
        "p99_ms": ms(bucket_quantile(buckets, 0.99)),
        "mean_ms": ms((seconds - old_seconds) / reviews) if reviews > 0 else None,
        "within_10ms": round(within / reviews, 4) if within is not None and reviews > 0 else None,
        # the estimate's grain: observations at or under each bound (cumulative)
        "buckets_ms": {f"{bound * 1e3:g}": int(n) for bound, n in sorted(buckets.items())},
    }


def _ours(found: dict[str, str]) -> bool:
    """Whether an API server admission series is one of the gang webhook's (``*.tpfabric.io``)."""
    return found.get("name", "").endswith(".tpfabric.io") and found.get("type") == "admit"


# -- the run --------------------------------------------------------------------------------------


def _webhook_metrics(hook: Any) -> str | None:
    """Return the gang webhook's /metrics text (its loopback metrics port), None when it cannot
    be read."""
    try:
        with urllib.request.urlopen(hook.metrics_url, timeout=10) as r:  # noqa: S310 - our own loopback URL
            text: str = r.read().decode()
    except OSError:
        return None
    return text


def _burst(
    api: Any,
    namespace: str,
    manifests: list[dict[str, Any]],
    *,
    size: int,
    leaf_of: Mapping[str, str],
    timeout: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Create ``manifests`` in ``namespace`` and measure until every pod runs (or ``timeout``:
    the arm is then reported incomplete, not raised)."""
    from kubernetes import client  # noqa: PLC0415

    custom = client.CustomObjectsApi(api)
    expected = sum(int(m["spec"]["replicas"]) for m in manifests) * size
    clock = EventClock(
        api,
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "seen": lambda _: True,
            "ungated": lambda p: not (p.get("spec") or {}).get("schedulingGates"),
            "bound": lambda p: bool((p.get("spec") or {}).get("nodeName")),
            "running": lambda p: (p.get("status") or {}).get("phase") == "Running",
        },
    ).start()
    try:
        log(f"{namespace}: {len(manifests)} LeaderWorkerSet(s), {expected} pods")
        t0 = time.perf_counter()
        for manifest in manifests:
            custom.create_namespaced_custom_object(*LWS_API[:2], namespace, LWS_API[2], manifest)
        create_s = time.perf_counter() - t0
        last_log = [t0]

        def all_running() -> bool:
            stamps, _ = clock.snapshot()
            counts = Counter(mark for marks in stamps.values() for mark in marks)
            if time.perf_counter() - last_log[0] > 10:
                last_log[0] = time.perf_counter()
                log(f"{namespace}: {dict(counts)} of {expected}")
            return counts["running"] >= expected

        try:
            wait(all_running, timeout, f"{expected} pods Running in {namespace}", step=0.1)
        except TimeoutError as err:
            log(f"[red]{err}[/red]")
    finally:
        clock.stop()
    stamps, pods = clock.snapshot()
    found = {"namespace": namespace, "expected_pods": expected, "create_s": round(create_s, 3)}
    return found | burst_result(stamps, pods, t0, expected=expected, size=size, leaf_of=leaf_of)


def _gang_states(api: Any, namespace: str) -> dict[str, int]:
    """Return the Gang records of ``namespace`` counted by their placement state, and the LWS
    groups that have pods but no record as ``no record`` (nothing plans those)."""
    from kubernetes import client  # noqa: PLC0415

    records = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, GANG_PLURAL
    )["items"]
    states: Counter[str] = Counter(
        placement_of_status(r.get("status")).state or "none" for r in records
    )
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    groups = {group_of(api.sanitize_for_serialization(pod)) for pod in pods} - {None}
    missing = groups - {r["metadata"]["name"] for r in records}
    if missing:
        states["no record"] = len(missing)
    return dict(states.most_common())


def _delete(api: Any, namespace: str, timeout: float, log: Callable[[str], None]) -> None:
    """Delete every LeaderWorkerSet of ``namespace`` and wait until their pods are gone."""
    from kubernetes import client  # noqa: PLC0415

    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    log(f"{namespace}: deleting the LeaderWorkerSets")
    custom.delete_collection_namespaced_custom_object(
        *LWS_API[:2], namespace, LWS_API[2], propagation_policy="Foreground"
    )
    wait(
        lambda: not core.list_namespaced_pod(namespace).items,
        timeout,
        f"the pods of {namespace} gone",
        step=0.5,
    )


def run_gangs(
    manifests: list[dict[str, Any]], nodes: int, timeout: float, log: Callable[[str], None]
) -> dict[str, Any]:
    """Return the measurements of both arms of ``manifests`` (:func:`lws_manifests`) on a fresh
    local cluster of ``nodes`` kwok nodes (always torn down); ``timeout``: an arm's bound."""
    from kubernetes import client  # noqa: PLC0415

    from tpfabric_localcluster.gang_webhook import NAMESPACE_LABEL  # noqa: PLC0415

    fabric = uniform_fabric(nodes, nodes_per_leaf=NODES_PER_LEAF)
    leaf_of = {node.name: node.leaf for node in fabric.nodes}
    size = int(manifests[0]["spec"]["leaderWorkerTemplate"]["size"])
    groups = sum(int(m["spec"]["replicas"]) for m in manifests)
    result: dict[str, Any] = {
        "nodes": nodes,
        "leaves": math.ceil(nodes / NODES_PER_LEAF),
        "nodes_per_leaf": NODES_PER_LEAF,
        "groups": groups,
        "size": size,
        "pods": groups * size,
        "gpus_per_pod": GPUS_PER_POD,
        "leaderworkersets": [
            {"name": m["metadata"]["name"], "replicas": m["spec"]["replicas"]} for m in manifests
        ],
    }
    with local_cluster(fabric, ARMS[0][1], log, result) as (cluster, api):
        port, hook = start_gang_components(cluster, api)
        core = client.CoreV1Api(api)
        for _, namespace, opted_in in ARMS[1:]:
            labels = {NAMESPACE_LABEL: "enabled"} if opted_in else {}
            core.create_namespace({"metadata": {"name": namespace, "labels": labels}})
            wait(
                functools.partial(_has_service_account, core, namespace),
                60,
                f"the default service account of {namespace}",
            )
        state = cluster.state()
        assert state is not None
        pids = {name: state.components[name].pid for name in PROCESSES}
        time.sleep(5)  # the components' first lists settle
        with ProcessSampler(pids) as sampler:
            for arm, namespace, opted_in in ARMS:
                before = (apiserver_metrics(api), _webhook_metrics(hook))
                with Phase(api, sampler, port, cluster=cluster, scheduler=SCHEDULER[arm]) as phase:
                    found = _burst(
                        api,
                        namespace,
                        wired_manifests(manifests) if arm == "wired" else manifests,
                        size=size,
                        leaf_of=leaf_of,
                        timeout=timeout,
                        log=log,
                    )
                found |= phase.result | {"opted_in": opted_in, "phase_s": round(phase.seconds, 2)}
                # on a small machine the burst is CPU-bound: the arms' CPU totals compare them
                found["cpu_s_total"] = round(
                    sum(p["cpu_s"] for p in found["processes"].values()), 1
                )
                found["admission"] = _admission(
                    before, (apiserver_metrics(api), _webhook_metrics(hook))
                )
                if opted_in:
                    found["gang_states"] = _gang_states(api, namespace)
                result[arm] = found
                _delete(api, namespace, timeout, log)
                time.sleep(3)
        result["vm_hwm_mib"] = {name: vm_hwm_mib(pid) for name, pid in pids.items()}
    result["ratio"] = _ratio(result, "tpfabric", "baseline")
    result["ratio_to_wired"] = _ratio(result, "tpfabric", "wired")
    result["wiring_ratio"] = _ratio(result, "wired", "baseline")
    return result


def _has_service_account(core: Any, namespace: str) -> bool:
    return bool(core.list_namespaced_service_account(namespace).items)


def _ratio(result: Mapping[str, Any], arm: str, to: str) -> float | None:
    """Return arm ``arm``'s time to every pod Running over arm ``to``'s (None: one never got
    there)."""
    ours, theirs = result[arm]["all_running_s"], result[to]["all_running_s"]
    return round(ours / theirs, 2) if ours and theirs else None


def _admission(before: tuple[str, str | None], after: tuple[str, str | None]) -> dict[str, Any]:
    """Return the gang webhook's latency between two scrapes: its own histogram (None when its
    /metrics could not be read) and the API server's view of it."""
    api_before, hook_before = before
    api_after, hook_after = after
    own = None
    if hook_before is not None and hook_after is not None:
        own = admission_latency(hook_before, hook_after, WEBHOOK_HISTOGRAM)
    return {
        "webhook": own,
        "apiserver": admission_latency(api_before, api_after, APISERVER_HISTOGRAM, _ours),
    }


# -- report ---------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def summary_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the arms side by side."""
    arms = [result[arm] for arm, _, _ in ARMS]
    table = Table(
        "measure",
        *(ARM_TITLES[arm] for arm, _, _ in ARMS),
        title=(
            f"{result['groups']} LeaderWorkerSet groups x {result['size']} pods "
            f"({result['pods']:,} pods of {result['gpus_per_pod']} GPUs, "
            f"{len(result['leaderworkersets'])} LWS) on {result['nodes']:,} kwok nodes "
            f"({result['leaves']} leaves of {result['nodes_per_leaf']})"
        ),
        caption=f"cluster up {result['cluster_up_s']} s, nodes Ready {result['nodes_ready_s']} s",
    )
    ratio = result.get("ratio")
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("create call(s)", lambda a: f"{a['create_s']:.2f} s"),
        ("every pod created (LWS, StatefulSets)", lambda a: _seconds(a["all_seen_s"])),
        (
            "every pod ungated (placer)",
            lambda a: _seconds(a["all_ungated_s"]) if a["opted_in"] else "(never gated)",
        ),
        ("every pod bound", lambda a: _seconds(a["all_bound_s"])),
        ("every pod Running (from the create call)", lambda a: _seconds(a["all_running_s"])),
        ("pods Running", lambda a: f"{a['pods_running']:,} of {a['expected_pods']:,}"),
        (
            "group Running s p50 / p90 / p99 / max",
            lambda a: (
                "-"
                if not a["groups_running"]
                else " / ".join(
                    f"{a['group_running_s'][k]:.1f}" for k in ("p50", "p90", "p99", "max")
                )
            ),
        ),
        (
            "groups with pods under > 1 leaf",
            lambda a: f"{a['groups_spanning_leaves']} of {result['groups']}",
        ),
        (
            "leaves a group spans: groups",
            lambda a: ", ".join(f"{k}: {v}" for k, v in a["leaves_per_group"].items()) or "-",
        ),
        ("pods' scheduler", lambda a: ", ".join(f"{k} {v}" for k, v in a["schedulers"].items())),
    ]
    for words, cell in rows:
        table.add_row(words, *(cell(arm) for arm in arms))

    def times(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    table.add_row(
        f"ratio of every pod Running to the plain pods' (target <= {RATIO_TARGET}x)",
        "",
        times(result.get("wiring_ratio")),
        times(ratio),
    )
    table.add_row(
        "ratio to the pods wired by hand (tpfabric's machinery alone)",
        "",
        "",
        times(result.get("ratio_to_wired")),
    )
    states = result["tpfabric"].get("gang_states")
    if states:
        table.add_row(
            "Gang records by state", "", "", ", ".join(f"{k} {v}" for k, v in states.items())
        )
    return table


def webhook_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the gang webhook's admission latency during the tpfabric arm."""
    table = Table(
        *WEBHOOK_COLUMNS,
        title=f"admission latency (target p99 <= {P99_TARGET_MS:.0f} ms; p50/p99 from buckets)",
    )
    admission = result["tpfabric"]["admission"]
    sources = (
        ("webhook", "its own /metrics histogram (handler time)"),
        ("apiserver", "kube-apiserver's (its round trip, TLS included)"),
    )
    reviews = (admission.get("webhook") or admission["apiserver"])["reviews"]
    table.caption = (
        f"{reviews / max(result['tpfabric']['pods'], 1):.2f} reviews a pod (reinvocationPolicy "
        "IfNeeded: the API server may call the webhook again after other mutations)"
    )
    for key, words in sources:
        row = admission.get(key)
        if row is None:
            table.add_row(words, "(its /metrics could not be read)", "", "", "", "")
            continue

        def number(value: float | None, form: str = "{:.2f}") -> str:
            return "-" if value is None else form.format(value)

        table.add_row(
            words,
            str(row["reviews"]),
            number(row["p50_ms"]),
            number(row["p99_ms"]),
            number(row["mean_ms"]),
            number(row["within_10ms"], "{:.2%}"),
        )
    return table


def cpu_table(result: dict[str, Any]) -> Table:
    """Return the rich table of every component's CPU seconds and peak RSS per arm."""
    arms = [arm for arm, _, _ in ARMS]
    table = Table(
        "component",
        *(f"{ARM_TITLES[arm].split(' (')[0]}: CPU s / peak RSS MiB" for arm in arms),
        "VmHWM MiB",
        title=f"CPU (user+system) and memory per arm, {len(os.sched_getaffinity(0))} CPUs usable",
    )

    def cell(arm: str, name: str) -> str:
        seen = result[arm]["processes"].get(name) or {"cpu_s": 0.0, "peak_rss_mib": 0.0}
        return f"{seen['cpu_s']:.1f} / {seen['peak_rss_mib']:.0f}"

    hwm = result.get("vm_hwm_mib", {})
    for name in PROCESSES:
        peak = hwm.get(name)
        table.add_row(
            name, *(cell(arm, name) for arm in arms), "-" if peak is None else f"{peak:.0f}"
        )
    table.add_row(
        "all of them: CPU s (cores busy over the arm)",
        *(
            f"{result[arm]['cpu_s_total']:.1f} "
            f"({result[arm]['cpu_s_total'] / max(result[arm]['phase_s'], 1e-3):.2f})"
            for arm in arms
        ),
        "",
    )
    return table


#: the size flags: (flag, default, help)
SIZE_FLAGS = (
    ("--nodes", 1000, "kwok nodes, 8 a leaf"),
    ("--groups", 100, "LWS groups (replicas, all at once)"),
    ("--size", 8, "pods a group, 8 GPUs each (a whole node)"),
    ("--sets", 1, "LeaderWorkerSets the groups are split over"),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the options (the sizes, an arm's timeout, the JSON file); exits on a bad one."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench gangs",
        description=("A burst of LeaderWorkerSet groups: plain, wired by hand and with tpfabric."),
    )
    for flag, default, words in SIZE_FLAGS:
        parser.add_argument(flag, type=int, default=default, help=words)
    parser.add_argument("--timeout", type=float, default=900, help="seconds for an arm")
    parser.add_argument("--json", type=argparse.FileType("w"), metavar="FILE")
    args = parser.parse_args(argv)
    if args.groups < 1 or args.size < 1 or args.timeout <= 0 or not 1 <= args.sets <= args.groups:
        parser.error("--groups >= 1, --size >= 1, 1 <= --sets <= --groups and --timeout > 0")
    if args.groups * args.size > args.nodes:
        parser.error(
            f"{args.groups} groups x {args.size} pods need {args.groups * args.size} nodes "
            f"(a pod takes a whole node); --nodes is {args.nodes}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line ``argv``; return the exit code (1: an arm did not
    get every pod Running, or the cluster did not come up)."""
    from importlib.metadata import version  # noqa: PLC0415

    args = parse_args(argv)
    console = Console(highlight=False, width=160)
    versions = {"kopf": version("kopf"), "kubernetes_client": version("kubernetes")}
    started = environment() | versions
    try:
        result = run_gangs(
            lws_manifests(args.groups, args.size, args.sets), args.nodes, args.timeout, console.log
        )
    except TimeoutError as err:
        console.print(f"[red]gangs benchmark failed:[/red] {err}")
        return 1
    for table in (summary_table, webhook_table, cpu_table, scheduler_time_table, server_time_table):
        console.print(table(result))
    if args.json is not None:
        ended = {"load_average_end": [round(x, 2) for x in os.getloadavg()]}
        output = {"benchmark": "gangs", "environment": started | ended}
        json.dump(output | {"result": result}, args.json, indent=2)
        args.json.write("\n")
    incomplete = [arm for arm, _, _ in ARMS if not result[arm]["complete"]]
    if incomplete:
        console.print(f"[red]not every pod Running in: {', '.join(incomplete)}[/red]")
    return 1 if incomplete else 0


if __name__ == "__main__":
    raise SystemExit(main())
