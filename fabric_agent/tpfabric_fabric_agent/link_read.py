"""Read, the first stage of link health: a node's fabric links from sysfs, HCA ports (state,
rate, width, error counters) and the PCIe links of its HCAs and GPUs.

Everything is read below a root that stands for ``/sys`` (the host's, mounted read-only into the
fabric agent, or a fixture tree in tests), from the files ``ibstat``, ``perfquery`` and ``lspci``
show:

- ``class/infiniband/<hca>/ports/<p>/{state,phys_state,rate,link_layer}``: ``4: ACTIVE``,
  ``5: LinkUp``, ``400 Gb/sec (4X NDR)``. The link width is the ``4X`` of the rate text: sysfs
  has no width file of its own, and a port that retrained on fewer lanes shows ``(2X NDR)``
  there; ``gids/0``, whose interface id is the port's GUID (read once, at start);
- ``class/infiniband/<hca>/ports/<p>/counters/<name>``: the IBTA PortCounters (kernel
  Documentation/ABI/stable/sysfs-class-infiniband);
- ``class/infiniband/<hca>/ports/<p>/hw_counters/<name>``: the driver's transport counters
  (mlx5: ``rnr_nak_retry_err``, ``local_ack_timeout_err``, ``roce_slow_restart``), its
  retransmission counters (``packet_seq_err``, ``out_of_sequence``, ``implied_nak_seq_err``,
  ``duplicate_request``, ``roce_adp_retrans``) and its congestion counters (``np_cnp_sent``,
  ``rp_cnp_handled``, ``np_ecn_marked_roce_packets``), with ``counters/port_xmit_wait``. Which of
  them a port has depends on the driver and its version (``roce_adp_retrans`` since kernel 5.6,
  the RoCE ones only on RoCE ports): a counter whose file is absent is *unread* (unknown, never
  zero) and named as such in the sample;
- the port's netdev (``device/net/<if>``, the one whose ``dev_port`` is the port number - 1):
  ``carrier_changes`` and ``statistics/rx_crc_errors`` (on RoCE ports the only PHY-side errors
  sysfs shows: the IB PMA counters do not see Ethernet PHY errors, and the pre-FEC ones,
  ``rx_symbol_err_phy``/``rx_corrected_bits_phy``, are only in ``ethtool -S``);
- ``class/infiniband/<hca>/device``: the link to the HCA's PCI function, whose
  ``{current,max}_link_{speed,width}`` say whether the PCIe link trained below what it can do
  (``16.0 GT/s PCIe``, ``16``), and whose parent (the upstream port it trains with) says what
  the slot can do; ``device/physfn`` marks an SR-IOV VF, ``device/device`` is the PCI id;
- GPUs: ``bus/pci/devices/<bdf>`` with vendor ``0x10de`` and a display/3D class.

Reading files is all this module may do: no tools, no network, no writes. Missing or unreadable
files become ``None``. What is read are core's records (:mod:`tpfabric_core.fabric.link_samples`);
judging them is :mod:`tpfabric_core.fabric.link_judge`'s, publishing the verdict
:mod:`tpfabric_core.fabric.link_publish`'s. :func:`read_sysfs_counters` reads a sysfs-style tree
once, for the CLI's fabric-wide snapshot (:mod:`tpfabric_core.fabric.link_snapshot_judge`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tpfabric_core.fabric.ibnetdiscover import normalize_guid
from tpfabric_core.fabric.link_samples import (
    CONGESTION_HW_COUNTERS,
    ERROR_COUNTERS,
    HW_COUNTERS,
    RETRANSMISSION_COUNTERS,
    WATCHED_COUNTERS,
    PcieLink,
    PortSample,
)
from tpfabric_core.fabric.link_snapshot_judge import PortCounters

__all__ = [
    "PciPlace",
    "SysfsGpu",
    "SysfsNic",
    "SysfsPort",
    "find_gpus",
    "hca_sort_key",
    "parse_rate",
    "port_netdevs",
    "read_gpu_places",
    "read_hca_ports",
    "read_nics",
    "read_pcie_links",
    "read_port_samples",
    "read_ports",
    "read_sysfs_counters",
]

NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller (datacenter GPUs), VGA controller
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec(?:\s*\((\d+)X\b)?")
_SPEED = re.compile(r"^\s*([0-9.]+)\s*GT/s")
_MLX_INDEX = re.compile(r"(\d+)$")
_MLX = re.compile(r"^mlx5_(\d+)$")
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HEX = re.compile(r"^[0-9a-f]+$")


def parse_rate(text: str) -> tuple[float | None, int | None]:
    """Return (Gb/s, lanes) of a sysfs ``rate``: ``400 Gb/sec (4X NDR)`` -> (400.0, 4)."""
    match = _RATE.match(text)
    if not match:
        return None, None
    return float(match[1]), int(match[2]) if match[2] else None


def _text(path: Path | str) -> str | None:
    # os.open/os.read, not Path.read_text: no text wrapper per file, a third of the CPU per
    # interval (a step reads ~10 files per port)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").strip()


def _int(path: Path | str) -> int | None:
    text = _text(path)
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def _after_colon(text: str | None) -> str:
    """Return ``ACTIVE`` from ``4: ACTIVE`` (sysfs prefixes states with their number)."""
    if text is None:
        return "UNKNOWN"
    return text.split(":", 1)[1].strip() if ":" in text else text


def _speed(path: Path) -> float | None:
    match = _SPEED.match(_text(path) or "")
    return float(match[1]) if match else None


def hca_sort_key(name: str) -> tuple[str, int]:
    """Return a key that orders ``mlx5_2`` before ``mlx5_10``."""
    match = _MLX_INDEX.search(name)
    return (name[: match.start()], int(match[1])) if match else (name, -1)


def _dirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def read_port_samples(sys_root: Path) -> list[PortSample]:
    """Return every port of every HCA under ``<sys_root>/class/infiniband``, HCAs in natural
    order, with the :data:`ERROR_COUNTERS` that exist (absent ones are left out)."""
    return read_hca_ports(sys_root / "class" / "infiniband")


def read_hca_ports(ib_class: Path) -> list[PortSample]:
    """Return the ports of the HCAs under ``ib_class`` (a ``class/infiniband`` folder or a copy
    of one), as :func:`read_port_samples` does."""
    result: list[PortSample] = []
    for device in sorted(_dirs(ib_class), key=lambda p: hca_sort_key(p.name)):
        ports = sorted(
            (p for p in _dirs(device / "ports") if p.name.isdigit()), key=lambda p: int(p.name)
        )
        for port_dir in ports:
            netdev = _port_netdev(device, int(port_dir.name))
            result.append(_port_sample(device.name, int(port_dir.name), port_dir, netdev))
    return result


#: the counters read from ``counters/`` and from ``hw_counters/``
_PORT_COUNTERS = (*ERROR_COUNTERS, "port_xmit_wait")
_DRIVER_COUNTERS = (*HW_COUNTERS, *RETRANSMISSION_COUNTERS, *CONGESTION_HW_COUNTERS)


def _port_sample(
    hca: str, number: int, port_dir: Path, netdev: Path | None, guid: str | None = None
) -> PortSample:
    base = str(port_dir)
    rate, width = parse_rate(_text(f"{base}/rate") or "")
    counters = {
        name: value
        for name in _PORT_COUNTERS
        if (value := _int(f"{base}/counters/{name}")) is not None
    }
    counters.update(
        (name, value)
        for name in _DRIVER_COUNTERS
        if (value := _int(f"{base}/hw_counters/{name}")) is not None
    )
    if netdev is not None:
        for name, path in (
            ("carrier_changes", f"{netdev}/carrier_changes"),
            ("rx_crc_errors", f"{netdev}/statistics/rx_crc_errors"),
        ):
            if (value := _int(path)) is not None:
                counters[name] = value
    return PortSample(
        hca=hca,
        port=number,
        state=_after_colon(_text(f"{base}/state")),
        phys_state=_after_colon(_text(f"{base}/phys_state")),
        rate_gbps=rate,
        width=width,
        link_layer=_text(f"{base}/link_layer") or "InfiniBand",
        counters=counters,
        unread=frozenset(WATCHED_COUNTERS) - set(counters),
        guid=guid,
        netdev=netdev.name if netdev is not None else None,
    )


def _port_netdev(device: Path, port: int) -> Path | None:
    """Return the netdev folder of port ``port`` of the HCA folder ``device``, None if none."""
    netdevs = _dirs(device / "device" / "net")
    if len(netdevs) == 1:
        return netdevs[0]
    return next((n for n in netdevs if _int(n / "dev_port") == port - 1), None)


def port_netdevs(sys_root: Path, ports: list[tuple[str, int]]) -> dict[tuple[str, int], Path]:
    """Return the netdev folder of each ``(hca, port)`` that has one (read once: netdevs of a
    port do not change while the agent runs)."""
    ib_class = sys_root / "class" / "infiniband"
    found = {}
    for hca, port in ports:
        netdev = _port_netdev(ib_class / hca, port)
        if netdev is not None:
            found[(hca, port)] = netdev
    return found


def read_ports(
    sys_root: Path,
    ports: list[tuple[str, int]],
    netdevs: dict[tuple[str, int], Path] | None = None,
    guids: Mapping[tuple[str, int], str | None] | None = None,
) -> list[PortSample]:
    """Return the samples of exactly ``ports`` (``(hca, port)``, in that order), as
    :func:`read_port_samples` reads them, without listing any folder; a port whose folder is
    gone reads as state ``UNKNOWN``. ``guids``: each port's GUID, read once at start."""
    ib_class = sys_root / "class" / "infiniband"
    netdevs = netdevs or {}
    guids = guids or {}
    return [
        _port_sample(
            hca,
            port,
            ib_class / hca / "ports" / str(port),
            netdevs.get((hca, port)),
            guids.get((hca, port)),
        )
        for hca, port in ports
        if (ib_class / hca).is_dir()
    ]


