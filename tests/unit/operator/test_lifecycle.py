from __future__ import annotations

from typing import Any

from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.lifecycle import WorkerPod, decide, honour_problem, job_status

NOW = 1_000_000.0


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


def running(index: int, phase: str = "Running") -> WorkerPod:
    return WorkerPod(f"j-worker-{index}", index, phase, phase == "Running", f"n{index}")


def test_a_new_job_creates_every_worker() -> None:
    intent = decide(
        a_job(), {}, created_before=False, restarts=0, failed=False, last_failure=None, now=NOW
    )
    assert (intent.create, intent.replaced, intent.fail) == ([0, 1, 2], [], None)


def test_a_lost_worker_is_replaced_and_counted() -> None:
    pods = {0: running(0), 2: running(2)}
    intent = decide(
        a_job(), pods, created_before=True, restarts=1, failed=False, last_failure=None, now=NOW
    )
    assert (intent.create, intent.replaced) == ([1], [1])


def test_a_failed_worker_is_deleted_first_then_replaced_after_the_backoff() -> None:
    pods = {0: running(0), 1: running(1, "Failed"), 2: running(2)}
    first = decide(
        a_job(), pods, created_before=True, restarts=0, failed=False, last_failure=None, now=NOW
    )
    assert first.delete == ["j-worker-1"]
    assert first.create == []  # it still exists; recreated once it is gone
    gone = {0: running(0), 2: running(2)}
    waiting = decide(
        a_job(), gone, created_before=True, restarts=0, failed=False, last_failure=NOW - 3, now=NOW
    )
    assert waiting.create == []
    assert waiting.wait_seconds == 7  # default backoff 10 s
    later = decide(
        a_job(), gone, created_before=True, restarts=0, failed=False, last_failure=NOW - 11, now=NOW
    )
    assert later.create == [1]


def test_exhausted_replacements_fail_the_job_and_delete_its_pods() -> None:
    pods = {0: running(0), 2: running(2)}
    intent = decide(
        a_job(failurePolicy={"maxRestarts": 2}),
        pods,
        created_before=True,
        restarts=2,
        failed=False,
        last_failure=None,
        now=NOW,
    )
    assert intent.fail == "worker 1 failed after 2 of 2 replacements"
    assert sorted(intent.delete) == ["j-worker-0", "j-worker-2"]
    assert intent.create == []


def test_a_job_that_may_not_replace_fails_on_the_first_loss() -> None:
    intent = decide(
        a_job(failurePolicy={"replaceFailedWorkers": False}),
        {0: running(0)},
        created_before=True,
        restarts=0,
        failed=False,
        last_failure=None,
        now=NOW,
    )
    assert intent.fail is not None
    assert "may not replace workers" in intent.fail


def test_suspending_deletes_every_worker_and_creates_none() -> None:
    pods = {i: running(i) for i in range(3)}
    intent = decide(
        a_job(suspend=True),
        pods,
        created_before=True,
        restarts=0,
        failed=False,
        last_failure=None,
        now=NOW,
    )
    assert (sorted(intent.delete), intent.create) == ([f"j-worker-{i}" for i in range(3)], [])


def test_jobs_no_node_can_run_are_explained() -> None:
    assert honour_problem(a_job(), []) is None
    assert honour_problem(a_job(), [{"nvidia.com/gpu": 8, "rdma/ib": 8}]) is None
    problem = honour_problem(a_job(), [{"nvidia.com/gpu": 4, "rdma/ib": 8}])
    assert problem is not None
    assert "no node has more than 4" in problem
    rdma = honour_problem(a_job(), [{"nvidia.com/gpu": 8}])
    assert rdma is not None
    assert "rdma/ib" in rdma


def status_of(pods: dict[int, WorkerPod], placement: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return job_status(
        a_job(),
        pods,
        placement=placement,
        previous_conditions=kw.get("prev", []),
        restarts=0,
        failure=kw.get("failure"),
        generation=2,
        now=NOW,
    )


def test_phases_follow_placement_and_readiness() -> None:
    assert status_of({}, {})["phase"] == "Pending"
    assert status_of({}, {"state": "Waiting", "message": "m"})["phase"] == "Waiting"
    assert status_of({0: running(0)}, {"state": "Planned"})["phase"] == "Placed"
    all_ready = {i: running(i) for i in range(3)}
    got = status_of(all_ready, {"state": "Planned"})
    assert (got["phase"], got["ready"]) == ("Running", "3/3")
    assert status_of(all_ready, {}, failure="boom")["phase"] == "Failed"


def test_conditions_carry_the_placers_words_and_keep_their_transition_time() -> None:
    first = status_of({}, {"state": "Waiting", "message": "no leaf has room"})
    placed = next(c for c in first["conditions"] if c["type"] == "Placed")
    assert (placed["status"], placed["reason"], placed["message"]) == (
        "False",
        "WaitingForCapacity",
        "no leaf has room",
    )
    earlier = [{**placed, "lastTransitionTime": "2020-01-01T00:00:00Z"}]
    again = status_of({}, {"state": "Waiting", "message": "still"}, prev=earlier)
    kept = next(c for c in again["conditions"] if c["type"] == "Placed")
    assert kept["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert kept["observedGeneration"] == 2
