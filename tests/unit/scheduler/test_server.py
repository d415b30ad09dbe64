"""The extender over real HTTP on loopback (aiohttp's test server)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer
from builders import a_job, a_node, a_worker, extender_args

from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.server import make_app
from tpfabric_scheduler.store import ClusterStore

Client = TestClient[Any, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def a_store() -> ClusterStore:
    store = ClusterStore()
    for name, leaf in (("a1", "leaf-a"), ("a2", "leaf-a"), ("b1", "leaf-b")):
        store.upsert_node(a_node(name, leaf))
    store.upsert_job(a_job("job", 2, plan=("leaf", "leaf-a", ["a1", "a2"])))
    return store


def with_client(
    test: Callable[[TestClient[Any, Any]], Awaitable[None]],
    ready: bool = True,
    *,
    store: ClusterStore | None = None,
    clock: Clock | None = None,
) -> None:
    app = make_app(
        store or a_store(),
        Metrics(),
        ready=lambda: ready,
        liveness_stall_seconds=60,
        clock=clock or Clock(),
    )

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
        assert got["NodeNames"] == ["a1"]  # the planned node, alone: no reasons for the rest
        assert got["Nodes"] is None
        assert got["FailedAndUnresolvableNodes"] == {}
        assert got["FailedNodes"] == {}
        assert got["Error"] == ""
        # kube-scheduler's own filters rejected the planned node a1: the others' reasons
        body = orjson.dumps(extender_args(a_worker("job", 0, gated=False), ["a2", "b1"]))
        got = await (await client.post("/filter", data=body)).json()
        assert got["NodeNames"] == []
        assert set(got["FailedAndUnresolvableNodes"]) == {"a2", "b1"}
        assert got["FailedNodes"] == {}

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


def node_objects(names: list[str]) -> dict[str, Any]:
    return {
        "items": [a_node(name, "leaf-a" if name.startswith("a") else "leaf-b") for name in names]
    }


def test_a_scheduler_without_node_cache_gets_the_kept_node_objects_back() -> None:
    async def test(client: Client) -> None:
        nodes = node_objects(["a1", "a2", "b1"])
        body = orjson.dumps({"Pod": a_worker("job", 0, gated=False), "Nodes": nodes})
        got = await (await client.post("/filter", data=body)).json()
        assert got["Nodes"] == {"items": [nodes["items"][0]]}
        assert got["NodeNames"] is None
        assert got["FailedAndUnresolvableNodes"] == {}
        # prioritize works by name on Node objects too
        body = orjson.dumps({"Pod": a_worker("job", 1, gated=False), "Nodes": nodes})
        scores = {
            e["Host"]: e["Score"]
            for e in await (await client.post("/prioritize", data=body)).json()
        }
        assert scores == {"a1": 0, "a2": 10, "b1": 0}

    with_client(test)


def test_a_plain_pod_keeps_every_node_object() -> None:
    async def test(client: Client) -> None:
        nodes = node_objects(["a1", "b1"])
        body = orjson.dumps({"Pod": {"metadata": {"name": "web"}}, "Nodes": nodes})
        got = await (await client.post("/filter", data=body)).json()
        assert got["Nodes"] == nodes

    with_client(test)


def test_before_the_informers_synced_the_extender_answers_an_error_never_unknown_job() -> None:
    async def test(client: Client) -> None:
        body = orjson.dumps(extender_args(a_worker("ghost", 0, gated=False), ["a1", "b1"]))
        response = await client.post("/filter", data=body)
        assert response.status == 200  # the protocol's Error: kube-scheduler retries the pod
        got = await response.json()
        assert got["Error"] == "tpfabric: extender not synced yet (informers listing)"
        assert got["FailedAndUnresolvableNodes"] == {}
        response = await client.post("/prioritize", data=body)
        assert response.status == 503
        assert (await response.json())["Error"] == (
            "tpfabric: extender not synced yet (informers listing)"
        )

    with_client(test, ready=False)


def test_liveness_fails_when_the_placer_loop_stalls_after_the_sync() -> None:
    store, clock = a_store(), Clock()
    store.placer_heartbeat = clock.now - 90

    async def stalled(client: Client) -> None:
        response = await client.get("/healthz")
        assert response.status == 503
        assert await response.text() == "placer loop stalled for 90 s"

    async def listing(client: Client) -> None:  # a long first list is no stall
        assert (await client.get("/healthz")).status == 200

    with_client(stalled, store=store, clock=clock)
    with_client(listing, ready=False, store=store, clock=clock)


def test_liveness_holds_while_the_placer_loop_turns() -> None:
    store, clock = a_store(), Clock()
    store.placer_heartbeat = clock.now - 30

    async def test(client: Client) -> None:
        assert (await client.get("/healthz")).status == 200
        store.placer_heartbeat = None  # before the first turn
        assert (await client.get("/healthz")).status == 200

    with_client(test, store=store, clock=clock)


def test_liveness_never_waits_on_the_store_lock() -> None:
    store, clock = a_store(), Clock()
    store.placer_heartbeat = clock.now

    async def test(client: Client) -> None:
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with store.lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(5)
        try:
            response = await asyncio.wait_for(client.get("/healthz"), timeout=2)
            assert response.status == 200
        finally:
            release.set()
            holder.join()

    with_client(test, store=store, clock=clock)


def test_metrics_show_the_leader_gauge() -> None:
    async def test(client: Client) -> None:
        metrics = await (await client.get("/metrics")).text()
        assert "tpfabric_placer_leader 0.0" in metrics

    with_client(test)
