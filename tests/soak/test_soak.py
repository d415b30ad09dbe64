"""Soak: 200 gangs arriving over time on 1,000 kwok nodes, with churn, plain pods competing,
nodes going NotReady and the placer leader killed twice; the gang invariants hold throughout.

The fleet (one uniform fabric, 8 nodes a leaf, 4 leaves a spine, 8 GPUs and 8 ``rdma/ib`` a
node): the last 10 % of the nodes carry no ``topology.tpfabric.io/`` label (just autoscaled),
the 104 nodes of the first 13 leaves carry ``pool=batch``, and one node in 16 of the others a
NoSchedule taint. The operator runs, and a second extender/placer replica beside the session's:
the two elect one placer by the Lease. Over ``ARRIVAL_SECONDS``: 200 TensorParallelJobs (mostly
1-4 workers, some 8, a few 16 and 32; required leaf, preferred leaf with maxWaitSeconds, some
required spine, some ``pool=batch``; some with workers of half a node, a third of those kept one
per node by required pod anti-affinity; two that can never fit, early in the line) in three
namespaces, 50 plain 8-GPU pods for the default
kube-scheduler (a third deleted after 30 s), about a third of the gangs deleted 20 s after they
run (they "finish"), five nodes made NotReady (some running workers), and the placer leader
SIGKILLed twice (restarted, as kubelet would, once the other replica holds the lease).

Checked every ~2 s, on one consistent list of pods, and at the end:

- no node overcommitted (GPU and RDMA requests of bound, non-terminal pods within allocatable),
  except by a race of the default scheduler's cache and tpfabric's: the two bound within
  ``SCHEDULER_RACE_SECONDS`` of each other, or the default scheduler bound onto a node that
  tpfabric's pods had filled (however late: a loaded machine delays its watch). A real kubelet
  refuses the later pod, kwok cannot, so those races are reported (``scheduler_races``), not
  failed; tpfabric binding beyond the window onto a node the other had filled is a violation;
- no gang half-bound (some workers bound, others not) longer than the placer's bind bound plus
  15 s; no job Failed; nothing newly bound to a NotReady node; no gang re-planned after it ran
  whole (nothing here makes a running worker fail);
- a gang that can never fit binds nothing (and ends waiting with a reason that says so); the
  workers of an anti-affine gang never share a node;
- after a settle period every remaining gang runs whole or waits with the placer's reason.

The numbers (time to Running, failover, plans, durations) are printed and written to
``$TPFABRIC_TEST_LOGS/soak.json``. Sized for a 2-core machine, nothing scaled down: alone on it
the whole test takes about 5 minutes (setup ~30-60 s, run ~125 s, settle <= 120 s, teardown
~50 s); beside other clusters on the same cores it took up to ~8 (pytest's timeout is 10).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from soak_support import (
    NEVER_FITTING,
    ROLE_LABEL,
    SOAK_LABEL,
    Fleet,
    GangView,
    JobKey,
    gang_mix,
    gang_views,
    overcommits,
    parse_time,
    percentile,
    plain_pod,
    scheduled_at,
    soak_fleet,
)

from control_plane_fixtures import LOGS
from tpfabric_core.api import GROUP, PLURAL, SCHEDULER_NAME, VERSION
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_localcluster.cluster import KWOK_NODE_ANNOTATION, LocalCluster, api_client
from tpfabric_localcluster.nodes import NOT_READY_TAINTS
from tpfabric_localcluster.tpfabric import (
    EXTENDER,
    LOCAL_PLACER_ARGS,
    OPERATOR,
    start_extender,
    start_operator,
)

NODES = 1000
JOBS = 200
ARRIVAL_SECONDS = 100.0
PLAIN_PODS = 50
PLAIN_LIFETIME_SECONDS = 30.0  # every third plain pod is deleted after this long
FINISH_SHARE = 0.35
FINISH_AFTER_SECONDS = 20.0  # a finishing gang is deleted this long after it runs
NOT_READY_NODES = 5
#: seconds into the run: kill the leader, make nodes NotReady, kill the (new) leader
KILL_AT = (30.0, 75.0)
NOT_READY_AT = 50.0
SETTLE_SECONDS = 120.0
SAMPLE_SECONDS = 2.0
SEED = 20240611

REPLICA_B = "tpfabric-extender-b"
_FLAGS = dict(arg.removeprefix("--").split("=", 1) for arg in LOCAL_PLACER_ARGS)
LEASE_NAMESPACE = _FLAGS["lease-namespace"]
LEASE_NAME = "tpfabric-placer"  # the placer's default --lease-name
#: the placer's bind bound, plus its check latency (a cycle plans for at most 10 s before the
#: bound checks come round again, a 5 s resync) and the deletion of the dropped gang's pods
HALF_BOUND_LIMIT_SECONDS = float(_FLAGS["bind-timeout-seconds"]) + 30.0
NOT_READY_BIND_SLACK_SECONDS = 2.0  # a binding decided just before the taint landed
#: two schedulers binding to one node this close together race (PodScheduled has 1 s steps)
SCHEDULER_RACE_SECONDS = 3.0


def _json(response: Any) -> Any:
    return orjson.loads(response.data)


@dataclass
class Soak:
    """The soak's cluster, fleet and namespaces, and the report the test fills in."""

    cluster: LocalCluster
    run: str  # the value of SOAK_LABEL on everything the soak creates
    fleet: Fleet
    namespaces: list[str]
    report: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Any:
        """Return a new API client (one per thread)."""
        return api_client(self.cluster.kubeconfig)


