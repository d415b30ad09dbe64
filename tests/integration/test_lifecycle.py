"""The job lifecycle on the local control plane: success, deadlines, TTL, gang restarts, evidence,
restart accounting, stuck pods, suspend/resume and API errors, one test per promise.

kwok runs the pods; a test ends a worker the way a kubelet would, by writing its pod status
(``phase`` Succeeded or Failed with container states), since kwok's fake containers never exit.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes.watch
import yaml
from kubernetes import client
from test_operator import Tpj, operator, small_job, tpj

from control_plane_fixtures import run_kubectl, wait_for
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator
from tpfabric_operator.jobs.children import (
    ATTEMPT_LABEL,
    FAILED_WORKER_LABEL,
    JOB_LABEL,
    service_name,
)

__all__ = ["operator", "tpj"]


def end_worker(
    tpj: Tpj,
    pod_name: str,
    phase: str,
    *,
    exit_code: int = 0,
    reason: str = "Completed",
    init_container: bool = False,
) -> None:
    """Write the status a kubelet writes when a worker's container (or init container) ends."""
    pod = tpj.core.read_namespaced_pod(pod_name, tpj.namespace)

    def terminated(container: Any, code: int, why: str) -> dict[str, Any]:
        return {
            "name": container.name,
            "image": container.image,
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": why}},
        }

    status: dict[str, Any] = {"phase": phase}
    if init_container:
        init = pod.spec.init_containers[0]
        status["initContainerStatuses"] = [terminated(init, exit_code, reason)]
    else:
        status["containerStatuses"] = [
            terminated(c, exit_code, reason) for c in pod.spec.containers
        ]
    tpj.core.patch_namespaced_pod_status(pod_name, tpj.namespace, {"status": status})


def release(tpj: Tpj, job: str) -> None:
    """Drop the test's finalizers from every pod of ``job`` (also when a test failed)."""
    for pod in tpj.pods(job):
        if pod.metadata.finalizers:
            tpj.core.patch_namespaced_pod(
                pod.metadata.name, tpj.namespace, {"metadata": {"finalizers": None}}
            )


def names(tpj: Tpj, job: str) -> list[str]:
    return [p.metadata.name for p in tpj.pods(job)]


def patch_spec(tpj: Tpj, name: str, spec: dict[str, Any]) -> None:
    tpj.custom.patch_namespaced_custom_object(
        GROUP, VERSION, tpj.namespace, PLURAL, name, {"spec": spec}
    )


# -- 1, 2: terminal semantics, success policy, deadline, TTL, phase ------------------------------


def test_a_succeeded_job_never_runs_a_worker_again(tpj: Tpj) -> None:
    name = tpj.apply(small_job("finished"))
    tpj.wait_phase(name, "Running")
    for pod in names(tpj, name):
        end_worker(tpj, pod, "Succeeded")
    tpj.wait_phase(name, "Succeeded")
    # PodGC or a node scale-down removes a finished pod: nothing may retrain
    tpj.core.delete_namespaced_pod(f"{name}-worker-0", tpj.namespace, grace_period_seconds=0)
    time.sleep(5)
    assert names(tpj, name) == [f"{name}-worker-1"]
    status = tpj.status(name)
    assert (status["phase"], status["restarts"]) == ("Succeeded", 0)
    assert status["completionTime"] >= status["startTime"]


def test_a_worker_finishing_first_keeps_the_job_running(tpj: Tpj) -> None:
    name = tpj.apply(small_job("staggered"))
    tpj.wait_phase(name, "Running")
    end_worker(tpj, f"{name}-worker-0", "Succeeded")
    time.sleep(4)
    status = tpj.status(name)
    assert status["phase"] == "Running"  # not back to Placed
    assert status["succeededWorkers"] == [0]


