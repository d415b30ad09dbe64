"""The gang webhook's HTTPS server: ``POST /mutate-pods`` and ``/healthz`` on one TLS port.

``POST /mutate-pods`` answers kube-apiserver's AdmissionReviews (:func:`.admission.admit`), and
``/healthz`` on the same port says it serves TLS (the readiness probe). A body that is not an
AdmissionReview gets a 400 with the reason, one over :data:`MAX_BODY` a 413 before it is read
whole; an unexpected error inside a decision admits the pod unchanged with a warning, never a
refusal and never a crash. The serving certificate is read again when its files change, and
made and rotated by :class:`.certs.CertKeeper` where the webhook manages its own. The process
around it (flags, the nodes' view, signals) is :mod:`tpfabric_operator.webhook.__main__`'s.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from tpfabric_core.gangs import GANG_LABEL
from tpfabric_kube.structured_logs import about
from tpfabric_operator.webhook.admission import BadReviewError, WebhookSettings, admit
from tpfabric_operator.webhook.certs import CertKeeper
from tpfabric_operator.webhook.gang_plans import GangPlans
from tpfabric_operator.webhook.node_offers import NodeOffers

__all__ = ["MAX_BODY", "WebhookMetrics", "make_app", "serve"]

log = logging.getLogger("tpfabric.webhook")
#: bytes of an AdmissionReview: a pod creation (the API server takes at most 3 MiB of JSON) and
#: the review's own few fields; a larger body is refused before it is read whole
MAX_BODY = 4 * 1024 * 1024


#: how often the start logs that the nodes' first list has not come yet
NODES_SYNC_LOG_SECONDS = 10.0


class WebhookMetrics:
    """The webhook's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.seconds = Histogram(
            "tpfabric_webhook_admission_seconds",
            "Time to answer one AdmissionReview",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=self.registry,
        )
        self.answers = Counter(
            "tpfabric_webhook_answers_total",
            "AdmissionReviews answered, by outcome (wired, unchanged, warned, bad, error)",
            ["outcome"],
            registry=self.registry,
        )


def _outcome(answer: dict[str, object]) -> str:
    response = answer.get("response")
    if not isinstance(response, dict):
        return "unchanged"
    if response.get("warnings"):  # admitted unwired (only marked with its problems)
        return "warned"
    return "wired" if "patch" in response else "unchanged"


def _pod_of(review: object) -> dict[str, Any]:
    """Return the log fields of the pod an AdmissionReview is about (its namespace, its name or
    generateName, the gang it names), as far as the review says."""
    request = review.get("request") if isinstance(review, dict) else None
    pod = request.get("object") if isinstance(request, dict) else None
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(request, dict) or not isinstance(meta, dict):
        return {}
    found = meta.get("labels")
    labels: dict[str, Any] = found if isinstance(found, dict) else {}
    return about(
        "Pod",
        str(request.get("namespace") or meta.get("namespace") or "") or None,
        str(meta.get("name") or meta.get("generateName") or "") or None,
        gang=str(labels.get(GANG_LABEL)) if labels.get(GANG_LABEL) else None,
    )


def make_app(settings: WebhookSettings, metrics: WebhookMetrics) -> web.Application:
    """Return the aiohttp application of the webhook."""

    async def handle_mutate(request: web.Request) -> web.Response:
        started = time.perf_counter()
        if request.content_length is not None and request.content_length > MAX_BODY:
            metrics.answers.labels("bad").inc()
            return web.Response(
                text=f"request body of {request.content_length} bytes is over {MAX_BODY}",
                status=413,
            )
        body = await request.read()
        try:
            review = orjson.loads(body)
            answer = admit(review, settings)
        except (orjson.JSONDecodeError, BadReviewError) as err:
            metrics.answers.labels("bad").inc()
            return web.Response(text=f"bad request: {err}", status=400)
        except Exception as err:  # never refuse a pod for our own fault
            log.exception("admission failed; the pod is admitted unchanged", extra=_pod_of(review))
            metrics.answers.labels("error").inc()
            uid = ((review.get("request") or {}).get("uid")) if isinstance(review, dict) else None
            if not uid:
                return web.Response(text=f"bad request: {err!r}", status=400)
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": uid,
                    "allowed": True,
                    "warnings": [f"tpfabric: pod admitted unchanged: webhook error {err!r}"],
                },
            }
        else:
            metrics.answers.labels(_outcome(answer)).inc()
        response = web.Response(body=orjson.dumps(answer), content_type="application/json")
        metrics.seconds.observe(time.perf_counter() - started)
        return response

    async def handle_healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/mutate-pods", handle_mutate)
    app.router.add_get("/healthz", handle_healthz)
    return app


