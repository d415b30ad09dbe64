"""Builders of sysfs/procfs/devfs trees that look like real GPU hosts to the init program.

``HostTree`` writes one device at a time, the way the kernel lays it out (relative symlinks from
``sys/class`` and ``sys/bus/pci/devices`` into ``sys/devices/pciDDDD:BB/...``), and the scenario
functions compose whole hosts: a DGX H100, an HGX with dual-port ConnectX-7, a GB200-like
switchless tray, a ConnectX-8 two-plane node, a RoCE v2 host, and the broken variants.
``PodView`` is the pod's own process view (network namespace, limits, capabilities).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpfabric_fabric_agent.fake_sysfs import DGX_H100_COMPUTE, DGX_H100_STORAGE

UNLIMITED = -1
CAPS_DEFAULT = 0x00000000A80425FB  # Docker's default set: no CAP_IPC_LOCK
CAPS_IPC_LOCK = CAPS_DEFAULT | 1 << 14

# DGX H100: compute HCAs interleave with the storage/in-band ones in mlx5_N numbering, so
# mlx5_1 is a storage HCA while mlx5_10 and mlx5_11 are compute HCAs (the prefix trap).
DGX_COMPUTE_HCAS = DGX_H100_COMPUTE
DGX_STORAGE_HCAS = DGX_H100_STORAGE
DGX_IB_HCA = "=" + ",".join(f"{name}:1" for name in DGX_COMPUTE_HCAS)


def memlock_of(soft: int) -> Callable[[], tuple[int, int]]:
    """Return a memlock probe reporting ``soft`` as both limits."""
    return lambda: (soft, soft)


UNLIMITED_MEMLOCK = memlock_of(UNLIMITED)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def ipv4_gid(address: str) -> str:
    """Return the sysfs spelling of the IPv4-mapped GID of ``address``."""
    a, b, c, d = (int(x) for x in address.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def link_local_gid(guid: int) -> str:
    """Return the default (link-local) GID of a port GUID."""
    text = f"{guid:016x}"
    return "fe80:0000:0000:0000:" + ":".join(text[i : i + 4] for i in range(0, 16, 4))


@dataclass
class HostTree:
    """A host root directory being filled with devices."""

    root: Path

    def pci_device(
        self,
        bdf: str,
        bridges: tuple[str, ...],
        *,
        root_complex: str,
        numa: int,
        vendor: str,
        pci_class: str,
    ) -> Path:
        """Create a PCI function below its bridges and return its sysfs directory."""
        path = self.root / "sys" / "devices" / root_complex
        for bridge in (*bridges, bdf):
            path /= bridge
        path.mkdir(parents=True, exist_ok=True)
        _write(path / "vendor", vendor)
        _write(path / "class", pci_class)
        _write(path / "numa_node", str(numa))
        link = self.root / "sys" / "bus" / "pci" / "devices" / bdf
        if not link.is_symlink():
            _link(link, path)
        return path

    def gpu(
        self,
        bdf: str,
        bridges: tuple[str, ...],
        *,
        root_complex: str,
        numa: int,
        procfs: bool,
        minor: int = 0,
    ) -> HostTree:
        """Add an NVIDIA H100 (3D controller) and, with ``procfs``, its driver procfs entry."""
        self.pci_device(
            bdf,
            bridges,
            root_complex=root_complex,
            numa=numa,
            vendor="0x10de",
            pci_class="0x030200",
        )
        if procfs:
            _write(
                self.root / "proc/driver/nvidia/gpus" / bdf / "information",
                f"Model: H100\nGPU UUID: {gpu_uuid(minor)}\nDevice Minor: {minor}",
            )
        return self

    def hca(
        self,
        name: str,
        bdf: str,
        bridges: tuple[str, ...],
        *,
        root_complex: str,
        numa: int,
        uverbs: int,
        link_layer: str = "InfiniBand",
        state: str = "4: ACTIVE",
        phys_state: str = "5: LinkUp",
        rate: str = "400 Gb/sec (4X NDR)",
        gids: tuple[tuple[str, ...], ...] | None = None,
        netdev: str | None = None,
        dev_node: bool = True,
        ports: int = 1,
        device_id: str = "0x1021",
        hca_type: str = "MT4129",
    ) -> HostTree:
        """Add an HCA (ConnectX-7 unless ``device_id`` says otherwise) with ``ports`` ports, its
        uverbs device and (optionally) its netdev."""
        pci = self.pci_device(
            bdf,
            bridges,
            root_complex=root_complex,
            numa=numa,
            vendor="0x15b3",
            pci_class="0x020700",
        )
        _write(pci / "device", device_id)
        guid = 0xB83FD20300000000 + uverbs
        dev = self.root / "sys" / "class" / "infiniband" / name
        _write(dev / "node_guid", ":".join(f"{guid:016x}"[i : i + 4] for i in range(0, 16, 4)))
        _write(dev / "hca_type", hca_type)
        _link(dev / "device", pci)
        for number in range(1, ports + 1):
            port = dev / "ports" / str(number)
            _write(port / "state", state)
            _write(port / "phys_state", phys_state)
            _write(port / "rate", rate)
            _write(port / "link_layer", link_layer)
            for counter in ("symbol_error", "link_downed", "port_rcv_errors"):
                _write(port / "counters" / counter, "0")
            # port N's GUID is the node GUID + N - 1, as ConnectX cards number them
            table = (
                gids if gids is not None else ((link_local_gid(guid + number - 1), "IB/RoCE v1"),)
            )
            for index, entry in enumerate(table):
                gid, gid_type = entry[0], entry[1]
                owner = entry[2] if len(entry) > 2 else netdev
                _write(port / "gids" / str(index), gid)
                _write(port / "gid_attrs" / "types" / str(index), gid_type)
                if owner:
                    _write(port / "gid_attrs" / "ndevs" / str(index), owner)
            _write(port / "gids" / str(len(table)), "0000:0000:0000:0000:0000:0000:0000:0000")
        verbs = self.root / "sys" / "class" / "infiniband_verbs" / f"uverbs{uverbs}"
        _write(verbs / "ibdev", name)
        if dev_node:
            _write(self.root / "dev" / "infiniband" / f"uverbs{uverbs}", "")
        if netdev:
            net_dir = pci / "net" / netdev
            _write(net_dir / "type", "32" if link_layer == "InfiniBand" else "1")
            _write(net_dir / "operstate", "up")
            _link(self.root / "sys" / "class" / "net" / netdev, net_dir)
        return self

    def interface(self, name: str, *, default_route: bool = False, kind: int = 1) -> HostTree:
        """Add a virtual network interface (the pod's eth0) and, optionally, its default route."""
        _write(self.root / "sys/class/net" / name / "type", str(kind))
        _write(self.root / "sys/class/net" / name / "operstate", "up")
        if default_route:
            route = self.root / "proc/net/route"
            lines = route.read_text().splitlines() if route.exists() else ["Iface\tDestination"]
            lines.append(f"{name}\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0")
            _write(route, "\n".join(lines))
        return self

    def rdma_cm(self) -> HostTree:
        """Add ``/dev/infiniband/rdma_cm``."""
        _write(self.root / "dev/infiniband/rdma_cm", "")
        return self

    def peermem(self, module: str = "nvidia_peermem") -> HostTree:
        """Load a peer-memory module (``/sys/module/<module>``)."""
        (self.root / "sys/module" / module).mkdir(parents=True, exist_ok=True)
        return self

    def nvidia_driver(
        self, *, open_module: bool, kernel: str, version: str = "550.90.07"
    ) -> HostTree:
        """Write the driver's procfs version (open or proprietary module) and the kernel release."""
        flavour = "Open Kernel Module" if open_module else "Kernel Module"
        _write(
            self.root / "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX x86_64 {flavour}  {version}  Fri May 31 09:35:42 UTC 2024",
        )
        _write(self.root / "proc/sys/kernel/osrelease", kernel)
        return self

    def capabilities(self, cap_eff: int, cap_bnd: int | None = None) -> HostTree:
        """Write ``proc/self/status`` with an effective (and bounding) capability set."""
        bounding = cap_eff if cap_bnd is None else cap_bnd
        _write(
            self.root / "proc/self/status",
            f"Name:\tpython3\nCapEff:\t{cap_eff:016x}\nCapBnd:\t{bounding:016x}",
        )
        return self

    def memlock(self, soft: int) -> HostTree:
        """Write ``proc/self/limits`` with a memlock limit (bytes, or UNLIMITED)."""
        value = "unlimited" if soft == UNLIMITED else str(soft)
        _write(
            self.root / "proc/self/limits",
            "Limit                     Soft Limit           Hard Limit           Units\n"
            f"Max locked memory         {value:<20} {value:<20} bytes",
        )
        return self

    def gpu_device_nodes(self, minors: tuple[int, ...]) -> HostTree:
        """Add ``dev/nvidiaN`` for the GPUs the runtime gave this pod."""
        for minor in minors:
            _write(self.root / "dev" / f"nvidia{minor}", "")
        return self

    def drop_uverbs(self, keep: set[str]) -> HostTree:
        """Remove ``dev/infiniband/uverbsN`` not in ``keep``: an exclusive RDMA device plugin."""
        for node in (self.root / "dev" / "infiniband").iterdir():
            if node.name.startswith("uverbs") and node.name not in keep:
                node.unlink()
        return self


def make_nccl_wheel(site: Path, cuda: int, version: str) -> Path:
    """Install a fake nvidia-nccl-cu<cuda> wheel of ``version`` into the folder ``site``."""
    library = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(f"\x7fELF fake libnccl {version}".encode())
    dist_info = site / f"nvidia_nccl_cu{cuda}-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: nvidia-nccl-cu{cuda}\nVersion: {version}\n"
    )
    (dist_info / "RECORD").write_text("nvidia/nccl/lib/libnccl.so.2,,\n")
    return site