def test_rank0_success_ends_the_job_and_stops_the_hung_workers(tpj: Tpj) -> None:
    name = tpj.apply(small_job("rank0", workers=3, successPolicy="Rank0"))
    tpj.wait_phase(name, "Running")
    end_worker(tpj, f"{name}-worker-0", "Succeeded")
    tpj.wait_phase(name, "Succeeded")
    assert tpj.condition(name, "Succeeded")["reason"] == "SuccessPolicyMet"
    # the workers that hang in NCCL are stopped: their GPUs go back
    wait_for(lambda: names(tpj, name) == [f"{name}-worker-0"], 60, what="hung workers stopped")


def test_a_job_past_its_deadline_fails_and_frees_its_nodes(tpj: Tpj) -> None:
    name = tpj.apply(small_job("slow", activeDeadlineSeconds=6))
    tpj.wait_phase(name, "Failed", timeout=60)
    failed = tpj.condition(name, "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    wait_for(lambda: not tpj.pods(name), 60, what="the pods of the expired job deleted")


def test_a_finished_job_is_deleted_after_its_ttl(tpj: Tpj) -> None:
    name = tpj.apply(small_job("shortlived", ttlSecondsAfterFinished=3))
    tpj.wait_phase(name, "Running")
    for pod in names(tpj, name):
        end_worker(tpj, pod, "Succeeded")
    tpj.wait_phase(name, "Succeeded")

    def gone() -> bool:
        jobs = tpj.custom.list_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL)
        return name not in [j["metadata"]["name"] for j in jobs["items"]]

    wait_for(gone, 30, what="the job deleted after its TTL")


# -- 3, 7: gang restart, per-attempt names, evidence ---------------------------------------------


def test_one_failed_worker_restarts_the_gang_and_keeps_the_failed_pod(tpj: Tpj) -> None:
    name = tpj.apply(small_job("gang", workers=3, failurePolicy={"backoffSeconds": 1}))
    tpj.wait_phase(name, "Running")
    before = {p.metadata.name: p.metadata.uid for p in tpj.pods(name)}
    end_worker(tpj, f"{name}-worker-1", "Failed", exit_code=137, reason="OOMKilled")

    def restarted() -> list[client.V1Pod] | None:
        pods = tpj.pods(name)
        ok = len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
        return pods if ok and not {p.metadata.uid for p in pods} & set(before.values()) else None

    pods = wait_for(restarted, 90, what="a Running second attempt of the whole gang")
    assert [p.metadata.name for p in pods] == [f"{name}-worker-{i}-a1" for i in range(3)]
    assert {p.metadata.labels[ATTEMPT_LABEL] for p in pods} == {"1"}
    # DNS is unchanged: same hostnames under the same subdomain
    assert [p.spec.hostname for p in pods] == [f"{name}-worker-{i}" for i in range(3)]
    assert {p.spec.subdomain for p in pods} == {service_name(name)}
    status = tpj.wait_phase(name, "Running")
    assert (status["restarts"], status["attempt"]) == (1, 1)  # one incident, one charge
    failure = status["lastFailure"]
    assert (failure["worker"], failure["reason"], failure["exitCode"]) == (1, "OOMKilled", 137)
    # the failed pod is still there for kubectl logs, out of the gang
    kept = tpj.core.read_namespaced_pod(f"{name}-worker-1", tpj.namespace)
    assert kept.status.phase == "Failed"
    assert kept.metadata.labels.get(FAILED_WORKER_LABEL) == name
    assert JOB_LABEL not in kept.metadata.labels


