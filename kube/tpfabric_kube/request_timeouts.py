"""A default timeout for every API request of a synchronous client.

The Kubernetes client waits forever for an answer unless each call passes ``_request_timeout``.
One half-open connection (an API server restarted behind a load balancer, a dropped NAT entry)
then holds a reconcile thread, and with it the job it reconciles, for good. The operator and the
placer wrap their client's ``rest_client.request`` with :func:`with_default_timeout`, so a call
that names no timeout gets one, and a watch keeps the longer one it names itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["API_TIMEOUT", "with_default_timeout"]

T = TypeVar("T")

#: (connect, read) seconds; the read timeout outlasts the API server's own 60 s request timeout,
#: so a slow server answers with its 504 before the client gives up
API_TIMEOUT: tuple[float, float] = (10.0, 65.0)


def with_default_timeout(
    request: Callable[..., T], timeout: tuple[float, float] = API_TIMEOUT
) -> Callable[..., T]:
    """Return ``request`` with ``_request_timeout=timeout`` wherever the caller gave none."""

    @functools.wraps(request)
    def timed(*args: Any, **kwargs: Any) -> T:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = timeout
        return request(*args, **kwargs)

    return timed
