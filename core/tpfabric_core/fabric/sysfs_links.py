"""Read a node's fabric links from sysfs: HCA ports (state, rate, width, error counters) and the
PCIe links of its HCAs and GPUs.

Everything is read below a root that stands for ``/sys`` (the host's, mounted read-only into the
fabric agent, or a fixture tree in tests), from the files ``ibstat``, ``perfquery`` and ``lspci``
show:

- ``class/infiniband/<hca>/ports/<p>/{state,phys_state,rate,link_layer}``: ``4: ACTIVE``,
  ``5: LinkUp``, ``400 Gb/sec (4X NDR)``. The link width is the ``4X`` of the rate text: sysfs has
  no width file of its own, and a port that retrained on fewer lanes shows ``(2X NDR)`` there;
- ``class/infiniband/<hca>/ports/<p>/counters/<name>``: the IBTA PortCounters (kernel
  Documentation/ABI/stable/sysfs-class-infiniband);
- ``class/infiniband/<hca>/device``: the link to the HCA's PCI function, whose
  ``{current,max}_link_{speed,width}`` say whether the PCIe link trained below what it can do
  (``16.0 GT/s PCIe``, ``16``);
- GPUs: ``bus/pci/devices/<bdf>`` with vendor ``0x10de`` and a display/3D class.

Reading files is all this module may do: no tools, no network, no writes. Missing or unreadable
files become ``None``; judging what was read is :mod:`tpfabric_core.fabric.link_judgement`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ERROR_COUNTERS",
    "PcieLink",
    "PortSample",
    "find_gpus",
    "hca_sort_key",
    "parse_rate",
    "read_hca_ports",
    "read_pcie_links",
    "read_port_samples",
]

#: The error counters the agent watches, by their sysfs names.
ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
)
NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller (datacenter GPUs), VGA controller
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec(?:\s*\((\d+)X\b)?")
_SPEED = re.compile(r"^\s*([0-9.]+)\s*GT/s")
_MLX_INDEX = re.compile(r"(\d+)$")


@dataclass(frozen=True, slots=True)
class PortSample:
    """One HCA port as sysfs shows it at one moment."""

    hca: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED (the text after ``4: ``)
    phys_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None
    width: int | None  # lanes: 4 for ``4X``
    link_layer: str = "InfiniBand"
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """Return ``mlx5_3 port 1``, the name messages use."""
        return f"{self.hca} port {self.port}"

    @property
    def up(self) -> bool:
        """Return whether the port carries traffic: ACTIVE, and physically LinkUp (or no
        ``phys_state`` file to say otherwise)."""
        return self.state.upper() == "ACTIVE" and self.phys_state.lower() in ("linkup", "unknown")


@dataclass(frozen=True, slots=True)
class PcieLink:
    """The PCIe link of one HCA or GPU: what it trained at and what it can do."""

    bdf: str
    role: str  # "hca" or "gpu"
    name: str  # mlx5_3 for an HCA, the bus id for a GPU
    speed_gts: float | None
    max_speed_gts: float | None
    width: int | None
    max_width: int | None


def parse_rate(text: str) -> tuple[float | None, int | None]:
    """Return (Gb/s, lanes) of a sysfs ``rate``: ``400 Gb/sec (4X NDR)`` -> (400.0, 4)."""
    match = _RATE.match(text)
    if not match:
        return None, None
    return float(match[1]), int(match[2]) if match[2] else None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
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
            rate, width = parse_rate(_text(port_dir / "rate") or "")
            counters = {
                name: value
                for name in ERROR_COUNTERS
                if (value := _int(port_dir / "counters" / name)) is not None
            }
            result.append(
                PortSample(
                    hca=device.name,
                    port=int(port_dir.name),
                    state=_after_colon(_text(port_dir / "state")),
                    phys_state=_after_colon(_text(port_dir / "phys_state")),
                    rate_gbps=rate,
                    width=width,
                    link_layer=_text(port_dir / "link_layer") or "InfiniBand",
                    counters=counters,
                )
            )
    return result


def _pcie(device: Path, role: str, name: str) -> PcieLink:
    return PcieLink(
        bdf=device.resolve().name if device.exists() else device.name,
        role=role,
        name=name,
        speed_gts=_speed(device / "current_link_speed"),
        max_speed_gts=_speed(device / "max_link_speed"),
        width=_int(device / "current_link_width"),
        max_width=_int(device / "max_link_width"),
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
    sys_root: Path, hcas: list[str] | None = None, gpus: list[str] | None = None
) -> list[PcieLink]:
    """Return the PCIe links of the HCAs (``hcas``, default every one) and of the GPUs (``gpus``
    by bus id, default :func:`find_gpus`).

    A device without ``current_link_speed`` (a virtual function, soft-RoCE) is left out.
    """
    result: list[PcieLink] = []
    ib_class = sys_root / "class" / "infiniband"
    names = hcas if hcas is not None else [p.name for p in _dirs(ib_class)]
    for name in sorted(names, key=hca_sort_key):
        device = ib_class / name / "device"
        if (device / "current_link_speed").is_file():
            result.append(_pcie(device, "hca", name))
    pci = sys_root / "bus" / "pci" / "devices"
    result.extend(
        _pcie(pci / bdf, "gpu", bdf)
        for bdf in (find_gpus(sys_root) if gpus is None else gpus)
        if (pci / bdf / "current_link_speed").is_file()
    )
    return result