def test_the_status_follows_the_workers_at_once_not_at_the_next_tick(tpj: Tpj) -> None:
    """The last worker ready makes the job Running, a failed worker is charged, and a worker
    finishing first is recorded, all without a tick: the operator's pod watch wakes the job's
    reconcile (at its tick only, a 256-worker gang showed Running 1.9 s after its pods, 100 jobs
    up to 11 s). The operator ticks every 60 s here (the first tick 60 s after a job appears), so
    everything checked before that is the wake's doing."""
    cluster = tpj.cluster
    cluster.stop_component(OPERATOR)
    start_operator(cluster, reconcile_seconds=60)
    try:
        name = tpj.apply(small_job("prompt", workers=3, failurePolicy={"backoffSeconds": 30}))
        created = time.monotonic()
        tpj.wait_phase(name, "Running", timeout=45)
        end_worker(tpj, f"{name}-worker-2", "Succeeded")
        wait_for(
            lambda: tpj.status(name).get("succeededWorkers") == [2],
            10,
            what="the finished worker recorded",
        )
        end_worker(tpj, f"{name}-worker-1", "Failed", exit_code=137, reason="OOMKilled")
        status = wait_for(
            lambda: (s := tpj.status(name)).get("restarts") == 1 and s,
            10,
            what="the failed worker charged",
        )
        assert status["lastFailure"]["worker"] == 1
        assert status["lastFailure"]["reason"] == "OOMKilled"
        assert time.monotonic() - created < 58, "too slow to tell the wake from the first tick"
    finally:
        cluster.stop_component(OPERATOR)
        start_operator(cluster)


def refuse_worker(tpj: Tpj, pod_name: str, resource: str) -> None:
    """Write the status a kubelet writes when its admission refuses a pod bound to a full node:
    Failed before any container started, ``OutOf<resource>``, ``Pod was rejected: ...``."""
    ops = [
        {"op": "replace", "path": "/status/phase", "value": "Failed"},
        {"op": "add", "path": "/status/reason", "value": f"OutOf{resource}"},
        {
            "op": "add",
            "path": "/status/message",
            "value": f"Pod was rejected: Node didn't have enough resource: {resource}, "
            "requested: 8, used: 8, capacity: 8",
        },
        {"op": "remove", "path": "/status/containerStatuses"},
    ]
    tpj.core.patch_namespaced_pod_status(pod_name, tpj.namespace, ops)


def test_a_worker_the_kubelet_refuses_on_a_full_node_restarts_without_a_charge(tpj: Tpj) -> None:
    # another scheduler bound a pod to the same node from a cache that did not show ours yet,
    # and the kubelet admitted that one first: not the job's failure, even with no restart left
    name = tpj.apply(
        small_job("refused", workers=3, failurePolicy={"maxRestarts": 0, "backoffSeconds": 1})
    )
    tpj.wait_phase(name, "Running")
    before = {p.metadata.uid for p in tpj.pods(name)}
    refuse_worker(tpj, f"{name}-worker-1", "nvidia.com/gpu")

    def restarted() -> list[client.V1Pod] | None:
        pods = tpj.pods(name)
        ok = len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
        return pods if ok and not {p.metadata.uid for p in pods} & before else None

    pods = wait_for(restarted, 90, what="a Running second attempt of the whole gang")
    status = tpj.wait_phase(name, "Running")
    assert (status["restarts"], status["attempt"]) == (0, 1)  # restarted, not charged
    # and at once: backoff 1 s and the old pods' deletion, not a reconcile held back because the
    # stored status (lastFailure without its None exitCode) never matched the patch as written
    failed_at = dt.datetime.fromisoformat(status["lastFailureTime"])
    recreated = min(p.metadata.creation_timestamp for p in pods)
    assert (recreated - failed_at).total_seconds() < 15, (failed_at, recreated)
    failure = status["lastFailure"]
    assert (failure["worker"], failure["reason"]) == (1, "OutOfnvidia.com/gpu")
    assert failure["message"].startswith("Pod was rejected: Node didn't have enough resource")
    assert failure.get("exitCode") is None


