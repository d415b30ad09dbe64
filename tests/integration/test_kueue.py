"""Kueue admits, tpfabric places: Kueue's real controller on the local control plane.

Kueue runs with ``waitForPodsReady`` (20 s, one requeue then deactivation, 1 s backoff) and
deletes a finished Workload 3 s after it finished. Each test makes the ClusterQueue (and flavors,
topology, priority classes) it needs; they are deleted after it, once its jobs are gone.

What is checked is Kueue's contract with a job framework: the operator keeps a job suspended
until its Workload is admitted, stops it whole when Kueue evicts it and gives the quota back so
that Kueue requeues it, tells Kueue when the gang is ready (``PodsReady``), runs the workers where
the admission says (flavor node labels and tolerations, TAS topology assignment), carries the
job's priority, queue and demand to the Workload, and holds the quota while pods terminate.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_lifecycle import end_worker
from test_operator import Tpj, small_job

from control_plane_fixtures import clear_jobs_and_pods, run_kubectl, wait_for
from tpfabric_core import labels
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.kueue import KUEUE, KUEUE_NAMESPACE, PodsReadyWait, start_kueue
from tpfabric_localcluster.nodes import FAKE_NODE_LABEL
from tpfabric_localcluster.toolchain import find_toolchain
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator
from tpfabric_operator.jobs.kueue.workload import (
    QUEUE_LABEL,
    WORKLOAD_GROUP,
    WORKLOAD_VERSION,
    workload_name,
)

KUEUE_V = f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}"
CHART = Path(__file__).resolve().parents[2] / "charts" / "tpfabric"
GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
#: a node label no node has: workers that need it are never scheduled, so never ready
NOWHERE = "tpfabric.io/test-nowhere"
#: a test's finalizer that keeps a worker pod terminating
HOLD = "tpfabric.io/test-hold"
PODS_READY_TIMEOUT = 20
PODS_READY = PodsReadyWait(
    timeout_seconds=PODS_READY_TIMEOUT,
    backoff_base_seconds=1,
    backoff_max_seconds=2,
    backoff_limit_count=1,
)
RETENTION = 3
#: how long a waiting job and its Workload are watched for writes (the operator reconciles
#: every second here: 15 reconciles)
IDLE_SECONDS = 15


def test_without_kueue_a_queued_job_waits_suspended_and_says_why(
    api: client.ApiClient,
    tpfabric_scheduling: LocalCluster,
    namespace: str,
    fabric_nodes: dict[str, dict[str, str]],
) -> None:
    """Before Kueue is installed (this test runs first in the module): a job labelled with a
    queue is held suspended with one condition that names the problem, and no Workload call
    fails every tick (the job's phase is Suspended, not blank)."""
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert WORKLOAD_GROUP not in groups, "Kueue is installed already: run this test first"
    start_operator(tpfabric_scheduling)
    jobs = Tpj(api, tpfabric_scheduling, namespace)
    try:
        name = jobs.apply(queued_job("no-kueue"))
        admitted = wait_for(
            lambda: (
                (c := jobs.condition(name, "Admitted")).get("reason") == "KueueNotInstalled" and c
            ),
            60,
            what="the job told that Kueue is not installed",
        )
        assert admitted["status"] == "False"
        assert "install Kueue v0.15 or later" in admitted["message"], admitted
        assert jobs.wait_phase(name, "Suspended", timeout=30)["phase"] == "Suspended"
        assert jobs.get(name)["spec"]["suspend"] is True
        assert jobs.pods(name) == []
    finally:
        jobs.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        wait_for(
            lambda: (
                not jobs.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
                    "items"
                ]
            ),
            60,
            what="the job to be gone",
        )
        tpfabric_scheduling.stop_component(OPERATOR)


@pytest.fixture(scope="module")
def kueue(tpfabric_scheduling: LocalCluster) -> Iterator[LocalCluster]:
    if find_toolchain(("kueue",)).missing:
        pytest.fail(
            "kueue is not built: run `tpfabric toolchain build --kueue` (the `make test` target "
            "does it)",
            pytrace=False,
        )
    start_kueue(tpfabric_scheduling, pods_ready=PODS_READY, finished_retention_seconds=RETENTION)
    start_operator(tpfabric_scheduling)
    yield tpfabric_scheduling
    tpfabric_scheduling.stop_component(OPERATOR)
    tpfabric_scheduling.stop_component(KUEUE)


