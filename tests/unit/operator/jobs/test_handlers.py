"""The reconciler's own rules: failure reasons read from pod status, one reconcile per job."""

from __future__ import annotations

import threading
import time
from typing import Any

import kopf
import pytest
from driven_clock import Clock
from kubernetes.client.rest import ApiException

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.placement import StoredPlacement, read_placement
from tpfabric_operator import handlers
from tpfabric_operator.jobs import apply_intent, reconcile
from tpfabric_operator.jobs.apply_intent import CREATE_CONCURRENCY, ensure_service
from tpfabric_operator.jobs.born_released import PlanWaits
from tpfabric_operator.jobs.children import GANG_GATE, worker_pod
from tpfabric_operator.jobs.kube import extended_resources
from tpfabric_operator.jobs.operator_state import (
    SERVICE_MEMORY_SECONDS,
    STALE_BODY_SECONDS,
    OperatorState,
    Serial,
    ServicesMade,
)
from tpfabric_operator.jobs.pod_cache import worker_of


def state_with(kube: Any = None, **parts: Any) -> OperatorState:
    """Return a fresh operator state on the given stand-in adapter."""
    return handlers.new_state(kube=kube, **parts)


def _create_pods(kube: Any, *args: Any, waits: PlanWaits | None = None, **kwargs: Any) -> Any:
    """Run a creation round on ``kube`` (with the small gangs' waits of ``waits``)."""
    return apply_intent.create_pods(state_with(kube, plan_waits=waits), *args, **kwargs)


def failed_pod(**status: Any) -> tuple[str, Any]:
    labels = {
        "tpfabric.io/job-name": "j",
        "tpfabric.io/worker-index": "1",
        "tpfabric.io/attempt": "2",
    }
    meta = {"ownerReferences": [{"kind": "TensorParallelJob", "uid": "u"}]}
    return worker_of(
        "j-worker-1-a2", labels, meta, {"nodeName": "n"}, {"phase": "Failed", **status}
    )


def terminated(name: str, code: int, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def test_an_oom_kill_is_the_reason_with_its_exit_code() -> None:
    owner, pod = failed_pod(containerStatuses=[terminated("trainer", 137, "OOMKilled")])
    assert (owner, pod.index, pod.attempt) == ("u", 1, 2)
    assert (pod.reason, pod.exit_code) == ("OOMKilled", 137)
    assert pod.message == "container trainer exited 137 (OOMKilled)"


def test_an_init_container_failure_is_found_though_no_main_container_ran() -> None:
    _, pod = failed_pod(initContainerStatuses=[terminated("rdma-init", 3, "Error")])
    assert (pod.reason, pod.exit_code) == ("InitContainerFailed", 3)
    assert "rdma-init exited 3" in pod.message


def test_an_eviction_without_container_states_keeps_the_pods_reason() -> None:
    _, pod = failed_pod(reason="Evicted", message="The node was low on memory.")
    assert (pod.reason, pod.message, pod.exit_code) == (
        "Evicted",
        "The node was low on memory.",
        None,
    )


def test_one_reconcile_at_a_time_and_never_on_a_body_older_than_our_patch(
    monkeypatch: Any,
) -> None:
    serial = Serial()
    old = {"phase": "Pending"}
    assert serial.enter("uid", "10", old)
    assert not serial.enter("uid", "10", old)  # the timer while the change handler runs
    serial.leave("uid", "10", {"phase": "Running", "lastFailure": None})
    assert not serial.enter("uid", "10", old)  # our patch has not come back yet
    # a body older still (kopf's view lags): its status does not show the patch either
    assert not serial.enter("uid", "9", {})
    assert serial.enter("uid", "12", {"phase": "Running"})  # shows it (a removed key: absent)
    serial.leave("uid", "12", None)
    assert serial.enter("uid", "11", old)  # nothing patched since: any body will do
    serial.leave("uid", "11", {"phase": "Failed"})
    # a patch that never shows (it did not land) holds the job back for a bounded time only
    later = time.monotonic() + STALE_BODY_SECONDS
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert serial.enter("uid", "11", old)


def test_a_patch_counts_as_shown_as_the_api_server_stores_a_merge_patch() -> None:
    # the status is written as a merge patch: a None removes its key, also inside an object
    # (lastFailure.exitCode of a lost or refused worker), so the stored status never holds it;
    # compared as plain values the patch never showed, and the job's reconciles waited the
    # full STALE_BODY_SECONDS after every incident without an exit code
    serial = Serial()
    assert serial.enter("uid", "1", {})
    failure = {"worker": 1, "reason": "OutOfnvidia.com/gpu", "exitCode": None, "pod": "p"}
    serial.leave("uid", "1", {"lastFailure": failure, "restarts": 0, "startTime": None})
    stored = {"worker": 1, "reason": "OutOfnvidia.com/gpu", "pod": "p"}
    assert not serial.enter("uid", "2", {"restarts": 0})  # lastFailure not there yet
    assert not serial.enter("uid", "2", {"lastFailure": {**stored, "pod": "q"}, "restarts": 0})
    # keys the patch left out keep what they had (merged, not replaced): still shown
    assert serial.enter("uid", "2", {"lastFailure": {**stored, "node": "n1"}, "restarts": 0})


def test_the_same_warning_is_posted_once_per_interval(monkeypatch: Any) -> None:
    from types import SimpleNamespace  # noqa: PLC0415

    posted: list[str] = []
    monkeypatch.setattr(kopf, "warn", lambda body, reason, message: posted.append(reason))
    body = SimpleNamespace(meta={"uid": "rate-limited"})
    state = state_with()
    for _ in range(5):
        state.warn(body, "InvalidSpec", "spec.workers: too many")
    state.warn(body, "InvalidSpec", "spec.workers: other")
    assert posted == ["InvalidSpec", "InvalidSpec"]


class _Pods:
    """A stand-in for the adapter's pod writes: records concurrency, answers per name."""

    def __init__(self, existing: dict[str, str], refuse: set[str]) -> None:
        self.existing, self.refuse = existing, refuse
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = self.posted = 0

    def create(self, manifest: dict[str, Any]) -> bool:
        name = manifest["metadata"]["name"]
        with self.lock:
            self.posted += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.02)
        with self.lock:
            self.in_flight -= 1
        if name in self.refuse:
            raise ApiException(status=403, reason="Forbidden")
        return name not in self.existing

    def read_placement(self, namespace: str, name: str, uid: str | None) -> None:
        return None  # no plan to wait for

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        owner = self.existing.get(name)
        refs = [{"kind": "TensorParallelJob", "uid": owner}] if owner else []
        return {"metadata": {"name": name, "ownerReferences": refs}}


