"""The placer loop: one placer cycle after every batch of changes, on the lease holder only.

It owns no placement logic (that is :class:`~tpfabric_scheduler.placer.GangPlacer`'s); it decides
when a cycle runs, and that a new term starts from a new placer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.store import ClusterStore

__all__ = ["RESYNC_SECONDS", "PlacerLoop"]

log = logging.getLogger("tpfabric.scheduler")
RESYNC_SECONDS = 5.0


class PlacerLoop:
    """Runs placer cycles, on the lease holder only, and keeps ``store.placer_heartbeat`` fresh.

    A turn waits for a change (or ``resync_seconds``), then runs one cycle in an executor thread
    (never on the event loop) if the informers have synced and this replica leads; a follower, or
    a replica still listing, only beats the heartbeat (it is alive, just idle). A replica that
    becomes leader starts from a new placer (``new_placer``): nothing an earlier term of it
    remembered is trusted, the store fed by the informers is the truth.
    """

    def __init__(
        self,
        store: ClusterStore,
        new_placer: Callable[[], GangPlacer],
        ready: Callable[[], bool],
        leading: Callable[[], bool],
        *,
        resync_seconds: float = RESYNC_SECONDS,
        settle_seconds: float = 0.05,
    ) -> None:
        self.store = store
        self.new_placer = new_placer
        self.ready = ready
        self.leading = leading
        self.resync_seconds = resync_seconds
        self.settle_seconds = settle_seconds
        self.changed = asyncio.Event()
        self.placer: GangPlacer | None = None
        self.cycles = 0

    async def turn(self) -> bool:
        """Wait for a change, then run a cycle if we may; return whether one ran."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout=self.resync_seconds)
        self.changed.clear()
        if not self.leading() or (self.placer is not None and not self.placer.leading()):
            self.placer = None  # the next term starts afresh (also one taken again meanwhile)
        if not self.ready() or not self.leading():
            self.store.placer_heartbeat = time.monotonic()
            return False
        if self.placer is None:
            # a new term: plans this process wrote in an earlier term may since have been
            # replaced by another leader; only what the watches deliver is trusted
            with self.store.lock:
                self.store.fresh_plans.clear()
            self.placer = self.new_placer()
        await asyncio.sleep(self.settle_seconds)  # let a burst of watch events land first
        try:
            more = await asyncio.get_running_loop().run_in_executor(None, self.placer.run_cycle)
        except Exception:
            # no heartbeat: a cycle that keeps failing turns /healthz red after the stall bound
            log.exception("placer cycle failed")
            return False
        self.store.placer_heartbeat = time.monotonic()
        self.cycles += 1
        if more:  # stopped at its time bound: the rest goes at once, on a fresh snapshot
            self.changed.set()
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Turn until ``stop`` is set (a cycle in flight finishes first)."""
        while not stop.is_set():
            await self.turn()
