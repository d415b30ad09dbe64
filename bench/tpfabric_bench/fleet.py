"""A fleet: a serving LeaderWorkerSet rolls out while training gangs come and go.

``tpfabric bench fleet [--nodes 1000] [--groups 50] [--size 2] [--max-surge 2]
[--max-unavailable 1] [--train-gangs 80] [--train-size 8] [--train-hold 10] [--timeout 900]
[--json FILE]``

One local control plane with N kwok nodes (``uniform_fabric``: 8 a leaf, 4 leaves a spine,
labelled as for ``tpfabric bench gangs``) runs the real LeaderWorkerSet controller (v0.9.0) and
tpfabric as a cluster runs it for other controllers' gangs (gang webhook, operator, placer and
extender, ``tpfabric-scheduler``). Both namespaces are opted in (``tpfabric.io/gangs=enabled``).

1. **Serving**: one LeaderWorkerSet ``serve`` of G groups of ``--size`` pods (each pod 8 GPUs,
   a whole node; rollout ``RollingUpdate`` with ``--max-surge`` and ``--max-unavailable``) is
   created and waited on until every pod runs.
2. **Training churn**: a thread keeps ``--train-gangs`` plain pod gangs (``tpfabric.io/gang-name``
   / ``gang-size``, ``--train-size`` pods of 8 GPUs) alive: every 0.5 s it lists their pods,
   deletes a gang ``--train-hold`` s after all its pods run and creates a new one in its place.
   The create and delete calls go to 4 worker threads. A gang waited from its first create
   call to the list that saw all its pods Running (0.5 s grain). The rollout starts once as many
   gangs as the target have run (the cluster is full) and the first has been replaced.
3. **Rollout**: the LWS pod template gets a new annotation; the rollout is timed from that patch
   until the LWS status says it is done (``observedGeneration == generation``, no condition
   ``UpdateInProgress=True``, ``updatedReplicas == readyReplicas == replicas == G``). Every 0.5 s
   meanwhile the serving pods are listed and each live (not deleting) bound pod's node kept.

Reported from those samples, per group (surge groups, index >= G, included):

- **crossed a spine / a leaf**: in some sample the group's live bound pods *of one template
  revision* (the gang tpfabric places) sat under more than one spine / leaf;
- **handover across spines / leaves**: the same with old and new revision counted together (the
  new leader already bound while the old worker still runs; LWS replaces a group's pods in turn);
- **back on its leaf**: the group's leaves after the rollout equal those just before the patch;
- the surge groups LWS made and the leaves/spines their pods were seen on;
- the training gangs that ran during the rollout and their wait (p50/p99/max), and those still
  waiting at its end (apart: those whose create calls the benchmark had not all made yet).

For a group that crossed a leaf, the JSON keeps the first sample that showed it (each pod's name,
revision, node, leaf, spine and scheduler) and its Gang record (spec and status) after the
rollout: the evidence a placement bug needs.

Why these defaults: 50 groups x 2 nodes is a serving fleet of 100 nodes (10% of the
cluster); maxSurge 2 / maxUnavailable 1 is a cautious serving rollout that still makes surge
groups; 80 training gangs of 8 (one leaf each) take 640 nodes, so with the serving groups and
their surge the cluster is ~74% full and a moved group has free nodes elsewhere to drift to --
which is what "keep their domains" is about. A hold of 10 s lets gangs come and go many times
during a rollout of a few minutes.

On a small machine the churn's own calls queue behind a busy API server, so the cluster is less
full during the rollout than at its start; the table shows the busy nodes at both ends. The 0.5 s
sampling can miss a crossing shorter than that (a pod bound and deleted between two
lists). The times are wall-clock seconds of the machine the run is on, loaded as it happens to
be. Only a benchmark: nothing of the product may import it, it asserts nothing about timings, and
every process it starts listens on 127.0.0.1 alone.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from tpfabric_bench._harness import (
    ProcessSampler,
    environment,
    local_cluster,
    start_gang_components,
    summary,
    wait,
)
from tpfabric_bench._operator_run import NODES_PER_LEAF
from tpfabric_bench.gangs import GPUS_PER_POD, LWS_API, PROCESSES, group_of, lws_manifests
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.api.models import GROUP, VERSION
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_core.gangs import GANG_NAME_LABEL, GANG_SIZE_LABEL, RANK_LABEL
from tpfabric_core.labels import LEAF, SPINE

__all__ = [
    "Placement",
    "TrainingGang",
    "group_domains",
    "live_placements",
    "main",
    "parse_args",
    "rollout_done",
    "rollout_patch",
    "rollout_summary",
    "run_fleet",
    "serving_manifest",
    "summary_table",
    "training_pods",
    "training_summary",
]

LWS_NAME = "serve"
SERVING_NAMESPACE = "bench-fleet-serve"
TRAINING_NAMESPACE = "bench-fleet-train"
REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
ROLLOUT_ANNOTATION = "bench.tpfabric.io/rollout"
SAMPLE_S = 0.5


# -- the objects (pure) ---------------------------------------------------------------------------


def serving_manifest(groups: int, size: int, surge: int, unavailable: int) -> dict[str, Any]:
    """Return the serving LeaderWorkerSet ``serve``: ``groups`` groups of ``size`` pods of 8 GPUs
    (as ``tpfabric bench gangs`` makes them), rolled out with ``surge`` / ``unavailable``."""
    (lws,) = lws_manifests(groups, size)
    lws["spec"]["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": surge, "maxUnavailable": unavailable},
    }
    return lws


def rollout_patch(mark: str) -> dict[str, Any]:
    """Return the merge patch that starts a rollout: an annotation ``mark`` on the pod template
    (any template change is a new revision to LWS)."""
    metadata = {"annotations": {ROLLOUT_ANNOTATION: mark}}
    return {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": metadata}}}}


def training_pods(name: str, size: int) -> list[dict[str, Any]]:
    """Return the ``size`` plain pods of training gang ``name`` (8 GPUs each, ranked, grace 0)."""
    container = {
        "name": "main",
        "image": "registry.invalid/train:1",
        "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_POD), "cpu": "1"}},
    }
    labels = {GANG_NAME_LABEL: name, GANG_SIZE_LABEL: str(size)}
    return [
        {
            "metadata": {"name": f"{name}-{rank}", "labels": labels | {RANK_LABEL: str(rank)}},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
        }
        for rank in range(size)
    ]


def rollout_done(lws: Mapping[str, Any], groups: int) -> bool:
    """Return whether the LeaderWorkerSet's status says its rollout is over: the current
    generation observed, no ``UpdateInProgress=True``, ``groups`` replicas all updated and
    ready (so the surge groups are gone)."""
    metadata, status = lws.get("metadata") or {}, lws.get("status") or {}
    if status.get("observedGeneration") != metadata.get("generation"):
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "UpdateInProgress" and condition.get("status") == "True":
            return False
    counts = (status.get(key, 0) for key in ("updatedReplicas", "readyReplicas", "replicas"))
    return all(count == groups for count in counts)


# -- where the groups sat (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """One live bound serving pod in one sample: its group, template revision and node (and,
    for the evidence of a crossing, its name and scheduler)."""

    group: str
    revision: str
    node: str
    pod: str = ""
    scheduler: str = ""


#: one sample: seconds from the rollout's patch, and the live bound serving pods then
Sample = tuple[float, tuple[Placement, ...]]


def live_placements(pods: Iterable[Mapping[str, Any]]) -> tuple[Placement, ...]:
    """Return the pods of LWS groups that are bound and live (not deleting, not finished)."""
    found = []
    for pod in pods:
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        group, node = group_of(pod), spec.get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if group is None or not node or metadata.get("deletionTimestamp"):
            continue
        if phase in ("Succeeded", "Failed"):
            continue
        revision = str((metadata.get("labels") or {}).get(REVISION_LABEL, ""))
        name, scheduler = str(metadata.get("name", "")), str(spec.get("schedulerName", ""))
        found.append(Placement(group, revision, str(node), name, scheduler))
    return tuple(found)


def leaves_of(placements: Iterable[Placement], leaf_of: Mapping[str, str]) -> dict[str, list[str]]:
    """Return each group's leaves (sorted) in one sample; a node missing from ``leaf_of`` is a
    leaf of its own."""
    leaves: dict[str, set[str]] = defaultdict(set)
    for placement in placements:
        leaves[placement.group].add(leaf_of.get(placement.node, placement.node))
    return {group: sorted(found) for group, found in leaves.items()}


def group_domains(
    samples: Iterable[Sample], leaf_of: Mapping[str, str], spine_of: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Return per group, over ``samples``: the most leaves and spines its live bound pods of one
    revision sat under at once (``leaves``, ``spines``), the same over both revisions together
    (``leaves_any_revision``, ``spines_any_revision``) and every leaf and spine it was seen on
    (``leaves_seen``, ``spines_seen``, sorted) and, as evidence, the first sample in which its
    pods of one revision sat under more than one leaf (``first_crossed``: ``t`` and every pod of
    the group then, None if never). A node missing from a map is a domain of its own."""
    widest: dict[str, dict[str, Any]] = {}
    for t, placements in samples:
        one: dict[tuple[str, str], set[str]] = defaultdict(set)
        both: dict[str, set[str]] = defaultdict(set)
        for placement in placements:
            one[placement.group, placement.revision].add(placement.node)
            both[placement.group].add(placement.node)
        for group, nodes in both.items():
            entry = widest.setdefault(
                group,
                {
                    "leaves": 0,
                    "spines": 0,
                    "leaves_any_revision": 0,
                    "spines_any_revision": 0,
                    "leaves_seen": set(),
                    "spines_seen": set(),
                    "first_crossed": None,
                },
            )
            leaves = {leaf_of.get(node, node) for node in nodes}
            spines = {spine_of.get(node, node) for node in nodes}
            entry["leaves_any_revision"] = max(entry["leaves_any_revision"], len(leaves))
            entry["spines_any_revision"] = max(entry["spines_any_revision"], len(spines))
            entry["leaves_seen"] |= leaves
            entry["spines_seen"] |= spines
        for (group, _), nodes in one.items():
            entry = widest[group]
            leaves = {leaf_of.get(node, node) for node in nodes}
            entry["leaves"] = max(entry["leaves"], len(leaves))
            entry["spines"] = max(entry["spines"], len({spine_of.get(n, n) for n in nodes}))
            if len(leaves) > 1 and entry["first_crossed"] is None:
                entry["first_crossed"] = {
                    "t": t,
                    "pods": [
                        _evidence(placement, leaf_of, spine_of)
                        for placement in placements
                        if placement.group == group
                    ],
                }
    for entry in widest.values():
        entry["leaves_seen"] = sorted(entry["leaves_seen"])
        entry["spines_seen"] = sorted(entry["spines_seen"])
    return dict(sorted(widest.items(), key=lambda kv: _group_order(kv[0])))


