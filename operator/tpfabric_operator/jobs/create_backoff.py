"""Worker pods the API server refuses to create: stop, back off, and give a partial gang back.

A refusal (403: ResourceQuota, PodSecurity; 422: an invalid template) usually holds for every pod
of the gang and for a while: posting the whole gang again at every reconcile cost a 64-worker
job refused by PodSecurity 128 POSTs in two reconciles. A refused gang must cost the API server
little and hold no quota others could use, so:

- a creation round stops at the first refusal: no pod is posted after it (only creations already
  in flight finish; ``apply_intent.create_pods``);
- the job's next round waits: ``BASE_SECONDS`` after its first refused round, doubling up to
  ``CAP_SECONDS`` (the Job controller backs off pod creation the same way); a round made during
  a refusal streak posts one pod first and doubles the batch while they are accepted (the Job
  controller's slow start), so a refusal that persists costs one POST per round;
- a gang refused for ``GIVE_BACK_SECONDS`` while part of it exists gives that part back
  (:func:`partial_gang`): its pods are deleted, uncharged. Gated pods count against
  ResourceQuota (pods, GPUs), and two partly created gangs under one quota would each hold part
  of it and wait for the other forever. Each later round creates the gang again, and gives it
  back again while the refusal persists; between rounds the quota is free for others;
- a round that leaves nothing to create ends the streak.

The streaks live in this process's memory, per job uid: a restarted operator (or a new leader)
begins with a fresh round. Pure: times are given (wall-clock seconds), nothing talks to the API.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.timestamps import rfc3339
from tpfabric_operator.jobs.job_state import Memory, WorkerPod

__all__ = [
    "BASE_SECONDS",
    "CAP_SECONDS",
    "GIVE_BACK_SECONDS",
    "CreateBackoff",
    "Streak",
    "partial_gang",
]

BASE_SECONDS = 1.0
CAP_SECONDS = 180.0
GIVE_BACK_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Streak:
    """Refused creation rounds of one job in a row."""

    rounds: int
    since: float  # when the first round of the streak was refused
    next_at: float  # when the next round may be made
    why: str  # the API server's words of the last refusal
    given_back: tuple[str, ...] = ()  # pods deleted since the last round (:func:`partial_gang`)

    def waiting(self, now: float) -> bool:
        """Return whether the next round must wait still."""
        return now < self.next_at

    def persisting(self, now: float) -> bool:
        """Return whether the refusal has lasted long enough to give a partial gang back."""
        return now - self.since >= GIVE_BACK_SECONDS

    def message(self) -> str:
        """Return the refusal, the backoff and what was given back, in words that change once
        per round (a condition's message: no status write per reconcile)."""
        words = (
            f"{self.why} ({self.rounds} creation round(s) refused since {rfc3339(self.since)}; "
            f"the next one at {rfc3339(self.next_at)}, backing off up to {CAP_SECONDS:.0f}s)"
        )
        if self.given_back:
            words += (
                f"; refused for {GIVE_BACK_SECONDS:.0f}s or more, the partial gang's pod(s) "
                f"{', '.join(self.given_back)} were deleted, uncharged, so that their quota "
                "goes back"
            )
        return words


class CreateBackoff:
    """The refusal streak of every job (by uid) whose last creation round was refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streaks: dict[str, Streak] = {}

    def streak(self, uid: str) -> Streak | None:
        """Return the job's refusal streak, or None when its last round was not refused."""
        with self._lock:
            return self._streaks.get(uid)

    def refused(self, uid: str, why: str, now: float) -> Streak:
        """Note a refused round; return the streak, with the time of the next round."""
        with self._lock:
            if len(self._streaks) > 10_000:  # streaks of jobs deleted meanwhile: forget old ones
                horizon = now - 10 * CAP_SECONDS
                self._streaks = {u: s for u, s in self._streaks.items() if s.next_at > horizon}
            before = self._streaks.get(uid)
            rounds = before.rounds + 1 if before else 1
            delay = min(CAP_SECONDS, BASE_SECONDS * 2 ** (rounds - 1))
            streak = Streak(rounds, before.since if before else now, now + delay, why)
            self._streaks[uid] = streak
            return streak

    def gave_back(self, uid: str, names: list[str]) -> None:
        """Note the pods given back while the job waits for its next round."""
        with self._lock:
            streak = self._streaks.get(uid)
            if streak is not None:
                merged = tuple(sorted({*streak.given_back, *names}))
                self._streaks[uid] = replace(streak, given_back=merged)

    def done(self, uid: str) -> None:
        """End the job's streak: a round left nothing to create."""
        with self._lock:
            self._streaks.pop(uid, None)


def partial_gang(job: TensorParallelJob, pods: list[WorkerPod], memory: Memory) -> list[WorkerPod]:
    """Return the pods to give back when the gang cannot be created whole, or [].

    Only a gang that has not run whole in its current attempt gives pods back: one created for
    the first time (``workersCreated`` not yet true) and a ``RecreateGang`` restart whose new
    attempt is still being created. Under ``ReplaceWorker`` the surviving workers of a running
    gang keep their pods (and their quota): only the replacements wait.
    """
    restarting_gang = job.spec.failure_policy.restart_strategy == "RecreateGang" and bool(
        memory.restarting
    )
    if memory.created_before and not restarting_gang:
        return []
    return [p for p in pods if p.active and p.attempt >= memory.attempt]
