from __future__ import annotations

from dataclasses import replace
from typing import Any

from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.jobs.children import WORKER_INDEX_LABEL
from tpfabric_operator.jobs.decide import decide, honour_problem
from tpfabric_operator.jobs.failure_policy import rule_action
from tpfabric_operator.jobs.job_state import Failure, Memory, WorkerPod
from tpfabric_operator.jobs.job_status import Outcome, job_status
from tpfabric_operator.jobs.obstacles import STUCK_AFTER_SECONDS, stuck_message, stuck_terminating
from tpfabric_operator.jobs.pod_cache import worker_of

NOW = 1_000_000.0
RUNNING = Memory(created_before=True)


def a_job(workers: int = 3, **spec: Any) -> TensorParallelJob:
    return TensorParallelJob.model_validate(
        {
            "metadata": {"name": "j"},
            "spec": {
                "workers": workers,
                "tensorParallelSize": 8,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
                **spec,
            },
        }
    )


def pod(index: int, phase: str = "Running", attempt: int = 0, **kw: Any) -> WorkerPod:
    name = f"j-worker-{index}" + (f"-a{attempt}" if attempt else "")
    return WorkerPod(name, index, phase, phase == "Running", f"n{index}", attempt=attempt, **kw)


def gang(*phases: str, attempt: int = 0) -> list[WorkerPod]:
    return [pod(i, p, attempt) for i, p in enumerate(phases)]


# -- creation ------------------------------------------------------------------------------------


def test_a_new_job_creates_every_worker() -> None:
    intent = decide(a_job(), [], Memory(), now=NOW)
    assert (intent.create, intent.charged, intent.fail) == ([0, 1, 2], 0, None)


def test_a_resumed_job_waits_for_its_old_pods_to_terminate_without_charging() -> None:
    terminating = [replace(pod(0), deleting=True), replace(pod(1), deleting=True)]
    intent = decide(a_job(workers=2), terminating, Memory(), now=NOW)
    assert (intent.create, intent.charged, intent.failure) == ([], 0, None)


def test_pods_of_an_older_job_with_the_same_name_are_deleted_and_block_creation() -> None:
    intent = decide(a_job(workers=2), [], Memory(), now=NOW, stale=gang("Running", "Running"))
    assert intent.create == []
    assert intent.delete == ["j-worker-0", "j-worker-1"]


def test_pods_no_job_owns_are_neither_adopted_nor_deleted_and_block_creation() -> None:
    # left by `kubectl delete --cascade=orphan`; they are the user's now
    orphans = gang("Running", "Running")
    intent = decide(a_job(workers=2), [], Memory(), now=NOW, foreign=orphans)
    assert (intent.create, intent.delete, intent.keep) == ([], [], [])


# -- terminal semantics --------------------------------------------------------------------------


def test_all_workers_succeeding_succeeds_the_job() -> None:
    intent = decide(a_job(), gang("Succeeded", "Succeeded", "Succeeded"), RUNNING, now=NOW)
    assert intent.succeed == "all 3 workers succeeded"


def test_a_succeeded_worker_whose_pod_is_deleted_is_not_run_again() -> None:
    memory = replace(RUNNING, succeeded=frozenset({0}))
    intent = decide(a_job(), gang("Running", "Running", "Running")[1:], memory, now=NOW)
    assert (intent.create, intent.failure, intent.succeed) == ([], None, None)


def test_a_finished_job_never_recreates_a_worker_and_stops_what_still_runs() -> None:
    for phase in ("Succeeded", "Failed"):
        memory = replace(RUNNING, phase=phase)
        intent = decide(a_job(), [pod(1)], memory, now=NOW)
        assert (intent.create, intent.delete, intent.charged) == ([], ["j-worker-1"], 0)


def test_rank0_success_stops_the_workers_still_running() -> None:
    intent = decide(
        a_job(successPolicy="Rank0"), gang("Succeeded", "Running", "Running"), RUNNING, now=NOW
    )
    assert intent.succeed == "worker 0 succeeded (successPolicy Rank0)"
    assert intent.delete == ["j-worker-1", "j-worker-2"]


def test_any_worker_success_succeeds_the_job() -> None:
    intent = decide(
        a_job(successPolicy="AnyWorker"), gang("Running", "Succeeded", "Running"), RUNNING, now=NOW
    )
    assert intent.succeed is not None


def test_all_workers_policy_waits_for_the_others_after_rank0_exits() -> None:
    intent = decide(a_job(), gang("Succeeded", "Running", "Running"), RUNNING, now=NOW)
    assert (intent.succeed, intent.delete, intent.create) == (None, [], [])