def _evidence(
    placement: Placement, leaf_of: Mapping[str, str], spine_of: Mapping[str, str]
) -> dict[str, str]:
    node = placement.node
    return {
        "pod": placement.pod,
        "revision": placement.revision,
        "node": node,
        "leaf": leaf_of.get(node, node),
        "spine": spine_of.get(node, node),
        "scheduler": placement.scheduler,
    }


def _group_order(group: str) -> tuple[str, int]:
    name, _, index = group.rpartition("-")
    return (name, int(index)) if index.isdigit() else (group, -1)


def _index(group: str) -> int:
    return _group_order(group)[1]


def rollout_summary(
    samples: Sequence[Sample],
    before: Iterable[Placement],
    after: Iterable[Placement],
    *,
    groups: int,
    leaf_of: Mapping[str, str],
    spine_of: Mapping[str, str],
) -> dict[str, Any]:
    """Return the rollout's domain numbers from its ``samples`` and the live bound pods just
    ``before`` the patch and ``after`` the end: which groups crossed a spine or a leaf (one
    revision, and old and new together), which serving groups (index < ``groups``) came back to
    their leaves (and how many to their very nodes), which moved, and the surge groups (index
    >= ``groups``) and where they went."""
    domains = group_domains(samples, leaf_of, spine_of)

    def named(key: str) -> list[str]:
        return [group for group, entry in domains.items() if entry[key] > 1]

    before, after = tuple(before), tuple(after)
    home, end = leaves_of(before, leaf_of), leaves_of(after, leaf_of)
    # a node as its own domain: the groups' very nodes
    home_nodes, end_nodes = leaves_of(before, {}), leaves_of(after, {})
    serving = [f"{LWS_NAME}-{index}" for index in range(groups)]
    back = [group for group in serving if group in home and home.get(group) == end.get(group)]
    same_nodes = [group for group in back if home_nodes.get(group) == end_nodes.get(group)]
    moved = [
        {"group": group, "before": home.get(group, []), "after": end.get(group, [])}
        for group in serving
        if group not in back
    ]
    surge = [
        {"group": group, "leaves": entry["leaves_seen"], "spines": entry["spines_seen"]}
        for group, entry in domains.items()
        if _index(group) >= groups
    ]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(samples)]
    return {
        "groups_seen": len(domains),
        "crossed_spine": named("spines"),
        "crossed_leaf": named("leaves"),
        "handover_crossed_spine": named("spines_any_revision"),
        "handover_crossed_leaf": named("leaves_any_revision"),
        "back_on_their_leaf": len(back),
        "back_on_their_nodes": len(same_nodes),
        "moved": moved,
        "surge_groups": surge,
        "samples": len(samples),
        "sample_gap_max_s": round(max(gaps), 2) if gaps else None,
        "per_group": domains,
    }