def gpu_uuid(minor: int) -> str:
    """Return the UUID the fixtures give GPU ``minor``."""
    return f"GPU-0000000{minor}-aaaa-bbbb-cccc-dddddddddddd"


def dgx_h100(
    root: Path,
    *,
    port_down: str | None = None,
    peermem: bool = True,
    dev_infiniband: bool = True,
    ipc_lock: bool = True,
    driver: str = "550.90.07",
) -> HostTree:
    """Return a DGX H100: 8 GPUs, each sharing a PCIe switch with one ConnectX-7 (400 Gb/s NDR),
    plus four storage HCAs under their own root ports (two IB, two RoCE)."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=False, kernel="5.15.0-113-generic", version=driver)
    tree.interface("lo").interface("eth0", default_route=True)
    for index, name in enumerate(DGX_COMPUTE_HCAS):
        base = 0x10 + index * 0x20
        numa = 0 if index < 4 else 1
        root_complex = f"pci0000:{base:02x}"
        switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
        tree.gpu(
            f"0000:{base + 3:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:00.0"),
            root_complex=root_complex,
            numa=numa,
            procfs=True,
            minor=index,
        )
        uverbs = int(name.split("_")[1])
        tree.hca(
            name,
            f"0000:{base + 4:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=numa,
            uverbs=uverbs,
            state="1: DOWN" if name == port_down else "4: ACTIVE",
            phys_state="3: Disabled" if name == port_down else "5: LinkUp",
            netdev=f"ibp{base + 4:x}s0",
            dev_node=dev_infiniband,
        )
    for name, bdf, numa, link_layer in (
        ("mlx5_1", "0000:0c:00.0", 0, "InfiniBand"),
        ("mlx5_2", "0000:0c:00.1", 0, "InfiniBand"),
        ("mlx5_7", "0000:8c:00.0", 1, "Ethernet"),
        ("mlx5_8", "0000:8c:00.1", 1, "Ethernet"),
    ):
        bus = bdf[5:7]
        tree.hca(
            name,
            bdf,
            (f"0000:{bus}:01.0",),
            root_complex=f"pci0000:{bus}",
            numa=numa,
            uverbs=int(name.split("_")[1]),
            link_layer=link_layer,
            rate="200 Gb/sec (4X HDR)",
            gids=(
                ((link_local_gid(0x1), "IB/RoCE v1"), (ipv4_gid("10.9.0.7"), "RoCE v2"))
                if link_layer == "Ethernet"
                else None
            ),
            dev_node=dev_infiniband,
        )
    if dev_infiniband:
        tree.rdma_cm()
    if peermem:
        tree.peermem()
    tree.capabilities(CAPS_IPC_LOCK if ipc_lock else CAPS_DEFAULT, CAPS_IPC_LOCK)
    return tree


def roce_v2_host(root: Path, *, second_gid_index: int = 3) -> HostTree:
    """Return a RoCE v2 host: 2 GPUs (found by PCI class, no driver procfs) and 2 Ethernet HCAs
    whose GID tables hold v1/v2 link-local and IPv4-mapped entries (v2 + IPv4 at index 3)."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.8.0-45-generic")
    tree.interface("eth0", default_route=True)
    for index in range(2):
        base = 0x40 + index * 0x40
        root_complex = f"pci0000:{base:02x}"
        switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
        tree.gpu(
            f"0000:{base + 3:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:00.0"),
            root_complex=root_complex,
            numa=index,
            procfs=False,
        )
        address = f"10.0.{index}.5"
        netdev = f"ens{index}f0np0"
        gids = [
            (link_local_gid(0x100 + index), "IB/RoCE v1"),
            (link_local_gid(0x100 + index), "RoCE v2"),
            (ipv4_gid(address), "IB/RoCE v1"),
            (ipv4_gid(address), "RoCE v2"),
        ]
        if index == 1 and second_gid_index != 3:
            gids.insert(2, (ipv4_gid("192.168.7.1"), "IB/RoCE v1"))
        tree.hca(
            f"mlx5_{index}",
            f"0000:{base + 4:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=index,
            uverbs=index,
            link_layer="Ethernet",
            rate="200 Gb/sec (4X HDR)",
            gids=tuple(gids),
            netdev=netdev,
        )
    tree.rdma_cm().capabilities(CAPS_IPC_LOCK)
    return tree