# -- setup and teardown ------------------------------------------------------------------------


def _create_nodes(api: client.ApiClient, manifests: list[dict[str, Any]]) -> None:
    core = client.CoreV1Api(api)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda m: core.create_node(m, _preload_content=False), manifests))


def _wait_nodes_ready(api: client.ApiClient, run: str, count: int, timeout: float) -> None:
    """Wait until ``count`` nodes of the run are Ready without a not-ready taint."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        nodes = _json(core.list_node(label_selector=f"{SOAK_LABEL}={run}", _preload_content=False))[
            "items"
        ]
        ready = 0
        for node in nodes:
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
            taints = {t["key"] for t in node["spec"].get("taints") or []}
            ready += conditions.get("Ready") == "True" and not taints & NOT_READY_TAINTS
        if ready == count:
            return
        time.sleep(1.0)
    raise TimeoutError(f"only {ready}/{count} soak nodes Ready after {timeout:.0f}s")


def _lease_holder(coordination: client.CoordinationV1Api) -> str:
    try:
        lease = coordination.read_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "")


def _wait(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def _jobs_in(custom: client.CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _json(
        custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _preload_content=False
        )
    )["items"]
    return items


def _soak_nodes(core: client.CoreV1Api, run: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _json(
        core.list_node(label_selector=f"{SOAK_LABEL}={run}", _preload_content=False)
    )["items"]
    return items


def _teardown(api: client.ApiClient, soak: Soak) -> None:
    """Stop the second replica, delete the jobs (while the operator runs), stop the operator,
    delete the namespaces, then the nodes; the session's extender leads again after."""
    cluster = soak.cluster
    state = cluster.state()
    if state is not None and not state.components[EXTENDER].alive():
        start_extender(cluster)  # killed by a chaos step that did not finish
    cluster.stop_component(REPLICA_B)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    # kopf puts a finalizer on every job (its timer needs one): only the running operator
    # lets a job go, so the jobs go first
    finalizers: set[str] = set()
    for namespace in soak.namespaces:
        for job in _jobs_in(custom, namespace):
            finalizers.update(job["metadata"].get("finalizers") or [])
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    soak.report["job_finalizers"] = sorted(finalizers)
    stuck = False
    try:
        _wait(
            lambda: not any(_jobs_in(custom, n) for n in soak.namespaces),
            180,
            "the operator to let the soak's jobs go",
            interval=1.0,
        )
    except TimeoutError:
        stuck = True
        for namespace in soak.namespaces:  # an operator that cannot: do it for it
            for job in _jobs_in(custom, namespace):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )  # fmt: skip
    cluster.stop_component(OPERATOR)
    for namespace in soak.namespaces:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_namespace(namespace)

    def namespaces_gone() -> bool:
        names = {
            n["metadata"]["name"]
            for n in _json(core.list_namespace(_preload_content=False))["items"]
        }
        return not names & set(soak.namespaces)

    _wait(namespaces_gone, 120, "the soak namespaces to be deleted", interval=1.0)
    core.delete_collection_node(label_selector=f"{SOAK_LABEL}={soak.run}")
    _wait(lambda: not _soak_nodes(core, soak.run), 60, "the soak nodes to be deleted", interval=1.0)
    coordination = client.CoordinationV1Api(api)
    _wait(lambda: _lease_holder(coordination) == EXTENDER, 30, f"{EXTENDER} to lead again")
    assert not stuck, "the operator did not remove its finalizer from the deleted jobs in 180 s"