class Queues:
    """The test's Kueue objects and reads of Kueue's state.

    Cluster-scoped objects (ClusterQueues, flavors, topologies, priority classes) are named after
    the test's namespace and deleted after the test (:meth:`delete`); LocalQueues go with the
    namespace. The flavor ``gpus`` (no node labels) is shared by the module and kept.
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.scheduling = client.SchedulingV1Api(api)
        self.namespace = namespace
        self.made: list[tuple[str, str]] = []  # (plural, name), in creation order
        self.priority_classes: list[str] = []

    def unique(self, tag: str) -> str:
        return f"{tag}-{self.namespace}"[:63].rstrip("-")

    def _create(self, plural: str, kind: str, name: str, body: dict[str, Any]) -> str:
        obj = {"apiVersion": KUEUE_V, "kind": kind, "metadata": {"name": name}, **body}
        self.custom.create_cluster_custom_object(WORKLOAD_GROUP, WORKLOAD_VERSION, plural, obj)
        self.made.append((plural, name))
        return name

    def flavor(self, tag: str, **spec: Any) -> str:
        return self._create("resourceflavors", "ResourceFlavor", self.unique(tag), {"spec": spec})

    def topology(self, tag: str, levels: list[str]) -> str:
        spec = {"levels": [{"nodeLabel": level} for level in levels]}
        return self._create("topologies", "Topology", self.unique(tag), {"spec": spec})

    def workload_priority_class(self, tag: str, value: int) -> str:
        return self._create(
            "workloadpriorityclasses", "WorkloadPriorityClass", self.unique(tag), {"value": value}
        )

    def priority_class(self, tag: str, value: int) -> str:
        name = self.unique(tag)
        self.scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        self.priority_classes.append(name)
        return name

    def queue(
        self,
        local: str = "training",
        *,
        gpus: int,
        flavor: str = "gpus",
        memory: bool = False,
        preemption: dict[str, Any] | None = None,
    ) -> str:
        """Make a ClusterQueue with ``gpus`` GPUs (as many RDMA devices, and 4Ti memory with
        ``memory``) of ``flavor`` for the namespace, and its LocalQueue ``local``; return the
        ClusterQueue's name."""
        if flavor == "gpus":
            shared = {"apiVersion": KUEUE_V, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
            try:
                self.custom.create_cluster_custom_object(
                    WORKLOAD_GROUP, WORKLOAD_VERSION, "resourceflavors", shared
                )
            except ApiException as err:
                if err.status != 409:
                    raise
        quotas = {GPU: str(gpus), "rdma/ib": str(gpus)}
        if memory:
            quotas["memory"] = "4Ti"
        resources = [{"name": k, "nominalQuota": v} for k, v in quotas.items()]
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
            "resourceGroups": [
                {
                    "coveredResources": list(quotas),
                    "flavors": [{"name": flavor, "resources": resources}],
                }
            ],
        }
        if preemption:
            spec["preemption"] = preemption
        queue = self._create("clusterqueues", "ClusterQueue", self.unique("cq"), {"spec": spec})
        local_queue = {
            "apiVersion": KUEUE_V,
            "kind": "LocalQueue",
            "metadata": {"name": local, "namespace": self.namespace},
            "spec": {"clusterQueue": queue},
        }
        self.custom.create_namespaced_custom_object(
            WORKLOAD_GROUP, WORKLOAD_VERSION, self.namespace, "localqueues", local_queue
        )
        return queue

    def reserved_gpus(self, cluster_queue: str) -> int:
        """Return the GPUs the ClusterQueue's status shows reserved (all flavors)."""
        queue = self.custom.get_cluster_custom_object(
            WORKLOAD_GROUP, WORKLOAD_VERSION, "clusterqueues", cluster_queue
        )
        return sum(
            int(resource.get("total") or 0)
            for flavor in (queue.get("status") or {}).get("flavorsReservation") or []
            for resource in flavor.get("resources") or []
            if resource.get("name") == GPU
        )

    def delete(self) -> None:
        """Delete what the test made (a ClusterQueue before its flavors, a flavor before its
        topology); Kueue's finalizers finish each once nothing uses it."""
        for plural, name in reversed(self.made):
            try:
                self.custom.delete_cluster_custom_object(
                    WORKLOAD_GROUP, WORKLOAD_VERSION, plural, name
                )
            except ApiException as err:
                if err.status != 404:
                    raise
        for name in self.priority_classes:
            self.scheduling.delete_priority_class(name)


@pytest.fixture
def queues(api: client.ApiClient, kueue: LocalCluster, namespace: str) -> Iterator[Queues]:
    made = Queues(api, namespace)
    yield made
    made.delete()


@pytest.fixture
def tpj(
    api: client.ApiClient,
    kueue: LocalCluster,
    namespace: str,
    fabric_nodes: dict[str, dict[str, str]],
    queues: Queues,
) -> Iterator[Tpj]:
    """Return the test's jobs; afterwards they are deleted while the operator runs (it releases
    each: kopf's finalizer, the Workload's), before the test's Kueue objects go."""
    jobs = Tpj(api, kueue, namespace)
    yield jobs
    for pod in jobs.core.list_namespaced_pod(namespace).items:
        if HOLD in (pod.metadata.finalizers or []):
            jobs.core.patch_namespaced_pod(
                pod.metadata.name, namespace, {"metadata": {"finalizers": None}}
            )
    jobs.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    wait_for(
        lambda: (
            not jobs.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
                "items"
            ]
            and not jobs.core.list_namespaced_pod(namespace).items
        ),
        60,
        what="the test's jobs and pods to be gone",
    )


@pytest.fixture
def queue_name_policy(kueue: LocalCluster) -> Iterator[None]:
    """Apply the chart's ValidatingAdmissionPolicy on TensorParallelJobs' queue label (its
    ``helm template`` render); delete it afterwards."""
    helm = find_toolchain(("helm",)).paths["helm"]
    assert helm is not None, "helm is missing: run `make toolchain`"
    shown = "templates/kueue-queue-name-policy.yaml"
    rendered = subprocess.run(
        [str(helm), "template", "tpfabric", str(CHART), "--show-only", shown],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    applied = run_kubectl(kueue, "apply", "-f", "-", stdin=rendered)
    assert applied.returncode == 0, applied.stderr
    time.sleep(2)  # the API server loads a new policy within a second or so
    yield
    run_kubectl(kueue, "delete", "-f", "-", "--ignore-not-found", stdin=rendered)


def chart_operator_env(*settings: str) -> dict[str, str]:
    """Return the operator's ``TPFABRIC_*`` environment as ``helm template`` renders it with
    ``settings`` (``--set-json`` pairs)."""
    helm = find_toolchain(("helm",)).paths["helm"]
    assert helm is not None, "helm is missing: run `make toolchain`"
    argv = [str(helm), "template", "tpfabric", str(CHART), "--show-only", "templates/operator.yaml"]
    for setting in settings:
        argv += ["--set-json", setting]
    rendered = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("TPFABRIC_")}