def hgx_dual_port_cx7(root: Path, *, separate_pfs: bool = True) -> HostTree:
    """Return an HGX H100 whose GPUs each share a PCIe switch with one dual-port ConnectX-7:
    two PCI functions ``mlx5_2i``/``mlx5_2i+1`` (``separate_pfs``) or one device with 2 ports."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=False, kernel="5.15.0-113-generic")
    tree.interface("eth0", default_route=True)
    for index in range(8):
        base = 0x10 + index * 0x20
        numa = 0 if index < 4 else 1
        root_complex = f"pci0000:{base:02x}"
        switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
        tree.gpu(
            f"0000:{base + 3:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:00.0"),
            root_complex=root_complex,
            numa=numa,
            procfs=True,
            minor=index,
        )
        functions = (0, 1) if separate_pfs else (0,)
        for function in functions:
            uverbs = index * len(functions) + function
            tree.hca(
                f"mlx5_{uverbs}",
                f"0000:{base + 4:02x}:00.{function}",
                (*switch, f"0000:{base + 2:02x}:01.0"),
                root_complex=root_complex,
                numa=numa,
                uverbs=uverbs,
                ports=1 if separate_pfs else 2,
            )
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)


# GB200-like tray: every device on its own root complex (PCI domain), 2 GPUs, 2 CX-7 and one
# BlueField-3 per Grace; the BF3 enumerates first on each socket.
GB200_GPUS = ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0")
GB200_NICS = (  # (bus id, numa, is BlueField-3)
    ("0000:03:00.0", 0, True),
    ("0002:03:00.0", 0, False),
    ("0003:03:00.0", 0, False),
    ("0010:03:00.0", 1, True),
    ("0012:03:00.0", 1, False),
    ("0013:03:00.0", 1, False),
)


def gb200_like(root: Path, *, reversed_names: bool = False) -> HostTree:
    """Return a switchless GB200-like tray (all PHB within a socket); with ``reversed_names``
    the mlx5 names run against the bus order."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.8.0-1013-nvidia-64k")
    tree.interface("eth0", default_route=True)
    for minor, bdf in enumerate(GB200_GPUS):
        domain = bdf[:4]
        tree.gpu(
            bdf,
            (f"{domain}:00:00.0",),
            root_complex=f"pci{domain}:00",
            numa=0 if minor < 2 else 1,
            procfs=True,
            minor=minor,
        )
    for order, (bdf, numa, bluefield) in enumerate(GB200_NICS):
        number = len(GB200_NICS) - 1 - order if reversed_names else order
        domain = bdf[:4]
        tree.hca(
            f"mlx5_{number}",
            bdf,
            (f"{domain}:00:00.0",),
            root_complex=f"pci{domain}:00",
            numa=numa,
            uverbs=number,
            device_id="0xa2dc" if bluefield else "0x1021",
            hca_type="MT41692" if bluefield else "MT4129",
        )
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)