@pytest.fixture
def soak(api: client.ApiClient, tpfabric_scheduling: LocalCluster) -> Iterator[Soak]:
    """Return the soak fleet (Ready), its namespaces, the operator and a second placer replica.

    Everything is removed afterwards; the report is then completed and written.
    """
    started = time.monotonic()
    run = uuid.uuid4().hex[:6]
    fabric = uniform_fabric(
        NODES, nodes_per_leaf=8, leaves_per_spine=4, spines_per_block=4, name=f"soak-{run}"
    )
    fleet = soak_fleet(fabric, run, unlabelled_share=0.1, taint_every=16, batch_leaves=13)
    soak = Soak(tpfabric_scheduling, run, fleet, [f"soak-{run}-{suffix}" for suffix in "abc"])
    report = soak.report
    report["fleet"] = {
        "nodes": len(fleet.manifests),
        "unlabelled": len(fleet.unlabelled),
        "tainted": len(fleet.tainted),
        "batch_pool": len(fleet.batch_pool),
    }
    core = client.CoreV1Api(api)
    try:
        for namespace in soak.namespaces:
            core.create_namespace({"metadata": {"name": namespace, "labels": {SOAK_LABEL: run}}})
        _create_nodes(api, fleet.manifests)
        _wait_nodes_ready(api, run, len(fleet.manifests), timeout=180)
        report["nodes_ready_s"] = round(time.monotonic() - started, 1)
        start_operator(tpfabric_scheduling)
        start_extender(tpfabric_scheduling, name=REPLICA_B)
        coordination = client.CoordinationV1Api(api)
        report["initial_leader"] = _wait(
            lambda: _lease_holder(coordination), 30, "a placer lease holder"
        )
        report["duration_s"] = {"setup": round(time.monotonic() - started, 1)}
        yield soak
    finally:
        torn = time.monotonic()
        try:
            _teardown(api, soak)
        finally:
            durations = report.setdefault("duration_s", {})
            durations["teardown"] = round(time.monotonic() - torn, 1)
            durations["total"] = round(time.monotonic() - started, 1)
            _write_report(report)


# -- watching the invariants -------------------------------------------------------------------


@dataclass
class Sample:
    """One look at the cluster: the gangs and the plain pods."""

    number: int
    at: float  # monotonic
    gangs: list[GangView]
    plain_bound: int