def test_an_init_container_failure_is_the_reason_shown(tpj: Tpj) -> None:
    name = tpj.apply(small_job("noinit", failurePolicy={"maxRestarts": 0}))
    tpj.wait_phase(name, "Running")
    end_worker(tpj, f"{name}-worker-0", "Failed", exit_code=3, reason="Error", init_container=True)
    status = tpj.wait_phase(name, "Failed")
    failure = status["lastFailure"]
    assert (failure["reason"], failure["exitCode"]) == ("InitContainerFailed", 3)
    assert "rdma-init exited 3" in failure["message"]
    assert tpj.condition(name, "Failed")["reason"] == "RestartsExhausted"
    assert tpj.core.read_namespaced_pod(f"{name}-worker-0", tpj.namespace).status.phase == "Failed"


# -- 4: restart accounting -----------------------------------------------------------------------


def test_an_evicted_worker_is_charged_once_and_restarted_after_the_backoff(tpj: Tpj) -> None:
    name = tpj.apply(small_job("evicted", failurePolicy={"backoffSeconds": 6}))
    tpj.wait_phase(name, "Running")
    tpj.core.delete_namespaced_pod(f"{name}-worker-1", tpj.namespace)
    wait_for(lambda: tpj.status(name).get("lastFailure"), 30, what="the loss recorded")
    status = tpj.wait_phase(name, "Running", timeout=90)
    assert status["restarts"] == 1
    lost_at = dt.datetime.fromisoformat(status["lastFailureTime"])
    first = min(p.metadata.creation_timestamp for p in tpj.pods(name))
    assert (first - lost_at).total_seconds() >= 5, "restarted before the backoff"
    time.sleep(4)
    assert tpj.status(name)["restarts"] == 1  # not charged again on later ticks


def test_a_worker_stuck_terminating_is_charged_once(tpj: Tpj) -> None:
    name = tpj.apply(small_job("sticky"))
    tpj.wait_phase(name, "Running")
    pod = f"{name}-worker-1"
    tpj.core.patch_namespaced_pod(pod, tpj.namespace, {"metadata": {"finalizers": ["test/hold"]}})
    try:
        tpj.core.delete_namespaced_pod(pod, tpj.namespace)
        wait_for(lambda: tpj.status(name).get("lastFailure"), 30, what="the loss recorded")
        time.sleep(6)  # several ticks while the old pod terminates
        status = tpj.status(name)
        assert status["restarts"] == 1
        assert status["phase"] == "Restarting"
    finally:
        release(tpj, name)
    status = tpj.wait_phase(name, "Running", timeout=90)
    assert status["restarts"] == 1


# -- 5: delete and re-create under the same name -------------------------------------------------


def test_a_job_recreated_under_the_same_name_runs(tpj: Tpj) -> None:
    """Timing decides whether the old pods still exist when the new job starts; kept anyway."""
    manifest = small_job("again")
    name = tpj.apply(manifest)
    tpj.wait_phase(name, "Running")
    tpj.custom.delete_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, name)
    wait_for(
        lambda: (
            name
            not in [
                j["metadata"]["name"]
                for j in tpj.custom.list_namespaced_custom_object(
                    GROUP, VERSION, tpj.namespace, PLURAL
                )["items"]
            ]
        ),
        30,
        what="the old job gone",
    )
    tpj.apply(manifest)
    uid = tpj.get(name)["metadata"]["uid"]
    status = tpj.wait_phase(name, "Running", timeout=90)
    assert (status["restarts"], status.get("phase")) == (0, "Running")
    pods = tpj.pods(name)
    assert len(pods) == 2
    assert {p.metadata.owner_references[0].uid for p in pods} == {uid}

    def service_is_ours() -> bool:
        try:
            service = tpj.core.read_namespaced_service(service_name(name), tpj.namespace)
        except client.ApiException:
            return False
        return bool(service.metadata.owner_references[0].uid == uid)

    wait_for(service_is_ours, 30, what="the new job's Service")


