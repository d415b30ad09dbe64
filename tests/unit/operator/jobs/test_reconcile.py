"""One job's reconciles against a recording stand-in of the API server and the pod cache: what a
reconcile reads before it charges a loss, and what it writes.

The stand-in keeps pods by name and the job's placement as the API server has it; the job's body
is kopf's view, which the test moves forward by applying each reconcile's status patch. Pure
logic of the reconciler: what reaches a real API server is tested in tests/integration.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import kopf
import pytest
from kubernetes.client.rest import ApiException

from tpfabric_core.api.placement import StoredPlacement, placement_of_status
from tpfabric_operator import handlers
from tpfabric_operator.jobs import reconcile
from tpfabric_operator.jobs.born_released import PlanWaits
from tpfabric_operator.jobs.children import GANG_GATE
from tpfabric_operator.jobs.operator_state import OperatorState
from tpfabric_operator.jobs.pod_cache import worker_of

UID = "uid-1"
T0 = 1_700_000_000.0


class Cluster:
    """Records what the reconciler asks of the adapter; serves the pod cache's reads."""

    def __init__(self, placement: dict[str, Any] | None = None, *, quota: int | None = None):
        self.pods: dict[str, dict[str, Any]] = {}
        self.placement = placement or {}
        self.quota = quota  # pods the namespace may hold (a ResourceQuota); None: no limit
        self.posted: list[str] = []
        self.refused: list[str] = []
        self.deleted: list[str] = []
        self.synced = threading.Event()
        self.synced.set()
        self.state: OperatorState = handlers.new_state(kube=self, pods=self)

    # -- the adapter -----------------------------------------------------------------------------

    def kueue_versions(self) -> tuple[str, ...]:
        return ()  # Kueue is not installed

    def create(self, manifest: dict[str, Any]) -> bool:
        if manifest["kind"] != "Pod":
            return True  # the Service
        name = manifest["metadata"]["name"]
        self.posted.append(name)
        if self.quota is not None and len(self.pods) >= self.quota:
            self.refused.append(name)
            refusal = ApiException(status=403, reason="Forbidden")
            refusal.body = '{"message": "exceeded quota: one-pod, requested: pods=1"}'
            raise refusal
        if name in self.pods:
            return False
        pod = copy.deepcopy(manifest)
        pod["status"] = {"phase": "Pending"}
        self.pods[name] = pod
        return True

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get(name)

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.deleted.append(name)
        pod = self.pods.get(name)
        if pod is None or pod["metadata"].get("uid", "") != uid:
            return False
        pod["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:20Z"
        return True

    def keep_failed_pod(self, namespace: str, name: str, job: str) -> None:
        raise AssertionError("no failed pod here")

    def read_placement(self, namespace: str, name: str, uid: str | None = None) -> StoredPlacement:
        return placement_of_status({"placement": self.placement})

    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return list(self.pods.values())

    # -- the pod cache ---------------------------------------------------------------------------

    def workers(self, job: Any) -> list[Any]:
        return [
            worker_of(
                p["metadata"]["name"],
                p["metadata"].get("labels") or {},
                p["metadata"],
                p.get("spec") or {},
                p.get("status") or {},
            )
            for p in self.pods.values()
        ]

    def failed(self, job: Any) -> list[Any]:
        return []

    def gone(self) -> None:
        """The kubelet confirms every deletion."""
        self.pods = {
            n: p for n, p in self.pods.items() if not p["metadata"].get("deletionTimestamp")
        }


class Job:
    """kopf's view of one job, moved forward by the reconciles' status patches."""

    def __init__(self, workers: int = 2, status: dict[str, Any] | None = None, **spec: Any):
        self.body: dict[str, Any] = {
            "apiVersion": "tpfabric.io/v1alpha1",
            "kind": "TensorParallelJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {
                "workers": workers,
                "tensorParallelSize": 8,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
                **spec,
            },
            "status": status or {},
        }

    def reconcile(self, cluster: Cluster) -> dict[str, Any]:
        """Run one reconcile on ``cluster``; return the status it patched (applied to the view)."""
        patch = kopf.Patch()
        indexes = {"node_resources": {}, "job_services": {("ns", "j"): [UID]}}
        body = kopf.Body(copy.deepcopy(self.body))
        reconcile._reconcile(cluster.state, body, patch, indexes)
        written = dict(patch.get("status") or {})
        for key, value in written.items():
            if value is None:
                self.body["status"].pop(key, None)
            else:
                self.body["status"][key] = value
        return written

    def condition(self, kind: str) -> dict[str, Any]:
        return next(
            (c for c in self.body["status"].get("conditions") or [] if c["type"] == kind), {}
        )


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    posted: list[tuple[str, str]] = []
    for kind in ("info", "warn"):
        monkeypatch.setattr(
            handlers.kopf, kind, lambda body, reason, message: posted.append((reason, message))
        )
    return posted


