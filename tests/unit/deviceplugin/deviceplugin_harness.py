"""A test kubelet (the Registration service over real gRPC on a unix socket) and small helpers."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from tpfabric_deviceplugin import api_pb2, api_pb2_grpc


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    """Serves ``v1beta1.Registration`` on ``socket_path`` and records every RegisterRequest."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.requests: queue.Queue[api_pb2.RegisterRequest] = queue.Queue()
        self._server: Any = None

    def Register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:  # noqa: N802
        self.requests.put(request)
        return api_pb2.Empty()

    def start(self) -> FakeKubelet:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, as a kubelet that exits."""
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    def next_registration(self, timeout_s: float = 10) -> api_pb2.RegisterRequest:
        return self.requests.get(timeout=timeout_s)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


def device_plugin_stub(socket_path: Path) -> tuple[grpc.Channel, api_pb2_grpc.DevicePluginStub]:
    channel = grpc.insecure_channel(f"unix://{socket_path}")
    return channel, api_pb2_grpc.DevicePluginStub(channel)
