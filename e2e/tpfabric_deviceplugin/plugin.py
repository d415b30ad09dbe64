"""The device-plugin server: kubelet API v1beta1 over gRPC on a unix socket, with re-registration.

Lifecycle (the one the kubelet expects, ``pkg/kubelet/cm/devicemanager``):

1. serve ``v1beta1.DevicePlugin`` on ``<plugin_dir>/<endpoint>``;
2. call ``v1beta1.Registration/Register`` on ``<plugin_dir>/kubelet.sock`` with the API version,
   the endpoint's file name, the resource name and the options;
3. the kubelet dials back, reads the options and keeps ``ListAndWatch`` open: every health change
   pushes the full device list again;
4. a kubelet restart removes every socket in the folder and creates a new ``kubelet.sock``; a
   watcher thread notices (new socket identity, or our own socket gone), restarts the server and
   registers again.

Device health changes through :meth:`FakeRdmaDevicePlugin.set_health`, or through the health
file (``<name> Unhealthy`` lines; re-read when it changes and on ``SIGUSR1`` from the CLI).

Two modes:

- ``exclusive`` (tests, the default): one device ID per HCA (``mlx5_N``) with its NUMA node;
  a container gets only its HCAs' ``uverbs``/``umad`` and ``rdma_cm``;
- ``shared``, as ``k8s-rdma-shared-dev-plugin`` (what clusters run): ``rdmaHcaMax`` interchangeable
  IDs ``0..rdmaHcaMax-1`` without topology, no preferred allocation, and *every* container that
  asks for any number of them gets *all* selected HCAs (``uverbsN``, ``umadN``, ``rdma_cm``,
  permissions ``rwm``); with a CDI folder it writes the CDI spec and answers with the CDI
  annotation instead of DeviceSpecs.

Service handlers are registered by hand (``grpc.method_handlers_generic_handler``) with the
generated messages, so this module stays typed; the generated ``api_pb2_grpc`` serves the tests
as an independent client. This module must never block the gRPC threads for long or touch real
devices.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tpfabric_deviceplugin import api_pb2, cdi
from tpfabric_deviceplugin.fake_world import FakeHca, FakeRdmaWorld, fake_hcas

__all__ = [
    "API_VERSION",
    "HEALTHY",
    "UNHEALTHY",
    "FakeRdmaDevicePlugin",
    "PluginConfig",
    "preferred_allocation",
]

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
_RPC_TIMEOUT_S = 5.0
_STREAM_WAKEUP_S = 0.5


@dataclass(frozen=True)
class PluginConfig:
    """How the fake plugin presents itself and where it keeps its files."""

    resource_name: str = "rdma/ib"
    hca_count: int = 8
    numa_nodes: int = 2
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    kubelet_socket: str = "kubelet.sock"
    endpoint: str = "tpfabric-fake-rdma.sock"
    world_dir: Path = Path("/var/run/tpfabric/fake-rdma")
    container_root: str = "/run/tpfabric/fake-rdma"
    """Where Allocate mounts the fake tree in the container (the init program's ``--root``)."""
    device_nodes: bool = False
    """Create character devices and return DeviceSpecs (needs CAP_MKNOD), else files as mounts."""
    health_file: Path | None = None
    pre_start_required: bool = False
    poll_interval_s: float = 0.5
    mode: str = "exclusive"
    """``exclusive`` (one ID per HCA) or ``shared`` (as k8s-rdma-shared-dev-plugin)."""
    rdma_hca_max: int = 1000
    """Shared mode: how many pods' containers may share the HCAs (IDs advertised)."""
    cdi_dir: Path | None = None
    """Shared mode: write the CDI spec here and allocate by CDI annotation."""


def preferred_allocation(
    available: list[str], must_include: list[str], size: int, numa_of: dict[str, int]
) -> list[str]:
    """Return ``size`` device IDs: ``must_include`` first, then packed onto few NUMA nodes."""
    chosen = [device for device in must_include if device in numa_of]
    remaining = [device for device in available if device not in chosen and device in numa_of]
    per_node = Counter(numa_of[device] for device in remaining)
    wanted_nodes = {numa_of[device] for device in chosen}
    remaining.sort(
        key=lambda d: (
            numa_of[d] not in wanted_nodes,
            -per_node[numa_of[d]],
            numa_of[d],
            int(d.rsplit("_", 1)[-1]) if d.rsplit("_", 1)[-1].isdigit() else 0,
            d,
        )
    )
    return chosen + remaining[: max(0, size - len(chosen))]


class FakeRdmaDevicePlugin:
    """N fake HCAs advertised to the kubelet; thread-safe; ``start``/``stop`` may be repeated."""

    def __init__(self, config: PluginConfig) -> None:
        if config.mode not in ("exclusive", "shared"):
            raise ValueError(f"mode {config.mode!r}: choose exclusive or shared")
        if config.rdma_hca_max < 0:
            raise ValueError(f"rdmaHcaMax must not be negative, not {config.rdma_hca_max}")
        self.config = config
        self.hcas: tuple[FakeHca, ...] = fake_hcas(config.hca_count, config.numa_nodes)
        self._by_name = {hca.name: hca for hca in self.hcas}
        self.world = FakeRdmaWorld(config.world_dir, self.hcas, device_nodes=config.device_nodes)
        self._health = dict.fromkeys(self._by_name, HEALTHY)
        self._changed = threading.Condition()
        self._version = 0
        self._stopping = threading.Event()
        self._server: Any = None
        self._watcher: threading.Thread | None = None
        self._kubelet_identity: tuple[int, int] | None = None
        self._health_mtime: int | None = None
        self.registrations = 0
        """How many times Register succeeded (tests and logs watch it)."""

    @property
    def socket_path(self) -> Path:
        """Return the path of this plugin's own gRPC socket."""
        return self.config.plugin_dir / self.config.endpoint

    @property
    def kubelet_socket_path(self) -> Path:
        """Return the path of the kubelet's registration socket."""
        return self.config.plugin_dir / self.config.kubelet_socket

    @property
    def registered(self) -> bool:
        """Return whether the plugin is registered with the kubelet socket that exists now."""
        return self._kubelet_identity is not None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Create the fake world, serve, register when the kubelet is there, and start watching."""
        self._stopping.clear()
        self.world.create()
        if self.config.mode == "shared" and self.config.cdi_dir is not None:
            self.write_cdi_spec()
        if self.config.health_file is not None:
            self.reload_health_file()
        self._serve()
        self._register_if_possible()
        self._watcher = threading.Thread(target=self._watch, name="fake-rdma-watch", daemon=True)
        self._watcher.start()

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop watching and serving; open ListAndWatch streams end."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None
        self._stop_server(grace_s)

    def _serve(self) -> None:
        self.config.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="dp"))
        server.add_generic_rpc_handlers((self._handlers(),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def _stop_server(self, grace_s: float) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait(timeout=grace_s + 5)
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    def _kubelet_socket_identity(self) -> tuple[int, int] | None:
        try:
            status = self.kubelet_socket_path.stat()
        except FileNotFoundError:
            return None
        return status.st_ino, status.st_ctime_ns

    def _register_if_possible(self) -> bool:
        identity = self._kubelet_socket_identity()
        if identity is None:
            self._kubelet_identity = None
            return False
        request = api_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.config.endpoint,
            resource_name=self.config.resource_name,
            options=self._options(),
        )
        with grpc.insecure_channel(f"unix://{self.kubelet_socket_path}") as channel:
            register = channel.unary_unary(
                "/v1beta1.Registration/Register",
                request_serializer=api_pb2.RegisterRequest.SerializeToString,
                response_deserializer=api_pb2.Empty.FromString,
            )
            try:
                register(request, timeout=_RPC_TIMEOUT_S)
            except grpc.RpcError as err:
                log.warning("registration with %s failed: %s", self.kubelet_socket_path, err)
                return False
        self._kubelet_identity = identity
        self.registrations += 1
        log.info("registered %s at %s", self.config.resource_name, self.socket_path)
        return True

    def _watch(self) -> None:
        while not self._stopping.wait(self.config.poll_interval_s):
            try:
                self._watch_once()
            except Exception:  # the watcher must outlive any single failure
                log.exception("fake RDMA plugin watcher")

    def _watch_once(self) -> None:
        identity = self._kubelet_socket_identity()
        if identity is None:
            self._kubelet_identity = None  # kubelet down: wait for its new socket
        elif identity != self._kubelet_identity or not self.socket_path.exists():
            # A new kubelet wiped the folder (our socket too): serve afresh, then register.
            self._stop_server(grace_s=0.2)
            self._serve()
            self._register_if_possible()
        if self.config.health_file is not None:
            self.reload_health_file(only_if_changed=True)

    # -- health ----------------------------------------------------------------------------

    def health(self) -> dict[str, str]:
        """Return a copy of device ID -> ``Healthy``/``Unhealthy``."""
        with self._changed:
            return dict(self._health)

    def set_health(self, name: str, *, healthy: bool) -> None:
        """Set one device's health, update its fake port and push the list to every stream."""
        if name not in self._by_name:
            raise KeyError(f"unknown device {name!r}; devices are {', '.join(self._by_name)}")
        self._apply_health({name: HEALTHY if healthy else UNHEALTHY})

    def _apply_health(self, updates: dict[str, str]) -> None:
        with self._changed:
            changed = {n: h for n, h in updates.items() if self._health.get(n) != h}
            if not changed:
                return
            self._health.update(changed)
            for name, health in changed.items():
                self.world.set_port_state(self._by_name[name], healthy=health == HEALTHY)
            self._version += 1
            self._changed.notify_all()

    def reload_health_file(self, *, only_if_changed: bool = False) -> None:
        """Re-read the health file: ``<device> Unhealthy`` lines; devices not named are healthy."""
        path = self.config.health_file
        if path is None:
            return
        try:
            mtime: int | None = path.stat().st_mtime_ns
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            mtime, text = None, ""
        if only_if_changed and mtime == self._health_mtime:
            return
        self._health_mtime = mtime
        updates = dict.fromkeys(self._by_name, HEALTHY)
        for line in text.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] in updates and fields[1] in (HEALTHY, UNHEALTHY):
                updates[fields[0]] = fields[1]
            elif fields and not line.lstrip().startswith("#"):
                log.warning("%s: ignoring %r (want '<device> Healthy|Unhealthy')", path, line)
        self._apply_health(updates)

    # -- the DevicePlugin service ----------------------------------------------------------

    def _options(self) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=self.config.pre_start_required,
            get_preferred_allocation_available=self.config.mode == "exclusive",
        )

    @property
    def shared(self) -> bool:
        """Return whether the plugin runs in the shared (k8s-rdma-shared-dev-plugin) mode."""
        return self.config.mode == "shared"

    def write_cdi_spec(self) -> Path:
        """Return the CDI spec file written for every HCA (shared mode)."""
        devices = {
            hca.pci_address: [
                (f"/dev/infiniband/{path.name}", str(path))
                for path in (
                    self.world.device_file(hca),
                    self.world.umad_file(hca),
                    self.world.rdma_cm,
                )
            ]
            for hca in self.hcas
        }
        assert self.config.cdi_dir is not None
        return cdi.write_spec(self.config.cdi_dir, cdi.spec(self.config.resource_name, devices))

    def _device_list(self) -> api_pb2.ListAndWatchResponse:
        if self.shared:
            return api_pb2.ListAndWatchResponse(
                devices=[
                    api_pb2.Device(ID=str(n), health=HEALTHY)
                    for n in range(self.config.rdma_hca_max)
                ]
            )
        return api_pb2.ListAndWatchResponse(
            devices=[
                api_pb2.Device(
                    ID=hca.name,
                    health=self._health[hca.name],
                    topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=hca.numa_node)]),
                )
                for hca in self.hcas
            ]
        )

    def get_device_plugin_options(
        self, request: api_pb2.Empty, context: Any
    ) -> api_pb2.DevicePluginOptions:
        """Return the plugin's options (preferred allocation on, PreStartContainer as set)."""
        return self._options()

    def list_and_watch(
        self, request: api_pb2.Empty, context: Any
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        """Return a stream of the device list: now, then after every health change."""
        seen = -1
        while not self._stopping.is_set() and context.is_active():
            with self._changed:
                if self._version == seen:
                    self._changed.wait(timeout=_STREAM_WAKEUP_S)
                if self._version == seen:
                    continue
                seen = self._version
                response = self._device_list()
            yield response

    def get_preferred_allocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        """Return, per container, the requested number of devices packed onto few NUMA nodes."""
        if self.shared:  # the shared plugin has no preference: its IDs are interchangeable
            return api_pb2.PreferredAllocationResponse()
        numa_of = {hca.name: hca.numa_node for hca in self.hcas}
        return api_pb2.PreferredAllocationResponse(
            container_responses=[
                api_pb2.ContainerPreferredAllocationResponse(
                    deviceIDs=preferred_allocation(
                        list(req.available_deviceIDs),
                        list(req.must_include_deviceIDs),
                        req.allocation_size,
                        numa_of,
                    )
                )
                for req in request.container_requests
            ]
        )

    def allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        """Return, per container, the mounts/devices/env that expose the allocated fake HCAs."""
        responses = []
        for container in request.container_requests:
            if self.shared:
                unknown = [
                    d
                    for d in container.devices_ids
                    if not d.isdigit() or int(d) >= self.config.rdma_hca_max
                ]
                if unknown:
                    context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"unknown device(s): {', '.join(unknown)}",
                    )
                responses.append(self._container_allocation([h.name for h in self.hcas]))
                continue
            unknown = [d for d in container.devices_ids if d not in self._by_name]
            if unknown:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"unknown device(s): {', '.join(unknown)}"
                )
            responses.append(self._container_allocation(list(container.devices_ids)))
        return api_pb2.AllocateResponse(container_responses=responses)

    def _container_allocation(self, names: list[str]) -> api_pb2.ContainerAllocateResponse:
        root = self.config.container_root.rstrip("/")
        files = []
        for name in names:
            files.append(self.world.device_file(self._by_name[name]))
            files.append(self.world.umad_file(self._by_name[name]))
        files.append(self.world.rdma_cm)
        mounts = [
            api_pb2.Mount(
                container_path=f"{root}/sys", host_path=str(self.world.root / "sys"), read_only=True
            )
        ]
        mounts += [
            api_pb2.Mount(
                container_path=f"{root}/dev/infiniband/{path.name}",
                host_path=str(path),
                read_only=True,
            )
            for path in files
        ]
        devices = (
            [
                api_pb2.DeviceSpec(
                    container_path=f"/dev/infiniband/{path.name}",
                    host_path=str(path),
                    permissions="rwm" if self.shared else "rw",
                )
                for path in files
            ]
            if self.config.device_nodes
            else []
        )
        annotations = {"tpfabric.io/fake-rdma-devices": ",".join(names)}
        if self.shared and self.config.cdi_dir is not None:
            devices = []  # the runtime injects the nodes from the CDI spec
            annotations.update(
                cdi.annotation(
                    self.config.resource_name, [self._by_name[n].pci_address for n in names]
                )
            )
        return api_pb2.ContainerAllocateResponse(
            envs={
                "TPFABRIC_HOST_ROOT": root,
                "TPFABRIC_PROCESS_ROOT": "/",
                "TPFABRIC_FAKE_RDMA_DEVICES": ",".join(names),
            },
            mounts=mounts,
            devices=devices,
            annotations=annotations,
        )

    def pre_start_container(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        """Return an empty response: fake devices need no reset before a container starts."""
        return api_pb2.PreStartContainerResponse()

    def _handlers(self) -> Any:
        def unary(method: Callable[[Any, Any], Any], request_type: Any, response_type: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                method,
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            "v1beta1.DevicePlugin",
            {
                "GetDevicePluginOptions": unary(
                    self.get_device_plugin_options, api_pb2.Empty, api_pb2.DevicePluginOptions
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    request_deserializer=api_pb2.Empty.FromString,
                    response_serializer=api_pb2.ListAndWatchResponse.SerializeToString,
                ),
                "GetPreferredAllocation": unary(
                    self.get_preferred_allocation,
                    api_pb2.PreferredAllocationRequest,
                    api_pb2.PreferredAllocationResponse,
                ),
                "Allocate": unary(self.allocate, api_pb2.AllocateRequest, api_pb2.AllocateResponse),
                "PreStartContainer": unary(
                    self.pre_start_container,
                    api_pb2.PreStartContainerRequest,
                    api_pb2.PreStartContainerResponse,
                ),
            },
        )