@pytest.fixture
def clock() -> list[float]:
    return [T0]


def use(cluster: Cluster, clock: list[float] | None = None) -> Cluster:
    """Give ``cluster`` a fresh operator state that acts on it, at the time ``clock`` shows."""
    now = clock if clock is not None else [T0]
    cluster.state = handlers.new_state(
        kube=cluster, pods=cluster, plan_waits=PlanWaits(0.0), clock=lambda: now[0]
    )
    return cluster


def running_pod(job: Job, index: int, owner: str | None = UID) -> dict[str, Any]:
    refs = [{"kind": "TensorParallelJob", "uid": owner, "controller": True}] if owner else []
    return {
        "metadata": {
            "name": f"j-worker-{index}",
            "namespace": "ns",
            "labels": {
                "tpfabric.io/job-name": "j",
                "tpfabric.io/worker-index": str(index),
                "tpfabric.io/attempt": "0",
            },
            "ownerReferences": refs,
        },
        "spec": {"nodeName": f"n{index}"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


# -- 15: one view of the placement ---------------------------------------------------------------


def test_a_worker_recreated_for_a_replan_is_never_born_released_onto_the_dropped_plan(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: Any
) -> None:
    """kopf's view still shows the plan; the API server already says Replanning (the placer
    writes that before it deletes the released pods). The loss check reads the API server: the
    worker the placer deleted is recreated uncharged, and gated, onto no plan."""
    planned = {
        "state": "Planned",
        "attempt": 0,
        "level": "leaf",
        "domainLabels": {"topology.tpfabric.io/leaf": "l1"},
        "nodes": ["n0", "n1"],
    }
    job = Job(status={"workersCreated": True, "attempt": 0, "placement": planned})
    cluster = use(Cluster({**planned, "state": "Replanning"}), clock)
    cluster.pods["j-worker-0"] = running_pod(job, 0)
    written = job.reconcile(cluster)
    assert cluster.posted == ["j-worker-1"]
    made = cluster.pods["j-worker-1"]
    assert made["spec"].get("schedulingGates") == [{"name": GANG_GATE}], "born released"
    assert "affinity" not in made["spec"]
    assert written.get("restarts", 0) == 0  # a re-plan's recreation is never charged


# -- 14: only pods owned by this job are its own -------------------------------------------------


def test_pods_no_job_owns_are_not_adopted_and_the_job_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: Any
) -> None:
    job = Job()
    cluster = use(Cluster(), clock)
    cluster.pods["j-worker-0"] = running_pod(job, 0, owner=None)  # kept by --cascade=orphan
    job.reconcile(cluster)
    assert (cluster.posted, cluster.deleted) == ([], [])
    created = job.condition("WorkersCreated")
    assert created["status"] == "False"
    assert "j-worker-0" in created["message"]
    assert "not owned by this job" in created["message"]
    assert "kubectl delete pod -n ns j-worker-0" in created["message"]
    cluster.pods.clear()  # the user deleted it: the job starts
    job.reconcile(cluster)
    assert cluster.posted == ["j-worker-0"]


# -- 11: a refused gang backs off and gives its quota back ---------------------------------------


def test_a_refused_gang_backs_off_and_gives_a_partial_gang_back(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: list[float]
) -> None:
    """A quota of one pod; a gang of four; a reconcile every second for 40 s. The old operator
    posted the missing three workers at every reconcile (about 120 refusals)."""
    job = Job(workers=4)
    cluster = use(Cluster(quota=1), clock)
    rounds: list[tuple[float, int]] = []
    for second in range(40):
        clock[0] = T0 + second
        before = len(cluster.posted)
        job.reconcile(cluster)
        cluster.gone()
        if len(cluster.posted) > before:
            rounds.append((second, len(cluster.posted) - before))
    # worker 0 alone, then the rest refused at 1 s; later rounds post one pod each, at 2, 4, 8
    # and 16 s after the round before (with worker 0 posted again once it was given back)
    assert len(cluster.refused) <= 3 + 5, rounds
    assert len(cluster.posted) <= 12, rounds
    given_back = [m for r, m in events if r == "PartialGangDeleted"]
    assert given_back, "a partial gang that waits 30 s gives its pods back"
    assert "j-worker-0" in given_back[0]
    created = job.condition("WorkersCreated")
    assert created["reason"] == "CreateFailed"
    assert "exceeded quota" in created["message"]
    assert "backing off" in created["message"]
    assert job.body["status"].get("restarts", 0) == 0  # nothing given back is charged


def test_a_gang_created_whole_ends_its_backoff(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: list[float]
) -> None:
    job = Job(workers=2)
    cluster = use(Cluster(quota=1), clock)
    job.reconcile(cluster)  # worker 0
    clock[0] += 1
    job.reconcile(cluster)  # worker 1 refused
    assert cluster.refused == ["j-worker-1"]
    cluster.quota = None  # the quota grows
    clock[0] += 0.5
    job.reconcile(cluster)
    assert cluster.posted == ["j-worker-0", "j-worker-1"], "nothing posted before the next round"
    clock[0] += 1
    job.reconcile(cluster)
    assert cluster.posted[-1] == "j-worker-1"
    assert set(cluster.pods) == {"j-worker-0", "j-worker-1"}
    assert cluster.state.create_backoff.streak(UID) is None


# -- 12: an invalid spec is a condition, not a failure -------------------------------------------


def test_an_invalid_spec_keeps_the_job_running_and_recovers_when_fixed(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: Any
) -> None:
    running = {"phase": "Running", "workersCreated": True, "restarts": 0, "attempt": 0}
    job = Job(status=running)
    cluster = use(Cluster(), clock)
    cluster.pods = {f"j-worker-{i}": running_pod(job, i) for i in range(2)}
    job.body["spec"]["failurePolicy"] = {"rules": [{"action": "FailJob"}]}  # past an old CRD
    written = job.reconcile(cluster)
    assert "phase" not in written
    assert job.body["status"]["phase"] == "Running"
    invalid = job.condition("InvalidSpec")
    assert (invalid["status"], invalid["reason"]) == ("True", "ValidationFailed")
    assert invalid["message"].startswith("spec.failurePolicy.rules[0]")
    assert not job.condition("Failed")
    assert (cluster.posted, cluster.deleted) == ([], [])
    assert ("InvalidSpec", invalid["message"]) in events
    job.body["spec"]["failurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": [3]}]}
    job.reconcile(cluster)
    assert job.body["status"]["phase"] == "Running"
    assert job.condition("InvalidSpec")["status"] == "False"
    assert job.condition("Failed")["status"] == "False"
    assert cluster.deleted == [], "the fix must not stop the job"


