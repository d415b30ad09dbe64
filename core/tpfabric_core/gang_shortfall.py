"""A gang short of pods: how many of its pods exist, which ranks are missing, and the words that
say so. Pure.

The placer plans a gang of another controller only once every pod of it exists (a plan for part
of a gang would hold nodes for pods that may never come). Until then the gang waits, and this
module says for what, in one set of words the Gang record's ``PodsCreated`` condition, the Event
on its pods, ``tpfabric explain`` and ``tpfabric queue`` all print:

- the pods that exist, counted, and the gang's size;
- the missing ranks, named, when every pod that exists carries its rank (a LeaderWorkerSet's
  ``worker-index``, a pod's ``tpfabric.io/rank``); a gang ranked by creation order gets its ranks
  only once it is whole, so then the words say that instead of guessing;
- what makes the missing pods: the owner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PODS_CREATED", "Shortfall", "ranges", "shortfall"]

#: the Gang record's condition type: True once every pod of the gang exists
PODS_CREATED = "PodsCreated"


def ranges(numbers: Iterable[int]) -> str:
    """Return sorted ``numbers`` folded into runs: ``0-2,5``."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """How far a gang is from whole."""

    present: int
    size: int
    #: the ranks no pod holds, when every present pod has its rank (None: not known yet)
    missing_ranks: tuple[int, ...] | None

    @property
    def missing(self) -> int:
        """Return how many pods are missing."""
        return max(self.size - self.present, 0)

    def words(self, owner: str = "") -> str:
        """Return one line: the pods that exist, the missing ranks (or why they are not known
        yet), and that the gang is placed once whole; ``owner`` (``LeaderWorkerSet x``) is named
        as what makes the missing pods."""
        head = f"{self.present} of {self.size} pods exist"
        if self.missing_ranks:
            noun = "rank" if len(self.missing_ranks) == 1 else "ranks"
            head += f"; missing {noun} {ranges(self.missing_ranks)}"
        elif self.missing:
            head += (
                f"; {self.missing} missing (ranks follow the order of creation and are given "
                "once every pod exists)"
            )
        maker = f" until {owner} creates the rest" if owner else " for the rest"
        return f"{head}: the gang waits{maker}; tpfabric places a gang only once all its pods exist"


def shortfall(ranks: Iterable[int | None], size: int) -> Shortfall | None:
    """Return how far the gang of pods with ``ranks`` (None: a pod without its rank yet) is from
    its ``size``, or None when no pod is missing."""
    held = list(ranks)
    if len(held) >= size:
        return None
    known = {rank for rank in held if rank is not None}
    missing = None
    if all(rank is not None for rank in held):
        missing = tuple(rank for rank in range(size) if rank not in known)
    return Shortfall(present=len(held), size=size, missing_ranks=missing)
