"""A gang short of pods: how many of its pods exist, which ranks are missing, and the words that
say so. Pure.

A gang of another controller short of pods waits for them. Most are planned only once every pod
exists (a plan for part of a gang would hold nodes for pods that may never come); a gang whose
pods are numbered at admission (``tpfabric.io/attempt``: a LeaderWorkerSet group, a JobSet, a
pod group with a controller and its own ranks, :mod:`tpfabric_core.gang_attempts`) is planned
whole from its first pods and the rest are placed onto that plan as they come, but it still
cannot run before they exist. This module says what the gang waits for, in one set of words the
Gang record's ``PodsCreated`` condition, the Event on its pods, ``tpfabric explain`` and
``tpfabric queue`` all print:

- the pods that exist, counted, and the gang's size;
- the missing ranks, named, when every pod that exists carries its rank (a LeaderWorkerSet's
  ``worker-index``, a pod's ``tpfabric.io/rank``); a gang ranked by creation order gets its ranks
  only once it is whole, so then the words say that instead of guessing;
- what makes the missing pods: the owner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tpfabric_core.api.models import ATTEMPT_LABEL

__all__ = ["PODS_CREATED", "Shortfall", "numbered", "ranges", "shortfall"]

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


def numbered(labels: Iterable[Mapping[str, str] | None]) -> bool:
    """Return whether a gang whose pods carry ``labels`` is planned from its first pods: one of
    them carries its attempt (``tpfabric.io/attempt``, stamped at admission)."""
    return any(ATTEMPT_LABEL in (each or {}) for each in labels)


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

    def words(self, owner: str = "", *, numbered: bool = False) -> str:
        """Return one line: the pods that exist, the missing ranks (or why they are not known
        yet), and when the gang is placed: once whole, or (``numbered``: its pods carry their
        attempt) from its first pods, the rest as they come; ``owner`` (``LeaderWorkerSet x``)
        is named as what makes the missing pods."""
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
        if numbered:
            placed = "tpfabric plans it from its first pods and places the rest as they come"
        else:
            placed = "tpfabric places a gang only once all its pods exist"
        return f"{head}: the gang waits{maker}; {placed}"


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
