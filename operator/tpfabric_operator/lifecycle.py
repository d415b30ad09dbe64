"""What the operator should do next for one job, and the status it should show: pure policy.

``decide`` looks at the job, its worker pods and what the status remembers, and returns an
intent (pods to create, pods to delete, replacements counted, a failure reason); ``job_status``
turns the same facts into the operator-owned part of ``status`` (phase, ready, counters,
conditions). The reconciler persists both in one status patch. The placer owns
``status.placement``; nothing here writes it (the placer drops the plan of a suspended job
itself, so that one writer owns it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core.api import TensorParallelJob

__all__ = ["Intent", "WorkerPod", "decide", "honour_problem", "job_status"]


@dataclass(frozen=True, slots=True)
class WorkerPod:
    """What the operator needs of one worker pod."""

    name: str
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool
    node: str | None
    deleting: bool = False
    reason: str = ""  # why it failed, when it did


@dataclass(slots=True)
class Intent:
    """What to do now; empty when the job is as it should be."""

    create: list[int] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)
    fail: str | None = None
    wait_seconds: float | None = None  # come back after the replacement backoff


def honour_problem(job: TensorParallelJob, nodes: list[dict[str, int]]) -> str | None:
    """Return why no node of the cluster could ever run one worker, or None when some can.

    ``nodes`` are the allocatable extended resources of every node. An empty cluster is not a
    problem (nodes may come); a cluster whose every node is too small for one worker is.
    """
    if not nodes:
        return None
    spec = job.spec
    gpus = max(n.get("nvidia.com/gpu", 0) for n in nodes)
    if gpus < spec.gpus_per_worker:
        return (
            f"gpusPerWorker is {spec.gpus_per_worker} but no node has more than {gpus} "
            "nvidia.com/gpu; lower gpusPerWorker or add bigger nodes"
        )
    if spec.rdma.count:
        rdma = max(n.get(spec.rdma.resource_name, 0) for n in nodes)
        if rdma < spec.rdma.count:
            return (
                f"rdma asks {spec.rdma.count} {spec.rdma.resource_name} per worker but no node "
                f"advertises more than {rdma}; check the RDMA device plugin's resource name, or "
                "set rdma.count to 0 to run over TCP"
            )
    return None


def decide(
    job: TensorParallelJob,
    pods: dict[int, WorkerPod],
    *,
    created_before: bool,
    restarts: int,
    failed: bool,
    last_failure: float | None,
    now: float,
    replanning: bool = False,
) -> Intent:
    """Return the intent for ``job`` given its worker pods by index.

    ``created_before`` says whether the full set of workers existed once (a missing worker is
    then a lost one to replace, not one to create for the first time). ``replanning`` says the
    placer dropped the gang's plan and deleted its released pods: missing workers are then
    recreated (gated) for a fresh plan, not charged as failures.
    """
    spec = job.spec
    intent = Intent()
    if failed or spec.suspend:
        intent.delete = [p.name for p in pods.values() if not p.deleting and p.phase != "Succeeded"]
        return intent
    lost: list[int] = []
    for index in range(spec.workers):
        pod = pods.get(index)
        if pod is None:
            (lost if created_before and not replanning else intent.create).append(index)
        elif pod.phase == "Failed" and not pod.deleting:
            intent.delete.append(pod.name)
            lost.append(index)
    if not lost:
        return intent
    policy = spec.failure_policy
    if not policy.replace_failed_workers or restarts + len(lost) > policy.max_restarts:
        why = ", ".join(
            f"worker {i}" + (f" ({pods[i].reason})" if i in pods and pods[i].reason else "")
            for i in lost
        )
        intent.fail = (
            f"{why} failed and the job may not replace workers"
            if not policy.replace_failed_workers
            else f"{why} failed after {restarts} of {policy.max_restarts} replacements"
        )
        intent.delete = [p.name for p in pods.values() if not p.deleting]
        return intent
    missing = [i for i in lost if i not in pods]
    if last_failure is not None and now - last_failure < policy.backoff_seconds:
        intent.wait_seconds = policy.backoff_seconds - (now - last_failure)
        return intent
    intent.create = missing
    intent.replaced = missing
    return intent


def _rfc3339(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    *,
    previous: dict[str, dict[str, Any]],
    kind: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: float,
) -> dict[str, Any]:
    text = "True" if status else "False"
    before = previous.get(kind)
    since = (
        before.get("lastTransitionTime")
        if before and before.get("status") == text and before.get("lastTransitionTime")
        else _rfc3339(now)
    )
    return {
        "type": kind,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def job_status(
    job: TensorParallelJob,
    pods: dict[int, WorkerPod],
    *,
    placement: dict[str, Any],
    previous_conditions: list[dict[str, Any]],
    restarts: int,
    failure: str | None,
    generation: int,
    now: float,
) -> dict[str, Any]:
    """Return the operator-owned status fields for the job as it is now."""
    spec = job.spec
    total = spec.workers
    ready = sum(1 for p in pods.values() if p.ready and p.phase == "Running")
    succeeded = sum(1 for p in pods.values() if p.phase == "Succeeded")
    state = placement.get("state")
    if failure:
        phase = "Failed"
    elif spec.suspend:
        phase = "Suspended"
    elif succeeded == total:
        phase = "Succeeded"
    elif ready == total:
        phase = "Running"
    elif state in ("Waiting", "Replanning", "Invalid"):
        phase = "Waiting"
    elif state == "Planned":
        phase = "Placed"
    else:
        phase = "Pending"
    before = {c.get("type", ""): c for c in previous_conditions}
    missing = total - len([p for p in pods.values() if not p.deleting])

    def cond(kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return _condition(
            previous=before,
            kind=kind,
            status=status,
            reason=reason,
            message=message,
            generation=generation,
            now=now,
        )

    if state == "Planned":
        placed = cond("Placed", True, "GangPlaced", str(placement.get("message") or "planned"))
    elif state in ("Waiting", "Replanning", "Invalid"):
        reason = {
            "Waiting": "WaitingForCapacity",
            "Replanning": "Replanning",
            "Invalid": "InvalidTopology",
        }[str(state)]
        placed = cond("Placed", False, reason, str(placement.get("message") or "waiting"))
    else:
        placed = cond(
            "Placed",
            False,
            "NotPlanned",
            "waiting for every worker pod to exist before the gang is planned",
        )
    conditions = [
        cond("Admitted", True, "WorkersCreated", f"{total} worker pods and a headless Service"),
        placed,
        cond(
            "Ready",
            ready == total,
            "AllWorkersReady" if ready == total else "WorkersNotReady",
            f"{ready}/{total} workers ready",
        ),
        cond(
            "Degraded",
            bool(missing) and not failure and not spec.suspend and succeeded < total,
            "WorkerLost" if missing else "AllWorkersPresent",
            f"{missing} worker(s) being replaced" if missing else "every worker pod exists",
        ),
        cond("Failed", bool(failure), "WorkerFailed" if failure else "NoFailure", failure or ""),
        cond(
            "Succeeded",
            succeeded == total,
            "AllWorkersSucceeded" if succeeded == total else "NotFinished",
            f"{succeeded}/{total} workers succeeded",
        ),
    ]
    return {
        "phase": phase,
        "ready": f"{ready}/{total}",
        "workersReady": ready,
        "workersTotal": total,
        "restarts": restarts,
        "conditions": conditions,
        "observedGeneration": generation,
    }