@pytest.fixture
def queue_required(kueue: LocalCluster, api: client.ApiClient) -> Iterator[str]:
    """Kueue run with ``manageJobsWithoutQueueName`` and the operator with the chart's mirror of
    it (``kueue.manageJobsWithoutQueueName: true``, ``kueue.managedJobsNamespaceSelector``):
    Kueue's default selector, and one namespace more left out (made here; its name is
    returned). Afterwards both run again as the module runs them."""
    core = client.CoreV1Api(api)
    exempt = f"t-no-queue-needed-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": exempt}})
    left_out = ["kube-system", KUEUE_NAMESPACE, exempt]
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": left_out}
        ]
    }
    env = chart_operator_env(
        "kueue.manageJobsWithoutQueueName=true",
        f"kueue.managedJobsNamespaceSelector={json.dumps(selector)}",
    )
    kueue.stop_component(OPERATOR)
    kueue.stop_component(KUEUE)
    start_kueue(
        kueue,
        pods_ready=PODS_READY,
        finished_retention_seconds=RETENTION,
        managed_namespaces=selector,
    )
    start_operator(kueue, env=env)
    try:
        yield exempt
    finally:
        clear_jobs_and_pods(api, exempt)
        core.delete_namespace(exempt)
        kueue.stop_component(OPERATOR)
        kueue.stop_component(KUEUE)
        start_kueue(kueue, pods_ready=PODS_READY, finished_retention_seconds=RETENTION)
        start_operator(kueue)


def queued_job(name: str, queue: str = "training", **spec: Any) -> dict[str, Any]:
    job = small_job(name, **spec)
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return job


def set_queue(tpj: Tpj, name: str, queue: str | None) -> None:
    """Set the job's queue label (None: remove it)."""
    patch = {"metadata": {"labels": {QUEUE_LABEL: queue}}}
    tpj.custom.patch_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, name, patch)


def uid_of(tpj: Tpj, name: str) -> str:
    return str(tpj.get(name)["metadata"]["uid"])