def test_a_deleted_headless_service_is_made_again(tpj: Tpj) -> None:
    # the workers find each other through the Service's DNS names: someone deleting it must not
    # leave a running job without them (the operator's memory of the Services it created only
    # spans the moment before its index shows them)
    name = tpj.apply(small_job("dns"))
    tpj.wait_phase(name, "Running")
    uid = tpj.get(name)["metadata"]["uid"]
    first = tpj.core.read_namespaced_service(service_name(name), tpj.namespace).metadata.uid
    tpj.core.delete_namespaced_service(service_name(name), tpj.namespace)

    def made_again() -> bool:
        try:
            service = tpj.core.read_namespaced_service(service_name(name), tpj.namespace)
        except client.ApiException:
            return False
        return service.metadata.uid != first and bool(
            service.metadata.owner_references[0].uid == uid
        )

    # within a few reconciles, well before the operator's 30 s memory of creating the Service
    # (SERVICE_MEMORY_SECONDS) would run out: a reconcile that stops looking once the index
    # shows the Service keeps that memory, and a Service deleted soon after its creation stayed
    # gone for up to 30 s (a CI failure)
    wait_for(made_again, 15, what="the deleted Service made again")
    assert tpj.get(name)["status"]["phase"] == "Running"


# -- 6: a worker stuck Terminating on a node that does not answer --------------------------------