def gb200_nic_name(bdf: str, *, reversed_names: bool = False) -> str:
    """Return the mlx5 name ``gb200_like`` gives the NIC at ``bdf``."""
    order = [nic[0] for nic in GB200_NICS].index(bdf)
    return f"mlx5_{len(GB200_NICS) - 1 - order if reversed_names else order}"


def cx8_two_plane(root: Path) -> HostTree:
    """Return a node of 4 GPUs, each behind the PCIe switch built into its ConnectX-8, whose two
    planes appear as two PCI functions (two mlx5 devices) on the same switch port."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.8.0-45-generic")
    tree.interface("eth0", default_route=True)
    for index in range(4):
        base = 0x20 + index * 0x20
        numa = index // 2
        root_complex = f"pci0000:{base:02x}"
        cx8_switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
        tree.gpu(
            f"0000:{base + 3:02x}:00.0",
            (*cx8_switch, f"0000:{base + 2:02x}:00.0"),
            root_complex=root_complex,
            numa=numa,
            procfs=True,
            minor=index,
        )
        for plane in (0, 1):
            uverbs = 2 * index + plane
            tree.hca(
                f"mlx5_{uverbs}",
                f"0000:{base + 4:02x}:00.{plane}",
                (*cx8_switch, f"0000:{base + 2:02x}:01.0"),
                root_complex=root_complex,
                numa=numa,
                uverbs=uverbs,
                device_id="0x1023",
                hca_type="MT4131",
            )
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)


@dataclass
class PodView:
    """The pod's own process view: its network namespace, limits and capabilities."""

    root: Path

    def interface(self, name: str, *, default_route: bool = False, kind: int = 1) -> PodView:
        HostTree(self.root).interface(name, default_route=default_route, kind=kind)
        return self

    def limits(self, memlock: int, cap_eff: int = CAPS_IPC_LOCK) -> PodView:
        HostTree(self.root).memlock(memlock).capabilities(cap_eff)
        return self


