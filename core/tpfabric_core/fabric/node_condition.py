"""A node condition the fabric agent owns, written only when it says something new.

The agent's conditions (``FabricHealthy``, ``FabricContractMet``) follow the Kubernetes
conventions: ``lastTransitionTime`` moves only when the status does, and ``lastHeartbeatTime``
only with a write, which happens only when status, reason or message change (a heartbeat per
interval would be an API write per node per interval on a quiet fabric). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MESSAGE_LIMIT", "condition", "condition_to_write", "message_of"]

#: characters of a condition's message: the reasons after it are counted, not written
MESSAGE_LIMIT = 1024


def message_of(reasons: Sequence[str]) -> str:
    """Return ``reasons`` joined by ``; ``, cut to :data:`MESSAGE_LIMIT` with how many more."""
    text = ""
    for index, reason in enumerate(reasons):
        candidate = f"{text}; {reason}" if text else reason
        if len(candidate) > MESSAGE_LIMIT:
            return f"{text}; ... (+{len(reasons) - index} more)"
        text = candidate
    return text


def condition_to_write(
    kind: str,
    *,
    status: str,
    reason: str,
    message: str,
    current: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any] | None:
    """Return the condition ``kind`` to write (strategic merge on ``type``), or None when
    ``current`` (the node's condition as read) already says the same."""
    if current is not None and (
        current.get("status"),
        current.get("reason"),
        current.get("message"),
    ) == (status, reason, message):
        return None
    return condition(kind, status=status, reason=reason, message=message, current=current, now=now)


def condition(
    kind: str,
    *,
    status: str,
    reason: str,
    message: str,
    current: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    """Return the condition ``kind`` as of ``now``, its ``lastTransitionTime`` kept from
    ``current`` (the node's condition as read) while its status stays the same."""
    since = (
        current.get("lastTransitionTime")
        if current is not None and current.get("status") == status
        else None
    ) or now
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "lastHeartbeatTime": now,
    }
