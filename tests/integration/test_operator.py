"""The operator on the local control plane: lifecycle, failures, restarts, deletion.

Real kube-apiserver, kube-scheduler (with the extender), kube-controller-manager (garbage
collection) and kwok nodes; the operator runs as its own process, as in a cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.watch
import pytest
import yaml
from kubernetes import client

from control_plane_fixtures import run_kubectl, wait_for
from tpfabric_core import labels
from tpfabric_core.api import GROUP, PLURAL, VERSION, TensorParallelJob
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator
from tpfabric_operator.jobs.children import JOB_LABEL, WORKER_INDEX_LABEL, service_name, worker_pod
from tpj_examples import valid_jobs


@pytest.fixture(scope="module")
def operator(tpfabric_scheduling: LocalCluster) -> Iterator[LocalCluster]:
    start_operator(tpfabric_scheduling)
    yield tpfabric_scheduling
    tpfabric_scheduling.stop_component(OPERATOR)


class Tpj:
    """One job in the test's namespace, read and written through the real API."""

    def __init__(self, api: client.ApiClient, cluster: LocalCluster, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.cluster = cluster
        self.namespace = namespace

    def apply(self, manifest: dict[str, Any]) -> str:
        done = run_kubectl(
            self.cluster, "apply", "-n", self.namespace, "-f", "-", stdin=yaml.safe_dump(manifest)
        )
        assert done.returncode == 0, done.stderr
        return str(manifest["metadata"]["name"])

    def get(self, name: str) -> dict[str, Any]:
        return dict(
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        )

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def pods(self, name: str) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_LABEL}={name}"
        ).items
        return sorted(pods, key=lambda p: int(p.metadata.labels[WORKER_INDEX_LABEL]))

    def wait_phase(self, name: str, phase: str, timeout: float = 90) -> dict[str, Any]:
        status: dict[str, Any] = wait_for(
            lambda: (s := self.status(name)).get("phase") == phase and s,
            timeout,
            what=f"job {name} {phase}",
        )
        return status

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        for condition in self.status(name).get("conditions") or []:
            if condition["type"] == kind:
                return dict(condition)
        return {}


@pytest.fixture
def tpj(
    api: client.ApiClient,
    operator: LocalCluster,
    namespace: str,
    fabric_nodes: dict[str, dict[str, str]],
) -> Iterator[Tpj]:
    yield Tpj(api, operator, namespace)
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    for job in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"]
        )
    wait_for(
        lambda: not core.list_namespaced_pod(namespace).items,
        timeout=60,
        what="the test's pods to be garbage-collected",
    )


def small_job(name: str, workers: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            **spec,
        },
    }