def test_the_deadline_fails_the_job_and_stops_its_pods() -> None:
    memory = replace(RUNNING, start_time=NOW - 61)
    intent = decide(a_job(activeDeadlineSeconds=60), gang("Running", "Running"), memory, now=NOW)
    assert intent.fail_reason == "DeadlineExceeded"
    assert intent.delete == ["j-worker-0", "j-worker-1"]


def test_before_the_deadline_the_reconcile_comes_back_in_time() -> None:
    memory = replace(RUNNING, start_time=NOW - 20)
    intent = decide(a_job(activeDeadlineSeconds=60), gang("Running") * 1, memory, now=NOW)
    assert intent.wait_seconds == 40


def test_a_finished_job_is_deleted_after_its_ttl() -> None:
    job = a_job(ttlSecondsAfterFinished=30)
    early = decide(job, [], replace(RUNNING, phase="Succeeded", completion_time=NOW - 10), now=NOW)
    assert (early.delete_job, early.wait_seconds) == (False, 20)
    late = decide(job, [], replace(RUNNING, phase="Failed", completion_time=NOW - 31), now=NOW)
    assert late.delete_job


# -- failures: RecreateGang ----------------------------------------------------------------------


def test_one_failed_worker_restarts_the_whole_gang_charged_once() -> None:
    failed = replace(pod(1, "Failed"), reason="Error", message="exited 1", exit_code=1)
    intent = decide(a_job(), [pod(0), failed, pod(2)], RUNNING, now=NOW)
    assert (intent.charged, intent.attempt, intent.restarting) == (1, 1, {0, 1, 2})
    assert intent.delete == ["j-worker-0", "j-worker-2"]
    assert intent.keep == ["j-worker-1"]  # evidence for kubectl logs
    assert intent.failure == Failure(1, "Error", "exited 1", 1, "j-worker-1")
    assert intent.create == []


def test_two_workers_lost_at_once_are_one_incident() -> None:
    intent = decide(a_job(), [pod(0)], RUNNING, now=NOW)
    assert (intent.charged, intent.restarting) == (1, {0, 1, 2})


def test_a_restarting_gang_waits_for_the_old_attempt_to_be_gone() -> None:
    memory = replace(RUNNING, attempt=1, restarting=frozenset({0, 1, 2}), last_failure=NOW - 60)
    terminating = [replace(pod(0), deleting=True)]
    waiting = decide(a_job(), terminating, memory, now=NOW)
    assert (waiting.create, waiting.charged) == ([], 0)
    gone = decide(a_job(), [], memory, now=NOW)
    assert (gone.create, gone.attempt, gone.charged) == ([0, 1, 2], 1, 0)


def test_a_restart_waits_for_the_backoff_after_every_loss() -> None:
    memory = replace(RUNNING, attempt=1, restarting=frozenset({0, 1, 2}), last_failure=NOW - 3)
    intent = decide(a_job(), [], memory, now=NOW)
    assert (intent.create, intent.wait_seconds) == ([], 7)  # default backoff 10 s


def test_a_worker_already_restarting_is_never_charged_again() -> None:
    memory = replace(RUNNING, attempt=1, restarting=frozenset({1}), restarts=1)
    intent = decide(a_job(), gang("Running", "Running", "Running", attempt=1)[::2], memory, now=NOW)
    assert intent.charged == 0


def test_a_deleted_running_worker_is_a_loss_at_once() -> None:
    evicted = replace(pod(1), deleting=True, conditions=frozenset({"DisruptionTarget"}))
    intent = decide(a_job(), [pod(0), evicted, pod(2)], RUNNING, now=NOW)
    assert intent.failure is not None
    assert intent.failure.reason == "Evicted"
    assert intent.charged == 0  # DisruptionTarget restarts without charge by default
    assert intent.attempt == 1


def test_workers_the_placer_deleted_for_a_replan_are_recreated_without_a_charge() -> None:
    memory = replace(RUNNING, replanning=True)
    intent = decide(a_job(), [pod(0)], memory, now=NOW)
    assert (intent.create, intent.charged, intent.failure) == ([1, 2], 0, None)


def test_exhausted_restarts_fail_the_job_and_stop_its_pods() -> None:
    memory = replace(RUNNING, restarts=2)
    intent = decide(a_job(failurePolicy={"maxRestarts": 2}), [pod(0), pod(2)], memory, now=NOW)
    assert intent.fail == (
        "worker 1 (Lost: worker 1's pod disappeared) failed after 2 of 2 restarts"
    )
    assert intent.fail_reason == "RestartsExhausted"
    assert sorted(intent.delete) == ["j-worker-0", "j-worker-2"]
    assert intent.create == []


