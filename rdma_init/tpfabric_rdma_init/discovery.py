"""Read what a worker pod can see of its host: HCAs, ports, GIDs, GPUs, GPUDirect, memlock.

Everything is read below a root directory (``/`` in a pod, a fixture tree in tests), from the same
files ``ibstat``, ``ibv_devinfo`` and NCCL's own topology detection read:

- ``sys/class/infiniband/<dev>/{node_guid,device,ports/<p>/{state,phys_state,rate,link_layer,
  gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>,counters/*}}`` (an InfiniBand port's GUID is
  the interface id of its GID 0)
- ``sys/class/infiniband_verbs/uverbs<N>/ibdev`` and ``dev/infiniband/{uverbs<N>,rdma_cm}``
- ``sys/bus/pci/devices/<bdf>/{numa_node,vendor,class}`` and the PCI path the ``device`` symlinks
  resolve to (``sys/devices/pci0000:00/0000:00:01.0/.../<bdf>``; on Hyper-V below a VMBus
  device, ``sys/devices/.../VMBUS:00/<guid>/pci0001:00/0001:00:00.0``)
- AWS EFA adapters: ``sys/class/infiniband/<dev>/device/vendor`` 0x1d0f (aws-ofi-nccl's)
- GPUs: PCI class 0x0302/0x0300 with vendor 0x10de, with UUID and minor from
  ``proc/driver/nvidia/gpus/<bdf>`` (masked in a pod to the pod's own GPUs)
- GPUDirect from ``sys/module/{nvidia_peermem,nv_peer_mem}``,
  ``sys/kernel/mm/memory_peers/nv_mem*``, else dma-buf (open GPU kernel module and Linux >= 5.12)
- ``proc/self/status`` (CapEff only: a capability in the bounding set is not granted),
  ``proc/self/limits`` (memlock; the probe ``resource.getrlimit`` only when the file is
  missing), ``proc/net/route`` and the pod's addresses (``proc/net/fib_trie``,
  ``proc/net/if_inet6``), all below the *process* root;
- which GPUs belong to this pod: ``NVIDIA_VISIBLE_DEVICES`` (UUIDs, bus ids, or the host's
  indices in bus order; ``void``/``none``/empty, CDI mode's values, name none), else the
  ``dev/nvidia<minor>`` nodes the runtime put into the pod, else the pod's masked
  ``proc/driver/nvidia/gpus`` listing, else every GPU (then the report says so).

This module only reads. It must never write below the root, load a kernel module, open a device
or decide anything: missing files become ``None``/empty values, judging them is for
:mod:`tpfabric_rdma_init.checks`.
"""

from __future__ import annotations

import ipaddress
import itertools
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
    "pod_gpus",
    "read_memlock_file",
    "read_memlock_limit",
]

CAP_IPC_LOCK = 14
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0302", "0x0300")  # 3D controller (datacenter GPUs), VGA controller
ARPHRD_INFINIBAND = 32
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery")
_HEX = re.compile(r"^[0-9a-f]+$")

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
    vmbus: bool = False
    """Below a Hyper-V VMBus device (Azure): no PCIe switch is visible, whatever the hardware."""
    link_speed: str | None = None
    """``max_link_speed`` as sysfs spells it (``32.0 GT/s PCIe``); None when not readable."""
    link_width: int | None = None
    """``max_link_width`` (lanes); None when not readable."""


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

    @property
    def link_local(self) -> bool:
        """Return whether the GID is link-local (``fe80::/64``): NCCL never picks one for RoCE."""
        return self.gid.lower().startswith("fe80")

    @property
    def address(self) -> str | None:
        """Return the IP address the GID carries (``10.0.0.5``, ``fd00::5``), None if unparsable."""
        try:
            ip = ipaddress.IPv6Address(self.gid)
        except ValueError:
            return None
        return str(ip.ipv4_mapped or ip)


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
    width: int | None = None
    """Lanes the link trained on: the ``4`` of ``(4X NDR)`` in ``rate``; None when not said."""

    @property
    def active(self) -> bool:
        """Return whether the port can carry traffic (logical state ACTIVE)."""
        return self.state.upper() == "ACTIVE"

    @property
    def guid(self) -> str | None:
        """Return the port GUID (16 hex digits): the interface id of an InfiniBand port's GID 0
        (``fe80::<port GUID>``, what ``ibnetdiscover`` prints after the port); None on RoCE or
        when GID 0 is not link-local."""
        if self.link_layer != "InfiniBand":
            return None
        first = next((gid for gid in self.gids if gid.index == 0), None)
        digits = first.gid.replace(":", "").lower() if first is not None else ""
        if len(digits) != 32 or not digits.startswith("fe80") or not _HEX.match(digits):
            return None
        return digits[16:]


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
    pci_device_id: str | None = None
    """The PCI device id (``0xa2dc`` is a BlueField-3); the NIC's type, never its name."""
    hca_type: str | None = None
    """``sys/class/infiniband/<dev>/hca_type`` (``MT4129`` ConnectX-7, ``MT41692`` BlueField-3)."""
    virtual_function: bool = False
    """An SR-IOV VF (``device/physfn`` exists): a pod's share of a PF, down until assigned."""


