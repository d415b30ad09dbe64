"""A gang that waits for its own pods says so: the Gang record's ``PodsCreated`` condition, and,
once it has waited a while, a Warning Event on each of its pods. Pure.

The placer plans a gang only once every pod of it exists, so a gang short of pods (its owner
made 3 of 4, a quota refused one, a pod group's last pod was never created) waits with no plan
and no placer message of its own. Its record says at once how many pods exist, which ranks are
missing and since when (the condition's ``lastTransitionTime``), in the words of
:mod:`tpfabric_core.gang_shortfall`; a gang still short after ``notice_seconds`` tells its pods
too (``kubectl describe pod`` shows it), so that whoever looks at a Pending pod learns why. A
gang coming up normally (its owner creating pods one after another) never gets an Event: it is
whole long before the notice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpfabric_core.gang_shortfall import PODS_CREATED, numbered, shortfall
from tpfabric_core.timestamps import parse_rfc3339
from tpfabric_operator.gangs.records import GangPod

__all__ = ["PODS_CREATED", "SHORT_REASON", "pods_created", "short_notice"]

#: the condition's and the Event's reason while pods are missing
SHORT_REASON = "PodsMissing"


def _owner(pod: GangPod) -> str:
    """Return what makes the gang's pods, in words ("" for a pod group: no owner object)."""
    member = pod.member
    return "" if member.kind == "PodGroup" else f"{member.kind} {member.owner}"


def pods_created(pods: Sequence[GangPod], size: int) -> dict[str, str]:
    """Return the ``PodsCreated`` condition of a gang of ``size`` with ``pods`` (without its
    transition time): True once all exist, else False with how many and which ranks."""
    short = shortfall((p.rank for p in pods), size)
    if short is None:
        return _condition(True, "AllPodsExist", f"all {size} pods of the gang exist")
    early = numbered(p.labels for p in pods)
    words = short.words(_owner(pods[0]) if pods else "", numbered=early)
    return _condition(False, SHORT_REASON, words)


def short_notice(
    conditions: Sequence[Mapping[str, Any]], gang: str, now: float, notice_seconds: float
) -> str | None:
    """Return what to tell a gang's pods once its merged ``conditions`` say it has been short of
    pods for ``notice_seconds`` (None: it is whole, or not for long enough yet)."""
    created = next((c for c in conditions if c.get("type") == PODS_CREATED), None)
    if created is None or created.get("status") != "False":
        return None
    since = str(created.get("lastTransitionTime") or "")
    started = parse_rfc3339(since)
    if started is None or now - started < notice_seconds:
        return None
    return f"gang {gang} has waited since {since} for its pods: {created.get('message')}"


def _condition(status: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": PODS_CREATED,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
    }
