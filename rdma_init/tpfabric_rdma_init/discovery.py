"""Read what a worker pod can see of its host: HCAs, ports, GIDs, GPUs, GPUDirect, memlock.

Everything is read below a root directory (``/`` in a pod, a fixture tree in tests), from the same
files ``ibstat``, ``ibv_devinfo`` and NCCL's own topology detection read:

- ``sys/class/infiniband/<dev>/{node_guid,device,ports/<p>/{state,phys_state,rate,link_layer,
  gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>,counters/*}}``
- ``sys/class/infiniband_verbs/uverbs<N>/ibdev`` and ``dev/infiniband/{uverbs<N>,rdma_cm}``
- ``sys/bus/pci/devices/<bdf>/{numa_node,vendor,class}`` and the PCI path the ``device`` symlinks
  resolve to (``sys/devices/pci0000:00/0000:00:01.0/.../<bdf>``)
- GPUs from ``proc/driver/nvidia/gpus/<bdf>``, else PCI class 0x0302/0x0300 with vendor 0x10de
- GPUDirect from ``sys/module/{nvidia_peermem,nv_peer_mem}``,
  ``sys/kernel/mm/memory_peers/nv_mem*``, else dma-buf (open GPU kernel module and Linux >= 5.12)
- ``proc/self/status`` (CapEff, CapBnd) and ``proc/net/route``; the memlock limit comes from a probe
  (``resource.getrlimit`` in a pod, injected in tests).

This module only reads. It must never write below the root, load a kernel module, open a device
or decide anything: missing files become ``None``/empty values, judging them is for
:mod:`tpfabric_rdma_init.checks`.
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CAP_IPC_LOCK",
    "Gid",
    "Gpu",
    "GpuDirect",
    "Hca",
    "HostInventory",
    "IbPort",
    "MemlockProbe",
    "NetInterface",
    "PciLocation",
    "discover_host",
    "natural_key",
    "read_memlock_limit",
]

CAP_IPC_LOCK = 14
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller (datacenter GPUs), VGA controller
ARPHRD_INFINIBAND = 32
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery")

MemlockProbe = Callable[[], tuple[int, int]]
"""Returns the (soft, hard) RLIMIT_MEMLOCK in bytes; ``resource.RLIM_INFINITY`` is unlimited."""


def read_memlock_limit() -> tuple[int, int]:
    """Return this process's (soft, hard) RLIMIT_MEMLOCK, the limit pinned NCCL buffers count in."""
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)


def natural_key(name: str) -> tuple[tuple[int, str], ...]:
    """Return a sort key that orders ``mlx5_2`` before ``mlx5_10`` (digits compare as numbers)."""
    return tuple(
        (int(part), "") if part.isdigit() else (0, part)
        for part in re.split(r"(\d+)", name)
        if part
    )


@dataclass(frozen=True)
class PciLocation:
    """Where a PCI function sits: its bus id, the bridges above it and its NUMA node."""

    bdf: str
    bridges: tuple[str, ...]
    """Bus ids of the bridges/switch ports from the root port down to the device's parent."""
    root_complex: str
    """The ``pciDDDD:BB`` host bridge the path starts at."""
    numa_node: int | None


@dataclass(frozen=True)
class Gid:
    """One entry of a port's GID table."""

    index: int
    gid: str
    type: str | None
    """``IB/RoCE v1`` or ``RoCE v2`` (``gid_attrs/types``); None where the kernel has no attrs."""
    netdev: str | None

    @property
    def ipv4_mapped(self) -> bool:
        """Return whether the GID is an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``)."""
        return self.gid.lower().replace(":", "").startswith("00000000000000000000ffff")


@dataclass(frozen=True)
class IbPort:
    """One port of an HCA as sysfs reports it."""

    number: int
    state: str
    """``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED`` (the text after ``4: ``)."""
    phys_state: str
    """``LinkUp``, ``Disabled``, ``Polling`` ..."""
    rate_gbps: float | None
    rate: str
    link_layer: str
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""
    gids: tuple[Gid, ...]
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Return whether the port can carry traffic (logical state ACTIVE)."""
        return self.state.upper() == "ACTIVE"


@dataclass(frozen=True)
class Hca:
    """An RDMA device (``/sys/class/infiniband/<name>``)."""

    name: str
    node_guid: str | None
    pci: PciLocation | None
    ports: tuple[IbPort, ...]
    uverbs: str | None
    """``uverbsN`` from ``infiniband_verbs``; None when sysfs names none."""
    uverbs_present: bool
    """Whether ``/dev/infiniband/<uverbs>`` exists inside this pod."""
    netdevs: tuple[str, ...]


@dataclass(frozen=True)
class Gpu:
    """An NVIDIA GPU found through the driver's procfs or the PCI class."""

    bdf: str
    pci: PciLocation | None
    source: str
    """``procfs`` or ``pci``."""