def _gpu_below_switch(tree: HostTree, index: int) -> tuple[int, str, tuple[str, str]]:
    """Add GPU ``index`` (NUMA node ``index``) below a PCIe switch of its own root complex and
    return (its bus base, the root complex, the switch's two bridges) for the NIC beside it."""
    base = 0x40 + index * 0x40
    root_complex = f"pci0000:{base:02x}"
    switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
    tree.gpu(
        f"0000:{base + 3:02x}:00.0",
        (*switch, f"0000:{base + 2:02x}:00.0"),
        root_complex=root_complex,
        numa=index,
        procfs=True,
        minor=index,
    )
    return base, root_complex, switch


def _roce_host(root: Path, gids_of: Callable[[int, str], list[tuple[str, ...]]]) -> HostTree:
    """Return a RoCE v2 host with two GPU/HCA pairs, each pair on its own PCIe switch and NUMA
    node; ``gids_of(index, host netdev)`` gives rail ``index``'s GID table."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.8.0-45-generic")
    for index in range(2):
        base, root_complex, switch = _gpu_below_switch(tree, index)
        host_dev = f"ens{index}f0np0"
        tree.hca(
            f"mlx5_{index}",
            f"0000:{base + 4:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=index,
            uverbs=index,
            link_layer="Ethernet",
            rate="400 Gb/sec (4X NDR)",
            gids=tuple(gids_of(index, host_dev)),
            netdev=host_dev,
        )
    return tree.rdma_cm().peermem()


def roce_multus_host(root: Path, *, same_index: bool = True) -> HostTree:
    """Return a RoCE host whose two HCAs carry the host's GID (index 3, netdev ensNf0np0) and
    a GID for the pod's Multus macvlan of each rail (``net1``/``net2``, index 5, or 5 and 6)."""

    def gids_of(index: int, host_dev: str) -> list[tuple[str, ...]]:
        pod_dev = f"net{index + 1}"
        gids: list[tuple[str, ...]] = [
            (link_local_gid(0x100 + index), "IB/RoCE v1", host_dev),
            (link_local_gid(0x100 + index), "RoCE v2", host_dev),
            (ipv4_gid(f"10.0.{index}.5"), "IB/RoCE v1", host_dev),
            (ipv4_gid(f"10.0.{index}.5"), "RoCE v2", host_dev),
            (ipv4_gid(f"10.77.{index}.9"), "IB/RoCE v1", pod_dev),
            (ipv4_gid(f"10.77.{index}.9"), "RoCE v2", pod_dev),
        ]
        if not same_index and index == 1:
            gids.insert(4, (ipv4_gid("10.99.0.1"), "RoCE v2", "ens1f0v1"))
        return gids

    return _roce_host(root, gids_of)


# --- GPU allocation, VMBus, IPv6 RoCE and net-plugin layouts ----------------------------------


def mask_gpu_procfs(tree: HostTree, keep_minors: tuple[int, ...]) -> HostTree:
    """Mask ``proc/driver/nvidia/gpus`` to the GPUs of ``keep_minors``, as libnvidia-container
    does in a pod: the listing holds only the allocated GPUs, sysfs still shows every GPU."""
    procfs = tree.root / "proc/driver/nvidia/gpus"
    for entry in procfs.iterdir():
        info = (entry / "information").read_text()
        minor = int(info.split("Device Minor:")[1].split()[0])
        if minor not in keep_minors:
            for child in entry.iterdir():
                child.unlink()
            entry.rmdir()
    return tree


# Azure ND H100 v5 (Hyper-V): every GPU and every ConnectX-7 VF sits alone in its own PCI
# domain below a VMBus device, so sysfs paths start with the ACPI/VMBus chain, not ``pci...``.
VMBUS_PREFIX = "LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00"


