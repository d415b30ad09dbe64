"""A client call that names no timeout gets one; a silent API server cannot hold it forever."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client

from tpfabric_kube.request_timeouts import API_TIMEOUT, with_default_timeout


def test_a_call_without_a_timeout_gets_the_default_and_one_with_keeps_its_own() -> None:
    seen: list[object] = []

    def request(method: str, url: str, **kwargs: object) -> str:
        seen.append(kwargs.get("_request_timeout"))
        return method

    timed = with_default_timeout(request)
    assert timed("GET", "/a") == "GET"
    timed("GET", "/b", _request_timeout=None)
    timed("GET", "/watch", _request_timeout=(10.0, 300.0))
    assert seen == [API_TIMEOUT, API_TIMEOUT, (10.0, 300.0)]


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never answers (a half-open API server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_real_client_call_to_a_silent_server_gives_up_after_the_read_timeout(
    silent_server: int,
) -> None:
    settings = client.Configuration()
    settings.host = f"http://127.0.0.1:{silent_server}"
    api = client.ApiClient(settings)
    api.rest_client.request = with_default_timeout(api.rest_client.request, (1.0, 1.0))
    start = time.monotonic()
    # urllib3 retries a GET that timed out three times, then gives up: 4 x 1 s, not forever
    with pytest.raises(urllib3.exceptions.MaxRetryError) as raised:
        client.CoreV1Api(api).read_namespaced_pod("p", "default")
    assert isinstance(raised.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert time.monotonic() - start < 10