def test_a_job_an_older_operator_failed_for_an_invalid_spec_runs_on(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: Any
) -> None:
    failed = {"type": "Failed", "status": "True", "reason": "InvalidSpec", "message": "m"}
    status = {"phase": "Failed", "workersCreated": True, "conditions": [failed]}
    job = Job(status=status)
    cluster = use(Cluster(), clock)
    cluster.pods = {f"j-worker-{i}": running_pod(job, i) for i in range(2)}
    job.reconcile(cluster)
    assert job.body["status"]["phase"] == "Running"
    assert cluster.deleted == []


# -- 18: a follower acts on nothing ---------------------------------------------------------------


def test_a_replica_that_does_not_hold_the_lease_acts_on_nothing(
    monkeypatch: pytest.MonkeyPatch, events: Any, clock: Any
) -> None:
    from tpfabric_operator import leadership  # noqa: PLC0415

    cluster = use(Cluster(), clock)

    class Follower:
        def is_leader(self) -> bool:
            return False

    monkeypatch.setattr(leadership, "_elector", Follower())
    job = Job()
    patch = kopf.Patch()
    assert reconcile.reconcile(cluster.state, kopf.Body(job.body), patch, {}) is True
    assert (cluster.posted, dict(patch), events) == ([], {}, [])


def test_a_replica_that_begins_to_lead_reconciles_every_job_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    woken: list[Any] = []
    state = handlers.new_state()
    monkeypatch.setattr(state.waker, "wake", woken.append)
    jobs = {("ns", "a"): [object()], ("ns", "b"): [object()]}
    state.kopf_state = ({"job_objects": jobs}, None)  # type: ignore[assignment]
    reconcile.reconcile_every_job(state)
    assert sorted(woken) == [("ns", "a"), ("ns", "b")]