# -- the training gangs (pure) --------------------------------------------------------------------


@dataclass
class TrainingGang:
    """One training gang's life, in ``time.perf_counter()`` seconds: its first create call, the
    return of its last (``posted``), the list that saw all its pods Running, its delete call
    (None until then)."""

    name: str
    created: float
    running: float | None = None
    deleted: float | None = None
    posted: float | None = None


def training_summary(gangs: Iterable[TrainingGang], start: float, end: float) -> dict[str, Any]:
    """Return the training gangs of the window ``start``..``end`` (the rollout): how many ran
    in it (all pods Running at some time in it), created in it, still waiting at its end with
    all their pods created (``waiting_at_end``) or with create calls still to make
    (``unposted_at_end``: the benchmark's own calls behind a busy API server), and the wait
    (first create call to Running, seconds) of those that ran in it (p50/p99/max)."""
    ran, created, waiting, unposted, waits = 0, 0, 0, 0, []
    for gang in gangs:
        if start <= gang.created <= end:
            created += 1
        if gang.running is None:
            if gang.created <= end and (gang.deleted is None or gang.deleted >= end):
                if gang.posted is not None and gang.posted <= end:
                    waiting += 1
                else:
                    unposted += 1
            continue
        if gang.running <= end and (gang.deleted is None or gang.deleted >= start):
            ran += 1
            waits.append(gang.running - gang.created)
    return {
        "ran": ran,
        "created": created,
        "waiting_at_end": waiting,
        "unposted_at_end": unposted,
        "wait_s": summary(waits, (0.5, 0.99)),
    }