def test_a_worker_stuck_terminating_is_reported_never_force_deleted(tpj: Tpj) -> None:
    """A pod stuck terminating is reported, never force-deleted: a node that does not answer never
    confirms a deletion, and its containers may still run; a finalizer stands in for it here. The
    operator says which pod, on which node, and the out-of-service taint that lets
    kube-controller-manager delete it; it creates nothing of the next attempt meanwhile. Once the
    pod goes (the test releases it, as the pod GC would), the gang restarts."""
    name = tpj.apply(small_job("partitioned", failurePolicy={"backoffSeconds": 1}))
    tpj.wait_phase(name, "Running")
    victim = tpj.pods(name)[1]
    pod, node = victim.metadata.name, victim.spec.node_name
    tpj.core.patch_namespaced_pod(pod, tpj.namespace, {"metadata": {"finalizers": ["test/hold"]}})
    tpj.core.delete_namespaced_pod(pod, tpj.namespace, grace_period_seconds=1)

    def reported() -> dict[str, Any]:
        degraded = tpj.condition(name, "Degraded")
        return degraded if degraded.get("reason") == "PodStuckTerminating" else {}

    def reasons() -> set[str]:
        events = tpj.core.list_namespaced_event(
            tpj.namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return {e.reason for e in events}

    def explain() -> str:
        return f"the job's Events: {sorted(reasons())}"

    try:
        degraded = wait_for(
            reported, 90, interval=1, what="the stuck worker reported", explain=explain
        )
        assert f"{pod} on node {node}" in degraded["message"]
        taint = f"kubectl taint nodes {node} node.kubernetes.io/out-of-service=nodeshutdown"
        assert taint in degraded["message"]
        assert "WorkerStuckTerminating" in reasons()
        time.sleep(3)
        # kwok, as a kubelet, ends each deletion with a grace of 0 itself: the pod's grace tells
        # nothing; the operator's own word (it posted WorkerForceDeleted when it forced) does
        assert "WorkerForceDeleted" not in reasons()
        assert tpj.core.read_namespaced_pod(pod, tpj.namespace).metadata.uid == victim.metadata.uid
        assert [p.metadata.name for p in tpj.pods(name)] == [pod], "nothing new meanwhile"
    finally:
        release(tpj, name)

    def replaced() -> bool:
        pods = tpj.pods(name)
        return (
            len(pods) == 2
            and victim.metadata.uid not in {p.metadata.uid for p in pods}
            and all(p.status.phase == "Running" for p in pods)
        )

    wait_for(replaced, 90, what="the gang running again")
    assert tpj.status(name)["restarts"] == 1
    assert tpj.condition(name, "Degraded")["reason"] != "PodStuckTerminating"


# -- 9: suspend and resume -----------------------------------------------------------------------


def test_resume_while_old_pods_terminate_neither_fails_nor_charges(tpj: Tpj) -> None:
    name = tpj.apply(small_job("toggler", failurePolicy={"maxRestarts": 0}))
    tpj.wait_phase(name, "Running")
    for pod in names(tpj, name):
        tpj.core.patch_namespaced_pod(
            pod, tpj.namespace, {"metadata": {"finalizers": ["test/hold"]}}
        )
    try:
        patch_spec(tpj, name, {"suspend": True})
        wait_for(
            lambda: all(p.metadata.deletion_timestamp for p in tpj.pods(name)),
            30,
            what="the pods terminating",
        )
        time.sleep(3)
        # the pods still hold their GPUs: not Suspended yet
        assert tpj.status(name)["phase"] != "Suspended"
        assert tpj.condition(name, "Suspended")["status"] == "False"
        patch_spec(tpj, name, {"suspend": False})
        time.sleep(3)
    finally:
        release(tpj, name)
    status = tpj.wait_phase(name, "Running", timeout=90)
    assert status["restarts"] == 0


def deletion_graces(
    tpj: Tpj, trigger: Callable[[], Any], wanted: set[str], timeout: int = 60
) -> dict[str, int | None]:
    """Return the grace period of each pod deleted after ``trigger()`` (at least ``wanted``), as
    the API server recorded it in ``deletionGracePeriodSeconds``.

    kwok removes a deleted pod at once, and ends each deletion with a grace of 0 itself (as a
    kubelet does), so only the watch event that first carries the pod's ``deletionTimestamp``
    shows the grace it was deleted with: one watch, from before the trigger, until all are seen.
    """
    graces: dict[str, int | None] = {}
    version = tpj.core.list_namespaced_pod(tpj.namespace).metadata.resource_version
    watch = kubernetes.watch.Watch()

    def collect() -> None:
        for event in watch.stream(
            tpj.core.list_namespaced_pod,
            tpj.namespace,
            resource_version=version,
            timeout_seconds=timeout,
        ):
            meta = event["object"].metadata
            if meta.deletion_timestamp:
                graces.setdefault(meta.name, meta.deletion_grace_period_seconds)
            if wanted <= set(graces):
                return

    watcher = threading.Thread(target=collect, daemon=True)
    watcher.start()
    trigger()
    watcher.join(timeout + 5)
    watch.stop()
    assert wanted <= set(graces), f"deletions seen in {timeout} s: {graces}"
    return graces


def test_a_worker_is_stopped_with_its_own_grace_period(tpj: Tpj) -> None:
    """A worker is stopped with its template's grace period, not a fixed 30 s that cut short a
    template's 600 s for a checkpoint on SIGTERM at a gang restart and a suspend."""
    template = {
        "spec": {
            "terminationGracePeriodSeconds": 600,
            "containers": [{"name": "w", "image": "x"}],
        }
    }
    restart = {"backoffSeconds": 1}
    name = tpj.apply(small_job("checkpoints", template=template, failurePolicy=restart))
    tpj.wait_phase(name, "Running")
    # a gang restart: the operator deletes worker 0 of the attempt worker 1 failed in
    restarted = deletion_graces(
        tpj,
        lambda: end_worker(tpj, f"{name}-worker-1", "Failed", exit_code=1, reason="Error"),
        {f"{name}-worker-0"},
    )
    second = {f"{name}-worker-{i}-a1" for i in range(2)}
    wait_for(
        lambda: (
            set(names(tpj, name)) == second
            and all(p.status.phase == "Running" for p in tpj.pods(name))
        ),
        90,
        what="the second attempt running",
    )
    # a suspend: the operator deletes every worker
    suspended = deletion_graces(tpj, lambda: patch_spec(tpj, name, {"suspend": True}), second)
    assert {**restarted, **suspended} == {
        f"{name}-worker-0": 600,
        f"{name}-worker-0-a1": 600,
        f"{name}-worker-1-a1": 600,
    }


# -- 10: conditions and API errors ---------------------------------------------------------------


def test_a_quota_that_refuses_a_worker_shows_create_failed(tpj: Tpj) -> None:
    tpj.core.create_namespaced_resource_quota(
        tpj.namespace, {"metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}}
    )
    wait_for(
        lambda: tpj.core.read_namespaced_resource_quota("one-pod", tpj.namespace).status.hard,
        30,
        what="the quota in force",
    )
    name = tpj.apply(small_job("overquota"))
    created = wait_for(
        lambda: (c := tpj.condition(name, "WorkersCreated")).get("reason") == "CreateFailed" and c,
        30,
        what="WorkersCreated False with reason CreateFailed",
    )
    assert created["status"] == "False"
    assert "exceeded quota" in created["message"]
    assert not tpj.condition(name, "Admitted")  # nothing admits this job
    events = tpj.core.list_namespaced_event(
        tpj.namespace, field_selector=f"involvedObject.name={name}"
    ).items
    assert [e for e in events if e.reason == "CreateFailed"]

    def held_back() -> bool:
        # gang semantics under a quota: while the rest cannot be created, no part of the gang
        # may run or hold a node (one gated pod, no plan)
        pods = tpj.pods(name)
        placement = tpj.status(name).get("placement") or {}
        return (
            len(pods) == 1
            and not pods[0].spec.node_name
            and bool(pods[0].spec.scheduling_gates)
            and placement.get("state") != "Planned"
        )

    wait_for(held_back, 60, what="the partial gang gated, unbound and unplanned")
    time.sleep(3)  # a few placer cycles: it stays so while the quota refuses the rest
    assert held_back(), tpj.status(name).get("placement")
    tpj.core.delete_namespaced_resource_quota("one-pod", tpj.namespace)
    tpj.wait_phase(name, "Running", timeout=90)


def refused_pod_creations(tpj: Tpj) -> int:
    """Return how many pod creations the API server has refused with 403 (its own counter:
    ``apiserver_request_total``, ResourceQuota and PodSecurity refusals alike)."""
    api = tpj.core.api_client
    request = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    total = 0
    for line in response.data.decode().splitlines():
        if line.startswith("apiserver_request_total{") and all(
            label in line
            for label in ('code="403"', 'resource="pods"', 'subresource=""', 'verb="POST"')
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_a_refused_gang_backs_off_and_gives_its_quota_back(tpj: Tpj) -> None:
    """A gang the API server refuses is not posted again whole at every reconcile, and its
    created part does not keep holding quota. A quota of one pod, a gang of four: the
    first round stops at the first refusal, later rounds back off (1, 2, 4, 8, 16 s) and post one
    pod each, and after 30 s the partial gang's pod is deleted, uncharged, so the quota is free
    between rounds. The old operator posted three refused pods every second (one reconcile per
    second here): about 120 in this window."""
    tpj.core.create_namespaced_resource_quota(
        tpj.namespace, {"metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}}
    )
    wait_for(
        lambda: tpj.core.read_namespaced_resource_quota("one-pod", tpj.namespace).status.hard,
        30,
        what="the quota in force",
    )
    before = refused_pod_creations(tpj)
    name = tpj.apply(small_job("refused-gang", workers=4))
    wait_for(
        lambda: tpj.condition(name, "WorkersCreated").get("reason") == "CreateFailed",
        30,
        what="the first refusal",
    )

    def given_back() -> list[Any]:
        events = tpj.core.list_namespaced_event(
            tpj.namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return [e for e in events if e.reason == "PartialGangDeleted"]

    first = time.monotonic()
    while not given_back() and time.monotonic() - first < 45:
        time.sleep(1)
    refused = refused_pod_creations(tpj) - before
    assert 1 <= refused <= 10, f"{refused} refused creations in {time.monotonic() - first:.0f}s"
    events = given_back()
    assert events, "the partial gang was not given back within 45 s of the first refusal"
    assert f"{name}-worker-0" in events[0].message
    created = tpj.condition(name, "WorkersCreated")
    assert "exceeded quota" in created["message"]
    assert "backing off" in created["message"]
    assert f"{name}-worker-0 were deleted, uncharged" in created["message"]
    wait_for(lambda: not tpj.pods(name), 30, what="the partial gang's pod gone")
    assert tpj.status(name).get("restarts", 0) == 0
    tpj.core.delete_namespaced_resource_quota("one-pod", tpj.namespace)
    tpj.wait_phase(name, "Running", timeout=120)  # the next round (after at most 32 s) runs it


def test_pods_left_by_cascade_orphan_are_not_taken_over_by_a_new_job(tpj: Tpj) -> None:
    """A job deleted with ``--cascade=orphan`` leaves its pods, owned by nobody; a new job of the
    same name must neither adopt nor delete them (they are the user's), create nothing while they
    exist, and say what to do."""
    name = tpj.apply(small_job("orphans"))
    tpj.wait_phase(name, "Running")
    old = {p.metadata.name: p.metadata.uid for p in tpj.pods(name)}
    done = run_kubectl(
        tpj.cluster, "delete", "tpj", name, "-n", tpj.namespace, "--cascade=orphan", "--wait"
    )
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: all(not p.metadata.owner_references for p in tpj.pods(name)),
        30,
        what="the orphaned pods without an owner",
    )
    tpj.apply(small_job("orphans"))

    def refused() -> dict[str, Any]:
        created = tpj.condition(name, "WorkersCreated")
        return created if "not owned by this job" in created.get("message", "") else {}

    def explain() -> str:
        owners = {
            p.metadata.name: [r.uid for r in p.metadata.owner_references or []]
            for p in tpj.pods(name)
        }
        return f"phase {tpj.status(name).get('phase')}; pods and their owners: {owners}"

    created = wait_for(
        refused, 30, what="WorkersCreated naming the pods it does not own", explain=explain
    )
    assert created["status"] == "False"
    for pod in old:
        assert pod in created["message"]
    assert f"kubectl delete pod -n {tpj.namespace}" in created["message"]
    time.sleep(3)  # several reconciles
    pods = tpj.pods(name)
    assert {p.metadata.name: p.metadata.uid for p in pods} == old, "kept, none added"
    assert all(not p.metadata.owner_references for p in pods), "not adopted"
    assert tpj.status(name).get("phase") != "Running"
    for pod in old:
        tpj.core.delete_namespaced_pod(pod, tpj.namespace)
    tpj.wait_phase(name, "Running", timeout=90)
    uid = tpj.get(name)["metadata"]["uid"]
    assert {p.metadata.owner_references[0].uid for p in tpj.pods(name)} == {uid}


def test_a_name_too_long_for_worker_hostnames_is_rejected_at_admission(tpj: Tpj) -> None:
    done = run_kubectl(
        tpj.cluster,
        "apply",
        "-n",
        tpj.namespace,
        "-f",
        "-",
        stdin=yaml.safe_dump(small_job("x" * 51)),
    )
    assert done.returncode != 0
    assert "at most 50 characters" in done.stderr, done.stderr


# -- 8: a temporary state of the cluster never fails a running job ------------------------------


def test_gpu_nodes_scaled_to_zero_do_not_fail_a_running_job(
    tpj: Tpj, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    name = tpj.apply(small_job("steady"))
    tpj.wait_phase(name, "Running")

    def set_gpus(count: str) -> None:
        for node in fabric_nodes:
            resources = {"nvidia.com/gpu": count}
            tpj.core.patch_node_status(
                node, {"status": {"capacity": resources, "allocatable": resources}}
            )

    set_gpus("0")  # the GPU pools scaled down to nothing: no node has a GPU
    try:
        time.sleep(35)  # past the operator's 30 s node cache, several reconciles
        status = tpj.status(name)
        assert status["phase"] != "Failed", tpj.condition(name, "Failed")
    finally:
        set_gpus("8")
