"""The fake RDMA devices on disk: a sysfs/devfs-like tree the RDMA init container can discover.

Layout below the world directory (the same relative paths the init program reads below its root)::

    sys/devices/pci0000:BB/0000:BB:01.0/0000:CC:00.0/{vendor,class,numa_node}   one per HCA
    sys/bus/pci/devices/0000:CC:00.0 -> ../../../devices/...                      (relative links)
    sys/class/infiniband/mlx5_N/{node_guid,device,ports/1/{state,phys_state,rate,link_layer,gids/0,
        gid_attrs/types/0}}
    sys/class/infiniband_verbs/uverbsN/ibdev
    sys/class/infiniband_mad/umadN/ibdev
    dev/infiniband/{uverbsN,umadN,rdma_cm}  regular files, or character devices (1:3, like
                                        /dev/null) with ``device_nodes`` so runc can pass them

Unhealthy HCAs get their port DOWN, so what the kubelet hears and what the init program reads
agree. This module writes only below its root and must never touch real devices.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FakeHca", "FakeRdmaWorld", "fake_hcas"]

_NULL_DEVICE = (1, 3)  # /dev/null's numbers: harmless if anything ever opens the fake node


@dataclass(frozen=True)
class FakeHca:
    """One advertised HCA: its device ID (``mlx5_N``), uverbs index and NUMA node."""

    name: str
    index: int
    numa_node: int

    @property
    def uverbs(self) -> str:
        """Return the uverbs device name of this HCA (``uverbsN``)."""
        return f"uverbs{self.index}"

    @property
    def umad(self) -> str:
        """Return the MAD device name of this HCA (``umadN``)."""
        return f"umad{self.index}"

    @property
    def pci_address(self) -> str:
        """Return the PCI address the fake tree gives this HCA (the CDI device name)."""
        return f"0000:{0x10 + self.index * 0x10 + 1:02x}:00.0"


def fake_hcas(count: int, numa_nodes: int) -> tuple[FakeHca, ...]:
    """Return ``count`` HCAs spread over ``numa_nodes`` in blocks (first half on node 0, ...)."""
    if count < 1 or numa_nodes < 1:
        raise ValueError("need at least one HCA and one NUMA node")
    return tuple(FakeHca(f"mlx5_{i}", i, i * numa_nodes // count) for i in range(count))


class FakeRdmaWorld:
    """Creates and updates the tree of fake HCAs below ``root``."""

    def __init__(
        self,
        root: Path,
        hcas: tuple[FakeHca, ...],
        *,
        rate: str = "400 Gb/sec (4X NDR)",
        device_nodes: bool = False,
    ) -> None:
        self.root = root
        self.hcas = hcas
        self.rate = rate
        self.device_nodes = device_nodes

    def device_file(self, hca: FakeHca) -> Path:
        """Return the path of the HCA's fake ``/dev/infiniband/uverbsN``."""
        return self.root / "dev" / "infiniband" / hca.uverbs

    def umad_file(self, hca: FakeHca) -> Path:
        """Return the path of the HCA's fake ``/dev/infiniband/umadN``."""
        return self.root / "dev" / "infiniband" / hca.umad

    @property
    def rdma_cm(self) -> Path:
        """Return the path of the fake ``/dev/infiniband/rdma_cm``."""
        return self.root / "dev" / "infiniband" / "rdma_cm"

    def _port_dir(self, hca: FakeHca) -> Path:
        return self.root / "sys" / "class" / "infiniband" / hca.name / "ports" / "1"

    def _device_file(self, path: Path) -> None:
        if path.exists() or path.is_symlink():
            return
        if self.device_nodes:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*_NULL_DEVICE))
        else:
            path.touch()

    def create(self) -> None:
        """Write the whole tree (idempotent: existing files are rewritten, nodes kept)."""
        (self.root / "dev" / "infiniband").mkdir(parents=True, exist_ok=True)
        for hca in self.hcas:
            bus = 0x10 + hca.index * 0x10
            pci = (
                self.root
                / "sys/devices"
                / f"pci0000:{bus:02x}"
                / f"0000:{bus:02x}:01.0"
                / hca.pci_address
            )
            files = {
                pci / "vendor": "0x15b3",
                pci / "class": "0x020700",
                pci / "numa_node": str(hca.numa_node),
            }
            guid = f"{0xFA4E000000000000 + hca.index:016x}"
            dev = self.root / "sys" / "class" / "infiniband" / hca.name
            files[dev / "node_guid"] = ":".join(guid[i : i + 4] for i in range(0, 16, 4))
            port = self._port_dir(hca)
            files[port / "rate"] = self.rate
            files[port / "link_layer"] = "InfiniBand"
            files[port / "gids" / "0"] = "fe80:0000:0000:0000:" + ":".join(
                guid[i : i + 4] for i in range(0, 16, 4)
            )
            files[port / "gid_attrs" / "types" / "0"] = "IB/RoCE v1"
            verbs = self.root / "sys" / "class" / "infiniband_verbs" / hca.uverbs
            files[verbs / "ibdev"] = hca.name
            mad = self.root / "sys" / "class" / "infiniband_mad" / hca.umad
            files[mad / "ibdev"] = hca.name
            for path, text in files.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text + "\n")
            self._link(dev / "device", pci)
            self._link(self.root / "sys" / "bus" / "pci" / "devices" / pci.name, pci)
            self.set_port_state(hca, healthy=True)
            self._device_file(self.device_file(hca))
            self._device_file(self.umad_file(hca))
        self._device_file(self.rdma_cm)

    @staticmethod
    def _link(link: Path, target: Path) -> None:
        if link.is_symlink():
            return
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))

    def set_port_state(self, hca: FakeHca, *, healthy: bool) -> None:
        """Write the HCA's port 1 as ACTIVE/LinkUp when healthy, else DOWN/Disabled."""
        port = self._port_dir(hca)
        port.mkdir(parents=True, exist_ok=True)
        (port / "state").write_text("4: ACTIVE\n" if healthy else "1: DOWN\n")
        (port / "phys_state").write_text("5: LinkUp\n" if healthy else "3: Disabled\n")
