"""The gang webhook's HTTP server on loopback (aiohttp's test server): what its port serves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from test_gang_admission import GANG, SETTINGS, pod, review

from tpfabric_operator.webhook.server import MAX_BODY, WebhookMetrics, make_app

Client = TestClient[Any, Any]


def with_client(test: Callable[[Client], Awaitable[None]], metrics: WebhookMetrics) -> None:
    async def run() -> None:
        async with TestClient(TestServer(make_app(SETTINGS, metrics), host="127.0.0.1")) as c:
            await test(c)

    asyncio.run(run())


def test_a_review_over_the_limit_gets_413_before_it_is_read_and_the_server_goes_on() -> None:
    metrics = WebhookMetrics()

    async def test(client: Client) -> None:
        response = await client.post("/mutate-pods", data=b"{" * (5 * 1024 * 1024))
        assert response.status == 413, await response.text()
        wired = await client.post("/mutate-pods", data=orjson.dumps(review(pod(GANG))))
        assert wired.status == 200
        assert "patch" in (await wired.json())["response"]

    assert MAX_BODY == 4 * 1024 * 1024
    with_client(test, metrics)
    text = generate_latest(metrics.registry).decode()
    assert 'tpfabric_webhook_answers_total{outcome="bad"} 1.0' in text
    assert 'tpfabric_webhook_answers_total{outcome="wired"} 1.0' in text


def test_the_webhook_port_serves_admission_and_readiness_not_metrics() -> None:
    async def test(client: Client) -> None:
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/metrics")).status == 404  # its own port, behind the API server

    with_client(test, WebhookMetrics())
