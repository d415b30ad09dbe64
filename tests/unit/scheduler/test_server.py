"""The extender over real HTTP on loopback (aiohttp's test server)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer
from builders import a_job, a_node, a_worker, extender_args

from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.server import make_app
from tpfabric_scheduler.store import ClusterStore

Client = TestClient[Any, Any]


def with_client(
    test: Callable[[TestClient[Any, Any]], Awaitable[None]], ready: bool = True
) -> None:
    store = ClusterStore()
    for name, leaf in (("a1", "leaf-a"), ("a2", "leaf-a"), ("b1", "leaf-b")):
        store.upsert_node(a_node(name, leaf))
    store.upsert_job(a_job("job", 2, plan=("leaf", "leaf-a", ["a1", "a2"])))
    app = make_app(store, Metrics(), ready=lambda: ready)

    async def run() -> None:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            await test(client)

    asyncio.run(run())


def test_filter_answers_in_the_extender_protocol() -> None:
    async def test(client: Client) -> None:
        body = orjson.dumps(extender_args(a_worker("job", 0, gated=False), ["a1", "a2", "b1"]))
        response = await client.post("/filter", data=body)
        assert response.status == 200
        got = await response.json()
        assert got["NodeNames"] == ["a1"]
        assert set(got["FailedAndUnresolvableNodes"]) == {"b1"}
        assert set(got["FailedNodes"]) == {"a2"}
        assert got["Error"] == ""

    with_client(test)


def test_prioritize_answers_host_scores() -> None:
    async def test(client: Client) -> None:
        body = orjson.dumps(extender_args(a_worker("job", 1, gated=False), ["a1", "a2", "b1"]))
        response = await client.post("/prioritize", data=body)
        assert response.status == 200
        scores = {e["Host"]: e["Score"] for e in await response.json()}
        assert scores["a2"] == 10
        assert scores["b1"] == 0

    with_client(test)


def test_a_malformed_request_gets_400_with_the_reason_and_the_server_stays_up() -> None:
    async def test(client: Client) -> None:
        for verb in ("filter", "prioritize"):
            response = await client.post(f"/{verb}", data=b"{garbage")
            assert response.status == 400
            assert "not JSON" in (await response.json())["Error"]
        response = await client.post(
            "/filter", data=orjson.dumps(extender_args({"metadata": {"name": "p"}}, ["a1"]))
        )
        assert response.status == 200
        metrics = await (await client.get("/metrics")).text()
        assert 'tpfabric_extender_bad_requests_total{verb="filter"} 1.0' in metrics
        assert 'tpfabric_extender_request_seconds_count{verb="filter"} 1.0' in metrics

    with_client(test)


def test_readiness_follows_the_informers() -> None:
    async def not_ready(client: Client) -> None:
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 503

    async def is_ready(client: Client) -> None:
        assert (await client.get("/readyz")).status == 200

    with_client(not_ready, ready=False)
    with_client(is_ready, ready=True)