def _tls(cert_dir: Path) -> tuple[ssl.SSLContext, Callable[[], bool]]:
    """Return the server's TLS context and a function that reloads changed files into it."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert, key = cert_dir / "tls.crt", cert_dir / "tls.key"
    seen: list[tuple[float, float]] = []

    def reload() -> bool:
        stamp = (cert.stat().st_mtime, key.stat().st_mtime)
        if seen and seen[-1] == stamp:
            return False
        context.load_cert_chain(cert, key)  # new handshakes use it; open connections keep theirs
        seen[:] = [stamp]
        return True

    reload()
    return context, reload


async def serve(
    settings: WebhookSettings,
    cert_dir: Path,
    *,
    host: str = "0.0.0.0",  # noqa: S104 - a pod's webhook is reached through its Service
    port: int = 9443,
    reload_seconds: float = 60.0,
    keeper: CertKeeper | None = None,
    renew_seconds: float = 3600.0,
    metrics: WebhookMetrics | None = None,
    nodes: NodeOffers | None = None,
    plans: GangPlans | None = None,
) -> None:
    """Serve the webhook until cancelled; ``keeper`` makes and rotates the certificate;
    ``nodes`` (the view of ``--rdma-count auto``) and ``plans`` (the gangs' plans and ranks)
    are listed before the first admission."""
    for watch in plans.watches if plans is not None else ():
        while not await asyncio.to_thread(watch.synced.wait, NODES_SYNC_LOG_SECONDS):
            log.warning(
                "waiting for the first list of %s (the webhook serves once it has one): "
                "can its ServiceAccount list and watch gangs, pods and jobsets?",
                watch.name,
            )
    if nodes is not None:
        while not await asyncio.to_thread(nodes.synced.wait, NODES_SYNC_LOG_SECONDS):
            log.warning(
                "waiting for the first list of nodes (the webhook serves once it has one): "
                "can its ServiceAccount list and watch nodes?"
            )
        log.info("nodes listed: %d in the webhook's view", len(nodes.offers()))
    if keeper is not None:
        await asyncio.to_thread(keeper.ensure)
        asyncio.get_running_loop().create_task(_keep(keeper, renew_seconds))
    context, reload = _tls(cert_dir)
    runner = web.AppRunner(make_app(settings, metrics or WebhookMetrics()), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    log.info("gang webhook serving on https://%s:%d/mutate-pods", host, port)
    try:
        while True:
            await asyncio.sleep(reload_seconds)
            try:
                if reload():
                    log.info("serving certificate reloaded from %s", cert_dir)
            except (OSError, ssl.SSLError) as err:  # a half-written rotation: keep the old one
                log.warning("certificate not reloaded from %s: %s", cert_dir, err)
    finally:
        await runner.cleanup()


async def _keep(keeper: CertKeeper, every: float) -> None:
    """Check the certificate every ``every`` seconds (another replica may have rotated it)."""
    while True:
        await asyncio.sleep(every)
        try:
            await asyncio.to_thread(keeper.ensure)
        except Exception:  # the old certificate serves on; the next check tries again
            log.exception("the webhook certificate could not be checked")