@dataclass(frozen=True)
class Gpu:
    """An NVIDIA GPU found through the driver's procfs or the PCI class."""

    bdf: str
    pci: PciLocation | None
    source: str
    """``procfs`` or ``pci``."""
    uuid: str | None = None
    minor: int | None = None


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
    """CAP_IPC_LOCK in *this* process's effective set; None when ``proc/self/status`` is unread."""
    interfaces: tuple[NetInterface, ...]
    memlock_source: str = "probe"
    """``proc/self/limits`` or ``probe``."""
    gpus_on_node: int = 0
    pod_addresses: frozenset[str] | None = None
    """This pod's own IP addresses (``proc/net/fib_trie`` LOCAL, ``proc/net/if_inet6``) below
    the process root; None when neither file is there (then GIDs are told by netdev name)."""
    efa_devices: tuple[str, ...] = ()
    """RDMA devices of AWS EFA (PCI vendor 0x1d0f): NCCL reaches them only via aws-ofi-nccl."""
    gpu_allocation: str = "all"
    """How the pod's GPUs were told apart: ``NVIDIA_VISIBLE_DEVICES``, ``dev/nvidia*``,
    ``proc/driver/nvidia/gpus (masked)`` or ``all``."""


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


_HOST_BRIDGE = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")


def _pci_location(root: Path, device_link: Path) -> PciLocation | None:
    """Return the PCI location a sysfs ``device`` link (or PCI device directory) resolves to.

    Bare metal paths start at the host bridge (``pci0000:00/...``); on Hyper-V (Azure) the
    host bridge of each device hangs below its VMBus device
    (``LNXSYSTM:00/.../VMBUS:00/<guid>/pci0001:00/0001:00:00.0``): the PCI part is the same,
    with no switch above the device, so only the NUMA node tells devices apart.
    """
    if not device_link.exists():
        return None
    resolved = Path(os.path.realpath(device_link))
    try:
        parts = resolved.relative_to(Path(os.path.realpath(root / "sys" / "devices"))).parts
    except ValueError:
        return None
    start = next((i for i, part in enumerate(parts) if _HOST_BRIDGE.match(part)), None)
    if start is None or not _BDF.match(parts[-1]):
        return None  # a virtual device (soft-RoCE, platform device): no PCI path
    chain = [part for part in parts[start + 1 :] if _BDF.match(part)]
    bdf = chain[-1].lower()
    numa = _read_int(root / "sys" / "bus" / "pci" / "devices" / bdf / "numa_node")
    if numa is None:
        numa = _read_int(resolved / "numa_node")
    return PciLocation(
        bdf=bdf,
        bridges=tuple(part.lower() for part in chain[:-1]),
        root_complex=parts[start],
        numa_node=numa if numa is not None and numa >= 0 else None,
        vmbus=any(part.upper().startswith("VMBUS") for part in parts[:start]),
        link_speed=_read(resolved / "max_link_speed"),
        link_width=_read_int(resolved / "max_link_width"),
    )


def _after_colon(text: str | None) -> str:
    """Return ``ACTIVE`` from ``4: ACTIVE`` (sysfs prefixes states with their number)."""
    if text is None:
        return "UNKNOWN"
    return text.split(":", 1)[1].strip() if ":" in text else text


def _rate_gbps(rate: str) -> float | None:
    match = re.match(r"^\s*([0-9.]+)\s*Gb/sec", rate)
    return float(match.group(1)) if match else None