def _slot(device: Path) -> tuple[float | None, int | None]:
    """Return (max speed, max width) of the upstream port ``device`` trains with, if it says."""
    parent = device.resolve().parent
    return _speed(parent / "max_link_speed"), _int(parent / "max_link_width")


def _pcie(
    device: Path, role: str, name: str, slots: dict[str, tuple[float | None, int | None]]
) -> PcieLink:
    bdf = device.resolve().name if device.exists() else device.name
    if bdf not in slots:
        slots[bdf] = _slot(device)
    slot_speed, slot_width = slots[bdf]
    return PcieLink(
        bdf=bdf,
        role=role,
        name=name,
        speed_gts=_speed(device / "current_link_speed"),
        max_speed_gts=_speed(device / "max_link_speed"),
        width=_int(device / "current_link_width"),
        max_width=_int(device / "max_link_width"),
        path_max_speed_gts=slot_speed,
        path_max_width=slot_width,
    )


def find_gpus(sys_root: Path) -> list[str]:
    """Return the bus ids of the NVIDIA GPUs under ``<sys_root>/bus/pci/devices`` (vendor
    ``0x10de``, a display or 3D class), sorted. Reads two files per PCI device: call it once,
    GPUs do not come and go between intervals."""
    pci = sys_root / "bus" / "pci" / "devices"
    return sorted(
        device.name
        for device in _dirs(pci)
        if _text(device / "vendor") == NVIDIA_VENDOR
        and (_text(device / "class") or "").startswith(_GPU_CLASSES)
    )


