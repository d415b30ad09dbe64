"""What a policy decided for one gang: the placement intent the cycle applies.

A policy (:mod:`tpfabric_scheduler.policy`) never writes: it returns a :class:`PlacementIntent`,
and the cycle applies it (:func:`tpfabric_scheduler.apply.apply_intent`) in a fixed order: the
placement is written (behind the compare-and-swap test of ``previous``) and its Event recorded,
the policy's memories updated (``remember``), the job's pods deleted, the log line said, the
waiting pods told why, and the gated pods released onto the placement once the cycle's plans
are written. The placer's decide/intent/apply seam, as the operator's
(``decide.py``/``apply_intent.py``). Plain data: nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tpfabric_core.api.placement import NO_PLACEMENT, StoredPlacement, read_placement
from tpfabric_scheduler.store import JobRecord, PodRecord

__all__ = ["PlacementIntent"]


@dataclass(frozen=True)
class PlacementIntent:
    """What to do for one gang (every field optional: an intent may do nothing at all)."""

    job: JobRecord
    #: the job's placement the decision was computed from (what the write replaces and tests)
    previous: StoredPlacement = NO_PLACEMENT
    #: the placement to write (None: none)
    placement: Mapping[str, Any] | None = None
    #: the Event recorded on the job once the placement is written, in its words ("": none)
    event: str = ""
    #: a fresh plan: written by the cycle's pool while the next gangs are planned, and its pods
    #: released only once that write succeeded
    fresh_plan: bool = False
    #: remove the job's placement (a suspended job's)
    drop: bool = False
    #: delete the job's pods the store holds when applied (a dropped plan: the owner makes them
    #: again gated)
    delete_pods: bool = False
    #: gated pods released onto the placement (written, else ``previous``) once the cycle's plans
    #: are written
    release: tuple[PodRecord, ...] = ()
    #: the Event recorded once the pods are released ("": none)
    released_event: str = ""
    #: gated pods told why they wait (one ``GangWaiting`` Event each), and the words
    tell: tuple[PodRecord, ...] = ()
    tell_words: str = ""
    #: a line for the log once applied, and how loud
    log: str = ""
    level: Literal["info", "warning"] = "info"
    #: what the deciding policy remembers once the placement is written (its memories only)
    remember: Callable[[], None] | None = None
    #: whether the gang holds a plan after this (False: it waits, or its plan is dropped)
    placed: bool = True
    #: why a plan is dropped, for the metrics (one of ``metrics.DROP_REASONS``; "": not dropped)
    dropped: str = ""
    #: the plan attempt's outcome for the metrics ("planned", "waiting"; "": none) and how long
    #: the engine took (None: it was not asked)
    outcome: str = ""
    plan_seconds: float | None = None
    #: an intent applied right after this one (a plan dropped a second time, for a second reason)
    then: PlacementIntent | None = None

    @property
    def onto(self) -> StoredPlacement:
        """Return the placement the released pods are narrowed to."""
        return read_placement(self.placement) if self.placement is not None else self.previous