# The GPUs' PCI domains on an ND H100 v5, as Azure's own topology file (ndv5-topo.xml) has them.
NDV5_GPU_DOMAINS = ("0001", "0002", "0003", "0008", "0009", "000a", "000b", "000c")
NDV5_LINK = ("32.0 GT/s PCIe", "16")


def azure_nd_h100_v5(root: Path) -> HostTree:
    """Return an Azure ND H100 v5 VM: 8 GPUs (domains 0001-0003, 0008-000c) and 8 InfiniBand VFs
    ``mlx5_ib0..7`` (domains 0101-0108) on VMBus, four of each per NUMA node, every function
    reporting a PCIe Gen5 x16 link."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=False, kernel="5.15.0-1061-azure")
    tree.interface("eth0", default_route=True)
    for index in range(8):
        numa = 0 if index < 4 else 1
        gpu_domain = NDV5_GPU_DOMAINS[index]
        tree.gpu(
            f"{gpu_domain}:00:00.0",
            (),
            root_complex=f"{VMBUS_PREFIX}/0000000{index}-0001-0000-3130-444531304244/"
            f"pci{gpu_domain}:00",
            numa=numa,
            procfs=True,
            minor=index,
        )
        nic_domain = f"{0x101 + index:04x}"
        tree.hca(
            f"mlx5_ib{index}",
            f"{nic_domain}:00:00.0",
            (),
            root_complex=f"{VMBUS_PREFIX}/0000000{index}-0002-0000-3130-444531304244/"
            f"pci{nic_domain}:00",
            numa=numa,
            uverbs=index,
            device_id="0x101e",  # ConnectX-7 virtual function
        )
        for bdf in (f"{gpu_domain}:00:00.0", f"{nic_domain}:00:00.0"):
            device = (root / "sys" / "bus" / "pci" / "devices" / bdf).resolve()
            _write(device / "max_link_speed", NDV5_LINK[0])
            _write(device / "max_link_width", NDV5_LINK[1])
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)


def ipv6_gid(address: str) -> str:
    """Return the sysfs spelling of the GID of an IPv6 ``address``."""
    return ipaddress.IPv6Address(address).exploded


def pod_addresses(view: PodView, ipv4: dict[str, str], ipv6: dict[str, str]) -> PodView:
    """Write the pod's own addresses: ``proc/net/fib_trie`` (IPv4 LOCAL entries) and
    ``proc/net/if_inet6`` (interface -> address), the files the init program reads them from."""
    trie = ["Main:", "  +-- 0.0.0.0/0 3 0 5"]
    for address in ipv4.values():
        trie += [f"     |-- {address}", "        /32 host LOCAL"]
    _write(view.root / "proc/net/fib_trie", "\n".join(trie))
    rows = [
        f"{ipv6_gid(address).replace(':', '')} {index + 2:02x} 40 00 80 {name:>8}"
        for index, (name, address) in enumerate(ipv6.items())
    ]
    _write(view.root / "proc/net/if_inet6", "\n".join(rows))
    for name in {**ipv4, **ipv6}:
        view.interface(name)
    return view


def roce_ipv6_macvlan_host(root: Path) -> HostTree:
    """Return a RoCE v2 host on an IPv6-only fabric: each of two HCAs carries the host's GID
    (``ensNf0np0``, index 3), another pod's macvlan GID (index 4) and this pod's (index 5); the
    macvlan of rail N is ``net<N+1>`` in every pod, so only the address tells the pods apart."""

    def gids_of(index: int, host_dev: str) -> list[tuple[str, ...]]:
        return [
            (link_local_gid(0x100 + index), "IB/RoCE v1", host_dev),
            (link_local_gid(0x100 + index), "RoCE v2", host_dev),
            (ipv6_gid(f"fd00:{index}::5"), "IB/RoCE v1", host_dev),
            (ipv6_gid(f"fd00:{index}::5"), "RoCE v2", host_dev),
            (ipv6_gid(f"fd77:{index}::8"), "RoCE v2", f"net{index + 1}"),  # another pod's
            (ipv6_gid(f"fd77:{index}::9"), "RoCE v2", f"net{index + 1}"),  # this pod's
        ]

    return _roce_host(root, gids_of).capabilities(CAPS_IPC_LOCK)


EFA_VENDOR = "0x1d0f"  # Amazon


def efa_like_host(root: Path, *, efa: bool = False) -> HostTree:
    """Return an AWS p5-like node for NCCL with a net plugin (aws-ofi-nccl): 8 GPUs, no
    InfiniBand HCA the init program could vet; with ``efa`` one EFA device per GPU switch
    (``rdmapNs0``, vendor 0x1d0f), the plugin's own devices, in ``sys/class/infiniband``."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.1.102-111.182.amzn2023.x86_64")
    tree.interface("eth0", default_route=True)
    for index in range(8):
        base = 0x10 + index * 0x20
        tree.gpu(
            f"0000:{base + 3:02x}:00.0",
            (f"0000:{base:02x}:01.0",),
            root_complex=f"pci0000:{base:02x}",
            numa=0 if index < 4 else 1,
            procfs=True,
            minor=index,
        )
        if efa:
            bdf = f"0000:{base + 4:02x}:00.0"
            tree.hca(
                f"rdmap{base + 4}s0",
                bdf,
                (f"0000:{base:02x}:01.0",),
                root_complex=f"pci0000:{base:02x}",
                numa=0 if index < 4 else 1,
                uverbs=index,
                link_layer="Unspecified",
                rate="100 Gb/sec",
                device_id="0xefa1",
                hca_type="efa",
            )
            _write(root / "sys" / "bus" / "pci" / "devices" / bdf / "vendor", EFA_VENDOR)
    return tree.capabilities(CAPS_IPC_LOCK)