def test_a_gangs_pods_are_created_concurrently_in_order_and_a_409_is_ours_only_if_owned() -> None:
    manifests = [{"metadata": {"name": f"w-{k}", "namespace": "ns"}} for k in range(40)]
    pods = _Pods(existing={"w-3": "uid-1", "w-4": "uid-old", "w-5": ""}, refuse=set())
    outcomes = _create_pods(pods, manifests, "uid-1")
    assert len(outcomes) == 40
    assert outcomes[3] == (True, None)  # an earlier reconcile's pod of this job
    assert outcomes[4] == (False, None)  # an older job's pod of the same name
    assert outcomes[5] == (False, None)  # nobody's: never adopted
    assert all(ok for k, (ok, _) in enumerate(outcomes) if k not in (4, 5))
    assert 1 < pods.most_in_flight <= CREATE_CONCURRENCY


def test_no_pod_is_posted_after_the_first_refusal() -> None:
    # a refused gang is not posted again whole: a 64-worker job refused by PodSecurity cost 128
    # POSTs in two reconciles when it was
    manifests = [{"metadata": {"name": f"w-{k}", "namespace": "ns"}} for k in range(64)]
    pods = _Pods(existing={}, refuse={f"w-{k}" for k in range(64)})
    outcomes = _create_pods(pods, manifests, "uid-1")
    assert outcomes[0][0] is False
    assert "w-0: 403" in str(outcomes[0][1])
    assert pods.posted <= CREATE_CONCURRENCY, "only creations already in flight"
    assert all(not ok for ok, _ in outcomes)
    # a round of a job whose last round was refused posts one pod first (slow start)
    again = _Pods(existing={}, refuse={f"w-{k}" for k in range(64)})
    _create_pods(again, manifests, "uid-1", slow_start=True)
    assert again.posted == 1
    # and doubles while they are accepted: worker 0 (alone: the plan), 1, 2, 4, 8, then the
    # batch of 16 in which the refusal comes
    partly = _Pods(existing={}, refuse={f"w-{k}" for k in range(20, 64)})
    outcomes = _create_pods(partly, manifests, "uid-1", slow_start=True)
    assert all(ok for ok, _ in outcomes[:20])
    assert partly.posted <= 1 + 1 + 2 + 4 + 8 + 16
    assert not any(ok for ok, _ in outcomes[20:])