@dataclass(frozen=True)
class GpuDirect:
    """What the kernel offers for GPUDirect RDMA."""

    peer_memory: str | None
    """``nvidia_peermem``, ``nv_peer_mem`` or ``memory_peers``; None when none is loaded."""
    dma_buf: bool
    """Open GPU kernel module on Linux >= 5.12 (NCCL then uses dma-buf without peermem)."""
    driver_version: str | None
    kernel_release: str | None

    @property
    def available(self) -> bool:
        """Return whether GPU memory can be registered with the HCA by any mechanism."""
        return self.peer_memory is not None or self.dma_buf


@dataclass(frozen=True)
class NetInterface:
    """A network interface of the pod (``/sys/class/net/<name>``)."""

    name: str
    type: int | None
    operstate: str | None
    default_route: bool


@dataclass(frozen=True)
class HostInventory:
    """Everything discovery found, in a stable order (HCAs and interfaces by natural name)."""

    root: str
    hcas: tuple[Hca, ...]
    gpus: tuple[Gpu, ...]
    gpudirect: GpuDirect
    dev_infiniband_present: bool
    rdma_cm_present: bool
    memlock_soft: int
    memlock_hard: int
    cap_ipc_lock: bool | None
    """None when ``proc/self/status`` could not be read."""
    interfaces: tuple[NetInterface, ...]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path, base: int = 10) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def _listdir(path: Path) -> list[str]:
    try:
        return sorted((entry.name for entry in path.iterdir()), key=natural_key)
    except OSError:
        return []


def _pci_location(root: Path, device_link: Path) -> PciLocation | None:
    """Return the PCI location a sysfs ``device`` link (or PCI device directory) resolves to."""
    if not device_link.exists():
        return None
    resolved = Path(os.path.realpath(device_link))
    try:
        parts = resolved.relative_to(Path(os.path.realpath(root / "sys" / "devices"))).parts
    except ValueError:
        return None
    if not parts or not parts[0].startswith("pci") or not _BDF.match(parts[-1]):
        return None  # a virtual device (soft-RoCE, platform device): no PCI path
    chain = [part for part in parts[1:] if _BDF.match(part)]
    bdf = chain[-1].lower()
    numa = _read_int(root / "sys" / "bus" / "pci" / "devices" / bdf / "numa_node")
    if numa is None:
        numa = _read_int(resolved / "numa_node")
    return PciLocation(
        bdf=bdf,
        bridges=tuple(part.lower() for part in chain[:-1]),
        root_complex=parts[0],
        numa_node=numa if numa is not None and numa >= 0 else None,
    )


def _after_colon(text: str | None) -> str:
    """Return ``ACTIVE`` from ``4: ACTIVE`` (sysfs prefixes states with their number)."""
    if text is None:
        return "UNKNOWN"
    return text.split(":", 1)[1].strip() if ":" in text else text


def _rate_gbps(rate: str) -> float | None:
    match = re.match(r"^\s*([0-9.]+)\s*Gb/sec", rate)
    return float(match.group(1)) if match else None


def _port(port_dir: Path, number: int) -> IbPort:
    gids: list[Gid] = []
    for index_name in _listdir(port_dir / "gids"):
        if not index_name.isdigit():
            continue
        gid = _read(port_dir / "gids" / index_name)
        if gid is None or gid.replace("0", "").replace(":", "") == "":
            continue  # an empty slot of the table
        gids.append(
            Gid(
                index=int(index_name),
                gid=gid,
                type=_read(port_dir / "gid_attrs" / "types" / index_name),
                netdev=_read(port_dir / "gid_attrs" / "ndevs" / index_name),
            )
        )
    counters = {
        name: value
        for name in _COUNTERS
        if (value := _read_int(port_dir / "counters" / name)) is not None
    }
    rate = _read(port_dir / "rate") or ""
    return IbPort(
        number=number,
        state=_after_colon(_read(port_dir / "state")),
        phys_state=_after_colon(_read(port_dir / "phys_state")),
        rate_gbps=_rate_gbps(rate),
        rate=rate,
        link_layer=_read(port_dir / "link_layer") or "InfiniBand",
        gids=tuple(gids),
        counters=counters,
    )


def _uverbs_by_hca(root: Path) -> dict[str, str]:
    verbs_class = root / "sys" / "class" / "infiniband_verbs"
    mapping: dict[str, str] = {}
    for uverbs in _listdir(verbs_class):
        ibdev = _read(verbs_class / uverbs / "ibdev")
        if uverbs.startswith("uverbs") and ibdev:
            mapping[ibdev] = uverbs
    return mapping


