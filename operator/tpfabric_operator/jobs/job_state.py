"""A job's state as the operator sees it: its worker pods, what its status remembers, and the
intent of one reconcile. Plain data, no policy: :mod:`.decide` computes the intent,
:mod:`.failure_policy` what a failure costs, :mod:`.job_status` the status shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Failure", "Intent", "Memory", "WorkerPod", "to_stop"]


@dataclass(frozen=True, slots=True)
class WorkerPod:
    """What the operator needs of one worker pod."""

    name: str
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool
    node: str | None
    deleting: bool = False
    reason: str = ""  # Error, OOMKilled, InitContainerFailed, Evicted, ... when it failed
    message: str = ""  # e.g. "container trainer exited 137 (OOMKilled)"
    exit_code: int | None = None
    conditions: frozenset[str] = frozenset()  # pod conditions with status True
    attempt: int = 0
    delete_deadline: float | None = None  # metadata.deletionTimestamp (epoch seconds)
    uid: str = ""  # the pod's own: deletes name it (a delete precondition)

    @property
    def active(self) -> bool:
        """Return whether the pod may still run (not finished, not being deleted)."""
        return not self.deleting and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed or lost worker, as ``status.lastFailure`` shows it."""

    worker: int
    reason: str
    message: str
    exit_code: int | None = None
    pod: str = ""


@dataclass(frozen=True, slots=True)
class Memory:
    """What the job's status remembers between reconciles."""

    phase: str | None = None
    created_before: bool = False
    restarts: int = 0
    attempt: int = 0
    restarting: frozenset[int] = frozenset()
    succeeded: frozenset[int] = frozenset()
    last_failure: float | None = None
    start_time: float | None = None
    completion_time: float | None = None
    replanning: bool = False


@dataclass(slots=True)
class Intent:
    """What to do now; empty when the job is as it should be."""

    create: list[int] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)  # failed pods to keep out of the gang
    attempt: int = 0  # the attempt of the pods to create (and of the job after this intent)
    restarting: set[int] = field(default_factory=set)
    succeeded: set[int] = field(default_factory=set)
    charged: int = 0  # restarts to add to status.restarts
    failure: Failure | None = None  # a new incident (status.lastFailure)
    fail: str | None = None
    fail_reason: str = ""
    succeed: str | None = None
    delete_job: bool = False
    wait_seconds: float | None = None


def to_stop(pods: list[WorkerPod]) -> list[str]:
    """Return the pods to delete to stop every pod that may still run."""
    return [p.name for p in pods if p.active]