def read_pcie_links(
    sys_root: Path,
    hcas: list[str] | None = None,
    gpus: list[str] | None = None,
    slots: dict[str, tuple[float | None, int | None]] | None = None,
) -> list[PcieLink]:
    """Return the PCIe links of the HCAs (``hcas``, default every one) and of the GPUs (``gpus``
    by bus id, default :func:`find_gpus`), each with what its upstream port can do.

    A device without ``current_link_speed`` (a virtual function, soft-RoCE) is left out.
    ``slots`` caches the upstream ports' maxima by bus id (they do not change): pass the same
    dict every interval to read them once.
    """
    slots = {} if slots is None else slots
    result: list[PcieLink] = []
    ib_class = sys_root / "class" / "infiniband"
    names = hcas if hcas is not None else [p.name for p in _dirs(ib_class)]
    for name in sorted(names, key=hca_sort_key):
        device = ib_class / name / "device"
        if (device / "current_link_speed").is_file():
            result.append(_pcie(device, "hca", name, slots))
    pci = sys_root / "bus" / "pci" / "devices"
    result.extend(
        _pcie(pci / bdf, "gpu", bdf, slots)
        for bdf in (find_gpus(sys_root) if gpus is None else gpus)
        if (pci / bdf / "current_link_speed").is_file()
    )
    return result


@dataclass(frozen=True, slots=True)
class PciPlace:
    """Where a PCI function sits: bus id, bridges from the root port down, root complex, NUMA."""

    bdf: str
    bridges: tuple[str, ...]
    root_complex: str
    numa_node: int | None


@dataclass(frozen=True, slots=True)
class SysfsPort:
    """A port's number and logical state, what the compute-rail rule needs of it, and its GUID
    (the interface id of an InfiniBand port's GID 0: how the node's rail map names it)."""

    number: int
    state: str
    link_layer: str = "InfiniBand"
    guid: str | None = None