def test_a_job_that_may_not_restart_fails_on_the_first_loss() -> None:
    job = a_job(failurePolicy={"replaceFailedWorkers": False})
    intent = decide(job, [pod(0)], RUNNING, now=NOW)
    assert intent.fail is not None
    assert "may not restart workers" in intent.fail


def test_a_pod_stuck_terminating_is_never_deleted_again_and_blocks_the_next_attempt() -> None:
    # never force-deleted: its containers may still run on a kubelet that does not answer; the
    # old rule force-deleted it, and the next attempt started beside them
    stuck = replace(pod(1), deleting=True, delete_deadline=NOW - STUCK_AFTER_SECONDS - 1)
    fresh = replace(pod(2), deleting=True, delete_deadline=NOW - 1)
    memory = replace(RUNNING, attempt=1, restarting=frozenset({0, 1, 2}), last_failure=NOW - 60)
    intent = decide(a_job(), [stuck, fresh], memory, now=NOW)
    assert (intent.delete, intent.create, intent.charged) == ([], [], 0)
    assert not hasattr(intent, "force_delete")
    assert stuck_terminating([stuck, fresh], NOW) == [stuck]


def test_a_stuck_pod_is_reported_with_its_node_and_the_out_of_service_taint() -> None:
    stuck = replace(pod(1), deleting=True, delete_deadline=NOW - 45)
    words = stuck_message([stuck], NOW)
    assert "j-worker-1 on node n1 (45s past its deletion deadline)" in words
    assert (
        "kubectl taint nodes n1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute" in words
    )
    assert "Do not force-delete" in words
    status = job_status(
        a_job(),
        [pod(0), stuck, pod(2)],
        placement={},
        previous_conditions=[],
        outcome=Outcome(restarting=frozenset({0, 1, 2}), stuck=words),
        generation=1,
        now=NOW,
    )
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True",
        "PodStuckTerminating",
        words,
    )


# -- failure rules -------------------------------------------------------------------------------


def test_rules_pick_the_first_match_and_default_by_disruption() -> None:
    job = a_job(
        failurePolicy={
            "rules": [
                {"action": "FailJob", "onExitCodes": [42]},
                {"action": "RestartIgnoreLimit", "onReasons": ["OOMKilled"]},
            ]
        }
    )
    rules = job.spec.failure_policy.rules
    assert rule_action(rules, Failure(0, "Error", "", 42), frozenset()) == "FailJob"
    assert rule_action(rules, Failure(0, "OOMKilled", "", 137), frozenset()) == (
        "RestartIgnoreLimit"
    )
    assert rule_action(rules, Failure(0, "Error", "", 1), frozenset()) == "Restart"
    assert rule_action([], Failure(0, "Evicted", ""), frozenset({"DisruptionTarget"})) == (
        "RestartIgnoreLimit"
    )


#: a pod status as the kubelet writes it when its admission refuses a pod bound to a full node
KUBELET_OUT_OF_GPU = {
    "phase": "Failed",
    "reason": "OutOfnvidia.com/gpu",
    "message": "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
    "requested: 8, used: 8, capacity: 8",
}


def _refused(index: int, status: dict[str, Any]) -> WorkerPod:
    labels = {WORKER_INDEX_LABEL: str(index)}
    meta = {"name": f"j-worker-{index}", "uid": "p"}
    _, worker = worker_of(meta["name"], labels, meta, {"nodeName": "n1"}, status)
    return worker


def test_a_worker_the_kubelet_refused_for_a_full_node_restarts_without_a_charge() -> None:
    # two schedulers bound to one node from caches that did not show each other's pods: the
    # kubelet admitted the other pod first; nothing of the job ran
    refused = _refused(1, KUBELET_OUT_OF_GPU)
    intent = decide(a_job(), [pod(0), refused, pod(2)], replace(RUNNING, restarts=3), now=NOW)
    assert intent.fail is None  # maxRestarts 3 is spent, and yet the job goes on
    assert intent.charged == 0
    assert intent.attempt == 1
    assert intent.failure is not None
    assert (intent.failure.reason, intent.failure.exit_code) == ("OutOfnvidia.com/gpu", None)
    assert intent.failure.message.startswith("Pod was rejected: Node didn't have enough")