class InvariantWatch(threading.Thread):
    """Samples the cluster every ``SAMPLE_SECONDS`` and records every broken invariant."""

    def __init__(self, soak: Soak) -> None:
        super().__init__(name="soak-watch", daemon=True)
        self.soak = soak
        self.api = soak.client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.latest: Sample | None = None
        #: what broke -> seconds into the watch it was first seen
        self.violations: dict[str, float] = {}
        #: overcommits from two schedulers binding at once -> first seen (not tpfabric's doing)
        self.scheduler_races: dict[str, float] = {}
        self.errors: list[str] = []
        self.max_overcommitted = 0
        self.half_bound_since: dict[JobKey, float] = {}
        self.too_long: set[JobKey] = set()  # half-bound gangs reported already
        self.longest_half_bound = 0.0
        #: job (namespace, name) -> monotonic time first seen Running
        self.running_since: dict[tuple[str, str], float] = {}
        #: job uid -> seconds from its creation to all workers Running
        self.time_to_running: dict[str, float] = {}
        #: job uid -> epoch seconds it was first seen with all workers Running
        self.ran_at: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        #: node -> epoch seconds its not-ready taint was seen (set by the chaos thread)
        self.not_ready_since: dict[str, float] = {}

    def run(self) -> None:
        while not self.halt.is_set():
            begun = time.monotonic()
            try:
                self.sample()
            except Exception as err:  # noqa: BLE001 - a busy API server: report, keep sampling
                self.errors.append(f"{time.strftime('%H:%M:%S')} {err!r}")
            self.halt.wait(max(0.0, SAMPLE_SECONDS - (time.monotonic() - begun)))

    def sample(self) -> Sample:
        """Look once; record violations; return the sample."""
        nodes = _soak_nodes(self.core, self.soak.run)
        # one list each, not one per namespace: a sample must be one consistent moment (a
        # pod deleted in one namespace and its node taken in another is not an overcommit)
        pods = _json(self.core.list_pod_for_all_namespaces(_preload_content=False))["items"]
        jobs = _json(
            self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, _preload_content=False)
        )["items"]
        ours = set(self.soak.namespaces)
        jobs = [j for j in jobs if j["metadata"]["namespace"] in ours]
        now = time.monotonic()
        gangs = gang_views(jobs, pods)
        over = overcommits(nodes, pods)
        plain_bound = sum(
            1
            for p in pods
            if ROLE_LABEL in (p["metadata"].get("labels") or {}) and p["spec"].get("nodeName")
        )
        with self.lock:
            self.max_overcommitted = max(self.max_overcommitted, len(over))
            for item in over:
                if item.scheduler_race(SCHEDULER_RACE_SECONDS, SCHEDULER_NAME):
                    self.scheduler_races.setdefault(str(item), round(now - self.started, 1))
                else:
                    self.violate(f"overcommitted {item}", now)
            self._check_gangs(gangs, now)
            self._check_not_ready(pods, now)
            number = self.latest.number + 1 if self.latest else 1
            self.latest = Sample(number, now, gangs, plain_bound)
            return self.latest

    def violate(self, what: str, now: float) -> None:
        """Record a broken invariant (once)."""
        self.violations.setdefault(what, round(now - self.started, 1))

    def _check_gangs(self, gangs: list[GangView], now: float) -> None:
        seen = set()
        for gang in gangs:
            namespace, name, uid = gang.key
            seen.add(gang.key)
            if gang.half_bound:
                since = self.half_bound_since.setdefault(gang.key, now)
                self.longest_half_bound = max(self.longest_half_bound, now - since)
                if now - since > HALF_BOUND_LIMIT_SECONDS and gang.key not in self.too_long:
                    self.too_long.add(gang.key)
                    self.violate(
                        f"{namespace}/{name} ({uid[:8]}) half-bound for more than "
                        f"{HALF_BOUND_LIMIT_SECONDS:.0f}s: {gang.describe()}",
                        since,
                    )
            else:
                self.half_bound_since.pop(gang.key, None)
            nodes = [
                (p.get("spec") or {}).get("nodeName")
                for p in gang.live_pods
                if (p.get("spec") or {}).get("nodeName")
            ]
            if "-never-" in name and nodes:
                self.violate(f"{namespace}/{name}, which can never fit, bound: {nodes}", now)
            if "-apart" in name and len(set(nodes)) < len(nodes):
                self.violate(f"{namespace}/{name}: anti-affine workers share a node {nodes}", now)
            if gang.running and uid not in self.ran_at:
                self.ran_at[uid] = time.time()
                self.running_since.setdefault((namespace, name), now)
                started = gang.started()
                if gang.created is not None and started is not None:
                    self.time_to_running[uid] = max(0.0, started - gang.created)
            if gang.phase == "Failed" and uid not in self.failed:
                why = next(
                    (c.get("message", "") for c in gang.conditions if c.get("type") == "Failed"),
                    "",
                )
                self.failed[uid] = f"{gang.describe()} -- Failed: {why}"
        for key in [k for k in self.half_bound_since if k not in seen]:
            del self.half_bound_since[key]  # deleted (finished)

    def _check_not_ready(self, pods: list[dict[str, Any]], now: float) -> None:
        for pod in pods:
            since = self.not_ready_since.get(pod["spec"].get("nodeName") or "")
            scheduled = scheduled_at(pod)
            if since is None or scheduled is None:
                continue
            if scheduled > since + NOT_READY_BIND_SLACK_SECONDS:
                self.violate(
                    f"{pod['metadata']['namespace']}/{pod['metadata']['name']} bound to NotReady "
                    f"node {pod['spec']['nodeName']} {scheduled - since:.0f}s after its taint",
                    now,
                )

    def fresh_sample(self, after: int) -> Sample:
        """Return the first sample numbered above ``after`` (waits for the thread)."""
        sample: Sample = _wait(
            lambda: self.latest if self.latest and self.latest.number > after else None,
            60,
            "a fresh sample",
        )
        return sample