# -- the run --------------------------------------------------------------------------------------


def _list(api: Any, path: str, query: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """Return the items of a collection as plain JSON (no client models: fast enough to list
    every 0.5 s on a loaded machine)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        path,
        query_params=list(query),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=60)
    items: list[dict[str, Any]] = orjson.loads(response.read()).get("items") or []
    return items


class TrainingChurn:
    """Keeps ``gangs`` training gangs of ``size`` pods alive: a thread lists their pods every
    0.5 s, and each gang is deleted ``hold`` s after all its pods run, a new one taking its place
    once the delete call returned.
    The create and delete calls go to a few worker threads, so that a slow API server delays
    the gangs, not the list that stamps them. ``history`` holds every gang made; ``errors``
    counts the API errors survived."""

    WORKERS = 4

    def __init__(
        self,
        api: Any,
        namespace: str,
        *,
        gangs: int,
        size: int,
        hold: float,
        log: Callable[[str], None],
    ) -> None:
        self.api, self.namespace, self.log = api, namespace, log
        self.target, self.size, self.hold = gangs, size, hold
        self.history: list[TrainingGang] = []
        self.errors = 0
        self._retiring: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="training-churn", daemon=True)
        self._pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix="training-calls")

    def ran(self) -> int:
        """Return how many gangs have had all their pods Running so far."""
        with self._lock:
            return sum(1 for gang in self.history if gang.running is not None)

    def replaced(self) -> int:
        """Return how many gangs have been deleted so far."""
        with self._lock:
            return sum(1 for gang in self.history if gang.deleted is not None)

    def snapshot(self) -> list[TrainingGang]:
        """Return copies of every gang's life so far."""
        with self._lock:
            return [
                TrainingGang(g.name, g.created, g.running, g.deleted, g.posted)
                for g in self.history
            ]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as err:  # noqa: BLE001 - the churn goes on; the errors are counted
                self._failed(err)
            self._stop.wait(SAMPLE_S)

    def _failed(self, err: Exception) -> None:
        self.errors += 1
        if self.errors <= 3:
            self.log(f"[yellow]training churn: {err!r}[/yellow]")

    def _step(self) -> None:
        pods = _list(self.api, f"/api/v1/namespaces/{self.namespace}/pods")
        running: dict[str, int] = defaultdict(int)
        for pod in pods:
            metadata = pod.get("metadata") or {}
            gang = (metadata.get("labels") or {}).get(GANG_NAME_LABEL)
            deleting = bool(metadata.get("deletionTimestamp"))
            if gang and not deleting and (pod.get("status") or {}).get("phase") == "Running":
                running[gang] += 1
        now = time.perf_counter()
        with self._lock:
            live = [g for g in self.history if g.deleted is None and g.name not in self._retiring]
            for gang in live:
                if gang.running is None and running[gang.name] >= self.size:
                    gang.running = now
                if gang.running is not None and now - gang.running >= self.hold:
                    self._retiring.add(gang.name)
                    self._pool.submit(self._retire, gang)
            # a gang being deleted still holds its nodes: its replacement waits for the call
            alive = sum(1 for g in self.history if g.deleted is None)
            for _ in range(self.target - alive):
                gang = TrainingGang(f"train-{len(self.history):05d}", time.perf_counter())
                self.history.append(gang)
                self._pool.submit(self._create, gang)

    def _create(self, gang: TrainingGang) -> None:
        from kubernetes import client  # noqa: PLC0415

        if self._stop.is_set():
            return
        core = client.CoreV1Api(self.api)
        gang.created = time.perf_counter()
        try:
            for pod in training_pods(gang.name, self.size):
                core.create_namespaced_pod(self.namespace, pod)
            gang.posted = time.perf_counter()
        except Exception as err:  # noqa: BLE001 - counted; the gang waits forever, as reported
            self._failed(err)

    def _retire(self, gang: TrainingGang) -> None:
        from kubernetes import client  # noqa: PLC0415

        when = time.perf_counter()
        try:
            client.CoreV1Api(self.api).delete_collection_namespaced_pod(
                self.namespace,
                label_selector=f"{GANG_NAME_LABEL}={gang.name}",
                grace_period_seconds=0,
            )
        except Exception as err:  # noqa: BLE001 - counted; its pods stay
            self._failed(err)
        with self._lock:
            gang.deleted = when
            self._retiring.discard(gang.name)

    def __enter__(self) -> TrainingChurn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(120)
        self._pool.shutdown(wait=True, cancel_futures=True)


def _opt_in(api: Any, namespace: str, *, create: bool) -> None:
    """Create (or label) ``namespace`` opted in to the gang webhook; wait for its service
    account."""
    from kubernetes import client  # noqa: PLC0415

    from tpfabric_localcluster.gang_webhook import NAMESPACE_LABEL  # noqa: PLC0415

    core = client.CoreV1Api(api)
    labels = {NAMESPACE_LABEL: "enabled"}
    if create:
        core.create_namespace({"metadata": {"name": namespace, "labels": labels}})
    else:
        core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    wait(
        lambda: bool(core.list_namespaced_service_account(namespace).items),
        60,
        f"the default service account of {namespace}",
    )


def _domains(api: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Return every node's leaf and spine as its labels say."""
    nodes = _list(api, "/api/v1/nodes")
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    leaf_of = {name: found[LEAF] for name, found in labels.items() if LEAF in found}
    spine_of = {name: found[SPINE] for name, found in labels.items() if SPINE in found}
    return leaf_of, spine_of


def _serving_pods(api: Any) -> list[dict[str, Any]]:
    return _list(api, f"/api/v1/namespaces/{SERVING_NAMESPACE}/pods")


def _busy_nodes(api: Any) -> int:
    """Return how many nodes hold a live pod of either namespace."""
    nodes = set()
    for namespace in (SERVING_NAMESPACE, TRAINING_NAMESPACE):
        for pod in _list(api, f"/api/v1/namespaces/{namespace}/pods"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                nodes.add(node)
    return len(nodes)


def _records(api: Any, groups: Iterable[str]) -> dict[str, Any]:
    """Return, as evidence, the Gang records of ``groups`` as they are after the rollout
    (their spec and status; an error's words when one cannot be read)."""
    from kubernetes import client  # noqa: PLC0415

    custom = client.CustomObjectsApi(api)
    found: dict[str, Any] = {}
    for group in sorted(groups):
        try:
            record = custom.get_namespaced_custom_object(
                GROUP, VERSION, SERVING_NAMESPACE, GANG_PLURAL, group
            )
            found[group] = {"spec": record.get("spec"), "status": record.get("status")}
        except Exception as err:  # noqa: BLE001 - evidence only
            found[group] = {"error": repr(err)[:300]}
    return found


def _get_lws(custom: Any) -> dict[str, Any]:
    found: dict[str, Any] = custom.get_namespaced_custom_object(
        *LWS_API[:2], SERVING_NAMESPACE, LWS_API[2], LWS_NAME
    )
    return found


def _serve(api: Any, manifest: dict[str, Any], timeout: float, log: Callable[[str], None]) -> float:
    """Create the serving LWS; return the seconds until every one of its pods runs."""
    from kubernetes import client  # noqa: PLC0415

    custom = client.CustomObjectsApi(api)
    groups = int(manifest["spec"]["replicas"])
    expected = groups * int(manifest["spec"]["leaderWorkerTemplate"]["size"])
    t0 = time.perf_counter()
    custom.create_namespaced_custom_object(*LWS_API[:2], SERVING_NAMESPACE, LWS_API[2], manifest)

    def all_running() -> bool:
        pods = _serving_pods(api)
        return (
            sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") >= (expected)
            and (_get_lws(custom).get("status") or {}).get("readyReplicas") == groups
        )

    wait(all_running, timeout, f"{expected} serving pods Running and {groups} groups ready", 0.5)
    seconds = time.perf_counter() - t0
    log(f"{groups} serving groups ready in {seconds:.1f} s")
    return seconds


def _roll_out(
    api: Any, groups: int, timeout: float, log: Callable[[str], None]
) -> tuple[list[Sample], float | None, float, float]:
    """Patch the serving LWS and sample its pods every 0.5 s until the rollout is done (or
    ``timeout``); return the samples, the rollout's seconds (None if not done), and the
    ``perf_counter`` of the patch and of the end."""
    from kubernetes import client  # noqa: PLC0415

    custom = client.CustomObjectsApi(api)
    samples: list[Sample] = []
    t0 = time.perf_counter()
    custom.patch_namespaced_custom_object(
        *LWS_API[:2], SERVING_NAMESPACE, LWS_API[2], LWS_NAME, rollout_patch(f"{time.time():.0f}")
    )
    done: float | None = None
    last_log = t0
    while True:
        tick = time.perf_counter()
        samples.append((round(tick - t0, 3), live_placements(_serving_pods(api))))
        lws = _get_lws(custom)
        if rollout_done(lws, groups):
            done = time.perf_counter() - t0
            break
        if tick - t0 > timeout:
            log(f"[red]the rollout did not finish in {timeout:.0f} s[/red]")
            break
        if tick - last_log > 10:
            last_log = tick
            status = lws.get("status") or {}
            counts = {k: status.get(k, 0) for k in ("replicas", "readyReplicas", "updatedReplicas")}
            log(f"rollout {tick - t0:.0f} s: {counts}")
        time.sleep(max(0.0, SAMPLE_S - (time.perf_counter() - tick)))
    return samples, done, t0, time.perf_counter()


def run_fleet(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    """Return the measurements of one fleet run (:func:`parse_args`'s options) on a fresh local
    cluster (always torn down)."""
    fabric = uniform_fabric(args.nodes, nodes_per_leaf=NODES_PER_LEAF)
    manifest = serving_manifest(args.groups, args.size, args.max_surge, args.max_unavailable)
    result: dict[str, Any] = {
        "nodes": args.nodes,
        "leaves": math.ceil(args.nodes / NODES_PER_LEAF),
        "spines": len({node.spine for node in fabric.nodes}),
        "nodes_per_leaf": NODES_PER_LEAF,
        "groups": args.groups,
        "size": args.size,
        "max_surge": args.max_surge,
        "max_unavailable": args.max_unavailable,
        "gpus_per_pod": GPUS_PER_POD,
        "training": {"gangs": args.train_gangs, "size": args.train_size, "hold_s": args.train_hold},
    }
    with local_cluster(fabric, SERVING_NAMESPACE, log, result) as (cluster, api):
        start_gang_components(cluster, api)
        _opt_in(api, SERVING_NAMESPACE, create=False)
        _opt_in(api, TRAINING_NAMESPACE, create=True)
        leaf_of, spine_of = _domains(api)
        state = cluster.state()
        assert state is not None
        pids = {name: state.components[name].pid for name in PROCESSES if name in state.components}
        time.sleep(5)  # the components' first lists settle; the webhook sees the namespace labels
        result["serving_ready_s"] = round(_serve(api, manifest, args.timeout, log), 1)
        with ProcessSampler(pids) as sampler, contextlib.ExitStack() as stack:
            churn = None
            if args.train_gangs:
                churn = stack.enter_context(
                    TrainingChurn(
                        api,
                        TRAINING_NAMESPACE,
                        gangs=args.train_gangs,
                        size=args.train_size,
                        hold=args.train_hold,
                        log=log,
                    )
                )
                started = time.perf_counter()
                try:
                    wait(lambda: churn.ran() > 0, args.timeout, "the first training gang", 1)
                    wait(lambda: churn.ran() >= args.train_gangs, args.timeout, "a full cluster", 1)
                    wait(lambda: churn.replaced() > 0, args.timeout, "a gang replaced", 1)
                except TimeoutError as err:
                    log(f"[yellow]{err}; rolling out anyway[/yellow]")
                result["training_fill_s"] = round(time.perf_counter() - started, 1)
            result["busy_nodes_at_patch"] = _busy_nodes(api)
            before = live_placements(_serving_pods(api))
            cpu_before = sampler.cpu()
            log(f"rolling out; {result['busy_nodes_at_patch']} of {args.nodes} nodes busy")
            samples, done, start, end = _roll_out(api, args.groups, args.timeout, log)
            cpu_after = sampler.cpu()
            result["busy_nodes_at_end"] = _busy_nodes(api)
            after = live_placements(_serving_pods(api))
            if churn is not None:
                result["training"] |= training_summary(churn.snapshot(), start, end)
                result["training"]["gangs_made"] = len(churn.history)
                result["training"]["api_errors"] = churn.errors
        result["rollout_s"] = None if done is None else round(done, 1)
        result["rollout_cpu_s"] = {
            name: round(cpu_after[name] - cpu_before.get(name, 0.0), 1) for name in cpu_after
        }
        result["rollout"] = rollout_summary(
            samples, before, after, groups=args.groups, leaf_of=leaf_of, spine_of=spine_of
        )
        crossed = set(result["rollout"]["crossed_leaf"])
        result["rollout"]["crossed_records"] = _records(api, crossed) if crossed else {}
    return result


# -- report ---------------------------------------------------------------------------------------


def _names(groups: Sequence[str], limit: int = 6) -> str:
    if not groups:
        return ""
    shown = ", ".join(groups[:limit])
    return f" ({shown}{', ...' if len(groups) > limit else ''})"


def summary_table(result: dict[str, Any]) -> Table:
    """Return the rich table of one fleet run."""
    rollout, training = result["rollout"], result["training"]
    groups = result["groups"]
    table = Table(
        "measure",
        "value",
        title=(
            f"{groups} serving groups x {result['size']} pods (maxSurge {result['max_surge']}, "
            f"maxUnavailable {result['max_unavailable']}) and training gangs of "
            f"{training['size']} on {result['nodes']:,} kwok nodes ({result['leaves']} leaves of "
            f"{result['nodes_per_leaf']}, {result['spines']} spines)"
        ),
        caption=(
            f"cluster up {result['cluster_up_s']} s, nodes Ready {result['nodes_ready_s']} s; "
            f"{rollout['samples']} samples, largest gap {rollout['sample_gap_max_s']} s"
        ),
    )
    surge = rollout["surge_groups"]
    rows = [
        ("serving groups ready (from the create call)", f"{result['serving_ready_s']:.1f} s"),
        (
            "training churn: live gangs x pods, hold",
            (
                f"{training['gangs']} x {training['size']}, {training['hold_s']:g} s "
                f"(cluster full in {result.get('training_fill_s', '-')} s)"
            ),
        ),
        (
            "nodes busy at the patch / at the end",
            (
                f"{result['busy_nodes_at_patch']} / {result['busy_nodes_at_end']} of "
                f"{result['nodes']:,}"
            ),
        ),
        (
            "rollout time (patch to LWS done)",
            "did not finish" if result["rollout_s"] is None else f"{result['rollout_s']:.1f} s",
        ),
        (
            "groups that crossed a spine (one revision)",
            f"{len(rollout['crossed_spine'])} of {rollout['groups_seen']}"
            + _names(rollout["crossed_spine"]),
        ),
        (
            "groups that crossed a leaf (one revision)",
            f"{len(rollout['crossed_leaf'])} of {rollout['groups_seen']}"
            + _names(rollout["crossed_leaf"]),
        ),
        (
            "old and new pods under > 1 spine / leaf at once",
            (
                f"{len(rollout['handover_crossed_spine'])} / "
                f"{len(rollout['handover_crossed_leaf'])} of {rollout['groups_seen']}"
            ),
        ),
        (
            "serving groups back on the leaf they had (on the same nodes)",
            f"{rollout['back_on_their_leaf']} of {groups} ({rollout['back_on_their_nodes']})",
        ),
        (
            "surge groups made: where",
            f"{len(surge)}: "
            + "; ".join(
                f"{s['group']} {'+'.join(s['leaves'])} ({'+'.join(s['spines'])})" for s in surge
            ),
        ),
    ]
    if "ran" in training:
        wait_s = training["wait_s"]
        rows += [
            (
                "training gangs that ran during the rollout (made in it)",
                f"{training['ran']} ({training['created']})",
            ),
            (
                "their wait, create to Running: p50 / p99 / max",
                f"{wait_s['p50']:.1f} / {wait_s['p99']:.1f} / {wait_s['max']:.1f} s",
            ),
            (
                "training gangs waiting at the end (create calls not all made)",
                f"{training['waiting_at_end']} ({training['unposted_at_end']})",
            ),
        ]
    cpu = result.get("rollout_cpu_s") or {}
    if cpu:
        rows.append(
            (
                "CPU s during the rollout",
                ", ".join(f"{name} {s:.1f}" for name, s in cpu.items() if s >= 0.1) or "-",
            )
        )
    for words, value in rows:
        table.add_row(words, value)
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the options (sizes, rollout, churn, a phase's timeout, the JSON file); exits on a
    bad one."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench fleet",
        description="A serving LWS rolls out while training gangs come and go, on kwok nodes.",
    )
    flags = (
        ("--nodes", 1000, "kwok nodes, 8 a leaf, 4 leaves a spine"),
        ("--groups", 50, "serving groups (LWS replicas)"),
        ("--size", 2, "pods a serving group, 8 GPUs each (a whole node)"),
        ("--max-surge", 2, "the LWS rollout's maxSurge (groups)"),
        ("--max-unavailable", 1, "the LWS rollout's maxUnavailable (groups)"),
        ("--train-gangs", 80, "training gangs kept alive (0: no churn)"),
        ("--train-size", 8, "pods a training gang, 8 GPUs each"),
    )
    for flag, default, words in flags:
        parser.add_argument(flag, type=int, default=default, help=words)
    parser.add_argument("--train-hold", type=float, default=10, help="seconds a training gang runs")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for a phase")
    parser.add_argument("--json", type=argparse.FileType("w"), metavar="FILE")
    args = parser.parse_args(argv)
    if min(args.groups, args.size, args.train_size) < 1 or args.timeout <= 0:
        parser.error("--groups, --size, --train-size >= 1 and --timeout > 0")
    if min(args.max_surge, args.max_unavailable, args.train_gangs) < 0 or args.train_hold < 0:
        parser.error("--max-surge, --max-unavailable, --train-gangs, --train-hold >= 0")
    if args.max_surge == 0 and args.max_unavailable == 0:
        parser.error("--max-surge and --max-unavailable cannot both be 0 (LWS refuses it)")
    serving = (args.groups + min(args.max_surge, args.groups)) * args.size
    if serving > args.nodes:
        parser.error(
            f"{args.groups} groups and {args.max_surge} surge of {args.size} pods need "
            f"{serving} nodes (a pod takes a whole node); --nodes is {args.nodes}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line ``argv``; return the exit code (1: the rollout did
    not finish, or the cluster or the serving groups did not come up)."""
    from importlib.metadata import version  # noqa: PLC0415

    args = parse_args(argv)
    console = Console(highlight=False, width=160)
    versions = {"kopf": version("kopf"), "kubernetes_client": version("kubernetes")}
    started = environment() | versions
    try:
        result = run_fleet(args, console.log)
    except TimeoutError as err:
        console.print(f"[red]fleet benchmark failed:[/red] {err}")
        return 1
    ended = {"load_average_end": [round(x, 2) for x in os.getloadavg()]}
    table = summary_table(result)
    table.caption = (
        f"{table.caption}; load average {started['load_average']} at the start, "
        f"{ended['load_average_end']} at the end, {started['cpus_usable']} CPUs"
    )
    console.print(table)
    if args.json is not None:
        output = {"benchmark": "fleet", "environment": started | ended}
        json.dump(output | {"result": result}, args.json, indent=2)
        args.json.write("\n")
    return 0 if result["rollout_s"] is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