def _rate_width(rate: str) -> int | None:
    match = re.search(r"\((\d+)X\b", rate)
    return int(match.group(1)) if match else None


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
        width=_rate_width(rate),
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
        pci_dir = dev / "device"
        hcas.append(
            Hca(
                name=name,
                pci_device_id=_read(pci_dir / "device"),
                hca_type=_read(dev / "hca_type"),
                node_guid=_read(dev / "node_guid"),
                pci=_pci_location(root, dev / "device"),
                ports=ports,
                uverbs=uverbs,
                uverbs_present=uverbs is not None
                and (root / "dev" / "infiniband" / uverbs).exists(),
                netdevs=tuple(_listdir(dev / "device" / "net")),
                virtual_function=(pci_dir / "physfn").exists(),
            )
        )
    return tuple(hcas)


def _gpus(root: Path) -> tuple[Gpu, ...]:
    """Return every GPU of the node in bus order: the PCI bus's, with procfs's UUID and minor.

    A pod's ``proc/driver/nvidia/gpus`` is masked to its own GPUs (libnvidia-container) while
    sysfs shows the whole node, so the node's GPUs are the union of both.
    """
    procfs = root / "proc" / "driver" / "nvidia" / "gpus"
    pci_devices = root / "sys" / "bus" / "pci" / "devices"
    from_procfs = {name.lower() for name in _listdir(procfs) if _BDF.match(name)}
    from_pci = {
        bdf.lower()
        for bdf in _listdir(pci_devices)
        if _read(pci_devices / bdf / "vendor") == NVIDIA_VENDOR
        and (_read(pci_devices / bdf / "class") or "").startswith(GPU_CLASSES)
    }
    gpus = []
    for bdf in sorted(from_procfs | from_pci):
        info = _read(procfs / bdf / "information") or ""
        uuid = re.search(r"^GPU UUID:\s*(\S+)", info, re.MULTILINE)
        minor = re.search(r"^Device Minor:\s*(\d+)", info, re.MULTILINE)
        gpus.append(
            Gpu(
                bdf=bdf,
                pci=_pci_location(root, pci_devices / bdf),
                source="procfs" if bdf in from_procfs else "pci",
                uuid=uuid.group(1) if uuid else None,
                minor=int(minor.group(1)) if minor else None,
            )
        )
    return tuple(gpus)


UNKNOWN_VISIBLE_DEVICES = ("", "void", "none")
"""Values that name no GPU: CDI mode (``void``), no GPU requested (``none``), unset. Under CDI
the runtime injects the devices itself, so these mean "ask the device nodes", never "no GPUs"."""


def _by_visible_devices(gpus: tuple[Gpu, ...], tokens: list[str]) -> tuple[Gpu, ...] | None:
    """Return the GPUs ``tokens`` name (UUIDs, bus ids or host indices), None if any is unknown.

    An index is the host's: the n-th GPU of the node in bus order (nvidia-smi's order), never
    a position in the pod's masked procfs listing.
    """
    chosen: list[Gpu] = []
    for token in tokens:
        if token.isdigit():
            gpu = gpus[int(token)] if int(token) < len(gpus) else None
        else:
            gpu = next(
                (g for g in gpus if token in (g.uuid, g.bdf) or token.lower() == g.bdf), None
            )
        if gpu is None:
            return None
        chosen.append(gpu)
    return tuple(sorted(set(chosen), key=lambda g: g.bdf))


def pod_gpus(
    root: Path, gpus: tuple[Gpu, ...], visible_devices: str | None
) -> tuple[tuple[Gpu, ...], str]:
    """Return (the GPUs allocated to this pod, how that was decided).

    The NVIDIA device plugin tells the runtime through ``NVIDIA_VISIBLE_DEVICES`` (UUIDs, or
    host indices in bus order); in CDI mode it is ``void`` and only the allocated
    ``/dev/nvidiaN`` are in the pod; a masked procfs listing holds only the pod's GPUs.
    """
    value = (visible_devices or "").strip()
    if value == "all":
        return gpus, "NVIDIA_VISIBLE_DEVICES"
    if value.lower() not in UNKNOWN_VISIBLE_DEVICES:
        tokens = [token.strip() for token in value.split(",") if token.strip()]
        chosen = _by_visible_devices(gpus, tokens)
        if chosen:
            return chosen, "NVIDIA_VISIBLE_DEVICES"
    nodes = {
        int(name[6:])
        for name in _listdir(root / "dev")
        if name.startswith("nvidia") and name[6:].isdigit()
    }
    listed = [gpu for gpu in gpus if gpu.source == "procfs"]
    if nodes and listed and all(gpu.minor is not None for gpu in listed):
        chosen_by_node = tuple(gpu for gpu in listed if gpu.minor in nodes)
        if chosen_by_node:
            return chosen_by_node, "dev/nvidia*"
    if listed and len(listed) < len(gpus):
        return tuple(listed), "proc/driver/nvidia/gpus (masked)"
    return gpus, "all"


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
    """Return whether this process holds CAP_IPC_LOCK in its *effective* set, None unknown.

    Only the effective set pins memory: a capability in the bounding set alone (what a non-root
    container gets for ``capabilities.add``, kubernetes#56374) does not let ``ibv_reg_mr`` pass.
    """
    status = _read(root / "proc" / "self" / "status") or ""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    if match is None:
        return None
    return bool(int(match.group(1), 16) >> CAP_IPC_LOCK & 1)


