"""The core/v1 Events tpfabric's components write: one shape for all of them.

Each is a whole ``events.v1``-compatible core/v1 Event: its object, type, reason, message (cut
to the API server's 1,024 characters), the component in ``source`` and ``reportingComponent``,
and its first and last time (without them ``kubectl get events`` shows no age). A fixed
``name`` makes writing it idempotent (two replicas, or a report told twice, write it once: the
second create is a 409); without one the API server names it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["MESSAGE_LIMIT", "event_body", "pod_object"]

#: the longest message the API server keeps in an Event
MESSAGE_LIMIT = 1024


def pod_object(name: str, namespace: str, uid: str) -> dict[str, str]:
    """Return the ``involvedObject`` of a pod."""
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace, "uid": uid}


def event_body(
    involved: dict[str, Any],
    *,
    reason: str,
    message: str,
    component: str,
    warning: bool = True,
    name: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Return the Event telling ``message`` on ``involved`` (a Warning unless ``warning`` is
    False). ``name``: a fixed name (idempotent), else the object's name with a generated
    suffix; ``namespace``: where it goes, by default the object's (``default`` for a
    cluster-scoped one)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    where = namespace or involved.get("namespace") or "default"
    meta: dict[str, str] = (
        {"name": name} if name else {"generateName": f"{str(involved['name'])[:200]}."}
    )
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**meta, "namespace": where},
        "involvedObject": involved,
        "type": "Warning" if warning else "Normal",
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
