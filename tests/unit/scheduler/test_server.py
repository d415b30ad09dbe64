"""The extender over real HTTP on loopback (aiohttp's test server), and its health checks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer
from builders import a_job, a_node, a_worker, extender_args
from prometheus_client import generate_latest

from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.server import MAX_BODY, health_checks, make_app
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
    metrics: Metrics | None = None,
) -> None:
    app = make_app(store or a_store(), metrics or Metrics(), ready=lambda: ready)

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
    metrics = Metrics()

    async def test(client: Client) -> None:
        for verb in ("filter", "prioritize"):
            response = await client.post(f"/{verb}", data=b"{garbage")
            assert response.status == 400
            assert "not JSON" in (await response.json())["Error"]
        response = await client.post(
            "/filter", data=orjson.dumps(extender_args({"metadata": {"name": "p"}}, ["a1"]))
        )
        assert response.status == 200

    with_client(test, metrics=metrics)
    text = generate_latest(metrics.registry).decode()
    assert 'tpfabric_extender_bad_requests_total{verb="filter"} 1.0' in text
    assert 'tpfabric_extender_request_seconds_count{verb="filter"} 1.0' in text


def test_a_body_over_the_limit_gets_413_before_it_is_parsed() -> None:
    metrics = Metrics()
    five_mib = b"[" * (5 * 1024 * 1024)  # would raise in the JSON parser: it must never get there

    async def test(client: Client) -> None:
        for verb in ("filter", "prioritize"):
            response = await client.post(f"/{verb}", data=five_mib)
            assert response.status == 413, await response.text()

        # a chunked body names no length: refused once it passes the limit
        async def chunks() -> Any:
            for _ in range(5):
                yield b"[" * (1024 * 1024)

        response = await client.post("/filter", data=chunks())
        assert response.status == 413
        body = orjson.dumps(extender_args(a_worker("job", 0, gated=False), ["a1"]))
        assert (await client.post("/filter", data=body)).status == 200  # still serving

    assert MAX_BODY == 4 * 1024 * 1024
    with_client(test, metrics=metrics)
    text = generate_latest(metrics.registry).decode()
    assert "tpfabric_extender_bad_requests_total{" not in text  # refused, never parsed


def test_the_extender_port_serves_only_filter_and_prioritize() -> None:
    async def test(client: Client) -> None:
        for path in ("/metrics", "/healthz", "/readyz"):
            assert (await client.get(path)).status == 404, path

    with_client(test)


def test_readiness_follows_the_informers() -> None:
    store = a_store()
    not_ready = health_checks(store, lambda: False, clock=Clock())
    assert not_ready["/healthz"]() == (True, "ok")
    assert not_ready["/readyz"]() == (False, "informers not synced")
    assert health_checks(store, lambda: True, clock=Clock())["/readyz"]() == (True, "ok")


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
    stalled = health_checks(store, lambda: True, liveness_stall_seconds=60, clock=clock)
    assert stalled["/healthz"]() == (False, "placer loop stalled for 90 s")
    # a long first list is no stall
    listing = health_checks(store, lambda: False, liveness_stall_seconds=60, clock=clock)
    assert listing["/healthz"]() == (True, "ok")


def test_liveness_holds_while_the_placer_loop_turns() -> None:
    store, clock = a_store(), Clock()
    store.placer_heartbeat = clock.now - 30
    healthz = health_checks(store, lambda: True, liveness_stall_seconds=60, clock=clock)["/healthz"]
    assert healthz()[0]
    store.placer_heartbeat = None  # before the first turn
    assert healthz()[0]


def test_liveness_never_waits_on_the_store_lock() -> None:
    store, clock = a_store(), Clock()
    store.placer_heartbeat = clock.now
    healthz = health_checks(store, lambda: True, clock=clock)["/healthz"]
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with store.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    answered: list[tuple[bool, str]] = []
    try:
        asker = threading.Thread(target=lambda: answered.append(healthz()))
        asker.start()
        asker.join(2)
        assert answered == [(True, "ok")]
    finally:
        release.set()
        holder.join()


def test_metrics_show_the_leader_gauge() -> None:
    assert "tpfabric_placer_leader 0.0" in generate_latest(Metrics().registry).decode()