# -- chaos: leader kills and NotReady nodes -----------------------------------------------------


class Chaos(threading.Thread):
    """Kills the placer leader at ``KILL_AT`` and makes nodes NotReady at ``NOT_READY_AT``."""

    def __init__(self, soak: Soak, watch: InvariantWatch, started: float) -> None:
        super().__init__(name="soak-chaos", daemon=True)
        self.soak = soak
        self.watch = watch
        self.started = started
        self.api = soak.client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.halt = threading.Event()
        self.failovers: list[dict[str, Any]] = []
        self.not_ready: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        steps = sorted(
            [(at, self.kill_leader) for at in KILL_AT] + [(NOT_READY_AT, self.make_not_ready)],
            key=lambda step: step[0],
        )
        try:
            for at, step in steps:
                if self.halt.wait(max(0.0, self.started + at - time.monotonic())):
                    return
                step()
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            self.error = err

    def planned_uids(self) -> set[str]:
        jobs = _json(
            self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, _preload_content=False)
        )["items"]
        return {
            j["metadata"]["uid"]
            for j in jobs
            if ((j.get("status") or {}).get("placement") or {}).get("state") == "Planned"
        }

    def kill_leader(self) -> None:
        """SIGKILL the lease holder; time the takeover and the next plan; restart it.

        The restart (a pod restart: same identity) waits until the other replica holds the
        lease: a restart while its own lease is still valid would simply renew it.
        """
        holder = _wait(lambda: _lease_holder(self.coordination), 30, "a placer lease holder")
        other = REPLICA_B if holder == EXTENDER else EXTENDER
        self.soak.cluster.kill_component(holder)
        killed = time.monotonic()
        planned = self.planned_uids()  # after the kill: the dead leader writes nothing more
        lease_s: float | None = None
        plan_s: float | None = None
        restarted: list[float] = []

        def restart() -> None:
            start_extender(self.soak.cluster, name=holder)  # returns once it is ready
            restarted.append(time.monotonic() - killed)

        restarter = threading.Thread(target=restart, name=f"restart-{holder}", daemon=True)
        polls = 0
        while time.monotonic() - killed < 45 and (lease_s is None or plan_s is None):
            if lease_s is None and _lease_holder(self.coordination) == other:
                lease_s = time.monotonic() - killed
                restarter.start()
            polls += 1
            if plan_s is None and polls % 3 == 0 and self.planned_uids() - planned:
                plan_s = time.monotonic() - killed
            time.sleep(0.1)
        if lease_s is None:
            restarter.start()
        restarter.join(90)
        if lease_s is None:
            raise AssertionError(f"{other} did not take the lease within 45 s of killing {holder}")
        self.failovers.append(
            {
                "killed": holder,
                "new_leader": other,
                "at_s": round(killed - self.started, 1),
                "lease_taken_s": round(lease_s, 2),
                "first_plan_s": None if plan_s is None else round(plan_s, 2),
                "restarted_ready_s": round(restarted[0], 2) if restarted else None,
            }
        )

    def make_not_ready(self) -> None:
        """Take nodes out of kwok's hands and report them NotReady; wait for the taint.

        Some of the nodes run workers (their pods stay, as on a real node whose kubelet
        stopped), the others are free (the placer and the schedulers must stop using them).
        """
        sample = self.watch.latest
        busy: set[str] = set()
        if sample is not None:
            for gang in sample.gangs:
                busy |= {p["spec"]["nodeName"] for p in gang.live_pods if p["spec"].get("nodeName")}
        rng = random.Random(SEED)
        candidates = self.soak.fleet.plain_labelled()
        with_workers = [n for n in candidates if n in busy]
        free = [n for n in candidates if n not in busy]
        chosen = rng.sample(with_workers, min(len(with_workers), NOT_READY_NODES // 2 + 1))
        chosen += rng.sample(free, NOT_READY_NODES - len(chosen))
        key, _ = KWOK_NODE_ANNOTATION
        for node in chosen:
            self.core.patch_node(node, {"metadata": {"annotations": {key: None}}})
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            condition = {
                "type": "Ready",
                "status": "False",
                "reason": "KubeletNotReady",
                "message": "soak: kubelet stopped",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            self.core.patch_node_status(node, {"status": {"conditions": [condition]}})
        for node in chosen:

            def tainted(node: str = node) -> bool:
                taints = self.core.read_node(node).spec.taints or []
                return any(t.key in NOT_READY_TAINTS for t in taints)

            _wait(tainted, 30, f"the not-ready taint on {node}", interval=0.25)
            with self.watch.lock:
                self.watch.not_ready_since[node] = time.time()
            self.not_ready.append({"node": node, "had_workers": node in busy})


# -- the report --------------------------------------------------------------------------------


def _report_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Return the report as (what, value) rows of a small table."""

    def slash(*keys: str) -> str:
        return " / ".join(str(report.get(key)) for key in keys)

    fleet = report.get("fleet") or {}
    rows = [
        (
            "nodes (unlabelled / tainted / pool=batch)",
            "{} ({} / {} / {})".format(
                *(fleet.get(k) for k in ("nodes", "unlabelled", "tainted", "batch_pool"))
            ),
        ),
        ("jobs created / finished (deleted)", slash("jobs_created", "jobs_finished")),
        (
            "jobs at the end: Running / Waiting / neither",
            slash("jobs_running", "jobs_waiting", "jobs_unsettled"),
        ),
        (
            "never-fitting jobs told so / half-node jobs running at the end",
            slash("never_fitting_told_never", "half_node_jobs_running"),
        ),
        (
            "plain pods created / deleted / bound at the end",
            slash("plain_created", "plain_deleted", "plain_bound"),
        ),
        (
            "creation -> all workers Running p50 / p99 / max (s)",
            slash("running_p50_s", "running_p99_s", "running_max_s")
            + f" (n={report.get('running_count')})",
        ),
        (
            "plans / replans / worker replans / waits",
            slash("plans", "replans", "worker_replans", "waits"),
        ),
        (
            "replans of gangs that had run whole",
            str(len(report.get("replans_after_running") or [])),
        ),
    ]
    rows += [
        (
            f"failover after killing {f['killed']} (s)",
            f"lease taken {f['lease_taken_s']}, first plan {f['first_plan_s']}",
        )
        for f in report.get("failovers", [])
    ]
    rows += [
        ("longest half-bound gang (s)", str(report.get("longest_half_bound_s"))),
        ("max overcommitted nodes in a sample", str(report.get("max_overcommitted_nodes"))),
        (
            "violations / failed jobs",
            f"{len(report.get('violations', []))} / {len(report.get('failed_jobs', []))}",
        ),
        (
            "two-scheduler races (overcommits a kubelet would refuse)",
            str(len(report.get("scheduler_races", []))),
        ),
        ("samples", str(report.get("samples"))),
        ("duration (s)", json.dumps(report.get("duration_s"))),
    ]
    return rows


def _write_report(report: dict[str, Any]) -> None:
    """Write the report as JSON to ``$TPFABRIC_TEST_LOGS/soak.json`` and print it as a table."""
    LOGS.mkdir(parents=True, exist_ok=True)
    path = LOGS / "soak.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    rows = _report_rows(report)
    width = max(len(what) for what, _ in rows)
    print(f"\nsoak report ({path}):")
    for what, value in rows:
        print(f"  {what:<{width}}  {value}")


def _events(core: client.CoreV1Api, namespaces: list[str], reason: str) -> list[dict[str, Any]]:
    return [
        event
        for namespace in namespaces
        for event in _json(
            core.list_namespaced_event(
                namespace, field_selector=f"reason={reason}", _preload_content=False
            )
        )["items"]
    ]


def _replans_after_running(
    core: client.CoreV1Api, namespaces: list[str], ran_at: dict[str, float]
) -> list[str]:
    """Return the placer's re-plans of gangs that had run whole before (none should: here
    no worker of a running gang fails, a NotReady node keeps its pods)."""
    found = []
    for event in _events(core, namespaces, "GangReplanning"):
        involved = event["involvedObject"]
        ran = ran_at.get(involved.get("uid", ""))
        at = parse_time(event.get("firstTimestamp")) or parse_time(event.get("eventTime"))
        if ran is not None and at is not None and at > ran + 1.0:  # 1 s: timestamp steps
            found.append(
                f"{involved['namespace']}/{involved['name']} re-planned {at - ran:.0f}s after it "
                f"ran whole: {event.get('message')}"
            )
    return found


# -- the workload ------------------------------------------------------------------------------


class Workload(threading.Thread):
    """Creates the jobs and the plain pods on their schedule; deletes what "finishes"."""

    def __init__(self, soak: Soak, watch: InvariantWatch, started: float) -> None:
        super().__init__(name="soak-workload", daemon=True)
        self.soak = soak
        self.watch = watch
        self.started = started
        self.halt = threading.Event()
        self.api = soak.client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.plans = gang_mix(JOBS, soak.namespaces, seed=SEED, finish_share=FINISH_SHARE)
        self.by_key = {(p.namespace, p.name): p for p in self.plans}
        self.created = 0
        self.plain_created = 0
        self.plain_deleted = 0
        self.plain_due: list[tuple[float, str]] = []  # (when, pod) to delete
        self.finished: set[tuple[str, str]] = set()
        self.errors: list[str] = []

    @property
    def done(self) -> bool:
        """Return whether everything is created and every plain pod due to go is gone."""
        return self.created == JOBS and self.plain_created == PLAIN_PODS and not self.plain_due

    def run(self) -> None:
        # once everything is created, gangs keep finishing until the test halts the workload
        while not self.halt.wait(0.1):
            try:
                self.step(time.monotonic() - self.started)
            except ApiException as err:
                self.errors.append(f"{err.status} {err.reason}: {err.body}")

    def step(self, now: float) -> None:
        """Do what is due ``now`` seconds into the run."""
        job_gap, plain_gap = ARRIVAL_SECONDS / JOBS, ARRIVAL_SECONDS / PLAIN_PODS
        while self.created < JOBS and self.created * job_gap <= now:
            plan = self.plans[self.created]
            self.created += 1
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, plan.namespace, PLURAL, plan.manifest()
            )
        plain_namespace = self.soak.namespaces[0]
        while self.plain_created < PLAIN_PODS and self.plain_created * plain_gap <= now:
            name = f"plain-{self.plain_created:03d}"
            if self.plain_created % 3 == 0:
                self.plain_due.append((now + PLAIN_LIFETIME_SECONDS, name))
            self.plain_created += 1
            self.core.create_namespaced_pod(plain_namespace, plain_pod(name))
        for due, name in [d for d in self.plain_due if d[0] <= now]:
            self.plain_due.remove((due, name))
            self.core.delete_namespaced_pod(name, plain_namespace, grace_period_seconds=0)
            self.plain_deleted += 1
        self.finish_gangs()

    def finish_gangs(self) -> None:
        """Delete the finishing gangs that have run for ``FINISH_AFTER_SECONDS``."""
        with self.watch.lock:
            running = dict(self.watch.running_since)
        for key, since in running.items():
            plan = self.by_key.get(key)
            if plan is None or not plan.finishes or key in self.finished:
                continue
            if time.monotonic() - since >= FINISH_AFTER_SECONDS:
                self.finished.add(key)
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, key[0], PLURAL, key[1])


def _settle(watch: InvariantWatch) -> list[GangView]:
    """Wait (up to ``SETTLE_SECONDS``) for two samples in a row where every gang runs or waits
    with a reason; return the gangs that do neither in the last sample."""
    deadline = time.monotonic() + SETTLE_SECONDS
    sample = watch.fresh_sample(0)
    settled = 0
    while time.monotonic() < deadline:
        sample = watch.fresh_sample(sample.number)
        unsettled = [g for g in sample.gangs if not (g.running or g.waiting_with_reason)]
        settled = 0 if unsettled else settled + 1
        if settled == 2:
            break
    return unsettled


def _summary(
    watch: InvariantWatch, chaos: Chaos, workload: Workload, final: Sample
) -> dict[str, Any]:
    """Return the numbers of the run for the report."""
    core = client.CoreV1Api(watch.api)
    namespaces = watch.soak.namespaces
    ttr = list(watch.time_to_running.values())
    unsettled = [g for g in final.gangs if not (g.running or g.waiting_with_reason)]
    return {
        "jobs_created": workload.created,
        "jobs_finished": len(workload.finished),
        "jobs_running": sum(1 for g in final.gangs if g.running),
        "jobs_waiting": sum(1 for g in final.gangs if not g.running and g.waiting_with_reason),
        "jobs_unsettled": len(unsettled),
        "never_fitting_told_never": sum(
            1
            for g in final.gangs
            if "-never-" in g.key[1] and "ever" in str(g.placement.get("message") or "")
        ),
        "half_node_jobs_running": sum(1 for g in final.gangs if "-g4" in g.key[1] and g.running),
        "plain_created": workload.plain_created,
        "plain_deleted": workload.plain_deleted,
        "plain_bound": final.plain_bound,
        "running_count": len(ttr),
        "running_p50_s": percentile(ttr, 0.5),
        "running_p99_s": percentile(ttr, 0.99),
        "running_max_s": max(ttr, default=None),
        "plans": len(_events(core, namespaces, "GangPlaced")),
        "replans": len(_events(core, namespaces, "GangReplanning")),
        "replans_after_running": _replans_after_running(core, namespaces, watch.ran_at),
        "worker_replans": len(_events(core, namespaces, "WorkerReplanned")),
        "waits": len(_events(core, namespaces, "WaitingForCapacity")),
        "failovers": chaos.failovers,
        "not_ready": chaos.not_ready,
        "longest_half_bound_s": round(watch.longest_half_bound, 1),
        "max_overcommitted_nodes": watch.max_overcommitted,
        "violations": [f"{at:.0f}s: {what}" for what, at in watch.violations.items()][:50],
        "scheduler_races": [f"{at:.0f}s: {what}" for what, at in watch.scheduler_races.items()],
        "failed_jobs": list(watch.failed.values()),
        "unsettled": [g.describe() for g in unsettled],
        "sample_errors": watch.errors[:20],
        "workload_errors": workload.errors[:20],
        "samples": final.number,
    }


# -- the test ----------------------------------------------------------------------------------


def test_200_gangs_with_churn_and_two_leader_kills_keep_the_gang_invariants(soak: Soak) -> None:
    watch = InvariantWatch(soak)
    watch.start()
    started = time.monotonic()
    chaos = Chaos(soak, watch, started)
    workload = Workload(soak, watch, started)
    chaos.start()
    workload.start()
    try:
        _wait(
            lambda: workload.done and not chaos.is_alive(),
            ARRIVAL_SECONDS + 120,
            "the arrivals and the chaos steps",
            interval=0.5,
        )
        run_s = time.monotonic() - started
        # the churn stops before the settle: a gang finishing during it frees room, a waiting
        # gang is planned and, caught between its plan and its binds, is neither (CI, once)
        for thread in (workload, chaos):
            thread.halt.set()
            thread.join(120)
        _settle(watch)
        settle_s = time.monotonic() - started - run_s
    finally:
        for thread in (workload, chaos, watch):
            thread.halt.set()
        for thread in (workload, chaos, watch):
            thread.join(120)
    final = watch.sample()  # one more after the threads: the end state
    soak.report.update(_summary(watch, chaos, workload, final))
    soak.report["duration_s"].update({"run": round(run_s, 1), "settle": round(settle_s, 1)})

    if chaos.error is not None:
        raise chaos.error
    assert not workload.errors, workload.errors
    assert not watch.violations, "\n".join(soak.report["violations"][:20])
    assert not watch.failed, "\n".join(watch.failed.values())
    assert not soak.report["replans_after_running"], "\n".join(soak.report["replans_after_running"])
    unsettled = [g for g in final.gangs if not (g.running or g.waiting_with_reason)]
    assert not unsettled, "neither Running nor Waiting with a reason after the settle period:\n" + (
        "\n".join(g.describe() for g in unsettled)
    )
    assert len(chaos.failovers) == len(KILL_AT)
    assert watch.time_to_running, "no gang ever ran"
    never = [g for g in final.gangs if "-never-" in g.key[1]]
    assert len(never) == len(NEVER_FITTING)
    assert soak.report["never_fitting_told_never"] == len(NEVER_FITTING), [
        g.placement.get("message") for g in never
    ]
    assert soak.report["half_node_jobs_running"], "a gang of half-node workers ran"
