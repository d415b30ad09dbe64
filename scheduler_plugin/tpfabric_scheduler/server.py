"""The extender's HTTP server: ``/filter`` and ``/prioritize``, for kube-scheduler on loopback.

Handlers run the (fast, synchronous) decisions under the store lock and nothing else there:
parsing and encoding happen outside it. A malformed request gets a 400 with the reason in the
body; a body over :data:`MAX_BODY` gets 413 before anything of it is parsed; an unexpected
error inside a decision is answered in the protocol's ``Error`` field (500 for prioritize) and
logged, never taking the server down. Until every informer has listed once, the store cannot
tell a worker's job from a missing one, so /filter answers with ``Error`` (the scheduler retries
the pod after a backoff) and /prioritize with 503, never "unknown job".

Health and metrics are served on the component's own port (:mod:`tpfabric_kube.metrics_server`)
from :func:`health_checks`: ``/healthz`` is the liveness of the placer loop (unhealthy once the
informers have synced and the loop has not finished a cycle, or a follower's idle round, for
``liveness_stall_seconds``; it reads one float and never waits on the store lock); ``/readyz``:
the informers have synced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import orjson
from aiohttp import web

from tpfabric_kube.metrics_server import HealthCheck
from tpfabric_scheduler.extender import filter_nodes, prioritize_nodes
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.protocol import (
    BadRequestError,
    FilterResult,
    encode_filter_result,
    encode_priorities,
    parse_extender_args,
)
from tpfabric_scheduler.store import ClusterStore

__all__ = ["MAX_BODY", "health_checks", "make_app"]

log = logging.getLogger("tpfabric.scheduler.server")
#: bytes of a request body: the pod (the API server takes at most 3 MiB of JSON) and the node
#: names (nodeCacheCapable: some 150 kB at 5,000 nodes). A larger body is refused unread: parsing
#: it on the event loop would hold every other answer
MAX_BODY = 4 * 1024 * 1024
NOT_SYNCED = "tpfabric: extender not synced yet (informers listing)"


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _too_large(request: web.Request) -> web.Response | None:
    """Return the 413 answer of a request that says its body is over :data:`MAX_BODY`."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        return web.Response(
            text=f"request body of {request.content_length} bytes is over {MAX_BODY}", status=413
        )
    return None


def health_checks(
    store: ClusterStore,
    ready: Callable[[], bool],
    *,
    liveness_stall_seconds: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, HealthCheck]:
    """Return the extender's ``/healthz`` and ``/readyz`` checks (see the module docstring).

    ``ready``: whether every informer has listed once. ``clock`` must be the clock of
    ``store.placer_heartbeat`` (``time.monotonic``).
    """

    def healthz() -> tuple[bool, str]:
        heartbeat = store.placer_heartbeat  # one attribute read: no lock, never blocks
        if heartbeat is not None and ready():
            stalled = clock() - heartbeat
            if stalled > liveness_stall_seconds:
                return False, f"placer loop stalled for {stalled:.0f} s"
        return True, "ok"

    def readyz() -> tuple[bool, str]:
        return (True, "ok") if ready() else (False, "informers not synced")

    return {"/healthz": healthz, "/readyz": readyz}


def make_app(store: ClusterStore, metrics: Metrics, ready: Callable[[], bool]) -> web.Application:
    """Return the aiohttp application of the extender (``ready``: every informer has listed
    once)."""

    async def handle_filter(request: web.Request) -> web.Response:
        started = time.perf_counter()
        if (refused := _too_large(request)) is not None:
            return refused
        try:
            args = parse_extender_args(await request.read())
        except BadRequestError as err:
            metrics.bad_requests.labels("filter").inc()
            return _json(orjson.dumps({"Error": f"bad request: {err}"}), 400)
        if not ready():
            return _json(encode_filter_result(FilterResult(node_names=[], error=NOT_SYNCED)))
        try:
            with store.lock:
                result, counts = filter_nodes(store, args)
        except Exception as err:
            log.exception("filter failed for %s/%s", args.pod.namespace, args.pod.name)
            result, counts = FilterResult(node_names=[], error=f"tpfabric: {err!r}"), {}
        for reason, count in counts.items():
            metrics.filtered_nodes.labels(reason).inc(count)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "filter %s/%s: %d of %d nodes kept %s",
                args.pod.namespace,
                args.pod.name,
                len(result.node_names),
                len(args.node_names),
                sorted(result.node_names)[:8],
            )
        response = _json(encode_filter_result(result, args.nodes))
        metrics.request_seconds.labels("filter").observe(time.perf_counter() - started)
        return response

    async def handle_prioritize(request: web.Request) -> web.Response:
        started = time.perf_counter()
        if (refused := _too_large(request)) is not None:
            return refused
        try:
            args = parse_extender_args(await request.read())
        except BadRequestError as err:
            metrics.bad_requests.labels("prioritize").inc()
            return _json(orjson.dumps({"Error": f"bad request: {err}"}), 400)
        if not ready():
            return _json(orjson.dumps({"Error": NOT_SYNCED}), 503)
        try:
            with store.lock:
                scores = prioritize_nodes(store, args)
        except Exception as err:
            log.exception("prioritize failed for %s/%s", args.pod.namespace, args.pod.name)
            return _json(orjson.dumps({"Error": f"tpfabric: {err!r}"}), 500)
        if log.isEnabledFor(logging.DEBUG):
            top = sorted(scores, key=lambda hs: -hs[1])[:4]
            log.debug("prioritize %s/%s: top %s", args.pod.namespace, args.pod.name, top)
        response = _json(encode_priorities(scores))
        metrics.request_seconds.labels("prioritize").observe(time.perf_counter() - started)
        return response

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/filter", handle_filter)
    app.router.add_post("/prioritize", handle_prioritize)
    return app