@dataclass(frozen=True, slots=True)
class SysfsNic:
    """An RDMA device as the compute-rail rule sees it (what it is and where it sits)."""

    name: str
    node_guid: str | None
    pci: PciPlace | None
    ports: tuple[SysfsPort, ...]
    pci_device_id: str | None
    hca_type: str | None
    virtual_function: bool


@dataclass(frozen=True, slots=True)
class SysfsGpu:
    """An NVIDIA GPU's bus id and PCI place."""

    bdf: str
    pci: PciPlace | None


def _place(sys_root: Path, device: Path) -> PciPlace | None:
    """Return the PCI place a ``device`` link (or PCI device folder) resolves to."""
    if not device.exists():
        return None
    resolved = device.resolve()
    try:
        parts = resolved.relative_to((sys_root / "devices").resolve()).parts
    except ValueError:
        return None
    if not parts or not parts[0].startswith("pci") or not _BDF.match(parts[-1]):
        return None  # a virtual device (soft-RoCE) or a VMBus path: no PCI tree to read
    chain = [part.lower() for part in parts[1:] if _BDF.match(part)]
    numa = _int(resolved / "numa_node")
    return PciPlace(
        chain[-1], tuple(chain[:-1]), parts[0], numa if numa is not None and numa >= 0 else None
    )


def _port_guid(gid: str | None) -> str | None:
    """Return the port GUID of a link-local GID 0 (``fe80::<16 hex digits>``), else None."""
    digits = (gid or "").replace(":", "").lower()
    if len(digits) != 32 or not digits.startswith("fe80") or not _HEX.match(digits):
        return None
    return digits[16:]


def read_nics(sys_root: Path) -> list[SysfsNic]:
    """Return every RDMA device under ``class/infiniband`` in natural order, with its PCI place,
    PCI id, hca_type, node GUID, whether it is a VF and its ports' states. Read once: what a NIC
    is and where it sits does not change while the agent runs."""
    ib_class = sys_root / "class" / "infiniband"
    nics = []
    for device in sorted(_dirs(ib_class), key=lambda p: hca_sort_key(p.name)):
        ports = tuple(
            SysfsPort(
                int(port.name),
                _after_colon(_text(port / "state")),
                _text(port / "link_layer") or "InfiniBand",
                _port_guid(_text(port / "gids" / "0")),
            )
            for port in sorted(
                (p for p in _dirs(device / "ports") if p.name.isdigit()), key=lambda p: int(p.name)
            )
        )
        nics.append(
            SysfsNic(
                name=device.name,
                node_guid=_text(device / "node_guid"),
                pci=_place(sys_root, device / "device"),
                ports=ports,
                pci_device_id=_text(device / "device" / "device"),
                hca_type=_text(device / "hca_type"),
                virtual_function=(device / "device" / "physfn").exists(),
            )
        )
    return nics


def read_gpu_places(sys_root: Path, gpus: list[str] | None = None) -> list[SysfsGpu]:
    """Return the PCI place of each GPU (``gpus`` by bus id, default :func:`find_gpus`)."""
    pci = sys_root / "bus" / "pci" / "devices"
    return [
        SysfsGpu(bdf, _place(sys_root, pci / bdf))
        for bdf in (find_gpus(sys_root) if gpus is None else gpus)
    ]


def read_sysfs_counters(root: Path, node: str | None = None) -> list[PortCounters]:
    """Return the counters of every HCA port under a sysfs-style ``root``
    (``<root>/<hca>/ports/<p>/counters/{symbol_error,link_downed}`` and ``.../rate``).

    An HCA is named by ``<root>/<hca>/node_guid`` when present, else by ``node`` and its
    ``mlx5_<n>`` name (rail n); others are skipped.
    """
    result: list[PortCounters] = []
    for sample in read_hca_ports(root):
        guid_file = root / sample.hca / "node_guid"
        ident: dict[str, object]
        if guid_file.is_file():
            ident = {"hca": normalize_guid(guid_file.read_text()), "port": sample.port}
        elif node is not None and (match := _MLX.match(sample.hca)):
            ident = {"node": node, "rail": int(match[1])}
        else:
            continue
        result.append(
            PortCounters.model_validate(
                ident
                | {
                    "symbol_errors": sample.counters.get("symbol_error", 0),
                    "link_downed": sample.counters.get("link_downed", 0),
                    "rate_gbps": sample.rate_gbps,
                }
            )
        )
    return result
