"""Command line of the fake RDMA device plugin: flags, signals, and the serve-until-stopped loop.

``SIGUSR1`` re-reads the health file; ``SIGTERM``/``SIGINT`` stop the plugin and remove its
socket. This module only wires flags and signals to :class:`~tpfabric_deviceplugin.plugin.
FakeRdmaDevicePlugin`; it must never implement plugin behaviour itself.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from tpfabric_deviceplugin.plugin import DEFAULT_PLUGIN_DIR, FakeRdmaDevicePlugin, PluginConfig

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the plugin."""
    parser = argparse.ArgumentParser(
        prog="tpfabric-fake-rdma-device-plugin",
        description="Advertise fake RDMA HCAs to the kubelet (device-plugin API v1beta1).",
    )
    parser.add_argument("--resource-name", default="rdma/ib")
    parser.add_argument("--hcas", type=int, default=8, help="number of fake HCAs")
    parser.add_argument("--numa-nodes", type=int, default=2)
    parser.add_argument("--plugin-dir", type=Path, default=DEFAULT_PLUGIN_DIR)
    parser.add_argument("--kubelet-socket", default="kubelet.sock", help="name in --plugin-dir")
    parser.add_argument("--endpoint", default="tpfabric-fake-rdma.sock")
    parser.add_argument(
        "--world-dir",
        type=Path,
        default=Path("/var/run/tpfabric/fake-rdma"),
        help="host folder for the fake sysfs/devfs tree (must be the same path on the host)",
    )
    parser.add_argument("--container-root", default="/run/tpfabric/fake-rdma")
    parser.add_argument(
        "--device-nodes",
        action="store_true",
        help="create character devices and return DeviceSpecs (needs CAP_MKNOD)",
    )
    parser.add_argument("--health-file", type=Path, default=None)
    parser.add_argument("--pre-start-required", action="store_true")
    parser.add_argument(
        "--mode",
        choices=("exclusive", "shared"),
        default="exclusive",
        help="exclusive: one ID per HCA; shared: as k8s-rdma-shared-dev-plugin",
    )
    parser.add_argument(
        "--rdma-hca-max", type=int, default=1000, help="shared mode: IDs advertised (rdmaHcaMax)"
    )
    parser.add_argument(
        "--cdi-dir", type=Path, default=None, help="shared mode: write the CDI spec here"
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Return 0 after serving until SIGTERM/SIGINT."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    plugin = FakeRdmaDevicePlugin(
        PluginConfig(
            resource_name=args.resource_name,
            hca_count=args.hcas,
            numa_nodes=args.numa_nodes,
            plugin_dir=args.plugin_dir,
            kubelet_socket=args.kubelet_socket,
            endpoint=args.endpoint,
            world_dir=args.world_dir,
            container_root=args.container_root,
            device_nodes=args.device_nodes,
            health_file=args.health_file,
            pre_start_required=args.pre_start_required,
            mode=args.mode,
            rdma_hca_max=args.rdma_hca_max,
            cdi_dir=args.cdi_dir,
        )
    )
    stopped = threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    def on_reload(signum: int, frame: FrameType | None) -> None:
        plugin.reload_health_file()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_reload)
    plugin.start()
    stopped.wait()
    plugin.stop()
    return 0