DOWN_PORT = ("1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)")  # a port with no link: SDR's rate


def set_port(root: Path, hca: str, port: int, state: str, phys_state: str, rate: str) -> None:
    """Rewrite one port's state, physical state and rate (a cable pulled, a link retrained)."""
    directory = root / "sys" / "class" / "infiniband" / hca / "ports" / str(port)
    _write(directory / "state", state)
    _write(directory / "phys_state", phys_state)
    _write(directory / "rate", rate)


def hgx_shared_switch(
    root: Path, *, down: str | None = None, retrained: str | None = None
) -> HostTree:
    """Return an HGX H100 with four PCIe switches, each holding two GPUs and two ConnectX-7
    (``mlx5_2s``, ``mlx5_2s+1``); ``down`` names a NIC whose port has no link, ``retrained`` one
    whose link came up on two lanes (``200 Gb/sec (2X NDR)``)."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=False, kernel="5.15.0-113-generic")
    tree.interface("eth0", default_route=True)
    for switch_index in range(4):
        base = 0x10 + switch_index * 0x20
        numa = switch_index // 2
        root_complex = f"pci0000:{base:02x}"
        switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
        for slot in range(2):
            number = 2 * switch_index + slot
            tree.gpu(
                f"0000:{base + 3 + 2 * slot:02x}:00.0",
                (*switch, f"0000:{base + 2:02x}:0{2 * slot}.0"),
                root_complex=root_complex,
                numa=numa,
                procfs=True,
                minor=number,
            )
            name = f"mlx5_{number}"
            tree.hca(
                name,
                f"0000:{base + 4 + 2 * slot:02x}:00.0",
                (*switch, f"0000:{base + 2:02x}:0{2 * slot + 1}.0"),
                root_complex=root_complex,
                numa=numa,
                uverbs=number,
            )
            if name == down:
                set_port(root, name, 1, *DOWN_PORT)
            if name == retrained:
                set_port(root, name, 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (2X NDR)")
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)


def hgx_dual_port_one_cabled(root: Path, *, separate_pfs: bool) -> HostTree:
    """Return :func:`hgx_dual_port_cx7` with only the first port of every card cabled: the
    second port (or PCI function) has no link."""
    tree = hgx_dual_port_cx7(root, separate_pfs=separate_pfs)
    for index in range(8):
        if separate_pfs:
            set_port(root, f"mlx5_{2 * index + 1}", 1, *DOWN_PORT)
        else:
            set_port(root, f"mlx5_{index}", 2, *DOWN_PORT)
    return tree


def spectrum_x_bf3(root: Path) -> HostTree:
    """Return a Spectrum-X node: 4 GPUs, each with a BlueField-3 SuperNIC (``0xa2dc``) on its
    PCIe switch (east-west, RoCE), and a dual-port BlueField-3 DPU (same PCI id) on a CPU root
    port of socket 0 (north-south). The DPU enumerates first: ``mlx5_0``/``mlx5_1``."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.8.0-45-generic")
    tree.interface("eth0", default_route=True)
    for function in (0, 1):
        tree.hca(
            f"mlx5_{function}",
            f"0000:0c:00.{function}",
            ("0000:0c:01.0",),
            root_complex="pci0000:0c",
            numa=0,
            uverbs=function,
            link_layer="Ethernet",
            rate="200 Gb/sec (4X HDR)",
            gids=((ipv4_gid(f"10.9.0.{7 + function}"), "RoCE v2"),),
            device_id="0xa2dc",
            hca_type="MT41692",
        )
    for index in range(4):
        base = 0x20 + index * 0x20
        numa = index // 2
        root_complex = f"pci0000:{base:02x}"
        switch = (f"0000:{base:02x}:01.0", f"0000:{base + 1:02x}:00.0")
        tree.gpu(
            f"0000:{base + 3:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:00.0"),
            root_complex=root_complex,
            numa=numa,
            procfs=True,
            minor=index,
        )
        tree.hca(
            f"mlx5_{index + 2}",
            f"0000:{base + 4:02x}:00.0",
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=numa,
            uverbs=index + 2,
            link_layer="Ethernet",
            gids=((ipv4_gid(f"10.0.{index}.5"), "RoCE v2"),),
            device_id="0xa2dc",
            hca_type="MT41692",
        )
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)


