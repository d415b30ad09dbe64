"""Reconcile a job soon after its workers changed, instead of at its next tick.

kopf runs a job's reconcile when the job changes and on a timer (every ``RECONCILE_SECONDS``,
2 s by default); a pod's change is not the job's, so a job showed ``Running`` up to a tick after
its last worker became ready, and a failed worker was charged up to a tick late. In a burst the
ticks also wait for kopf's few handler threads, which reconciles creating pods hold: the last
stage of ``tpfabric bench operator`` (all workers Running → job Running) took 1.9 s for a
256-worker gang and up to 11 s at p90 over 100 jobs. A job's status must follow its workers
within moments, in a burst too.

The pod cache calls :meth:`Waker.wake` for the changes a job's status shows at once
(``pod_cache.shows_at_once``); the waker runs that job's reconcile on a small pool of its own:

- at once, unless the waker ran the same job less than ``spacing`` seconds ago: then at that
  point, with every wake in between folded into one run (a gang of 256 being deleted wakes its
  job 512 times and costs a few reconciles, not hundreds);
- a run the reconcile refuses (``run`` returns False: a reconcile of the job is running, or the
  status it patched last has not come back through the watch yet) is tried again after
  ``retry`` seconds, until ``give_up`` seconds after the wake; by then the job's tick, which
  stays, has run on newer data anyway.

Pure mechanism: ``run`` and ``clock`` are given, so the unit tests drive it without kopf.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["Waker"]

log = logging.getLogger("tpfabric.operator.wakeups")

K = TypeVar("K")


class Waker(threading.Thread, Generic[K]):
    """Runs ``run(key)`` soon after :meth:`wake` (see the module's docstring)."""

    def __init__(
        self,
        run: Callable[[K], bool],
        *,
        spacing: float = 0.5,
        retry: float = 0.2,
        give_up: float = 5.0,
        threads: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="waker", daemon=True)
        self.run_key = run
        self.spacing = spacing
        self.retry = retry
        self.give_up = give_up
        self.clock = clock
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="woken")
        self._cond = threading.Condition()
        self._due: dict[K, float] = {}  # key -> when to run it
        self._since: dict[K, float] = {}  # key -> its wake not yet served (retries count from it)
        self._last: dict[K, float] = {}  # key -> when the waker last ran it
        self._stopping = False

    def wake(self, key: K) -> None:
        """Ask for ``key``'s run soon; never blocks (called from a watch thread)."""
        now = self.clock()
        with self._cond:
            if key not in self._due:  # else folded into the run already due
                self._since[key] = now
                self._due[key] = max(now, self._last.get(key, now - self.spacing) + self.spacing)
                self._cond.notify()

    def stop(self) -> None:
        """End the loop; runs already started finish on the pool."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._pool.shutdown(wait=False)

    def take_due(self) -> list[K]:
        """Return the keys due now and mark them run (the loop's step; tests call it too)."""
        now = self.clock()
        with self._cond:
            due = [k for k, when in self._due.items() if when <= now]
            for key in due:
                del self._due[key]
                self._last[key] = now
            if len(self._last) > 10_000:  # keys long since served need no spacing any more
                self._last = {k: t for k, t in self._last.items() if now - t < self.spacing}
        return due

    def serve(self, key: K) -> None:
        """Run ``key`` once; ask again later if it was refused and the wake is still fresh."""
        try:
            done = self.run_key(key)
        except Exception:
            log.exception("reconcile of %s after its workers changed failed", key)
            done = True  # the tick tries again; no tight loop on a persistent error
        now = self.clock()
        with self._cond:
            since = self._since.get(key, now)
            if done or now - since >= self.give_up:
                if key not in self._due:  # no newer wake waiting
                    self._since.pop(key, None)
                return
            if key not in self._due:
                self._due[key] = now + self.retry
                self._cond.notify()

    def run(self) -> None:
        """Loop until stopped: wait for the next due key, hand due keys to the pool."""
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = self.clock()
                soonest = min(self._due.values(), default=None)
                if soonest is None or soonest > now:
                    self._cond.wait(None if soonest is None else soonest - now)
                    continue
            for key in self.take_due():
                self._pool.submit(self.serve, key)