def _gang(workers: int) -> list[dict[str, Any]]:
    job = TensorParallelJob.model_validate(
        {
            "metadata": {"name": "big"},
            "spec": {
                "workers": workers,
                "tensorParallelSize": 8,
                "template": {"spec": {"containers": [{"name": "t", "image": "img"}]}},
            },
        }
    )
    return [worker_pod(job, "big", "ns", i, "init:1") for i in range(workers)]


class _Recorder:
    """Records creations; the placer's plan reaches the API server a few reads after the first
    worker exists (``plan_after`` reads), or never (None)."""

    def __init__(self, plan_after: int | None = 3) -> None:
        self.created: list[dict[str, Any]] = []
        self.reads = 0
        self.plan_after = plan_after
        self.lock = threading.Lock()

    def create(self, manifest: dict[str, Any]) -> bool:
        with self.lock:
            self.created.append(manifest)
        return True

    def read_placement(self, namespace: str, name: str, uid: str | None) -> StoredPlacement:
        assert (namespace, name, uid) == ("ns", "big", "uid-1")
        assert self.created, "read only once the first worker exists"
        self.reads += 1
        if self.plan_after is None or self.reads <= self.plan_after:
            return read_placement({})
        return read_placement(
            {
                "state": "Planned",
                "attempt": 0,
                "level": "leaf",
                "domainLabels": {"leaf": "l1"},
                "nodes": [f"n{i}" for i in range(40)],
            }
        )


def test_a_big_gangs_first_worker_waits_for_the_plan_and_the_rest_is_born_released() -> None:
    kube = _Recorder()
    started = time.monotonic()
    outcomes = _create_pods(kube, _gang(40), "uid-1")
    assert time.monotonic() - started < state_with().plan_wait_seconds, "stopped at the plan"
    assert all(ok for ok, _ in outcomes)
    first, rest = kube.created[0], kube.created[1:]
    assert first["metadata"]["name"] == "big-worker-0"
    assert first["spec"]["schedulingGates"] == [{"name": GANG_GATE}], "made before the plan"
    assert kube.reads == 4
    assert len(rest) == 39
    assert all("schedulingGates" not in pod["spec"] for pod in rest), "born released"
    assert all(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]["matchExpressions"]
        == [{"key": "leaf", "operator": "In", "values": ["l1"]}]
        for pod in rest
    )


def test_without_a_plan_in_time_the_rest_of_the_gang_is_created_gated() -> None:
    kube = _Recorder(plan_after=None)
    apply_intent.create_pods(state_with(kube, plan_wait_seconds=0.1), _gang(40), "uid-1")
    assert len(kube.created) == 40
    assert all(pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}] for pod in kube.created)


@pytest.fixture
def waits() -> tuple[PlanWaits, Clock]:
    clock = Clock(100.0)
    return PlanWaits(2.0, clock), clock


def _planned(workers: int) -> dict[str, Any]:
    return {
        "state": "Planned",
        "attempt": 0,
        "level": "leaf",
        "domainLabels": {"leaf": "l1"},
        "nodes": [f"n{i}" for i in range(workers)],
    }


def test_a_small_gangs_first_worker_is_made_alone_and_the_rest_follow_its_plan_released(
    waits: Any,
) -> None:
    plan_waits, clock = waits
    kube = _Recorder()
    gang = _gang(CREATE_CONCURRENCY)
    started = time.monotonic()
    outcomes = _create_pods(kube, gang, "uid-1", waits=plan_waits)
    assert time.monotonic() - started < 1, "the reconcile does not wait for the plan"
    assert outcomes == [(True, None)] + [(False, None)] * (CREATE_CONCURRENCY - 1)
    assert [m["metadata"]["name"] for m in kube.created] == ["big-worker-0"]
    assert kube.created[0]["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert kube.reads == 0, "it never polls the API server"
    # a reconcile before the plan (a tick, the pod cache not showing worker 0 yet) makes nothing
    clock.now += 1.0
    assert (
        _create_pods(kube, gang, "uid-1", waits=plan_waits) == [(False, None)] * CREATE_CONCURRENCY
    )
    assert len(kube.created) == 1
    # the job's watch shows the plan: the reconcile it wakes makes the rest, born released
    assert plan_waits.answered("uid-1")
    assert plan_waits.heard("uid-1")
    outcomes = _create_pods(kube, gang[1:], "uid-1", _planned(CREATE_CONCURRENCY), waits=plan_waits)
    assert all(ok for ok, _ in outcomes)
    assert len(kube.created) == CREATE_CONCURRENCY
    assert all("schedulingGates" not in pod["spec"] for pod in kube.created[1:])
    assert not plan_waits.heard("uid-1"), "the wait is over"


def test_without_a_plan_in_time_a_small_gangs_rest_is_made_gated(waits: Any) -> None:
    plan_waits, clock = waits
    kube = _Recorder(plan_after=None)
    gang = _gang(4)
    _create_pods(kube, gang, "uid-1", waits=plan_waits)
    clock.now += 2.5  # past the wait: the next reconcile (a tick) makes the rest as they are
    outcomes = _create_pods(kube, gang[1:], "uid-1", waits=plan_waits)
    assert all(ok for ok, _ in outcomes)
    assert [m["metadata"]["name"] for m in kube.created] == [f"big-worker-{i}" for i in range(4)]
    assert all(pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}] for pod in kube.created)


