"""Where capacity was freed: the store's log of the changes that may let a waiting gang fit.

Every change that may free capacity for a waiting gang (a bound pod finished or went, a node
changed, a plan's reservations went, a worker bound away from its rank's reservation) bumps the
log's ``generation`` and names the nodes it freed; a change that may have freed capacity anywhere
(a node came, went or was relabelled, a relist) names none and reads "anywhere". A waiting gang
remembers the generation of its last attempt and asks which nodes were freed since
(:mod:`.policy.requeue` weighs them). O(1) per change; the entries are kept up to
:data:`FREED_LOG_LENGTH` (halved, in a new list, when full: a view keeps reading its own). Pure
data: no I/O, no lock (the store's lock guards it).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["FREED_LOG_LENGTH", "FreedLog"]

#: entries kept (halved when full): at 10 completions per second, minutes of history
FREED_LOG_LENGTH = 8192


def _generation(entry: tuple[int, str | None]) -> int:
    return entry[0]


@dataclass
class FreedLog:
    """The generations of freed capacity, each with the nodes it named (None: anywhere)."""

    generation: int = 0
    #: (generation, node freed; None: anywhere), in order, complete after ``floor``
    entries: list[tuple[int, str | None]] = field(default_factory=list)
    floor: int = 0

    def record(self, *nodes: str | None) -> None:
        """Bump the generation for capacity freed on ``nodes`` (``None``: anywhere; none: a
        change that freed nothing a gang could use, as a job that held no plan going)."""
        self.generation += 1
        if len(self.entries) >= FREED_LOG_LENGTH:
            kept = self.entries[FREED_LOG_LENGTH // 2 :]
            self.floor = kept[0][0] - 1
            self.entries = kept  # a new list: views keep theirs
        self.entries.extend((self.generation, node) for node in nodes)

    def view(self) -> FreedLog:
        """Return the log as it stands now, to read without the store's lock (entries appended
        later lie beyond its generation and are not read)."""
        return FreedLog(self.generation, self.entries, self.floor)

    def since(self, generation: int) -> frozenset[str] | None:
        """Return the nodes capacity was freed on after ``generation``; ``None`` when it may
        have been freed anywhere, or the log no longer reaches back that far."""
        if generation >= self.generation:
            return frozenset()
        if generation < self.floor:
            return None
        nodes = set()
        for entry_generation, node in self.entries[
            bisect.bisect_right(self.entries, generation, key=_generation) :
        ]:
            if entry_generation > self.generation:
                break  # logged after this view was made
            if node is None:
                return None
            nodes.add(node)
        return frozenset(nodes)
