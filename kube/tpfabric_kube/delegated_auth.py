"""Who may read a component's metrics: the API server says, as kube-scheduler and Kueue ask it.

A scrape carries a bearer token. A ``TokenReview`` asks the API server who the token is; a
``SubjectAccessReview`` asks whether that user may ``get`` the non-resource URL (``/metrics``),
which RBAC grants with a ``nonResourceURLs`` rule (the chart's ``<fullname>-metrics-reader``
ClusterRole). Both answers are kept for a short while (:data:`CACHE_SECONDS`), so Prometheus
scraping every few seconds costs the API server two reviews per token and TTL, not per scrape.

Only answers are cached, never errors: an API server that cannot be reached gives 503 now and is
asked again on the next scrape. The cache holds at most :data:`MAX_ENTRIES` tokens (by their
SHA-256, never the token), so a flood of made-up tokens cannot grow it without bound.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

__all__ = ["CACHE_SECONDS", "MAX_ENTRIES", "Decision", "DelegatedAuth"]

#: how long an answer of the API server stands (kube-apiserver's own webhook cache: 10 s)
CACHE_SECONDS = 10.0
#: tokens whose answers are kept at once; the oldest goes first
MAX_ENTRIES = 1024


@dataclass(frozen=True, slots=True)
class Decision:
    """What to answer a request: an HTTP status (200, 401, 403, 503) and why."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        """Return whether the request may be served."""
        return self.status == 200


class DelegatedAuth:
    """Authenticates bearer tokens and authorizes a ``get`` of a non-resource URL through the
    API server: ``authn`` creates TokenReviews and ``authz`` SubjectAccessReviews (the
    :mod:`kubernetes` client's ``AuthenticationV1Api`` and ``AuthorizationV1Api``:
    :meth:`of`). Thread-safe."""

    def __init__(
        self,
        authn: Any,
        authz: Any,
        *,
        cache_seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authn = authn
        self._authz = authz
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], tuple[float, Decision]] = OrderedDict()

    @classmethod
    def of(cls, api: client.ApiClient) -> DelegatedAuth:
        """Return the reviews of the API server ``api`` talks to."""
        return cls(client.AuthenticationV1Api(api), client.AuthorizationV1Api(api))

    def decide(self, authorization: str | None, path: str) -> Decision:
        """Return whether the request with header ``Authorization: authorization`` may ``get``
        ``path``."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Decision(401, "a bearer token is required (Authorization: Bearer <token>)")
        key = (hashlib.sha256(token.encode()).hexdigest(), path)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        try:
            decision = self._review(token, path)
        except (ApiException, OSError) as err:
            reason = getattr(err, "reason", None) or str(err)
            return Decision(503, f"the API server could not review the token: {reason}")
        with self._lock:
            self._cache[key] = (now + self._cache_seconds, decision)
            self._cache.move_to_end(key)
            while len(self._cache) > MAX_ENTRIES:
                self._cache.popitem(last=False)
        return decision

    def _review(self, token: str, path: str) -> Decision:
        review: Any = self._authn.create_token_review({"spec": {"token": token}})
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            why = (status.error if status is not None else None) or "token not authenticated"
            return Decision(401, why)
        user = status.user
        access: Any = self._authz.create_subject_access_review(
            {
                "spec": {
                    "user": user.username,
                    "uid": user.uid,
                    "groups": user.groups or [],
                    "extra": user.extra or {},
                    "nonResourceAttributes": {"path": path, "verb": "get"},
                }
            }
        )
        if access.status is not None and access.status.allowed:
            return Decision(200, "allowed")
        why = (access.status.reason if access.status is not None else None) or "no RBAC rule"
        return Decision(
            403, f'{user.username} may not get {path} (grant nonResourceURLs: ["{path}"]): {why}'
        )