def read_memlock_file(root: Path) -> tuple[int, int] | None:
    """Return (soft, hard) "Max locked memory" of ``proc/self/limits`` below ``root``, or None."""
    text = _read(root / "proc" / "self" / "limits") or ""
    match = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)", text, re.MULTILINE)
    if match is None:
        return None

    def value(text: str) -> int:
        return resource.RLIM_INFINITY if text == "unlimited" else int(text)

    try:
        return value(match.group(1)), value(match.group(2))
    except ValueError:
        return None


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


AMAZON_VENDOR = "0x1d0f"


def _efa_devices(root: Path) -> tuple[str, ...]:
    """Return the RDMA devices that are AWS EFA adapters (by PCI vendor, never by name)."""
    ib_class = root / "sys" / "class" / "infiniband"
    return tuple(
        name
        for name in _listdir(ib_class)
        if _read(ib_class / name / "device" / "vendor") == AMAZON_VENDOR
    )


def _pod_addresses(root: Path) -> frozenset[str] | None:
    """Return the addresses of this network namespace, None when procfs names none."""
    trie = _read(root / "proc" / "net" / "fib_trie")
    inet6 = _read(root / "proc" / "net" / "if_inet6")
    if trie is None and inet6 is None:
        return None
    addresses: set[str] = set()
    lines = (trie or "").splitlines()
    for line, following in itertools.pairwise(lines):
        match = re.match(r"^[\s|`+-]*-- (\d+\.\d+\.\d+\.\d+)$", line.rstrip())
        if match and "host LOCAL" in following:
            addresses.add(match.group(1))
    for row in (inet6 or "").splitlines():
        fields = row.split()
        if fields and len(fields[0]) == 32:
            try:
                addresses.add(str(ipaddress.IPv6Address(int(fields[0], 16))))
            except ValueError:
                continue
    return frozenset(addresses)


def discover_host(
    root: Path | str = "/",
    memlock: MemlockProbe = read_memlock_limit,
    process_root: Path | str | None = None,
    visible_devices: str | None = None,
) -> HostInventory:
    """Return the inventory of RDMA devices, GPUs and limits visible below ``root``.

    ``process_root`` (default ``root``) is where this process's own view is read: capabilities,
    routes and network interfaces. The fake device plugin mounts a fake device tree as ``root``
    while the pod's process and network stay real (``process_root`` ``/``).
    """
    root = Path(root)
    own = Path(process_root) if process_root is not None else root
    from_file = read_memlock_file(own)
    soft, hard = from_file if from_file is not None else memlock()
    dev_ib = root / "dev" / "infiniband"
    node_gpus = _gpus(root)
    gpus, allocation = pod_gpus(root, node_gpus, visible_devices)
    return HostInventory(
        root=str(root),
        hcas=_hcas(root),
        gpus=gpus,
        gpus_on_node=len(node_gpus),
        gpu_allocation=allocation,
        memlock_source="proc/self/limits" if from_file is not None else "probe",
        gpudirect=_gpudirect(root),
        dev_infiniband_present=dev_ib.is_dir(),
        rdma_cm_present=(dev_ib / "rdma_cm").exists(),
        memlock_soft=soft,
        memlock_hard=hard,
        cap_ipc_lock=_cap_ipc_lock(own),
        interfaces=_interfaces(own),
        pod_addresses=_pod_addresses(own),
        efa_devices=_efa_devices(root),
    )