def test_past_the_wait_a_plan_kopf_has_not_shown_yet_is_read_from_the_api_server(
    waits: Any,
) -> None:
    plan_waits, clock = waits
    kube = _Recorder(plan_after=0)  # the API server has the plan; kopf's view still lags
    gang = _gang(4)
    _create_pods(kube, gang, "uid-1", waits=plan_waits)
    clock.now += 1.0
    _create_pods(kube, gang[1:], "uid-1", waits=plan_waits)
    assert kube.reads == 0, "no read while the wait lasts"
    clock.now += 1.5
    outcomes = _create_pods(kube, gang[1:], "uid-1", waits=plan_waits)
    assert kube.reads == 1
    assert all(ok for ok, _ in outcomes)
    assert all("schedulingGates" not in pod["spec"] for pod in kube.created[1:]), "born released"


def test_a_small_gang_the_placer_answered_is_made_whole_at_once(waits: Any) -> None:
    plan_waits, _ = waits
    for placement in ({"state": "Waiting"}, {"state": "Replanning"}, _planned(4)):
        kube = _Recorder(plan_after=None)
        _create_pods(kube, _gang(4), "uid-1", placement, waits=plan_waits)
        assert len(kube.created) == 4, placement
        assert not plan_waits.answered("uid-1"), "no wait begun"


def test_a_small_gang_whose_first_worker_was_refused_posts_nothing_more(waits: Any) -> None:
    plan_waits, _ = waits
    pods = _Pods(existing={}, refuse={f"big-worker-{i}" for i in range(4)})
    outcomes = _create_pods(pods, _gang(4), "uid-1", waits=plan_waits)
    assert outcomes[0][0] is False
    assert "403" in str(outcomes[0][1])
    assert outcomes[1:] == [(False, None)] * 3, "the round ends at the refusal"
    assert pods.posted == 1
    assert not plan_waits.answered("uid-1")


def test_the_rest_of_a_gang_whose_creation_was_cut_short_is_made_at_once(waits: Any) -> None:
    plan_waits, _ = waits
    kube = _Recorder(plan_after=None)
    _create_pods(kube, _gang(4)[1:], "uid-1", whole_gang=False, waits=plan_waits)
    assert len(kube.created) == 3, "no second wait for a gang whose worker 0 exists"
    assert all(pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}] for pod in kube.created)
    assert not plan_waits.answered("uid-1")


def test_a_plan_wakes_the_reconcile_of_a_gang_that_waits_for_it(
    waits: Any, monkeypatch: Any
) -> None:
    plan_waits, _ = waits
    state = state_with(plan_waits=plan_waits)
    memo = kopf.Memo(state=state)
    woken: list[Any] = []
    monkeypatch.setattr(state.waker, "wake", woken.append)

    def body(state: str | None) -> kopf.Body:
        status = {"placement": {"state": state}} if state else {}
        return kopf.Body({"metadata": {"uid": "uid-1", "name": "big"}, "status": status})

    handlers.job_objects(namespace="ns", name="big", body=body("Planned"), memo=memo)
    assert woken == [], "no gang of the job waits"
    plan_waits.begin(("uid-1", "0"))
    handlers.job_objects(namespace="ns", name="big", body=body(None), memo=memo)
    assert woken == [], "no answer yet"
    handlers.job_objects(namespace="ns", name="big", body=body("Planned"), memo=memo)
    assert woken == [("ns", "big")]
    # a woken reconcile that finds the older body in kopf's index (stored after this function
    # returns) is tried again; the one that finds the plan runs
    older = body(None)
    state.kopf_state = ({"job_objects": {("ns", "big"): [older]}}, None)  # type: ignore[assignment]
    assert reconcile.reconcile_woken(state, ("ns", "big")) is False


