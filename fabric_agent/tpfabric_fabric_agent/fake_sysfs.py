"""A fake ``/sys`` of one GPU node, in the real file layout, that tests and benchmarks mutate.

:class:`FakeSysfs` writes what a DGX-class node shows (kernel
Documentation/ABI/stable/sysfs-class-infiniband and sysfs-bus-pci):

- ``class/infiniband/<hca>/ports/<p>/{state,phys_state,rate,link_layer,counters/*}`` with
  ``4: ACTIVE``, ``5: LinkUp``, ``400 Gb/sec (4X NDR)`` and every error counter and
  ``port_xmit_wait`` at 0, the driver's ``hw_counters/*`` at 0 (the transport, retransmission and
  congestion ones; ``hw_counters`` names a subset, as an older driver exposes), ``gids/0``
  (``fe80::<port GUID>``, port *p*'s GUID the node GUID + *p* - 1), and per port a netdev
  below the PCI function (``dev_port``, ``carrier_changes``, ``statistics/rx_crc_errors``): an
  IPoIB ``ibp<bus>s0``, or with ``link_layer="Ethernet"`` (RoCE) ``enp<bus>s0f<p-1>np<p-1>`` with
  what MLNX_OFED's mlx5 shows of its QoS: ``ecn/roce_np/enable/<prio>`` and
  ``ecn/roce_rp/enable/<prio>`` (1 on every priority) and ``qos/trust`` (``dscp``). PFC is not in
  sysfs (the kernel shows it through DCB netlink only): :meth:`FakeSysfs.pfc_enabled` answers
  what the agent's DCB reader would, from :attr:`FakeSysfs.pfc` (priority 3 on every RoCE
  netdev). HCAs are
  ``mlx5_0..`` by default, or named as a real node names them (:meth:`FakeSysfs.dgx_h100`: the
  compute HCAs ``mlx5_0,3,4,5,6,9,10,11`` and the storage ones between them, each storage HCA
  on a root port of its own, which the compute-rail rule leaves out);
- ``class/infiniband/mlx5_<i>/device`` as a symlink into ``devices/pci0000:00/...`` like the
  kernel's, and ``bus/pci/devices/<bdf>`` symlinks to the same directories; HCAs and GPUs share
  PCIe switch ports ``0000:00:<s+1>.0`` in order (a DGX: GPU *i*'s NIC is HCA *i*; with 4 HCAs
  and 2 GPUs each GPU's port holds two HCAs), so the agent's compute-rail rule keeps them all;
- per HCA and GPU ``{current,max}_link_{speed,width}`` (``32.0 GT/s PCIe``, ``16``), ``vendor``
  and ``class``.

It only ever writes below its own root.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tpfabric_core.fabric.link_samples import (
    CONGESTION_HW_COUNTERS,
    ERROR_COUNTERS,
    HW_COUNTERS,
    RETRANSMISSION_COUNTERS,
)

__all__ = ["DGX_H100_COMPUTE", "DGX_H100_STORAGE", "DRIVER_COUNTERS", "FakeSysfs"]

_UP = ("4: ACTIVE", "5: LinkUp")
_DOWN = ("1: DOWN", "2: Polling")


#: a DGX H100's compute HCAs, in PCI (and GPU) order: storage and in-band HCAs take the gaps
DGX_H100_COMPUTE = (
    "mlx5_0",
    "mlx5_3",
    "mlx5_4",
    "mlx5_5",
    "mlx5_6",
    "mlx5_9",
    "mlx5_10",
    "mlx5_11",
)
DGX_H100_STORAGE = ("mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8")
_NODE_GUID = 0xB83FD20300000001
#: every driver counter a current mlx5 exposes of those the agent reads
DRIVER_COUNTERS = (*HW_COUNTERS, *RETRANSMISSION_COUNTERS, *CONGESTION_HW_COUNTERS)
_PRIORITIES = range(8)


class FakeSysfs:
    """A node's ``/sys`` below ``root`` with ``hcas`` HCAs (a count, or their names) of
    ``ports`` ports and ``gpus`` GPUs; ``storage`` HCAs sit on root ports of their own; HCA *i*'s
    node GUID is ``node_guid`` + *i* << 16."""

    def __init__(
        self,
        root: Path,
        *,
        hcas: int | Sequence[str] = 8,
        ports: int = 1,
        gpus: int = 8,
        rate: str = "400 Gb/sec (4X NDR)",
        storage: Sequence[str] = (),
        node_guid: int = _NODE_GUID,
        link_layer: str = "InfiniBand",
        hw_counters: Sequence[str] = DRIVER_COUNTERS,
    ) -> None:
        self.root = root
        #: the PFC-enabled priorities of each RoCE netdev, as DCB netlink would report them
        self.pfc: dict[str, frozenset[int]] = {}
        self.netdevs: dict[tuple[str, int], Path] = {}
        self.pci_root = root / "devices" / "pci0000:00"
        compute = [f"mlx5_{i}" for i in range(hcas)] if isinstance(hcas, int) else list(hcas)
        self.compute = compute
        self.hcas = [*compute, *storage]
        self.gpus = [f"0000:{0x40 + i:02x}:00.0" for i in range(gpus)]
        slots = [self._slot(index, len(compute), gpus) for index in range(len(compute))]
        slots += [0x10 + index for index in range(len(storage))]  # no GPU below them
        for index, (hca, slot) in enumerate(zip(self.hcas, slots, strict=True)):
            bdf = f"0000:{0x10 + index:02x}:00.0"
            device = self._pci_device(bdf, slot, vendor="0x15b3", klass="0x020700")
            ib = root / "class" / "infiniband" / hca
            ib.mkdir(parents=True, exist_ok=True)
            link = ib / "device"
            if not link.is_symlink():
                link.symlink_to(os.path.relpath(device, ib))
            guid = f"{node_guid + (index << 16):016x}"
            (ib / "node_guid").write_text(":".join(guid[i : i + 4] for i in range(0, 16, 4)) + "\n")
            for port in range(1, ports + 1):
                directory = self.port_dir(hca, port)
                (directory / "counters").mkdir(parents=True, exist_ok=True)
                self.set_up(hca, port, up=True)
                self.set_rate(hca, port, rate)
                (directory / "link_layer").write_text(f"{link_layer}\n")
                port_guid = f"{node_guid + (index << 16) + port - 1:016x}"
                (directory / "gids").mkdir(exist_ok=True)
                (directory / "gids" / "0").write_text(
                    "fe80:0000:0000:0000:"
                    + ":".join(port_guid[i : i + 4] for i in range(0, 16, 4))
                    + "\n"
                )
                for name in (*ERROR_COUNTERS, "port_xmit_wait"):
                    self.set_counter(hca, port, name, 0)
                (directory / "hw_counters").mkdir(exist_ok=True)
                for name in hw_counters:
                    (directory / "hw_counters" / name).write_text("0\n")
                roce = link_layer == "Ethernet"
                name = (
                    f"enp{0x10 + index:x}s0f{port - 1}np{port - 1}"
                    if roce
                    else f"ibp{0x10 + index:x}s0{'' if port == 1 else 'd1'}"
                )
                netdev = device / "net" / name
                (netdev / "statistics").mkdir(parents=True, exist_ok=True)
                (netdev / "dev_port").write_text(f"{port - 1}\n")
                (netdev / "carrier_changes").write_text("1\n")
                (netdev / "statistics" / "rx_crc_errors").write_text("0\n")
                self.netdevs[(hca, port)] = netdev
                if roce:
                    self._roce_qos(netdev)
        for index, bdf in enumerate(self.gpus):
            slot = self._slot(index, gpus, len(compute))
            self._pci_device(bdf, slot, vendor="0x10de", klass="0x030200")

    def _roce_qos(self, netdev: Path) -> None:
        """Write what MLNX_OFED's mlx5 shows of a RoCE netdev's QoS: ECN on every priority,
        trust dscp; and PFC on priority 3 (DCB netlink's, kept in :attr:`pfc`)."""
        for point in ("roce_np", "roce_rp"):
            (netdev / "ecn" / point / "enable").mkdir(parents=True, exist_ok=True)
            for prio in _PRIORITIES:
                (netdev / "ecn" / point / "enable" / str(prio)).write_text("1\n")
        (netdev / "qos").mkdir(exist_ok=True)
        (netdev / "qos" / "trust").write_text("dscp\n")
        self.pfc[netdev.name] = frozenset({3})

    def netdev(self, hca: str, port: int = 1) -> str:
        """Return the name of the netdev of ``port`` of ``hca``."""
        return self.netdevs[(hca, port)].name

    def set_ecn(self, hca: str, port: int, prio: int, *, np: bool, rp: bool) -> None:
        """Turn ECN on or off on priority ``prio`` of a RoCE port's netdev, as notification
        point (``roce_np``) and reaction point (``roce_rp``)."""
        netdev = self.netdevs[(hca, port)]
        for point, on in (("roce_np", np), ("roce_rp", rp)):
            (netdev / "ecn" / point / "enable" / str(prio)).write_text(f"{int(on)}\n")

    def set_trust(self, hca: str, port: int, trust: str) -> None:
        """Write a RoCE port's netdev's ``qos/trust`` (``pcp`` or ``dscp``)."""
        (self.netdevs[(hca, port)] / "qos" / "trust").write_text(f"{trust}\n")

    def set_pfc(self, hca: str, port: int, priorities: Sequence[int]) -> None:
        """Set the PFC-enabled priorities of a RoCE port's netdev (what DCB netlink shows)."""
        self.pfc[self.netdevs[(hca, port)].name] = frozenset(priorities)

    def pfc_enabled(self, netdev: str) -> frozenset[int] | None:
        """Return the PFC-enabled priorities of ``netdev`` as the agent's DCB reader would,
        None for a netdev it cannot see."""
        return self.pfc.get(netdev)

    def hw_counter(self, hca: str, port: int, name: str) -> int:
        """Return the value of one driver counter (``hw_counters/<name>``)."""
        return int((self.port_dir(hca, port) / "hw_counters" / name).read_text())

    def add_hw(self, hca: str, port: int, name: str, count: int) -> None:
        """Add ``count`` events to one driver counter."""
        value = self.hw_counter(hca, port, name) + count
        (self.port_dir(hca, port) / "hw_counters" / name).write_text(f"{value}\n")

    @classmethod
    def dgx_h100(cls, root: Path, node_guid: int = _NODE_GUID) -> FakeSysfs:
        """Return a DGX H100's ``/sys``: 8 GPUs, each with its ConnectX-7 ``mlx5_0,3,4,5,6,9,10,
        11`` on its PCIe switch, and four storage HCAs (``mlx5_1,2,7,8``) on their own;
        ``node_guid``: the first HCA's (the others' follow), to tell nodes apart."""
        return cls(
            root, hcas=DGX_H100_COMPUTE, gpus=8, storage=DGX_H100_STORAGE, node_guid=node_guid
        )

    def port_guid(self, hca: str, port: int = 1) -> str:
        """Return the GUID of ``port`` of ``hca`` (16 hex digits), as its ``gids/0`` shows."""
        gid = (self.port_dir(hca, port) / "gids" / "0").read_text().strip()
        return gid.replace(":", "")[16:]

    @staticmethod
    def _slot(index: int, count: int, others: int) -> int:
        """Return the switch port of the ``index``-th of ``count`` devices sharing
        ``min(count, others)`` ports (all of them when there are no others) in order."""
        ports = min(count, others) or count
        return index * ports // count

    def _pci_device(self, bdf: str, slot: int, *, vendor: str, klass: str) -> Path:
        device = self.pci_root / f"0000:00:{slot % 31 + 1:02x}.0" / bdf
        device.mkdir(parents=True, exist_ok=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
        self._write_link(device, speed=32.0, width=16)
        (device / "max_link_speed").write_text("32.0 GT/s PCIe\n")
        (device / "max_link_width").write_text("16\n")
        listed = self.root / "bus" / "pci" / "devices"
        listed.mkdir(parents=True, exist_ok=True)
        if not (listed / bdf).is_symlink():
            (listed / bdf).symlink_to(os.path.relpath(device, listed))
        return device

    @staticmethod
    def _write_link(device: Path, *, speed: float, width: int) -> None:
        (device / "current_link_speed").write_text(f"{speed:.1f} GT/s PCIe\n")
        (device / "current_link_width").write_text(f"{width}\n")

    def port_dir(self, hca: str, port: int = 1) -> Path:
        """Return ``class/infiniband/<hca>/ports/<port>``."""
        return self.root / "class" / "infiniband" / hca / "ports" / str(port)

    def counter(self, hca: str, port: int, name: str) -> int:
        """Return the value of one counter."""
        return int((self.port_dir(hca, port) / "counters" / name).read_text())

    def set_counter(self, hca: str, port: int, name: str, value: int) -> None:
        """Write one counter (a clear is ``value=0``)."""
        (self.port_dir(hca, port) / "counters" / name).write_text(f"{value}\n")

    def add_errors(self, hca: str, port: int, name: str, count: int) -> None:
        """Add ``count`` events to one counter."""
        self.set_counter(hca, port, name, self.counter(hca, port, name) + count)

    def set_up(self, hca: str, port: int, *, up: bool) -> None:
        """Bring a port up (ACTIVE/LinkUp) or down (DOWN/Polling)."""
        state, phys = _UP if up else _DOWN
        (self.port_dir(hca, port) / "state").write_text(state + "\n")
        (self.port_dir(hca, port) / "phys_state").write_text(phys + "\n")

    def set_rate(self, hca: str, port: int, rate: str) -> None:
        """Write a port's ``rate``, e.g. ``200 Gb/sec (2X NDR)``."""
        (self.port_dir(hca, port) / "rate").write_text(rate + "\n")

    def set_pcie(self, bdf_or_hca: str, *, speed: float, width: int) -> None:
        """Retrain the PCIe link of an HCA (by name) or a GPU (by bus id)."""
        if bdf_or_hca in self.hcas:
            device = (self.root / "class" / "infiniband" / bdf_or_hca / "device").resolve()
        else:
            device = (self.root / "bus" / "pci" / "devices" / bdf_or_hca).resolve()
        self._write_link(device, speed=speed, width=width)