def _hcas(root: Path) -> tuple[Hca, ...]:
    ib_class = root / "sys" / "class" / "infiniband"
    uverbs_of = _uverbs_by_hca(root)
    hcas = []
    for name in _listdir(ib_class):
        dev = ib_class / name
        ports = tuple(
            _port(dev / "ports" / number, int(number))
            for number in _listdir(dev / "ports")
            if number.isdigit()
        )
        uverbs = uverbs_of.get(name)
        if uverbs is None:  # older kernels: only the PCI function's infiniband_verbs folder
            found = [u for u in _listdir(dev / "device" / "infiniband_verbs") if u.startswith("uv")]
            uverbs = found[0] if found else None
        hcas.append(
            Hca(
                name=name,
                node_guid=_read(dev / "node_guid"),
                pci=_pci_location(root, dev / "device"),
                ports=ports,
                uverbs=uverbs,
                uverbs_present=uverbs is not None
                and (root / "dev" / "infiniband" / uverbs).exists(),
                netdevs=tuple(_listdir(dev / "device" / "net")),
            )
        )
    return tuple(hcas)


def _gpus(root: Path) -> tuple[Gpu, ...]:
    procfs = root / "proc" / "driver" / "nvidia" / "gpus"
    pci_devices = root / "sys" / "bus" / "pci" / "devices"
    from_procfs = [name.lower() for name in _listdir(procfs) if _BDF.match(name)]
    if from_procfs:
        source, bdfs = "procfs", from_procfs
    else:
        source = "pci"
        bdfs = [
            bdf
            for bdf in _listdir(pci_devices)
            if _read(pci_devices / bdf / "vendor") == NVIDIA_VENDOR
            and (_read(pci_devices / bdf / "class") or "").startswith(GPU_CLASSES)
        ]
    return tuple(
        Gpu(bdf=bdf, pci=_pci_location(root, pci_devices / bdf), source=source)
        for bdf in sorted(bdfs)
    )


def _kernel_at_least(release: str | None, major: int, minor: int) -> bool:
    match = re.match(r"^(\d+)\.(\d+)", release or "")
    if match is None:
        return False
    return (int(match.group(1)), int(match.group(2))) >= (major, minor)


def _gpudirect(root: Path) -> GpuDirect:
    peer: str | None = None
    for module in ("nvidia_peermem", "nv_peer_mem"):
        if (root / "sys" / "module" / module).is_dir():
            peer = module
            break
    if peer is None and any(
        name.startswith("nv_mem") for name in _listdir(root / "sys/kernel/mm/memory_peers")
    ):
        peer = "memory_peers"
    version = _read(root / "proc" / "driver" / "nvidia" / "version")
    release = _read(root / "proc" / "sys" / "kernel" / "osrelease")
    open_module = version is not None and "Open Kernel Module" in version
    driver = re.search(r"Kernel Module\s+([0-9.]+)", version or "")
    return GpuDirect(
        peer_memory=peer,
        dma_buf=open_module and _kernel_at_least(release, 5, 12),
        driver_version=driver.group(1) if driver else None,
        kernel_release=release,
    )


def _cap_ipc_lock(root: Path) -> bool | None:
    """Return whether the pod was granted CAP_IPC_LOCK (effective or bounding set), None unknown.

    The bounding set counts too: a non-root init container never has added capabilities in its
    effective set, yet the grant in the pod spec is what the (usually root) main container gets.
    """
    status = _read(root / "proc" / "self" / "status") or ""
    sets = re.findall(r"^Cap(?:Eff|Bnd):\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    if not sets:
        return None
    return any(int(value, 16) >> CAP_IPC_LOCK & 1 for value in sets)


def _default_route_interfaces(root: Path) -> set[str]:
    table = _read(root / "proc" / "net" / "route") or ""
    return {
        fields[0]
        for line in table.splitlines()[1:]
        if len(fields := line.split()) >= 2 and fields[1] == "00000000"
    }


def _interfaces(root: Path) -> tuple[NetInterface, ...]:
    net_class = root / "sys" / "class" / "net"
    default = _default_route_interfaces(root)
    return tuple(
        NetInterface(
            name=name,
            type=_read_int(net_class / name / "type"),
            operstate=_read(net_class / name / "operstate"),
            default_route=name in default,
        )
        for name in _listdir(net_class)
    )


def discover_host(
    root: Path | str = "/",
    memlock: MemlockProbe = read_memlock_limit,
    process_root: Path | str | None = None,
) -> HostInventory:
    """Return the inventory of RDMA devices, GPUs and limits visible below ``root``.

    ``process_root`` (default ``root``) is where this process's own view is read: capabilities,
    routes and network interfaces. The fake device plugin mounts a fake device tree as ``root``
    while the pod's process and network stay real (``process_root`` ``/``).
    """
    root = Path(root)
    own = Path(process_root) if process_root is not None else root
    soft, hard = memlock()
    dev_ib = root / "dev" / "infiniband"
    return HostInventory(
        root=str(root),
        hcas=_hcas(root),
        gpus=_gpus(root),
        gpudirect=_gpudirect(root),
        dev_infiniband_present=dev_ib.is_dir(),
        rdma_cm_present=(dev_ib / "rdma_cm").exists(),
        memlock_soft=soft,
        memlock_hard=hard,
        cap_ipc_lock=_cap_ipc_lock(own),
        interfaces=_interfaces(own),
    )
