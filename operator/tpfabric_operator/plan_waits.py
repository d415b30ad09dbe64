"""Small gangs whose first worker was created alone, waiting for their plan.

The placer plans a gang from its first worker. A worker created after the plan is born released
(narrowed affinity, no gate): no release write for it. A gang larger than one batch of creations
waits for its plan inside the reconcile (``handlers._create_pods``: a few such gangs hold a
handler thread each for a moment). A burst of small gangs cannot do that: kopf runs reconciles on
a few threads, and 100 gangs each holding one while its plan comes would stall the burst. So a
small gang's first reconcile creates its first worker and returns; the reconcile that the plan
wakes (the job's watch sees it, :func:`PlanWaits.answered` says so) creates the rest released.
The first reconcile after ``wait_seconds`` asks the API server once for the plan (kopf's view of
the job lags in a burst) and creates the rest released onto it, or gated without one, as the
placer expects any gang it has not planned yet.

Pure mechanism: the clock is given, so the unit tests drive it without kopf.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["PLAN_ANSWERS", "PlanWaits"]

#: placement states that end a wait: a plan, or the placer's word that none comes soon
PLAN_ANSWERS = ("Planned", "Waiting", "Invalid")

Key = tuple[str, str]  # (job uid, attempt)


class PlanWaits:
    """The gangs (job uid, attempt) whose first worker waits for the plan, and since when."""

    def __init__(self, wait_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_seconds = wait_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._since: dict[str, tuple[str, float]] = {}  # job uid -> (attempt, when it began)
        self._answered: set[str] = set()  # job uids whose answer the job's watch has shown

    def phase(self, key: Key) -> Literal["new", "waiting", "over"]:
        """Return whether ``key`` has not begun waiting, waits still, or waited long enough."""
        uid, attempt = key
        with self._lock:
            began = self._since.get(uid)
        if began is None or began[0] != attempt:
            return "new"
        return "waiting" if self.clock() - began[1] < self.wait_seconds else "over"

    def begin(self, key: Key) -> None:
        """Start ``key``'s wait (its first worker exists now)."""
        uid, attempt = key
        now = self.clock()
        with self._lock:
            if len(self._since) > 1_000:  # waits of jobs deleted meanwhile never end: forget
                horizon = 10 * self.wait_seconds + 60
                for old in [u for u, (_, t) in self._since.items() if now - t > horizon]:
                    self._end(old)
            self._since[uid] = (attempt, now)
            self._answered.discard(uid)

    def end(self, key: Key) -> None:
        """End ``key``'s wait (its other workers are being created)."""
        uid, attempt = key
        with self._lock:
            began = self._since.get(uid)
            if began is not None and began[0] == attempt:
                self._end(uid)

    def _end(self, uid: str) -> None:
        self._since.pop(uid, None)
        self._answered.discard(uid)

    def answered(self, uid: str) -> bool:
        """Note that the job's watch shows the placer's answer; return True when a wait of the
        job hears it (the caller wakes the job's reconcile)."""
        with self._lock:
            if uid not in self._since:
                return False
            self._answered.add(uid)
            return True

    def heard(self, uid: str) -> bool:
        """Return whether the job's answer was seen and its wait has not ended yet: a woken
        reconcile that acts on an older view of the job must be tried again."""
        with self._lock:
            return uid in self._answered
