"""When a Gang record whose pods are all gone is deleted. Pure.

A LeaderWorkerSet's or a JobSet's record is owned by it and goes with it (garbage collection);
a pod group has no owner object to take its record along, and a gang between two incarnations
(its pods deleted and made again) must keep its record and its plan. So a record is deleted
once its gang has had no live pod for ``idle_seconds`` (``TPFABRIC_GANG_IDLE_SECONDS``), with
its uid as a precondition (a record made again meanwhile is another record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["IdleStep", "idle_step"]


@dataclass(frozen=True, slots=True)
class IdleStep:
    """What a sync does with the record of a gang that has no live pod."""

    #: when the gang was first seen without pods (None: forget it, there is no record)
    since: float | None
    #: whether to delete the record now
    delete: bool = False


def idle_step(
    record: Mapping[str, Any] | None, since: float | None, now: float, idle_seconds: float
) -> IdleStep:
    """Return what to do with the record of a gang seen without pods at ``now``, first seen so
    at ``since`` (None: just now)."""
    if record is None:
        return IdleStep(None)
    since = now if since is None else since
    return IdleStep(since, delete=now - since >= idle_seconds)
