"""The one status patch of a job's reconcile, and the Events that say what changed.

:func:`patch_status` turns what :func:`.decide.decide` asked and :func:`.apply_intent.apply_intent`
did into the operator-owned part of ``status``: the incident (``lastFailure``), the terminal
phase and its condition, ``workersCreated``, ``startTime``, ``attempt``, the restarting and
succeeded workers, the nodes a job moved off, and everything :func:`.job_status.job_status`
derives (phase, conditions, counts). Only what differs from the status shown goes into the
patch; kopf (or a woken reconcile, :mod:`.reconcile`) writes it once. The placer owns
``status.placement``; nothing here writes it.
"""

from __future__ import annotations

from typing import Any

import kopf

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.placement import WORKERS_CREATED, StoredPlacement
from tpfabric_core.rdma_default import RdmaDecision
from tpfabric_core.timestamps import rfc3339
from tpfabric_operator.jobs.job_state import Intent, Memory, WorkerPod
from tpfabric_operator.jobs.job_status import Outcome, job_status
from tpfabric_operator.jobs.kueue.admission import Admission
from tpfabric_operator.jobs.operator_state import OperatorState

__all__ = ["patch_status"]


def patch_status(
    state: OperatorState,
    body: kopf.Body,
    patch: kopf.Patch,
    job: TensorParallelJob,
    intent: Intent,
    *,
    memory: Memory,
    owned: list[WorkerPod],
    placement: StoredPlacement,
    create_error: str | None,
    admission: Admission | None,
    now: float,
    straggler: str = "",
    stuck: str = "",
    moved_off: frozenset[str] = frozenset(),
    rdma: RdmaDecision | None = None,
) -> None:
    """Put into ``patch`` what of the job's operator-owned status differs from what it shows
    (an unchanged job costs no API call), and post the Events that say what changed.

    ``intent``: what the reconcile decided and did (trimmed to what was done); the rest are its
    facts: why a creation failed, Kueue's verdict, the straggler and stuck words, the degraded
    nodes the job moved off, the workers' RDMA devices.
    """
    status = dict(body.get("status") or {})
    spec = job.spec
    wanted: dict[str, Any] = {}
    terminal = memory.phase if memory.phase in ("Succeeded", "Failed") else None
    conditions = {str(c.get("type")): dict(c) for c in status.get("conditions") or []}
    shown: dict[str, Any] = conditions.get(terminal or "", {})
    terminal_reason = str(shown.get("reason") or "")
    terminal_message = str(shown.get("message") or "")
    restarts = memory.restarts + intent.charged
    if intent.failure is not None:
        failure = intent.failure
        wanted["lastFailureTime"] = rfc3339(now)
        wanted["lastFailure"] = {
            "worker": failure.worker,
            "reason": failure.reason,
            "message": failure.message,
            "exitCode": failure.exit_code,
            "pod": failure.pod,
            "time": rfc3339(now),
        }
        if not intent.fail:
            state.warn(
                body,
                "WorkerFailed",
                f"worker {failure.worker} {failure.reason}: {failure.message}; restarting "
                + ("the gang" if spec.failure_policy.restart_strategy == "RecreateGang" else "it")
                + f" ({restarts}/{spec.failure_policy.max_restarts} restarts charged)",
            )
    if not terminal and intent.fail:
        terminal, terminal_reason, terminal_message = "Failed", intent.fail_reason, intent.fail
        state.warn(body, "JobFailed", intent.fail)
    elif not terminal and intent.succeed:
        terminal, terminal_reason = "Succeeded", "SuccessPolicyMet"
        terminal_message = intent.succeed
        kopf.info(body, reason="JobSucceeded", message=intent.succeed)
    if terminal and not status.get("completionTime"):
        wanted["completionTime"] = rfc3339(now)
    restarting = set(intent.restarting) - set(intent.create)
    if intent.create and memory.restarting & set(intent.create):
        kopf.info(
            body,
            reason="WorkersRestarted",
            message=f"created attempt {intent.attempt} of worker(s) {sorted(intent.create)}",
        )
    kept = set(intent.keep) | set(intent.delete)
    alive = [p for p in owned if p.name not in kept]
    present = {p.index for p in alive if not p.deleting} | set(intent.create)
    if spec.suspend:
        wanted["workersCreated"] = False  # the placer drops the plan of a suspended job
        wanted["startTime"] = None  # the deadline counts running time, as a Job's does
    elif not terminal and present | intent.succeeded >= set(range(spec.workers)):
        wanted["workersCreated"] = True
        if intent.create and not memory.created_before and not memory.replanning:
            # once, when the gang is whole (a small gang's first worker comes a moment earlier)
            kopf.info(
                body,
                reason=WORKERS_CREATED,
                message=f"the gang's {spec.workers} worker pods are created",
            )
    if intent.create and not status.get("startTime") and not spec.suspend:
        wanted["startTime"] = rfc3339(now)
    wanted["attempt"] = intent.attempt
    wanted["restartingWorkers"] = sorted(restarting) if not terminal else []
    wanted["succeededWorkers"] = sorted(intent.succeeded)
    # the degraded nodes the job was restarted away from (and that have not healed): it is not
    # restarted again while it runs only on them (degraded_links.workers_to_move); None drops it
    wanted["movedOffNodes"] = sorted(moved_off) if moved_off and not terminal else None
    outcome = Outcome(
        restarts=restarts,
        restarting=frozenset(restarting) if not terminal else frozenset(),
        terminal=terminal,  # type: ignore[arg-type]  # narrowed to the two terminal phases
        terminal_reason=terminal_reason,
        terminal_message=terminal_message,
        create_error=create_error,
        degraded_links=straggler,
        stuck=stuck,
        created_before=memory.created_before,
        rdma=rdma,
        admitted=(
            None
            if admission is None
            else (admission.admitted and not admission.evicted, admission.reason, admission.message)
        ),
    )
    wanted |= job_status(
        job,
        alive,
        placement=placement,
        previous_conditions=list(status.get("conditions") or []),
        outcome=outcome,
        generation=int(body.meta.get("generation") or 0),
        now=now,
    )
    for key, value in wanted.items():  # an unchanged job costs no API call
        if status.get(key) != value and not (value is None and key not in status):
            patch.status[key] = value
