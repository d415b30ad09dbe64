"""What the store reads of each job's plan, remembered from one change of the job's records to
the next, so that a placer cycle over thousands of jobs does not read again what did not change.

The store replaces a record when it changes and never changes one, so an entry that names the
records it was read from (compared by identity) holds as long as those are the records read again.
A store and its views share one memo: an entry any of them made holds for all. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpfabric_core.api.placement import StoredPlacement
from tpfabric_scheduler.records import JobRecord, PodRecord

__all__ = ["PlanMemo", "same_plan"]


class PlanMemo:
    """What each job's plan reads, kept from one change of its records to the next: whether its
    stored placement is its fresh one (by job uid), whether its plan holds nodes (by job key) and
    its ranks not bound yet (by job key). Each entry names the records it was read from and
    counts only while those are the ones read again (the store replaces a record on change), so
    a store and its views share it: an entry any of them made holds for all."""

    __slots__ = ("holding", "same", "unbound")

    def __init__(self) -> None:
        #: job uid -> (stored placement, fresh plan, whether they are the same plan)
        self.same: dict[str, tuple[StoredPlacement, StoredPlacement, bool]] = {}
        #: job key -> (its record, its placement, whether that plan holds nodes)
        self.holding: dict[str, tuple[JobRecord, StoredPlacement, bool]] = {}
        #: job key -> (its plan, its pods' map, its (rank, node) not bound yet)
        self.unbound: dict[
            str, tuple[StoredPlacement, Mapping[str, PodRecord] | None, tuple[tuple[int, str], ...]]
        ] = {}

    def same_plan(self, uid: str, stored: StoredPlacement, fresh: StoredPlacement) -> bool:
        """Return :func:`same_plan` of the two, worked out once per pair."""
        kept = self.same.get(uid)
        if kept is not None and kept[0] is stored and kept[1] is fresh:
            return kept[2]
        same = same_plan(stored, fresh)
        self.same[uid] = (stored, fresh, same)
        return same

    def trim(self, jobs: int) -> None:
        """Start over once the entries outnumber twice the ``jobs`` (those of jobs gone)."""
        limit = 2 * jobs + 1024
        for entries in (self.same, self.holding, self.unbound):
            if len(entries) > limit:
                entries.clear()


def same_plan(stored: StoredPlacement, fresh: StoredPlacement) -> bool:
    """Return whether the stored placement is the fresh one (or a later write of the placer)."""
    if not fresh.present:
        return not stored.planned
    return stored.state == fresh.state and stored.nodes == fresh.nodes
