"""The order in which the placer considers the gangs that wait: priority, then arrival. Pure.

One function decides it, and both its readers call it: the placer, which walks its waiting gangs
in this order every cycle (a gang earlier in it plans first, and holds a domain against later
ones once it has waited long: head of line), and ``tpfabric queue``, which shows users the same
order from the objects they can read. A gang's priority is the highest ``spec.priority`` of its
pods (the API server resolves a pod's ``priorityClassName`` into it); its arrival is its object's
``metadata.creationTimestamp`` (RFC 3339, which sorts as text); ties go by key, so that the order
is total and the same in both.
"""

from __future__ import annotations

__all__ = ["GANG_KEY", "gang_key", "job_key", "queue_order"]

#: a Gang record's key is ``namespace/gang:name``: ``:`` is in no object name, so a Gang and a
#: TensorParallelJob of the same name never share a key
GANG_KEY = "gang:"


def gang_key(namespace: str, name: str) -> str:
    """Return the key of a Gang record (its pods' job in the placer's store)."""
    return f"{namespace}/{GANG_KEY}{name}"


def job_key(namespace: str, name: str, *, gang: bool) -> str:
    """Return the key of a TensorParallelJob (``namespace/name``) or, ``gang``, a Gang record."""
    return gang_key(namespace, name) if gang else f"{namespace}/{name}"


def queue_order(priority: int, created: str, key: str) -> tuple[int, str, str]:
    """Return the sort key of a waiting gang: higher ``priority`` first, then earlier
    ``created`` (its creationTimestamp), then ``key`` (:func:`job_key`)."""
    return (-priority, created, key)