def test_a_gang_whose_plan_the_reconcile_saw_is_born_released_without_waiting() -> None:
    kube = _Recorder(plan_after=None)
    plan = {"state": "Planned", "attempt": 0, "level": "cluster", "nodes": ["n0", "n1"]}
    _create_pods(kube, _gang(2)[1:], "uid-1", plan)
    assert kube.reads == 0
    assert "schedulingGates" not in kube.created[0]["spec"]


def test_a_restarted_big_gang_under_an_earlier_attempts_plan_is_created_without_waiting() -> None:
    kube = _Recorder()
    restart = _gang(40)
    for manifest in restart:
        manifest["metadata"]["labels"]["tpfabric.io/attempt"] = "1"
    plan = {"state": "Planned", "attempt": 0, "level": "cluster", "nodes": ["n"] * 40}
    started = time.monotonic()
    _create_pods(kube, restart, "uid-1", plan)
    assert time.monotonic() - started < 1, "no plan of attempt 1 comes: the ranks are moved"
    assert kube.reads == 0
    assert len(kube.created) == 40
    assert all(pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}] for pod in kube.created)


def test_a_nodes_extended_resources_are_its_whole_domain_prefixed_counts() -> None:
    assert extended_resources({"cpu": "8", "nvidia.com/gpu": "8", "rdma/ib": "8"}) == {
        "nvidia.com/gpu": 8,
        "rdma/ib": 8,
    }
    assert extended_resources({"nvidia.com/gpu": "4", "example.com/odd": "1500m"}) == {
        "nvidia.com/gpu": 4
    }
    assert extended_resources({}) == {}


def test_a_service_made_here_counts_until_the_index_shows_it_or_the_memory_runs_out(
    monkeypatch: Any,
) -> None:
    made = ServicesMade()
    assert not made.pending("u", shown=False)  # never made here: the index decides
    made.note("u")
    assert made.pending("u", shown=False)  # made a moment ago, the index lags: do not post again
    assert not made.pending("u", shown=True)  # the index has it: forgotten
    assert not made.pending("u", shown=False)  # so a later deletion is seen and repaired
    made.note("v")
    later = time.monotonic() + SERVICE_MEMORY_SECONDS
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert not made.pending("v", shown=False)  # never shown: after the memory, post again


def test_a_service_deleted_after_the_index_showed_it_is_made_again_at_once(
    monkeypatch: Any,
) -> None:
    # what every reconcile of a job with pods goes through (the regression itself, apply_intent not
    # calling this once the index showed the Service, is caught on the real control plane by
    # test_a_deleted_headless_service_is_made_again)
    created: list[str] = []

    class _Kube:
        def create(self, manifest: dict[str, Any]) -> bool:
            created.append(manifest["metadata"]["name"])
            return True

        def delete_service(self, namespace: str, name: str) -> None:
            raise AssertionError("no older job's Service here")

    meta = {"namespace": "ns", "name": "j", "uid": "u"}
    body = kopf.Body(
        {"apiVersion": "tpfabric.io/v1alpha1", "kind": "TensorParallelJob", "metadata": meta}
    )
    state = state_with(_Kube())
    assert ensure_service(state, body, []) is None  # the job's first reconcile
    assert ensure_service(state, body, []) is None  # the index lags: not posted again
    assert ensure_service(state, body, ["u"]) is None  # the index shows it
    assert created == ["j-workers"]
    assert ensure_service(state, body, []) is None  # someone deleted it: made again now
    assert created == ["j-workers", "j-workers"]


def test_a_woken_reconcile_marks_its_body_patched_only_when_its_write_went_through(
    monkeypatch: Any,
) -> None:
    class _Synced:
        synced = threading.Event()

    _Synced.synced.set()
    state = state_with(pods=_Synced)

    def decide(state: Any, body: Any, patch: Any, indexes: Any) -> None:
        patch.status["phase"] = "Running"

    monkeypatch.setattr(reconcile, "_reconcile", decide)
    body = kopf.Body({"metadata": {"uid": "u", "resourceVersion": "7", "name": "j"}})
    written: list[dict[str, Any]] = []

    def refused(body: Any, patch: Any) -> None:
        raise ApiException(status=500, reason="etcd timeout")

    with pytest.raises(ApiException):
        reconcile.reconcile(state, body, kopf.Patch(), {}, refused)
    # nothing was written: the same body may be acted on again at once
    assert reconcile.reconcile(state, body, kopf.Patch(), {}, lambda b, p: written.append(dict(p)))
    assert written == [{"status": {"phase": "Running"}}]
    # written: that body is stale now, until the watch brings the job as patched
    assert not reconcile.reconcile(
        state, body, kopf.Patch(), {}, lambda b, p: written.append(dict(p))
    )
    assert len(written) == 1