def env_of(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def test_a_4_worker_job_runs_in_one_leaf_with_ranks_following_the_plan(
    tpj: Tpj, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    name = tpj.apply(valid_jobs()["llama-70b-tp8x4"])
    status = tpj.wait_phase(name, "Running")
    pods = tpj.pods(name)
    nodes = [p.spec.node_name for p in pods]
    assert len({fabric_nodes[n][labels.LEAF] for n in nodes}) == 1
    assert nodes == status["placement"]["nodes"]
    assert [env_of(p)["NODE_RANK"] for p in pods] == ["0", "1", "2", "3"]
    assert [env_of(p)["PET_NODE_RANK"] for p in pods] == ["0", "1", "2", "3"]  # for torchrun
    assert {env_of(p)["MASTER_ADDR"] for p in pods} == {
        f"llama-70b-worker-0.{service_name(name)}.{tpj.namespace}.svc"
    }
    assert status["ready"] == "4/4"
    assert tpj.core.read_namespaced_service(service_name(name), tpj.namespace).spec.cluster_ip
    assert all(p.spec.init_containers[0].name == "rdma-init" for p in pods)

    table = run_kubectl(tpj.cluster, "get", "tpj", name, "-n", tpj.namespace).stdout.split()
    domain = fabric_nodes[nodes[0]][labels.LEAF]
    assert table[:8] == ["NAME", "PHASE", "READY", "LEVEL", "DOMAIN", "HOPS", "RESTARTS", "AGE"]
    assert table[8:13] == [name, "Running", "4/4", "leaf", domain]
    assert table[14] == "0"  # restarts
    described = run_kubectl(tpj.cluster, "describe", "tpj", name, "-n", tpj.namespace).stdout
    for words in ("Type:                  Placed", "GangPlaced", "WorkersCreated", "Events:"):
        assert words in described, described
    events = tpj.core.list_namespaced_event(
        tpj.namespace, field_selector=f"involvedObject.name={name}"
    ).items
    placed = [e for e in events if e.reason == "GangPlaced"]
    assert placed, [e.reason for e in events]
    assert placed[0].message == status["placement"]["message"]  # the event says what status says


@pytest.mark.parametrize(("workers", "level"), [(24, "spine"), (4, "leaf")])
def test_a_gangs_first_worker_is_planned_and_the_rest_born_released_onto_its_plan(
    tpj: Tpj, fabric_nodes: dict[str, dict[str, str]], workers: int, level: str
) -> None:
    """Worker 0 is created gated, the placer plans the whole gang from it, and the others are
    created already released onto the plan (narrowed affinity, no gate): no release write for
    them. 24 workers are more than the operator creates at once (16): its reconcile waits for
    the plan. 4 are fewer: the reconcile returns after worker 0, and the plan, seen on the
    job's watch, wakes the reconcile that creates the rest."""
    added: dict[str, client.V1Pod] = {}
    watch = kubernetes.watch.Watch()
    version = tpj.core.list_namespaced_pod(tpj.namespace).metadata.resource_version

    def collect() -> None:
        for event in watch.stream(
            tpj.core.list_namespaced_pod,
            tpj.namespace,
            resource_version=version,
            timeout_seconds=120,
        ):
            if event["type"] == "ADDED":
                added.setdefault(event["object"].metadata.name, event["object"])
            if len(added) >= workers:
                watch.stop()  # ends the stream after this event

    watcher = threading.Thread(target=collect, daemon=True)
    watcher.start()
    name = tpj.apply(small_job("early", workers, topology={"mode": "required", "level": level}))
    status = tpj.wait_phase(name, "Running", timeout=120)
    watcher.join(30)
    assert len(added) == workers, f"the watch showed {len(added)} of {workers} creations"
    pods = tpj.pods(name)
    assert [p.spec.node_name for p in pods] == status["placement"]["nodes"]
    key = {"spine": labels.SPINE, "leaf": labels.LEAF}[level]
    assert len({fabric_nodes[p.spec.node_name][key] for p in pods}) == 1
    born_gated = sorted(n for n, p in added.items() if p.spec.scheduling_gates)
    assert born_gated == ["early-worker-0"], f"created gated: {born_gated}"
    domain = status["placement"]["domainLabels"][key]
    for pod in (added[f"early-worker-{i}"] for i in range(1, workers)):
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        expressions = terms.node_selector_terms[0].match_expressions
        assert any(e.key == key and e.values == [domain] for e in expressions)

    def workers_created() -> list[Any]:
        events = tpj.core.list_namespaced_event(
            tpj.namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return [e for e in events if e.reason == "WorkersCreated"]

    created = wait_for(workers_created, 30, what="the WorkersCreated Event")
    time.sleep(1)  # a second one would be a defect: give it the time to show
    assert [e.message for e in workers_created()] == [
        f"the gang's {workers} worker pods are created"
    ], created


def test_a_deleted_worker_is_replaced_in_the_same_domain(
    tpj: Tpj, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    name = tpj.apply(small_job("replaced", workers=3))
    tpj.wait_phase(name, "Running")
    before = tpj.pods(name)
    domain = fabric_nodes[before[0].spec.node_name][labels.LEAF]
    tpj.core.delete_namespaced_pod(before[1].metadata.name, tpj.namespace)

    def replaced() -> list[client.V1Pod] | None:
        pods = tpj.pods(name)
        fresh = [p for p in pods if p.metadata.uid != before[1].metadata.uid]
        ok = len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
        return pods if ok and len(fresh) == 3 else None

    pods = wait_for(replaced, 60, what="a Running replacement of worker 1")
    assert {fabric_nodes[p.spec.node_name][labels.LEAF] for p in pods} == {domain}
    status = tpj.wait_phase(name, "Running")
    assert status["restarts"] == 1


def test_an_operator_killed_mid_creation_leaves_exactly_one_set_of_pods(
    tpj: Tpj, operator: LocalCluster
) -> None:
    state = operator.state()
    assert state is not None
    process = state.components[OPERATOR]
    operator.stop_component(OPERATOR)
    try:
        name = tpj.apply(small_job("resumed", workers=4))
        job = tpj.get(name)
        model = TensorParallelJob.model_validate(job)
        # as if the operator died after creating two of the four workers
        owner = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TensorParallelJob",
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for index in (0, 2):
            pod = worker_pod(model, name, tpj.namespace, index, "x")
            pod["metadata"]["ownerReferences"] = [owner]
            tpj.core.create_namespaced_pod(tpj.namespace, pod)
    finally:
        operator.add_component(OPERATOR, process.argv, env={"TPFABRIC_RECONCILE_SECONDS": "1"})
    time.sleep(1.5)  # let it start creating, then kill it hard and start it again
    operator.kill_component(OPERATOR)
    operator.add_component(OPERATOR, process.argv, env={"TPFABRIC_RECONCILE_SECONDS": "1"})
    status = tpj.wait_phase(name, "Running")
    pods = tpj.pods(name)
    assert [p.metadata.name for p in pods] == [f"resumed-worker-{i}" for i in range(4)]
    assert status["workersTotal"] == 4
    assert status["restarts"] == 0
    assert status["workersCreated"] is True


def test_an_api_server_restart_loses_no_job_no_plan_and_no_watch(
    tpj: Tpj, operator: LocalCluster, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    """The API server goes away for longer than the placer's lease (6 s here) and comes back:
    every watch ends, the placer loses its lease. Nothing running may be touched, and every
    component must pick up again: a new job runs, and a worker lost afterwards is replaced."""
    steady = tpj.apply(small_job("steady", workers=3))
    before = tpj.wait_phase(steady, "Running")
    pods_before = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in tpj.pods(steady)}
    operator.restart_api_server(outage_seconds=8)
    assert not operator.crashed(), "\n".join(operator.crashed())

    fresh = tpj.apply(small_job("fresh", workers=2))
    tpj.wait_phase(fresh, "Running", timeout=120)
    after = tpj.wait_phase(steady, "Running")
    assert {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in tpj.pods(steady)} == (
        pods_before
    ), "the running gang was left as it was"
    assert after["restarts"] == 0
    assert after["placement"]["nodes"] == before["placement"]["nodes"]

    # the operator's pod cache and the placer's watches resumed: a worker lost now is seen,
    # replaced and placed again inside the job's leaf
    lost = tpj.pods(steady)[1]
    domain = fabric_nodes[lost.spec.node_name][labels.LEAF]
    tpj.core.delete_namespaced_pod(lost.metadata.name, tpj.namespace)

    def replaced() -> list[client.V1Pod] | None:
        pods = tpj.pods(steady)
        ok = len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
        return pods if ok and lost.metadata.uid not in {p.metadata.uid for p in pods} else None

    pods = wait_for(replaced, 90, what="a Running replacement of worker 1 after the outage")
    assert {fabric_nodes[p.spec.node_name][labels.LEAF] for p in pods} == {domain}
    assert tpj.wait_phase(steady, "Running")["restarts"] == 1


def test_deleting_the_job_garbage_collects_pods_and_service(tpj: Tpj) -> None:
    name = tpj.apply(small_job("doomed"))
    tpj.wait_phase(name, "Running")
    tpj.custom.delete_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, name)

    def gone() -> bool:
        pods = tpj.pods(name)
        services = tpj.core.list_namespaced_service(tpj.namespace).items
        return not pods and not services

    wait_for(gone, 60, what="pods and Service garbage-collected")


def test_deleting_many_running_jobs_at_once_lets_every_one_go_promptly(
    tpj: Tpj, operator: LocalCluster
) -> None:
    """A job deleted while its reconcile tick runs must not wait for kopf's 60 s re-check.

    kopf removes its finalizer only after the job's timer has stopped. When a tick is running
    (or waiting for an executor thread) at the moment of deletion, kopf by default looks again
    only after ``cancellation_polling`` (60 s): the job, its pods and a namespace being deleted
    hang for a minute. Ticks every 20 ms over twelve jobs make that the common case here.
    """
    operator.stop_component(OPERATOR)
    start_operator(operator, reconcile_seconds=0.02)
    try:
        names = [tpj.apply(small_job(f"many-{i}")) for i in range(12)]
        for name in names:
            tpj.wait_phase(name, "Running")
        for name in names:
            tpj.custom.delete_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, name)

        def remaining() -> list[str]:
            items = tpj.custom.list_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL)
            return [j["metadata"]["name"] for j in items["items"]]

        wait_for(lambda: not remaining(), 20, what="all 12 deleted jobs gone within 20 s")
    finally:
        operator.stop_component(OPERATOR)
        start_operator(operator)


def test_a_job_no_node_could_run_fails_with_the_reason(tpj: Tpj) -> None:
    name = tpj.apply(small_job("toobig", gpusPerWorker=16, tensorParallelSize=16))
    tpj.wait_phase(name, "Failed")
    failed = tpj.condition(name, "Failed")
    assert failed["status"] == "True"
    assert "gpusPerWorker is 16 but no node has more than 8" in failed["message"]
    assert tpj.pods(name) == []


def test_suspend_removes_the_pods_and_resume_places_the_gang_again(tpj: Tpj) -> None:
    name = tpj.apply(small_job("napper"))
    tpj.wait_phase(name, "Running")
    tpj.custom.patch_namespaced_custom_object(
        GROUP, VERSION, tpj.namespace, PLURAL, name, {"spec": {"suspend": True}}
    )
    tpj.wait_phase(name, "Suspended")
    wait_for(lambda: not tpj.pods(name), 60, what="pods of the suspended job gone")
    wait_for(lambda: not tpj.status(name).get("placement"), 30, what="the plan dropped")
    tpj.custom.patch_namespaced_custom_object(
        GROUP, VERSION, tpj.namespace, PLURAL, name, {"spec": {"suspend": False}}
    )
    try:
        status = tpj.wait_phase(name, "Running")
    except BaseException:
        print(
            "STATUS",
            tpj.status(name),
            [(p.metadata.name, p.status.phase, p.spec.scheduling_gates) for p in tpj.pods(name)],
        )
        raise
    assert len(status["placement"]["nodes"]) == 2


def test_exhausted_replacements_fail_the_job_and_free_its_nodes(tpj: Tpj) -> None:
    name = tpj.apply(small_job("fragile", failurePolicy={"maxRestarts": 0}))
    tpj.wait_phase(name, "Running")
    tpj.core.delete_namespaced_pod(f"{name}-worker-0", tpj.namespace)
    tpj.wait_phase(name, "Failed")
    failed = tpj.condition(name, "Failed")
    assert failed["message"].startswith("worker 0 (")
    assert "failed after 0 of 0 restarts" in failed["message"]
    wait_for(lambda: not tpj.pods(name), 60, what="the failed job's pods deleted")
