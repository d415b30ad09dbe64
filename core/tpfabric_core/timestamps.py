"""RFC 3339 UTC timestamps at seconds precision, as Kubernetes writes them in object fields, and
the microsecond ``MicroTime`` of Lease times.

Shared by the operator (status times), the placer (plannedAt, releasedAt, waitingSince) and every
writer of a Lease (leader election, the fabric agent's heartbeat).
"""

from __future__ import annotations

import datetime as dt
import functools

__all__ = ["micro_time", "parse_rfc3339", "rfc3339"]

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_MICRO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def rfc3339(timestamp: float) -> str:
    """Return ``timestamp`` (seconds since the epoch) as RFC 3339 UTC, seconds precision."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime(_FORMAT)


def micro_time(timestamp: float) -> str:
    """Return ``timestamp`` as a ``metav1.MicroTime`` text (RFC 3339, microseconds, UTC)."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime(_MICRO_FORMAT)


@functools.lru_cache(maxsize=65_536)
def parse_rfc3339(text: str | None) -> float | None:
    """Return the epoch seconds of an RFC 3339 UTC time, or None when absent or unreadable
    (remembered: a placer cycle reads every waiting gang's ``waitingSince``, and ``strptime``
    is slow)."""
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, _FORMAT).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None
