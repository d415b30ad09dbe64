"""Builders and invariant checks of the soak test (``test_soak.py``), on plain API dicts.

The fleet, the job mix and the plain pods are built here, deterministically from a seed; the
checks (overcommitted nodes, half-bound gangs, gangs Running) read the objects exactly as the API
server returns them (``_preload_content=False`` + orjson: a typed client model of 1,000 nodes
costs seconds per sample on two cores). The checks compute requests themselves, never through
tpfabric's own code: they hold the product to account. Pure: no API call is made here.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core import labels
from tpfabric_core.api import GROUP, JOB_LABEL, KIND, VERSION
from tpfabric_core.fabric_description import FabricDescription
from tpfabric_localcluster.nodes import GPU_RESOURCE, fake_node_manifest

RDMA_RESOURCE = "rdma/ib"
COUNTED = (GPU_RESOURCE, RDMA_RESOURCE)
SOAK_LABEL = "soak.tpfabric.io/run"
ROLE_LABEL = "soak.tpfabric.io/role"
POOL_LABEL = "pool"
MAINTENANCE_TAINT = {"key": "soak.tpfabric.io/maintenance", "value": "true", "effect": "NoSchedule"}
TERMINAL = ("Succeeded", "Failed")

JobKey = tuple[str, str, str]
"""(namespace, name, uid) of one incarnation of a TensorParallelJob."""


# -- the fleet ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    """Node manifests of the soak fleet and which nodes play which part."""

    manifests: list[dict[str, Any]]
    unlabelled: frozenset[str]
    tainted: frozenset[str]
    batch_pool: frozenset[str]

    @property
    def names(self) -> list[str]:
        """Return every node name, in fabric order."""
        return [m["metadata"]["name"] for m in self.manifests]

    def plain_labelled(self) -> list[str]:
        """Return the labelled, untainted nodes outside the batch pool (fabric order)."""
        special = self.unlabelled | self.tainted | self.batch_pool
        return [n for n in self.names if n not in special]


def soak_fleet(
    fabric: FabricDescription,
    run: str,
    *,
    unlabelled_share: float,
    taint_every: int,
    batch_leaves: int,
) -> Fleet:
    """Return the fleet of ``fabric``'s nodes, labelled ``SOAK_LABEL=run``.

    The last ``unlabelled_share`` of the nodes carry no ``topology.tpfabric.io/`` label (nodes an
    autoscaler just added, not discovered yet); the nodes of the first ``batch_leaves`` leaves
    carry ``pool=batch``; one node in every ``taint_every`` of the labelled nodes outside the pool
    carries a NoSchedule taint (so some leaves have 7 usable nodes, others 8).
    """
    nodes = fabric.nodes
    first_unlabelled = len(nodes) - round(len(nodes) * unlabelled_share)
    leaves = list(dict.fromkeys(n.leaf for n in nodes))
    pool_leaves = set(leaves[:batch_leaves])
    manifests = []
    unlabelled, tainted, pool = set(), set(), set()
    for index, node in enumerate(nodes):
        manifest = fake_node_manifest(fabric, node)
        meta = manifest["metadata"]
        meta["labels"][SOAK_LABEL] = run
        if index >= first_unlabelled:
            meta["labels"] = {
                k: v for k, v in meta["labels"].items() if not k.startswith(labels.PREFIX)
            }
            unlabelled.add(node.name)
        elif node.leaf in pool_leaves:
            meta["labels"][POOL_LABEL] = "batch"
            pool.add(node.name)
        elif index % taint_every == taint_every // 2:
            manifest["spec"]["taints"] = [dict(MAINTENANCE_TAINT)]
            tainted.add(node.name)
        manifests.append(manifest)
    return Fleet(manifests, frozenset(unlabelled), frozenset(tainted), frozenset(pool))


# -- the workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GangPlan:
    """One TensorParallelJob of the soak: its size, policy, and whether it "finishes"."""

    name: str
    namespace: str
    workers: int
    mode: str
    level: str
    max_wait_seconds: int | None
    batch_pool: bool
    finishes: bool
    #: 4: workers of half a node (and half its RDMA devices); two can share a node
    gpus_per_worker: int = 8
    #: the template's required pod anti-affinity keeps the gang's workers one per node
    apart: bool = False
    #: a nodeSelector no node matches (a typo): the gang can never fit
    typo_selector: bool = False

    @property
    def never_fits(self) -> bool:
        """Return whether no domain the job may use can ever hold it (it must hold nothing)."""
        return self.typo_selector or (self.mode == "required" and self.workers > LEAF_NODES)

    def manifest(self) -> dict[str, Any]:
        """Return the TensorParallelJob object."""
        topology: dict[str, Any] = {"mode": self.mode, "level": self.level}
        if self.max_wait_seconds is not None:
            topology["maxWaitSeconds"] = self.max_wait_seconds
        pod_spec: dict[str, Any] = {
            "containers": [{"name": "worker", "image": "registry.invalid/soak-worker:1"}]
        }
        if self.batch_pool:
            pod_spec["nodeSelector"] = {POOL_LABEL: "batch"}
        if self.typo_selector:
            pod_spec["nodeSelector"] = {POOL_LABEL: "bacth"}
        if self.apart:
            pod_spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {JOB_LABEL: self.name}},
                        }
                    ]
                }
            }
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "workers": self.workers,
                "gpusPerWorker": self.gpus_per_worker,
                "tensorParallelSize": self.gpus_per_worker,
                "topology": topology,
                "rdma": {"resourceName": RDMA_RESOURCE, "count": self.gpus_per_worker},
                "template": {"spec": pod_spec},
            },
        }


#: workers -> share of the jobs: mostly 1-4, some 8, a few 16 and 32
SIZE_WEIGHTS = {1: 20, 2: 25, 3: 10, 4: 20, 8: 15, 16: 6, 32: 4}
#: nodes of a leaf of the soak's fabric
LEAF_NODES = 8
#: job index -> how it can never fit (arriving early, so they wait at the head of the line)
NEVER_FITTING = {5: "level", 9: "selector"}


def gang_mix(
    count: int, namespaces: list[str], *, seed: int, finish_share: float
) -> list[GangPlan]:
    """Return ``count`` jobs in arrival order, spread over ``namespaces``.

    Up to 8 workers: half ``required`` leaf, half ``preferred`` leaf waiting 10-40 s; about one
    in six of those up to 4 workers asks for ``pool=batch``; about one in six of up to 8 has
    workers of half a node (4 GPUs), and a third of those keep them one per node by required pod
    anti-affinity. 16 and 32 workers: ``preferred`` leaf (no leaf holds them: they climb after
    waiting), a 16 sometimes ``required`` spine. Two jobs can never fit: 12 workers that require
    one leaf of 8 nodes, and a typo in a nodeSelector.
    """
    rng = random.Random(seed)
    sizes = list(SIZE_WEIGHTS)
    weights = list(SIZE_WEIGHTS.values())
    plans = []
    for index in range(count):
        workers = rng.choices(sizes, weights)[0]
        mode, level = "preferred", "leaf"
        wait: int | None = rng.choice((10, 20, 40))
        if workers <= 8 and rng.random() < 0.5:
            mode, wait = "required", None
        elif workers == 16 and rng.random() < 0.4:
            mode, level, wait = "required", "spine", None
        half = workers <= 8 and rng.random() < 0.17
        apart = half and rng.random() < 0.33
        never = NEVER_FITTING.get(index, "")
        if never == "level":
            workers, mode, level, wait = LEAF_NODES + 4, "required", "leaf", None
        suffix = "-g4" if half else ""
        suffix += "-apart" if apart else ""
        suffix += f"-never-{never}" if never else ""
        plans.append(
            GangPlan(
                name=f"gang-{index:03d}-w{workers}{suffix}",
                namespace=namespaces[index % len(namespaces)],
                workers=workers,
                mode=mode,
                level=level,
                max_wait_seconds=wait,
                batch_pool=workers <= 4 and rng.random() < 0.17 and not never,
                finishes=rng.random() < finish_share and not never,
                gpus_per_worker=4 if half else 8,
                apart=apart,
                typo_selector=never == "selector",
            )
        )
    return plans


def plain_pod(name: str) -> dict[str, Any]:
    """Return a plain 8-GPU pod for the default kube-scheduler (no schedulerName, no gate)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {ROLE_LABEL: "plain"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/plain:1",
                    "resources": {"limits": {GPU_RESOURCE: "8", "cpu": "1"}},
                }
            ],
        },
    }