def workload_of(tpj: Tpj, name: str, uid: str) -> dict[str, Any] | None:
    """Return the Workload of job ``name`` (``uid``), or None when there is none."""
    try:
        found: dict[str, Any] = tpj.custom.get_namespaced_custom_object(
            WORKLOAD_GROUP, WORKLOAD_VERSION, tpj.namespace, "workloads", workload_name(name, uid)
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def condition_of(workload: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return dict(condition)
    return {}


def is_true(workload: dict[str, Any] | None, kind: str) -> bool:
    return condition_of(workload, kind).get("status") == "True"


def explain_workload(tpj: Tpj, name: str, uid: str) -> Callable[[], str]:
    """Return what a failed wait shows: the Workload's conditions and the job's pods."""

    def explain() -> str:
        workload = workload_of(tpj, name, uid)
        lines = [f"workload {'absent' if workload is None else ''}"]
        lines += [
            f"  {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
            for c in ((workload or {}).get("status") or {}).get("conditions") or []
        ]
        try:
            lines.append(f"job status: {tpj.status(name)}")
        except ApiException as err:
            lines.append(f"job: {err.reason}")
        lines += [f"  pod {p.metadata.name}: {p.status.phase}" for p in tpj.pods(name)]
        return "\n".join(lines)

    return explain


def wait_workload_condition(
    tpj: Tpj, name: str, uid: str, kind: str, *, timeout: float, what: str, **shown: str
) -> dict[str, Any]:
    """Wait until the job's Workload shows condition ``kind`` with the fields ``shown`` (e.g.
    ``status="True"``); return the condition."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (
            (c := condition_of(workload_of(tpj, name, uid), kind))
            and all(c.get(k) == v for k, v in shown.items())
            and c
        ),
        timeout,
        what=what,
        explain=explain_workload(tpj, name, uid),
    )


def holds(check: Callable[[], Any], seconds: float, what: str) -> None:
    """Fail unless ``check()`` stays truthy for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), f"no longer {what}"
        time.sleep(0.5)


def assigned_domains(assignment: dict[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    """Return [(values per level, pods)] of a v1beta2 ``topologyAssignment`` (its compact form:
    slices of ``domainCount`` domains, each level's values one ``universal`` value or
    ``individual`` roots with a prefix and suffix, pod counts the same way)."""

    def value(values: dict[str, Any], index: int) -> str:
        if values.get("universal") is not None:
            return str(values["universal"])
        individual = values["individual"]
        root = individual["roots"][index]
        return f"{individual.get('prefix') or ''}{root}{individual.get('suffix') or ''}"

    domains = []
    for piece in assignment.get("slices") or []:
        counts = piece["podCounts"]
        for index in range(int(piece["domainCount"])):
            values = tuple(value(v, index) for v in piece["valuesPerLevel"])
            pods = (
                counts["universal"]
                if counts.get("universal") is not None
                else counts["individual"][index]
            )
            domains.append((values, int(pods)))
    return domains


def required_expressions(pod: client.V1Pod) -> list[list[Any]]:
    """Return the match expressions of each required node-affinity term of ``pod``."""
    affinity = pod.spec.affinity
    required = (
        affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if affinity is not None and affinity.node_affinity is not None
        else None
    )
    terms = required.node_selector_terms if required is not None else []
    return [list(t.match_expressions or []) for t in terms]


# -- quota, finish, retention ---------------------------------------------------------------------


def test_two_jobs_fit_the_quota_and_the_third_waits_for_one_to_finish(
    tpj: Tpj, queues: Queues, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    """A ClusterQueue has GPU quota for two 2-worker jobs; three are submitted. Two are admitted
    and run in their leaves; the third waits on quota (suspended by the operator: no pods, so no
    plan and no reservation), and runs once one of the others finishes and its Workload gives
    the quota back. A worker that finished is reported reclaimable; the finished job's Workload,
    deleted by Kueue's retention policy, is not made again."""
    queues.queue(gpus=32)  # 2 jobs x 2 workers x 8
    started = time.monotonic()
    names = [tpj.apply(queued_job(f"q{i}")) for i in range(3)]

    def running() -> list[str]:
        return [n for n in names if tpj.status(n).get("phase") == "Running"]

    wait_for(lambda: len(running()) == 2, 120, what="two of the three jobs Running")
    both_running = time.monotonic() - started
    admitted_jobs = running()
    for name in admitted_jobs:
        status = tpj.status(name)
        leaves = {fabric_nodes[n][labels.LEAF] for n in status["placement"]["nodes"]}
        assert len(leaves) == 1  # tpfabric placed the admitted gang in one leaf
        assert tpj.condition(name, "Admitted")["status"] == "True"
    (waiting,) = set(names) - set(admitted_jobs)
    admitted = wait_for(
        lambda: (c := tpj.condition(waiting, "Admitted")).get("reason") == "Queued" and c,
        60,
        what="the third job queued",
    )
    assert admitted["status"] == "False"
    assert "quota" in admitted["message"], admitted  # Kueue's words: waiting on quota
    time.sleep(3)
    status = tpj.status(waiting)
    assert status["phase"] == "Suspended"
    assert not status.get("placement")  # not waiting on topology: never planned
    assert tpj.pods(waiting) == []

    first = admitted_jobs[0]
    first_uid = uid_of(tpj, first)
    end_worker(tpj, f"{first}-worker-1", "Succeeded")
    wait_for(
        lambda: (
            ((workload_of(tpj, first, first_uid) or {}).get("status") or {}).get("reclaimablePods")
            == [{"name": "workers", "count": 1}]
        ),
        30,
        what="the finished worker reported reclaimable",
        explain=explain_workload(tpj, first, first_uid),
    )
    end_worker(tpj, f"{first}-worker-0", "Succeeded")
    tpj.wait_phase(first, "Succeeded")
    finished = time.monotonic()
    status = tpj.wait_phase(waiting, "Running", timeout=120)
    print(
        f"KUEUE two admitted and running after {both_running:.1f}s; third running "
        f"{time.monotonic() - finished:.1f}s after the first finished"
    )
    assert tpj.condition(waiting, "Admitted")["status"] == "True"
    assert len(status["placement"]["nodes"]) == 2

    # Kueue deletes the finished Workload after RETENTION seconds; the operator, which makes a
    # Workload for every queued job that has none, must not make this one again
    wait_for(
        lambda: workload_of(tpj, first, first_uid) is None,
        RETENTION + 30,
        what="the finished job's Workload deleted by Kueue's retention policy",
        explain=explain_workload(tpj, first, first_uid),
    )
    holds(lambda: workload_of(tpj, first, first_uid) is None, 8, "without a Workload")
    assert tpj.status(first)["phase"] == "Succeeded"


# -- eviction, PodsReady, requeue -----------------------------------------------------------------


def test_an_evicted_job_stops_uncharged_and_waits_without_writes_until_readmitted(
    tpj: Tpj, queues: Queues
) -> None:
    """A running gang tells Kueue it is ready (so ``waitForPodsReady`` never evicts it). A
    deactivated Workload is evicted: the job stops whole, the quota is released once, and while
    it waits neither the job nor its Workload is written; reactivated, it runs again."""
    queues.queue(gpus=32)
    name = tpj.apply(queued_job("evictee"))
    tpj.wait_phase(name, "Running", timeout=120)
    uid = uid_of(tpj, name)
    workload = workload_name(name, uid)
    ready = wait_workload_condition(
        tpj, name, uid, "PodsReady", status="True", timeout=30, what="the Workload's PodsReady True"
    )
    assert ready["reason"] == "Started", ready

    def set_active(active: bool) -> None:
        tpj.custom.patch_namespaced_custom_object(
            WORKLOAD_GROUP,
            WORKLOAD_VERSION,
            tpj.namespace,
            "workloads",
            workload,
            {"spec": {"active": active}},
        )

    set_active(False)  # Kueue evicts a deactivated workload
    wait_for(
        lambda: tpj.condition(name, "Admitted").get("reason") == "Evicted",
        60,
        what="the eviction seen by the job",
    )
    tpj.wait_phase(name, "Suspended", timeout=60)
    assert tpj.pods(name) == []

    def requeued() -> bool:
        found = workload_of(tpj, name, uid)
        return (
            condition_of(found, "QuotaReserved").get("status") == "False"
            and condition_of(found, "PodsReady").get("status") == "False"
            and not (found or {}).get("status", {}).get("admission")
        )

    wait_for(
        requeued,
        30,
        what="the Workload's reservation released (the requeue)",
        explain=explain_workload(tpj, name, uid),
    )
    assert condition_of(workload_of(tpj, name, uid), "Requeued").get("status") == "False"
    time.sleep(2)  # the reconcile that wrote the requeue ends

    def versions() -> tuple[str, str]:
        found = workload_of(tpj, name, uid)
        assert found is not None
        return tpj.get(name)["metadata"]["resourceVersion"], found["metadata"]["resourceVersion"]

    last = versions()
    job_writes = workload_writes = 0
    deadline = time.monotonic() + IDLE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = versions()
        job_writes += now[0] != last[0]
        workload_writes += now[1] != last[1]
        last = now
    assert (job_writes, workload_writes) == (0, 0), (
        f"while the evicted job waited, its job was written {job_writes} times and its "
        f"Workload {workload_writes} times in {IDLE_SECONDS}s\n{explain_workload(tpj, name, uid)()}"
    )

    set_active(True)
    status = tpj.wait_phase(name, "Running", timeout=120)
    assert status["restarts"] == 0  # an eviction is not the job's failure
    assert tpj.condition(name, "Admitted")["status"] == "True"


def wait_pods_ready(tpj: Tpj, name: str, uid: str) -> None:
    wait_for(
        lambda: is_true(workload_of(tpj, name, uid), "PodsReady"),
        30,
        what="the Workload's PodsReady True",
        explain=explain_workload(tpj, name, uid),
    )


def wait_recovered(tpj: Tpj, name: str, uid: str) -> None:
    """Wait for the Workload's ``PodsReady`` True again, ``Recovered`` (after a gang restart)."""
    recovered = wait_workload_condition(
        tpj,
        name,
        uid,
        "PodsReady",
        reason="Recovered",
        timeout=60,
        what="the Workload's PodsReady True again, Recovered",
    )
    assert recovered["status"] == "True", recovered


def test_a_gang_restart_is_a_recovery_kueue_is_told_of(tpj: Tpj, queues: Queues) -> None:
    """A worker fails and the gang restarts: the Workload's ``PodsReady`` goes False
    (``WaitForRecovery``) and back to True (``Recovered``) once the new gang is ready, as
    Kueue's own job reconciler writes it; the job is never evicted meanwhile."""
    queues.queue(gpus=16)
    name = tpj.apply(queued_job("recovers"))
    tpj.wait_phase(name, "Running", timeout=120)
    uid = uid_of(tpj, name)
    wait_pods_ready(tpj, name, uid)
    end_worker(tpj, tpj.pods(name)[0].metadata.name, "Failed", exit_code=1, reason="Error")
    wait_recovered(tpj, name, uid)
    status = tpj.wait_phase(name, "Running", timeout=30)
    assert status["restarts"] == 1
    assert not is_true(workload_of(tpj, name, uid), "Evicted")


@contextmanager
def degraded(tpj: Tpj, node: str, fabric_nodes: dict[str, dict[str, str]]) -> Iterator[None]:
    """Label ``node`` degraded as the fabric agent does (restored afterwards)."""
    tpj.core.patch_node(node, {"metadata": {"labels": {labels.HEALTH: "degraded"}}})
    try:
        yield
    finally:
        before = fabric_nodes[node].get(labels.HEALTH)
        tpj.core.patch_node(node, {"metadata": {"labels": {labels.HEALTH: before}}})


def test_a_restart_off_a_degraded_node_that_pays_is_a_recovery_kueue_is_told_of(
    tpj: Tpj, queues: Queues, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    """``onDegradedLink: restart-when-it-pays`` on a Kueue-admitted job: the move is a gang
    restart inside the admission (the Workload stays admitted, its ``PodsReady`` goes False and
    back to True, ``Recovered``), never an eviction, and is not charged."""
    queues.queue(gpus=16)
    paying = {
        "mode": "required",
        "level": "leaf",
        "onDegradedLink": "restart-when-it-pays",
        "restartCost": {"interNodeCommShare": 0.9},
    }
    name = tpj.apply(queued_job("pays", topology=paying))
    nodes = tpj.wait_phase(name, "Running", timeout=120)["placement"]["nodes"]
    uid = uid_of(tpj, name)
    wait_pods_ready(tpj, name, uid)
    admitted = (workload_of(tpj, name, uid) or {})["status"]["admission"]
    with degraded(tpj, nodes[0], fabric_nodes):

        def moved() -> list[str] | None:
            running = [p.spec.node_name for p in tpj.pods(name) if p.status.phase == "Running"]
            return running if len(running) == 2 and nodes[0] not in running else None

        wait_for(moved, 90, what="the gang running again off the degraded node")
        wait_recovered(tpj, name, uid)
        workload = workload_of(tpj, name, uid) or {}
        assert not is_true(workload, "Evicted")
        assert workload["status"]["admission"] == admitted  # the same admission throughout
        status = tpj.status(name)
        assert (status["attempt"], status["restarts"]) == (1, 0)
        assert status["lastFailure"]["message"].startswith(f"node {nodes[0]} is degraded")
        assert "restart pays: running slow (steps 90.0% slower)" in status["lastFailure"]["message"]


def test_a_job_held_to_kueues_hosts_keeps_running_on_a_degraded_one(
    tpj: Tpj, queues: Queues, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    """Under Kueue's TAS every worker is held to the hosts Kueue assigned (the operator adds
    that node affinity to each pod, a restart too): with one of them degraded no healthy room
    exists for the job, so ``restart-elsewhere`` keeps it running there, saying why, instead of
    restarting it onto the same hosts."""
    topology = queues.topology("fabric", [labels.LEAF, HOSTNAME])
    flavor = queues.flavor("tas", nodeLabels={FAKE_NODE_LABEL: "true"}, topologyName=topology)
    queues.queue(gpus=80, flavor=flavor)
    moving = {"mode": "required", "level": "leaf", "onDegradedLink": "restart-elsewhere"}
    name = tpj.apply(queued_job("held", topology=moving))
    nodes = tpj.wait_phase(name, "Running", timeout=120)["placement"]["nodes"]
    with degraded(tpj, nodes[1], fabric_nodes):
        words = wait_for(
            lambda: "no healthy room" in (m := condition_message(tpj, name, "Degraded")) and m,
            30,
            what="the Degraded condition saying there is no healthy room",
        )
        assert words.startswith(f"straggler risk: rank 1 on node {nodes[1]}: ")
        assert "; kept running: no healthy room for the whole gang: " in words
        time.sleep(12)  # longer than the backoff a restart would wait
        status = tpj.status(name)
        assert (status.get("attempt", 0), status["phase"]) == (0, "Running"), status
        assert status["placement"]["healthyRoom"]["found"] is False


def condition_message(tpj: Tpj, name: str, kind: str) -> str:
    found = [c for c in tpj.status(name).get("conditions") or [] if c.get("type") == kind]
    return str(found[0].get("message") or "") if found else ""


def test_a_gang_that_never_gets_ready_is_evicted_by_kueue_and_requeued(
    tpj: Tpj, queues: Queues
) -> None:
    """With ``waitForPodsReady``, a gang whose workers are not all ready in time is evicted
    (PodsReadyTimeout); the operator stops it whole and releases the reservation, and Kueue
    admits it again after its backoff."""
    queues.queue(gpus=16)
    job = queued_job("unready")
    job["spec"]["template"]["spec"]["nodeSelector"] = {NOWHERE: "true"}  # never scheduled
    name = tpj.apply(job)
    uid = uid_of(tpj, name)
    explain = explain_workload(tpj, name, uid)
    pods = wait_for(lambda: len(p := tpj.pods(name)) == 2 and p, 60, what="the workers created")
    first_pods = {p.metadata.uid for p in pods}
    waiting = wait_for(
        lambda: (c := condition_of(workload_of(tpj, name, uid), "PodsReady")) and c,
        30,
        what="the Workload's PodsReady condition",
        explain=explain,
    )
    assert (waiting["status"], waiting["reason"]) == ("False", "WaitForStart"), waiting

    evicted = wait_for(
        lambda: (c := tpj.condition(name, "Admitted")).get("reason") == "Evicted" and c,
        PODS_READY_TIMEOUT + 40,
        what="the job evicted on the PodsReady timeout",
        explain=explain,
    )
    assert "PodsReady timeout" in evicted["message"], evicted

    def readmitted() -> dict[str, Any] | None:
        found = workload_of(tpj, name, uid)
        eviction = condition_of(found, "Evicted")
        count = ((found or {}).get("status", {}).get("requeueState") or {}).get("count")
        done = eviction.get("status") == "False" and is_true(found, "QuotaReserved")
        return eviction if done and count == 1 else None

    # Kueue reserves quota again only after the operator released it, which it does once the
    # evicted gang's pods are gone
    eviction = wait_for(readmitted, 60, what="the Workload admitted again", explain=explain)
    assert eviction["reason"] == "QuotaReserved", eviction
    assert "PodsReady timeout" in eviction["message"], eviction  # "Previously: ..."
    assert not first_pods & {p.metadata.uid for p in tpj.pods(name)}  # the first gang went
    assert tpj.status(name).get("restarts", 0) == 0


# -- what an admission puts on the workers --------------------------------------------------------


def test_workers_run_only_on_the_nodes_of_the_admitted_flavor(
    tpj: Tpj, queues: Queues, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    """The admitted flavor's node labels and tolerations are put on every worker; the placer
    plans inside them. The job's maximum execution time label reaches the Workload."""
    leaf = fabric_nodes["dgx-su2-l4-01"][labels.LEAF]  # the fabric's last leaf
    toleration = {"key": "tpfabric.io/test-flavor", "operator": "Exists", "effect": "NoSchedule"}
    flavor = queues.flavor("leaf", nodeLabels={labels.LEAF: leaf}, tolerations=[toleration])
    queues.queue(gpus=16, flavor=flavor)
    job = queued_job("flavored")
    job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "600"
    name = tpj.apply(job)
    status = tpj.wait_phase(name, "Running", timeout=120)
    workload = workload_of(tpj, name, uid_of(tpj, name))
    assert workload is not None
    assert workload["spec"]["maximumExecutionTimeSeconds"] == 600
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"][GPU] == flavor
    pods = tpj.pods(name)
    for pod in pods:
        assert (pod.spec.node_selector or {}).get(labels.LEAF) == leaf, pod.spec.node_selector
        tolerated = {(t.key, t.operator, t.effect) for t in pod.spec.tolerations or []}
        assert ("tpfabric.io/test-flavor", "Exists", "NoSchedule") in tolerated, tolerated
    assert {fabric_nodes[n][labels.LEAF] for n in status["placement"]["nodes"]} == {leaf}
    assert sorted(p.spec.node_name for p in pods) == sorted(status["placement"]["nodes"])


def test_workers_run_inside_kueues_topology_assignment(
    tpj: Tpj, queues: Queues, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    """A ClusterQueue whose flavor has a Topology (Kueue's TAS): every worker runs on the hosts
    Kueue assigned (a required node affinity on them) and carries Kueue's TAS annotation (else
    Kueue counts it again as a non-TAS pod). A job that requires one leaf asks Kueue for one
    (its own policy, or Kueue's required-topology annotation on the job); a job whose level is
    not one of the Topology's gets Kueue's implied, unconstrained request."""
    topology = queues.topology("fabric", [labels.LEAF, HOSTNAME])
    flavor = queues.flavor("tas", nodeLabels={FAKE_NODE_LABEL: "true"}, topologyName=topology)
    queues.queue(gpus=80, flavor=flavor)
    loose = tpj.apply(queued_job("loose", topology={"mode": "preferred", "level": "cluster"}))
    own = tpj.apply(queued_job("own", workers=4))  # required, leaf: tpfabric's default policy
    packed_job = queued_job("packed", workers=4, topology={"mode": "preferred", "level": "leaf"})
    packed_job["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": labels.LEAF}
    packed = tpj.apply(packed_job)
    requests = {
        loose: (None, {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}),
        own: ({"required": labels.LEAF}, {"kueue.x-k8s.io/podset-required-topology": labels.LEAF}),
        packed: (
            {"required": labels.LEAF},
            {"kueue.x-k8s.io/podset-required-topology": labels.LEAF},
        ),
    }
    for name, workers in ((loose, 2), (own, 4), (packed, 4)):
        uid = uid_of(tpj, name)
        tpj.wait_phase(name, "Running", timeout=120)
        workload = workload_of(tpj, name, uid)
        assert workload is not None
        request, marker = requests[name]
        assert workload["spec"]["podSets"][0].get("topologyRequest") == request, name
        assignment = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
        assert assignment["levels"][-1] == HOSTNAME, assignment
        domains = assigned_domains(assignment)
        assert sum(pods for _, pods in domains) == workers, assignment
        hosts = {values[-1] for values, _ in domains}
        pods = tpj.pods(name)
        assert {p.spec.node_name for p in pods} <= hosts, (hosts, [p.spec.node_name for p in pods])
        if request is not None:
            assert len({fabric_nodes[h][labels.LEAF] for h in hosts}) == 1, (name, hosts)
        for pod in pods:
            assert marker.items() <= (pod.metadata.annotations or {}).items(), pod.metadata
            terms = required_expressions(pod)
            assert terms, f"{pod.metadata.name} has no required node affinity"
            for expressions in terms:
                assert any(
                    e.key == HOSTNAME and e.operator == "In" and set(e.values) == hosts
                    for e in expressions
                ), expressions


# -- priority and preemption ----------------------------------------------------------------------


def test_a_higher_priority_job_preempts_a_lower_one_which_runs_again_after_it(
    tpj: Tpj, queues: Queues
) -> None:
    """The template's PriorityClass and the job's WorkloadPriorityClass label (which wins) set
    the Workload's priority. In a ClusterQueue with room for one job and preemption of lower
    priorities, the high job evicts the low one, which stops whole, waits requeued, and runs
    again once the high one finished."""
    low_class = queues.priority_class("low", 100)
    high_class = queues.workload_priority_class("high", 1000)
    queues.queue(gpus=16, preemption={"withinClusterQueue": "LowerPriority"})
    low_job = queued_job("low")
    low_job["spec"]["template"]["spec"]["priorityClassName"] = low_class
    low = tpj.apply(low_job)
    tpj.wait_phase(low, "Running", timeout=120)
    low_uid = uid_of(tpj, low)
    low_workload = workload_of(tpj, low, low_uid)
    assert low_workload is not None
    assert low_workload["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": low_class,
    }
    assert low_workload["spec"]["priority"] == 100

    high_job = queued_job("high")
    high_job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = high_class
    high_job["spec"]["template"]["spec"]["priorityClassName"] = low_class  # the label wins
    high = tpj.apply(high_job)
    high_uid = uid_of(tpj, high)
    high_workload = wait_for(
        lambda: workload_of(tpj, high, high_uid), 30, what="the high job's Workload"
    )
    assert high_workload["spec"]["priorityClassRef"] == {
        "group": WORKLOAD_GROUP,
        "kind": "WorkloadPriorityClass",
        "name": high_class,
    }
    assert high_workload["spec"]["priority"] == 1000

    preempted = wait_workload_condition(
        tpj,
        low,
        low_uid,
        "Preempted",
        status="True",
        timeout=60,
        what="the low job's Workload preempted",
    )
    assert preempted["reason"] == "InClusterQueue", preempted
    assert condition_of(workload_of(tpj, low, low_uid), "Evicted")["reason"] == "Preempted"
    tpj.wait_phase(high, "Running", timeout=120)
    status = tpj.wait_phase(low, "Suspended", timeout=30)
    assert tpj.pods(low) == []
    assert not status.get("placement")
    admitted = tpj.condition(low, "Admitted")
    assert admitted["status"] == "False", admitted
    assert not is_true(workload_of(tpj, low, low_uid), "QuotaReserved")

    for pod in tpj.pods(high):
        end_worker(tpj, pod.metadata.name, "Succeeded")
    tpj.wait_phase(high, "Succeeded")
    status = tpj.wait_phase(low, "Running", timeout=120)
    assert status["restarts"] == 0
    assert tpj.condition(low, "Admitted")["status"] == "True"


# -- the job's edits reach its Workload -----------------------------------------------------------


def test_queue_label_and_demand_edits_reach_the_workload(
    tpj: Tpj, queues: Queues, queue_name_policy: None
) -> None:
    """A waiting job moved to another LocalQueue moves its Workload; its template's demand
    edited while it waits remakes the Workload's pod set; the chart's policy refuses removing the
    queue label of an admitted, running job; removed while it is suspended, the job leaves Kueue
    once its pods are gone, and only then is another job admitted on its quota."""
    queues.queue(gpus=16, memory=True)  # room for one 2-worker job
    holder = tpj.apply(queued_job("holder"))
    tpj.wait_phase(holder, "Running", timeout=120)
    holder_uid = uid_of(tpj, holder)

    mover = tpj.apply(queued_job("mover", queue="elsewhere"))  # no such LocalQueue yet
    mover_uid = uid_of(tpj, mover)
    first = wait_for(lambda: workload_of(tpj, mover, mover_uid), 30, what="the mover's Workload")
    assert first["spec"]["queueName"] == "elsewhere"
    set_queue(tpj, mover, "training")
    moved = wait_for(
        lambda: (
            (w := workload_of(tpj, mover, mover_uid)) and w["spec"]["queueName"] == "training" and w
        ),
        30,
        what="the Workload moved to LocalQueue training",
        explain=explain_workload(tpj, mover, mover_uid),
    )
    assert moved["metadata"]["uid"] == first["metadata"]["uid"]  # moved, not remade
    waiting = wait_for(
        lambda: "quota" in (c := tpj.condition(mover, "Admitted")).get("message", "") and c,
        30,
        what="the mover waiting on quota in LocalQueue training",
        explain=explain_workload(tpj, mover, mover_uid),
    )
    assert waiting["status"] == "False"
    assert tpj.get(mover)["spec"]["suspend"] is True

    container = {"name": "w", "image": "x", "resources": {"requests": {"memory": "1Gi"}}}
    tpj.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        tpj.namespace,
        PLURAL,
        mover,
        {"spec": {"template": {"spec": {"containers": [container]}}}},
    )

    def memory_requested() -> bool:
        found = workload_of(tpj, mover, mover_uid)
        containers = ((found or {}).get("spec", {}).get("podSets") or [{}])[0]
        requests = [
            c.get("resources", {}).get("requests", {})
            for c in containers.get("template", {}).get("spec", {}).get("containers") or []
        ]
        return any(r.get("memory") == "1Gi" for r in requests)

    wait_for(
        memory_requested,
        30,
        what="the Workload's pod set demanding the edited memory",
        explain=explain_workload(tpj, mover, mover_uid),
    )

    with pytest.raises(ApiException) as refused:
        set_queue(tpj, holder, None)  # a running job cannot skip its queue
    assert refused.value.status == 403  # the policy's reason: Forbidden
    assert "the queue of a job that is not suspended cannot change" in str(refused.value.body)
    assert workload_of(tpj, holder, holder_uid) is not None
    patch = {"metadata": {"labels": {QUEUE_LABEL: None}}, "spec": {"suspend": True}}
    tpj.custom.patch_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, holder, patch)
    wait_for(
        lambda: workload_of(tpj, holder, holder_uid) is None and not tpj.pods(holder),
        60,
        what="the suspended, unlabelled job's pods gone, then its Workload",
        explain=explain_workload(tpj, holder, holder_uid),
    )
    tpj.wait_phase(mover, "Running", timeout=120)  # the quota the holder had is free now
    for pod in tpj.pods(mover):
        assert pod.spec.containers[0].resources.requests["memory"] == "1Gi"


# -- a queue required ----------------------------------------------------------------------------


def test_where_kueue_requires_a_queue_a_job_without_one_waits_until_it_names_one(
    api: client.ApiClient,
    tpj: Tpj,
    queues: Queues,
    queue_name_policy: None,
    queue_required: str,
) -> None:
    """With Kueue's ``manageJobsWithoutQueueName`` mirrored by the chart, a job made without a
    queue label is held suspended, with no pods, and told how to name a queue; labelled (the
    chart's policy allows it: the job is suspended), it is admitted by Kueue and runs. In a
    namespace Kueue's selector leaves out, a job without a queue runs at once."""
    queues.queue(gpus=16)
    name = tpj.apply(small_job("unqueued"))
    held = wait_for(
        lambda: (c := tpj.condition(name, "Admitted")).get("reason") == "QueueNameRequired" and c,
        30,
        what="the job held for want of a queue",
    )
    assert held["status"] == "False"
    assert f"kubectl label tpj {name} {QUEUE_LABEL}=<local-queue>" in held["message"]
    assert tpj.get(name)["spec"]["suspend"] is True
    assert tpj.wait_phase(name, "Suspended", timeout=30)["phase"] == "Suspended"
    told = wait_for(
        lambda: [
            e
            for e in tpj.core.list_namespaced_event(tpj.namespace).items
            if e.involved_object.name == name and e.reason == "QueueNameRequired"
        ],
        30,
        what="a QueueNameRequired Event on the job",
    )
    assert told[0].type == "Warning"
    uid = uid_of(tpj, name)
    holds(
        lambda: not tpj.pods(name) and tpj.get(name)["spec"]["suspend"] is True,
        IDLE_SECONDS / 3,
        "held: suspended, without pods",
    )
    assert workload_of(tpj, name, uid) is None

    set_queue(tpj, name, "training")  # allowed while suspended
    tpj.wait_phase(name, "Running", timeout=120)
    assert is_true(workload_of(tpj, name, uid), "Admitted")

    free = Tpj(api, tpj.cluster, queue_required)
    loose = free.apply(small_job("loose"))
    free.wait_phase(loose, "Running", timeout=120)
    assert workload_of(free, loose, uid_of(free, loose)) is None
    assert "Admitted" not in {c["type"] for c in free.status(loose).get("conditions") or []}


# -- deletion -------------------------------------------------------------------------------------


def test_a_deleted_jobs_workload_keeps_its_quota_until_its_pods_are_gone(
    tpj: Tpj, queues: Queues
) -> None:
    """The Workload carries Kueue's ``resource-in-use`` finalizer: a deleted job's quota stays
    reserved while a worker still terminates, and is released once it is gone."""
    cluster_queue = queues.queue(gpus=16)
    name = tpj.apply(queued_job("held"))
    tpj.wait_phase(name, "Running", timeout=120)
    uid = uid_of(tpj, name)
    workload = workload_of(tpj, name, uid)
    assert workload is not None
    assert "kueue.x-k8s.io/resource-in-use" in workload["metadata"]["finalizers"]
    wait_for(lambda: queues.reserved_gpus(cluster_queue) == 16, 30, what="16 GPUs reserved")
    held = f"{name}-worker-0"
    tpj.core.patch_namespaced_pod(held, tpj.namespace, {"metadata": {"finalizers": [HOLD]}})
    tpj.custom.delete_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, name)

    def only_held_terminating() -> bool:
        pods = tpj.core.list_namespaced_pod(tpj.namespace).items
        return [p.metadata.name for p in pods] == [held] and bool(
            pods[0].metadata.deletion_timestamp
        )

    wait_for(only_held_terminating, 30, what="the workers deleted, one held terminating")

    def still_reserved() -> bool:
        found = workload_of(tpj, name, uid)
        return found is not None and queues.reserved_gpus(cluster_queue) == 16

    holds(still_reserved, 5, "the Workload and its quota kept while a worker terminates")
    tpj.core.patch_namespaced_pod(held, tpj.namespace, {"metadata": {"finalizers": None}})
    wait_for(
        lambda: workload_of(tpj, name, uid) is None,
        30,
        what="the Workload gone with the last pod",
        explain=explain_workload(tpj, name, uid),
    )
    wait_for(lambda: queues.reserved_gpus(cluster_queue) == 0, 30, what="the quota released")
