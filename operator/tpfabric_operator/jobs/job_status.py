"""The operator-owned part of a job's ``status``: its phase, counts and conditions.

:func:`job_status` turns the job's pods and the outcome of one reconcile (:class:`Outcome`) into
the fields the reconciler patches, together with the intent's own, in one status patch. A
condition keeps its ``lastTransitionTime`` while its status does not change. The placer owns
``status.placement``; nothing here writes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.placement import (
    CREATE_FAILED,
    INVALID,
    PLANNED,
    REPLANNING,
    WAITING,
    WORKERS_CREATED,
    StoredPlacement,
    read_placement,
)
from tpfabric_core.rdma_default import RDMA_CONDITION, RdmaDecision, rdma_condition
from tpfabric_operator.jobs.job_state import WorkerPod

__all__ = ["Outcome", "job_status"]


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


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the job stands after this reconcile (inputs of ``job_status`` beyond the pods)."""

    restarts: int = 0
    restarting: frozenset[int] = frozenset()
    terminal: Literal["Succeeded", "Failed"] | None = None
    terminal_reason: str = ""
    terminal_message: str = ""
    create_error: str | None = None  # why creating a child failed (WorkersCreated False)
    admitted: tuple[bool, str, str] | None = None  # (admitted, reason, message) by a queue
    degraded_links: str = ""  # ranks on degraded nodes, in words (degraded_links)
    stuck: str = ""  # pods stuck terminating, in words (:func:`stuck_message`)
    #: the gang existed whole before (``status.workersCreated``): a missing worker is lost, not
    #: still to come (a small gang's first worker is made a moment before the rest)
    created_before: bool = True
    #: the RDMA devices of the workers created now, and why (None: none created now; the ``RDMA``
    #: condition stays as the last creation left it)
    rdma: RdmaDecision | None = None


def job_status(  # noqa: PLR0912, PLR0915 - the facts a status is made of
    job: TensorParallelJob,
    pods: list[WorkerPod],
    *,
    placement: StoredPlacement | Mapping[str, Any],
    previous_conditions: list[dict[str, Any]],
    outcome: Outcome,
    generation: int,
    now: float,
) -> dict[str, Any]:
    """Return the operator-owned status fields for the job as it is now."""
    spec = job.spec
    total = spec.workers
    running = [p for p in pods if p.active]
    holding = [p for p in pods if p.phase not in ("Succeeded", "Failed")]  # hold their GPUs
    ready = sum(1 for p in running if p.ready and p.phase == "Running")
    succeeded = {p.index for p in pods if p.phase == "Succeeded"}
    finished = sum(1 for i in range(total) if i in succeeded)
    placement = read_placement(placement)
    state = placement.state
    terminal = outcome.terminal
    phase: str
    if terminal:
        phase = terminal
    elif spec.suspend:
        phase = "Suspended" if not holding else "Running" if ready else "Pending"
    elif outcome.restarting:
        phase = "Restarting"
    elif ready and ready + finished >= total:
        phase = "Running"  # a worker that finished first keeps the job Running
    elif state in (WAITING, REPLANNING, INVALID):
        phase = "Waiting"
    elif state == PLANNED:
        phase = "Placed"
    else:
        phase = "Pending"
    before = {c.get("type", ""): c for c in previous_conditions}
    present = {p.index for p in pods if not p.deleting}
    missing = 0 if spec.suspend or terminal else total - len(present | succeeded)
    lost = missing if outcome.created_before else 0

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

    if state == PLANNED:
        placed = cond("Placed", True, "GangPlaced", placement.message or "planned")
    elif state in (WAITING, REPLANNING, INVALID):
        reason = {
            WAITING: "WaitingForCapacity",
            REPLANNING: "Replanning",
            INVALID: "InvalidTopology",
        }[state]
        placed = cond("Placed", False, reason, placement.message or "waiting")
    else:
        placed = cond(
            "Placed",
            False,
            "NotPlanned",
            "not planned yet: the placer plans the gang once its first worker exists (once every"
            " worker exists, after the API server refused one)",
        )
    if outcome.create_error:
        created = cond(WORKERS_CREATED, False, CREATE_FAILED, outcome.create_error)
    elif spec.suspend or terminal:
        created = cond(WORKERS_CREATED, False, "NoWorkers", "the job keeps no running workers")
    elif missing:
        created = cond(WORKERS_CREATED, False, "Creating", f"{total - missing}/{total} exist")
    else:
        created = cond(
            WORKERS_CREATED, True, WORKERS_CREATED, f"{total} worker pods and a headless Service"
        )
    if spec.suspend:
        suspended = (
            cond("Suspended", True, "JobSuspended", "no pods; resuming plans the gang again")
            if not holding
            else cond("Suspended", False, "Stopping", f"{len(holding)} pod(s) still stopping")
        )
    else:
        suspended = cond("Suspended", False, "JobResumed", "the job is not suspended")
    conditions = []
    if outcome.admitted is not None:
        admitted, why, text = outcome.admitted
        conditions.append(cond("Admitted", admitted, why, text))
    conditions += [
        created,
        suspended,
        placed,
        cond(
            "Ready",
            bool(ready) and ready + finished >= total and not terminal,
            "AllWorkersReady" if ready + finished >= total else "WorkersNotReady",
            f"{ready}/{total} workers ready",
        ),
        cond(
            "Degraded",
            bool(outcome.stuck)
            or (
                bool(lost or outcome.restarting or outcome.degraded_links)
                and not terminal
                and not spec.suspend
            ),
            # a stuck pod first: it is why a restart (or a suspend) does not go on
            "PodStuckTerminating"
            if outcome.stuck
            else "Restarting"
            if outcome.restarting
            else "WorkerLost"
            if lost
            else "DegradedLink"
            if outcome.degraded_links
            else "Creating"
            if missing
            else "AllWorkersPresent",
            outcome.stuck or f"restarting worker(s) {sorted(outcome.restarting)}"
            if outcome.stuck or outcome.restarting
            else f"{lost} worker(s) missing"
            if lost
            else outcome.degraded_links
            or (f"{total - missing}/{total} workers created so far" if missing else "")
            or "every worker pod exists",
        ),
        cond(
            "Failed",
            terminal == "Failed",
            outcome.terminal_reason if terminal == "Failed" else "NoFailure",
            outcome.terminal_message if terminal == "Failed" else "",
        ),
        cond(
            "Succeeded",
            terminal == "Succeeded",
            "SuccessPolicyMet" if terminal == "Succeeded" else "NotFinished",
            outcome.terminal_message
            if terminal == "Succeeded"
            else f"{finished}/{total} workers succeeded",
        ),
    ]
    transport = rdma_condition([outcome.rdma]) if outcome.rdma is not None else None
    if transport is not None:
        conditions.append(
            cond(
                RDMA_CONDITION,
                transport["status"] == "True",
                transport["reason"],
                transport["message"],
            )
        )
    elif RDMA_CONDITION in before:  # as the last workers made left it
        conditions.append(dict(before[RDMA_CONDITION]))
    if "InvalidSpec" in before:  # the spec was invalid (reconcile._invalid_spec), valid now
        conditions.append(cond("InvalidSpec", False, "SpecValid", "the spec is valid"))
    return {
        "phase": phase,
        "ready": f"{ready}/{total}",
        "workersReady": ready,
        "workersTotal": total,
        "restarts": outcome.restarts,
        "conditions": conditions,
        "observedGeneration": generation,
    }