# -- reading objects ---------------------------------------------------------------------------


def parse_time(text: Any) -> float | None:
    """Return the epoch seconds of an RFC 3339 time of the API (None when absent)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def pod_demand(pod: Mapping[str, Any]) -> Counter[str]:
    """Return the pod's effective request of the counted resources (as the scheduler sums it).

    Containers add up; an init container runs alone, so the pod needs the larger of the two.
    Extended resources are given as limits (requests default to them).
    """

    def requested(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: int(str(v)) for k, v in merged.items() if k in COUNTED}

    spec = pod.get("spec") or {}
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        total.update(requested(container))
    for container in spec.get("initContainers") or []:
        for key, amount in requested(container).items():
            total[key] = max(total[key], amount)
    return total


def is_live(pod: Mapping[str, Any]) -> bool:
    """Return whether the pod is neither terminal nor being deleted."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL and not pod["metadata"].get(
        "deletionTimestamp"
    )


@dataclass(frozen=True)
class BoundPod:
    """A pod holding devices on a node: who bound it, and when (``PodScheduled``)."""

    name: str  # namespace/name
    scheduler: str
    scheduled: float | None
    demand: Mapping[str, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Overcommit:
    """A node whose bound, non-terminal pods ask for more of a resource than it has."""

    node: str
    resource: str
    requested: int
    allocatable: int
    pods: tuple[BoundPod, ...]

    def scheduler_race(self, window: float, ours: str) -> bool:
        """Return whether this is a race of two schedulers' caches, not a wrong binding of ``ours``.

        Two kube-schedulers (the default one and tpfabric's) keep two caches: each may bind to
        a node the other has just filled, before its watch shows the other's binding. On a real
        node the kubelet's admission rejects the later pod (``OutOf<resource>``); kwok admits
        everything, so the race shows here as an overcommitted node. It is a race when pods of
        two schedulers hold the node and either

        - they were bound within ``window`` seconds of each other (either cache may have been
          behind), or
        - ``ours`` did not overcommit: its pods alone fit, and none of them was bound more than
          ``window`` after a pod of the other scheduler (the other scheduler bound onto a node
          ``ours`` had filled; its cache lagged, by however long a loaded machine makes it).

        ``ours`` binding beyond the window onto a node another scheduler had filled, or its
        pods alone asking for more than the node has, is never a race.
        """
        times = [p.scheduled for p in self.pods]
        if len({p.scheduler for p in self.pods}) < 2 or None in times:
            return False
        known = [t for t in times if t is not None]
        if max(known) - min(known) <= window:
            return True
        mine = [p for p in self.pods if p.scheduler == ours]
        if sum(p.demand.get(self.resource, 0) for p in mine) > self.allocatable:
            return False
        others = [p.scheduled for p in self.pods if p.scheduler != ours and p.scheduled is not None]
        return all(p.scheduled is not None and p.scheduled <= min(others) + window for p in mine)

    def __str__(self) -> str:
        holders = ", ".join(f"{p.name} by {p.scheduler}" for p in self.pods)
        return f"{self.node}: {self.resource} {self.requested} > {self.allocatable} ({holders})"


def scheduled_at(pod: Mapping[str, Any]) -> float | None:
    """Return when the pod was bound (its ``PodScheduled`` condition), None if unknown."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def overcommits(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> list[Overcommit]:
    """Return every node and resource where bound, non-terminal pods ask for more than the
    node's allocatable (pods being deleted still hold their devices)."""
    allocatable = {
        n["metadata"]["name"]: {
            r: int(str((n.get("status") or {}).get("allocatable", {}).get(r, 0))) for r in COUNTED
        }
        for n in nodes
    }
    used: dict[str, Counter[str]] = {}
    holders: dict[str, list[BoundPod]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = str(spec.get("nodeName"))
        if node not in allocatable or (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        used.setdefault(node, Counter()).update(pod_demand(pod))
        meta = pod["metadata"]
        holders.setdefault(node, []).append(
            BoundPod(
                f"{meta['namespace']}/{meta['name']}",
                str(spec.get("schedulerName") or "default-scheduler"),
                scheduled_at(pod),
                pod_demand(pod),
            )
        )
    return [
        Overcommit(node, resource, amount, allocatable[node][resource], tuple(holders[node]))
        for node, demand in sorted(used.items())
        for resource, amount in sorted(demand.items())
        if amount > allocatable[node][resource]
    ]


@dataclass
class GangView:
    """One job and its worker pods as one sample saw them."""

    key: JobKey
    workers: int
    created: float | None
    phase: str
    placement: dict[str, Any]
    conditions: list[dict[str, Any]]
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def live_pods(self) -> list[dict[str, Any]]:
        """Return the pods neither terminal nor being deleted."""
        return [p for p in self.pods if is_live(p)]

    @property
    def bound(self) -> int:
        """Return how many live workers are bound to a node."""
        return sum(1 for p in self.live_pods if (p.get("spec") or {}).get("nodeName"))

    @property
    def half_bound(self) -> bool:
        """Return whether some workers are bound and others are not (or missing)."""
        return 0 < self.bound < self.workers

    @property
    def running(self) -> bool:
        """Return whether every worker exists and is Running."""
        live = self.live_pods
        return len(live) == self.workers and all(
            (p.get("status") or {}).get("phase") == "Running" for p in live
        )

    @property
    def waiting_with_reason(self) -> bool:
        """Return whether the placer says the gang waits, and why."""
        return self.placement.get("state") == "Waiting" and bool(self.placement.get("message"))

    def started(self) -> float | None:
        """Return when the last worker started running (kwok's ``startedAt``)."""
        times = []
        for pod in self.live_pods:
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                started = parse_time(
                    ((status.get("state") or {}).get("running") or {}).get("startedAt")
                )
                if started is not None:
                    times.append(started)
        return max(times) if len(times) >= self.workers else None

    def describe(self) -> str:
        """Return one line: the job, its phase, placement and workers."""
        namespace, name, _ = self.key
        phases = Counter((p.get("status") or {}).get("phase") for p in self.live_pods)
        return (
            f"{namespace}/{name} ({self.workers} workers, {self.bound} bound, "
            f"pods {dict(phases)}): "
            f"phase {self.phase or '-'}, placement {self.placement.get('state') or '-'}: "
            f"{self.placement.get('message') or ''}"
        )


def gang_views(
    jobs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> list[GangView]:
    """Return a view of every job not being deleted, with the worker pods it owns."""
    owned: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod["metadata"]
        if JOB_LABEL not in (meta.get("labels") or {}):
            continue
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == KIND:
                owned.setdefault(ref["uid"], []).append(dict(pod))
    views = []
    for job in jobs:
        meta = job["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        status = job.get("status") or {}
        views.append(
            GangView(
                key=(meta["namespace"], meta["name"], meta["uid"]),
                workers=int(job["spec"]["workers"]),
                created=parse_time(meta.get("creationTimestamp")),
                phase=str(status.get("phase") or ""),
                placement=dict(status.get("placement") or {}),
                conditions=list(status.get("conditions") or []),
                pods=owned.get(meta["uid"], []),
            )
        )
    return views


def percentile(values: list[float], share: float) -> float | None:
    """Return the nearest-rank percentile (``share`` in 0..1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]