def test_other_kubelet_refusals_and_a_user_rule_stay_charged() -> None:
    # a device plugin that fails to allocate, or a topology manager that can never align, may
    # refuse again on the same node: the restart limit bounds those
    for reason in ("UnexpectedAdmissionError", "TopologyAffinityError"):
        status = {**KUBELET_OUT_OF_GPU, "reason": reason}
        intent = decide(a_job(), [pod(0), _refused(1, status), pod(2)], RUNNING, now=NOW)
        assert intent.charged == 1, reason
    # an OutOf reason the container gave itself (it ran) is the job's own failure
    ran = Failure(1, "OutOfnvidia.com/gpu", "container w exited 1 (Error)", 1)
    assert rule_action([], ran, frozenset()) == "Restart"
    # a rule comes first: a user may fail the job on it
    job = a_job(
        failurePolicy={"rules": [{"action": "FailJob", "onReasons": ["OutOfnvidia.com/gpu"]}]}
    )
    intent = decide(job, [pod(0), _refused(1, KUBELET_OUT_OF_GPU), pod(2)], RUNNING, now=NOW)
    assert intent.fail_reason == "FailJob"


def test_a_fail_job_rule_fails_at_once_and_keeps_the_evidence() -> None:
    job = a_job(failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [42]}]})
    failed = replace(pod(1, "Failed"), reason="Error", exit_code=42)
    intent = decide(job, [pod(0), failed, pod(2)], RUNNING, now=NOW)
    assert intent.fail_reason == "FailJob"
    assert intent.keep == ["j-worker-1"]


def test_an_ignored_failure_is_not_restarted_and_counts_as_finished() -> None:
    job = a_job(failurePolicy={"rules": [{"action": "Ignore", "onExitCodes": [3]}]})
    failed = replace(pod(1, "Failed"), reason="Error", exit_code=3)
    going = decide(job, [pod(0, "Succeeded"), failed, pod(2)], RUNNING, now=NOW)
    assert (going.charged, going.create, going.delete, going.succeed) == (0, [], [], None)
    done = decide(job, [pod(0, "Succeeded"), failed, pod(2, "Succeeded")], RUNNING, now=NOW)
    assert done.succeed == "all 3 workers succeeded (1 failure(s) ignored by a rule)"


# -- failures: ReplaceWorker ---------------------------------------------------------------------


def test_one_incident_is_one_restart_for_either_strategy() -> None:
    # one restart per incident under either strategy: a node taking two workers with it is one
    # incident under both, not one per lost worker
    elastic = {"launcher": {"rendezvous": "c10d"}}
    for strategy in ("RecreateGang", "ReplaceWorker"):
        job = a_job(workers=4, failurePolicy={"restartStrategy": strategy}, **elastic)
        intent = decide(job, [pod(0), pod(3)], RUNNING, now=NOW)
        assert intent.charged == 1, strategy
        assert {1, 2} <= intent.restarting, strategy


def test_replace_worker_replaces_only_the_lost_one() -> None:
    job = a_job(failurePolicy={"restartStrategy": "ReplaceWorker"}, launcher={"rendezvous": "c10d"})
    intent = decide(job, [pod(0), pod(2)], RUNNING, now=NOW)
    assert (intent.restarting, intent.charged, intent.delete) == ({1}, 1, [])
    memory = replace(RUNNING, attempt=1, restarting=frozenset({1}), last_failure=NOW - 11)
    later = decide(job, [pod(0), pod(2)], memory, now=NOW)
    assert (later.create, later.attempt) == ([1], 1)


# -- honouring -----------------------------------------------------------------------------------


def test_jobs_no_gpu_node_can_run_are_explained() -> None:
    assert honour_problem(a_job(), []) is None
    assert honour_problem(a_job(), [{"nvidia.com/gpu": 8, "rdma/ib": 8}]) is None
    problem = honour_problem(a_job(), [{"nvidia.com/gpu": 4, "rdma/ib": 8}])
    assert problem is not None
    assert "no node has more than 4" in problem
    assert "re-create the job" in problem  # gpusPerWorker cannot change
    rdma = honour_problem(a_job(rdma={"count": 8}), [{"nvidia.com/gpu": 8}])
    assert rdma is not None
    assert "rdma/ib" in rdma
    shared = honour_problem(a_job(rdma={"count": 1}), [{"nvidia.com/gpu": 8}], "rdma/shared_a")
    assert shared is not None
    assert "rdma/shared_a" in shared, "the cluster's resource when the job names none"


def test_a_job_that_names_no_rdma_count_is_no_problem_on_nodes_without_rdma() -> None:
    """It runs over TCP, and its RDMA condition says why (the default follows the nodes)."""
    assert honour_problem(a_job(), [{"nvidia.com/gpu": 8}]) is None