def add_virtual_function(root: Path, pf_bdf: str, name: str, uverbs: int) -> Path:
    """Add an SR-IOV VF of the PF at ``pf_bdf`` (``device/physfn`` -> the PF), unassigned: its
    port is DOWN. Returns the VF's PCI directory."""
    pf = (root / "sys" / "bus" / "pci" / "devices" / pf_bdf).resolve()
    bus, rest = pf_bdf.rsplit(":", 1)
    vf_bdf = f"{bus}:{int(rest.split('.')[0], 16) + 0:02x}.{int(rest.split('.')[1]) + 2}"
    vf = pf.parent / vf_bdf
    for entry in ("vendor", "class", "numa_node"):
        _write(vf / entry, (pf / entry).read_text().strip())
    _write(vf / "device", "0x101e")
    _link(vf / "physfn", pf)
    dev = root / "sys" / "class" / "infiniband" / name
    _link(dev / "device", vf)
    _write(dev / "node_guid", "0000:0000:0000:0000")
    port = dev / "ports" / "1"
    _write(port / "state", "1: DOWN")
    _write(port / "phys_state", "3: Disabled")
    _write(port / "rate", "10 Gb/sec (4X SDR)")
    _write(port / "link_layer", "InfiniBand")
    _write(root / "sys" / "class" / "infiniband_verbs" / f"uverbs{uverbs}" / "ibdev", name)
    return vf


def sriov_vf_pod(root: Path) -> HostTree:
    """Return a RoCE host whose pod holds SR-IOV virtual functions (the SR-IOV device plugin's
    layout): 2 GPUs, each beside a ConnectX-7 PF (the host's, not in the pod) whose VF
    ``mlx5_<2+i>`` is the pod's, with the pod's GID on its Multus interface ``net<i+1>``."""
    tree = HostTree(root)
    tree.nvidia_driver(open_module=True, kernel="6.8.0-45-generic")
    tree.interface("eth0", default_route=True).interface("net1").interface("net2")
    for index in range(2):
        base, root_complex, switch = _gpu_below_switch(tree, index)
        pf_bdf = f"0000:{base + 4:02x}:00.0"
        tree.hca(
            f"mlx5_{index}",
            pf_bdf,
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=index,
            uverbs=index,
            link_layer="Ethernet",
            gids=((ipv4_gid(f"10.0.{index}.5"), "RoCE v2", f"ens{index}f0np0"),),
            dev_node=False,
        )
        vf_bdf = f"0000:{base + 4:02x}:00.2"
        vf = tree.pci_device(
            vf_bdf,
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=index,
            vendor="0x15b3",
            pci_class="0x020700",
        )
        _link(vf / "physfn", (root / "sys" / "bus" / "pci" / "devices" / pf_bdf).resolve())
        tree.hca(
            f"mlx5_{index + 2}",
            vf_bdf,
            (*switch, f"0000:{base + 2:02x}:01.0"),
            root_complex=root_complex,
            numa=index,
            uverbs=index + 2,
            link_layer="Ethernet",
            gids=(
                (link_local_gid(0x200 + index), "IB/RoCE v1", f"net{index + 1}"),
                (link_local_gid(0x200 + index), "RoCE v2", f"net{index + 1}"),
                (ipv4_gid(f"10.77.{index}.9"), "IB/RoCE v1", f"net{index + 1}"),
                (ipv4_gid(f"10.77.{index}.9"), "RoCE v2", f"net{index + 1}"),
            ),
            device_id="0x101e",
        )
    return tree.rdma_cm().peermem().capabilities(CAPS_IPC_LOCK)