def test_gpu_pools_scaled_to_zero_are_not_a_problem() -> None:
    assert honour_problem(a_job(), [{"example.com/cpu-only": 1}, {}]) is None


# -- status --------------------------------------------------------------------------------------


def status_of(pods: list[WorkerPod], placement: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return job_status(
        kw.get("job", a_job()),
        pods,
        placement=placement,
        previous_conditions=kw.get("prev", []),
        outcome=kw.get("outcome", Outcome()),
        generation=2,
        now=NOW,
    )


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_phases_follow_placement_and_readiness() -> None:
    assert status_of([], {})["phase"] == "Pending"
    assert status_of([], {"state": "Waiting", "message": "m"})["phase"] == "Waiting"
    assert status_of([pod(0)], {"state": "Planned"})["phase"] == "Placed"
    all_ready = gang("Running", "Running", "Running")
    got = status_of(all_ready, {"state": "Planned"})
    assert (got["phase"], got["ready"]) == ("Running", "3/3")
    failed = status_of(all_ready, {}, outcome=Outcome(terminal="Failed", terminal_message="x"))
    assert failed["phase"] == "Failed"


def test_a_job_stays_running_while_some_workers_have_finished() -> None:
    got = status_of(gang("Succeeded", "Running", "Running"), {"state": "Planned"})
    assert got["phase"] == "Running"


def test_a_suspended_job_is_suspended_only_once_its_pods_are_gone() -> None:
    job = a_job(suspend=True)
    stopping = status_of([replace(pod(0), deleting=True)], {}, job=job)
    assert stopping["phase"] != "Suspended"
    assert conditions(stopping)["Suspended"]["status"] == "False"
    done = status_of([], {}, job=job)
    assert done["phase"] == "Suspended"
    assert conditions(done)["Suspended"]["status"] == "True"


def test_admitted_is_shown_only_when_something_admits() -> None:
    assert "Admitted" not in conditions(status_of([], {}))
    queued = status_of([], {}, outcome=Outcome(admitted=(False, "Queued", "waiting for quota")))
    assert conditions(queued)["Admitted"]["reason"] == "Queued"


def test_a_create_error_shows_as_workers_created_false() -> None:
    got = status_of([], {}, outcome=Outcome(create_error="403 Forbidden: exceeded quota"))
    created = conditions(got)["WorkersCreated"]
    assert (created["status"], created["reason"]) == ("False", "CreateFailed")
    assert "exceeded quota" in created["message"]


def test_conditions_carry_the_placers_words_and_keep_their_transition_time() -> None:
    first = status_of([], {"state": "Waiting", "message": "no leaf has room"})
    placed = conditions(first)["Placed"]
    assert (placed["status"], placed["reason"], placed["message"]) == (
        "False",
        "WaitingForCapacity",
        "no leaf has room",
    )
    earlier = [{**placed, "lastTransitionTime": "2020-01-01T00:00:00Z"}]
    again = status_of([], {"state": "Waiting", "message": "still"}, prev=earlier)
    kept = conditions(again)["Placed"]
    assert kept["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert kept["observedGeneration"] == 2


def test_a_gang_still_being_created_is_not_degraded_and_one_that_lost_a_worker_is() -> None:
    creating = conditions(status_of([pod(0)], {}, outcome=Outcome(created_before=False)))
    assert (creating["Degraded"]["status"], creating["Degraded"]["reason"]) == ("False", "Creating")
    assert creating["Degraded"]["message"] == "1/3 workers created so far"
    assert creating["WorkersCreated"]["message"] == "1/3 exist"
    lost = conditions(status_of([pod(0)], {}, outcome=Outcome(created_before=True)))
    assert (lost["Degraded"]["status"], lost["Degraded"]["reason"]) == ("True", "WorkerLost")
    assert lost["Degraded"]["message"] == "2 worker(s) missing"
    whole = conditions(status_of([pod(0), pod(1), pod(2)], {}, outcome=Outcome()))
    assert (whole["Degraded"]["status"], whole["Degraded"]["reason"]) == (
        "False",
        "AllWorkersPresent",
    )


def test_an_invalid_spec_made_valid_again_turns_its_condition_false() -> None:
    invalid = {"type": "InvalidSpec", "status": "True", "reason": "ValidationFailed"}
    valid_again = conditions(status_of(gang("Running", "Running", "Running"), {}, prev=[invalid]))
    assert (valid_again["InvalidSpec"]["status"], valid_again["InvalidSpec"]["reason"]) == (
        "False",
        "SpecValid",
    )
    assert "InvalidSpec" not in conditions(status_of([], {}))  # never invalid: never shown
