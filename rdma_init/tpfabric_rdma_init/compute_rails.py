"""Which NIC ports of a GPU node are compute rails: one rule for the RDMA init container and the
fabric agent, so the agent judges the ports the init container pairs with GPUs.

It lives in the init program (which may import nothing but the standard library) and the fabric
agent imports it from here (both ship in the tpfabric image; the init image holds the init program
alone). It must stay standard library only, never read a file, and take its NICs and GPUs through
the small protocols below.

A NIC's *role* comes from what it is and where it sits, never from its live state (a compute port
that is down reports ``10 Gb/sec (4X SDR)`` and is still a compute port; a retrained one is still
compute, and a problem):

- ``vf``: an SR-IOV virtual function (``device/physfn`` exists): its PF is the rail;
- ``dpu``: a BlueField (PCI id ``0xa2d2``/``0xa2d6``/``0xa2dc``/``0xa2df`` or hca_type ``MT416xx``)
  that shares no PCIe switch with a GPU: a north-south DPU. A BlueField-3 *SuperNIC* (same PCI id)
  sits on its GPU's PCIe switch (Spectrum-X east-west) and is ``compute``. Where position cannot
  tell (switchless trays), the node override names the SuperNICs;
- ``compute``: a NIC on a GPU's PCIe switch (PIX/PXB to some GPU of the node);
- ``other``: any other NIC (storage, frontend, in-band management): kept, ranked after compute.

A port is *uncabled* when it is not ACTIVE on a card (PCI device, any function) that has another
port ACTIVE, and no card of the node's candidates runs two ports ACTIVE (the fabric cables one
port per card). A card with no port ACTIVE keeps the port position the other cards use.

Pairing follows NCCL's path types (PIX < PXB < PHB < SYS), then the NUMA node, then the role;
GPUs whose winners are the same set share them in PCIe order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

__all__ = [
    "BLUEFIELD_DEVICE_IDS",
    "GpuHcaPair",
    "GpuLike",
    "NicLike",
    "NicPort",
    "PathType",
    "PciPathLike",
    "PortLike",
    "card_of",
    "compute_nic_roles",
    "is_bluefield",
    "matches_override",
    "pair_gpus_with_hcas",
    "path_type",
    "uncabled_ports",
]

BLUEFIELD_DEVICE_IDS = frozenset({"0xa2d2", "0xa2d6", "0xa2dc", "0xa2df"})
BLUEFIELD_HCA_TYPES = ("MT41682", "MT41686", "MT41692")
ROLE_RANK = {"compute": 0, "other": 1}


class PciPathLike(Protocol):
    """A PCI function's place in the tree: its bus id, the bridges above it, its root complex."""

    @property
    def bdf(self) -> str: ...
    @property
    def bridges(self) -> tuple[str, ...]: ...
    @property
    def root_complex(self) -> str: ...
    @property
    def numa_node(self) -> int | None: ...


class PortLike(Protocol):
    """One port: its number and logical state (``ACTIVE``, ``DOWN`` ...)."""

    @property
    def number(self) -> int: ...
    @property
    def state(self) -> str: ...


class NicLike(Protocol):
    """An RDMA device: name, PCI place and identity, ports, and whether it is a VF."""

    @property
    def name(self) -> str: ...
    @property
    def node_guid(self) -> str | None: ...
    @property
    def pci(self) -> PciPathLike | None: ...
    @property
    def ports(self) -> Sequence[PortLike]: ...
    @property
    def pci_device_id(self) -> str | None: ...
    @property
    def hca_type(self) -> str | None: ...
    @property
    def virtual_function(self) -> bool: ...


class GpuLike(Protocol):
    """A GPU: its bus id and PCI place."""

    @property
    def bdf(self) -> str: ...
    @property
    def pci(self) -> PciPathLike | None: ...


class PathType(IntEnum):
    """NCCL's path types between a GPU and a NIC, closest first (names as NCCL spells them)."""

    LOC = 0
    PIX = 1
    PXB = 2
    PHB = 3
    SYS = 4


def path_type(a: PciPathLike | None, b: PciPathLike | None) -> PathType:
    """Return the NCCL path type between two PCI functions (SYS when either has no PCI path)."""
    if a is None or b is None:
        return PathType.SYS
    if a.bdf == b.bdf:
        return PathType.LOC
    common = 0
    for left, right in zip(a.bridges, b.bridges, strict=False):
        if left != right:
            break
        common += 1
    if common == 0:
        same_numa = a.numa_node is not None and a.numa_node == b.numa_node
        return PathType.PHB if same_numa or a.root_complex == b.root_complex else PathType.SYS
    # Below the deepest shared bridge (a switch's upstream port) each side passes its own
    # downstream port: one port each is one switch (PIX), anything deeper crosses several (PXB).
    if max(len(a.bridges), len(b.bridges)) - common <= 1:
        return PathType.PIX
    return PathType.PXB


@dataclass(frozen=True, order=True)
class NicPort:
    """One port of one HCA: a rail endpoint (``mlx5_0:1``)."""

    hca: str
    port: int

    def __str__(self) -> str:
        return f"{self.hca}:{self.port}"


@dataclass(frozen=True)
class GpuHcaPair:
    """A GPU, one of its fabric ports and the NCCL path type between them."""

    gpu: str
    hca: str
    path: PathType
    port: int = 1


def is_bluefield(nic: NicLike) -> bool:
    """Return whether the NIC is a BlueField (DPU or SuperNIC) by PCI id or hca_type."""
    return (nic.pci_device_id or "").lower() in BLUEFIELD_DEVICE_IDS or (
        nic.hca_type or ""
    ).startswith(BLUEFIELD_HCA_TYPES)


def _normal(text: str) -> str:
    return text.lower().replace(":", "").replace(".", "").replace("-", "").removeprefix("0x")


def matches_override(nic: NicLike, names: Iterable[str]) -> bool:
    """Return whether ``names`` (PCI addresses, node GUIDs or device names) name ``nic``.

    ``0000:3b:00.0``, ``3b:00.0``, ``b83f:d203:0001:0002``, ``0xb83fd20300010002`` all match.
    """
    wanted = {_normal(name) for name in names if name.strip()}
    if nic.name.lower() in wanted:
        return True
    if nic.node_guid and _normal(nic.node_guid) in wanted:
        return True
    if nic.pci is not None:
        bdf = _normal(nic.pci.bdf)
        return bdf in wanted or bdf.removeprefix("0000") in wanted
    return False


def compute_nic_roles(
    nics: Sequence[NicLike], gpus: Sequence[GpuLike], override: Sequence[str] = ()
) -> dict[str, str]:
    """Return ``{nic name: role}`` (``compute``, ``other``, ``dpu``, ``vf``; see the module).

    With ``override`` (PCI addresses, GUIDs or names) the NICs it names are ``compute`` and every
    other NIC is ``other`` (VFs stay ``vf``). Without GPUs every non-BlueField PF is ``compute``.
    """
    roles: dict[str, str] = {}
    for nic in nics:
        if nic.virtual_function:
            roles[nic.name] = "vf"
        elif override:
            roles[nic.name] = "compute" if matches_override(nic, override) else "other"
        else:
            near_gpu = any(path_type(gpu.pci, nic.pci) <= PathType.PXB for gpu in gpus)
            if is_bluefield(nic):
                roles[nic.name] = "compute" if near_gpu else "dpu"
            else:
                roles[nic.name] = "compute" if near_gpu or not gpus else "other"
    return roles


def card_of(nic: NicLike) -> str:
    """Return the card a NIC belongs to: its bus id without the function (``0000:3b:00``)."""
    if nic.pci is None:
        return nic.name
    return nic.pci.bdf.rsplit(".", 1)[0]


def uncabled_ports(nics: Sequence[NicLike]) -> dict[NicPort, str]:
    """Return the ports of ``nics`` that are not cabled, each with the reason (see the module)."""
    cards: dict[str, list[tuple[NicLike, PortLike]]] = {}
    for nic in sorted(nics, key=lambda n: (card_of(n), n.pci.bdf if n.pci else n.name)):
        if nic.virtual_function:
            continue
        for port in sorted(nic.ports, key=lambda p: p.number):
            cards.setdefault(card_of(nic), []).append((nic, port))
    active_at: dict[str, list[int]] = {
        card: [i for i, (_, port) in enumerate(ports) if port.state.upper() == "ACTIVE"]
        for card, ports in cards.items()
    }
    if any(len(active) > 1 for active in active_at.values()):
        return {}  # the fabric cables several ports of a card: every port is a rail
    usual = Counter(active[0] for active in active_at.values() if active)
    if not usual:
        return {}  # nothing is up: no evidence of which port is cabled
    position = usual.most_common(1)[0][0]
    found: dict[NicPort, str] = {}
    for card, ports in cards.items():
        if len(ports) < 2:
            continue
        keep = active_at[card][0] if active_at[card] else position
        if keep >= len(ports):
            continue
        kept = ports[keep]
        for index, (nic, port) in enumerate(ports):
            if index != keep:
                found[NicPort(nic.name, port.number)] = (
                    f"not cabled: {kept[0].name} port {kept[1].number} is this card's fabric "
                    "port (every card of this node runs one port)"
                )
    return found


def _natural(name: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (0, p) for p in re.split(r"(\d+)", name) if p)


def _pci_order(nic: NicLike) -> tuple[int, str, tuple[tuple[int, str], ...]]:
    if nic.pci is None:
        return (1, "", _natural(nic.name))
    return (0, nic.pci.bdf, _natural(nic.name))


def pair_gpus_with_hcas(
    gpus: Sequence[GpuLike],
    nics: Sequence[NicLike],
    roles: dict[str, str],
    exclude: frozenset[str] = frozenset(),
) -> tuple[GpuHcaPair, ...]:
    """Return the pairs of every GPU (bus-id order) with each of its closest ports.

    Only NICs whose role is ``compute`` or ``other`` are candidates (never a DPU or a VF); ports
    named in ``exclude`` (``mlx5_1:2``) are left out.
    """
    endpoints = [
        (nic, NicPort(nic.name, port.number))
        for nic in sorted(nics, key=_pci_order)
        if roles.get(nic.name, "compute") in ROLE_RANK
        for port in sorted(nic.ports, key=lambda p: p.number)
        if f"{nic.name}:{port.number}" not in exclude
    ]
    if not endpoints or not gpus:
        return ()
    winners: list[tuple[GpuLike, tuple[tuple[NicLike, NicPort], ...]]] = []
    for gpu in sorted(gpus, key=lambda g: g.bdf):
        gpu_numa = gpu.pci.numa_node if gpu.pci else None

        def key(
            item: tuple[NicLike, NicPort], gpu: GpuLike = gpu, numa: int | None = gpu_numa
        ) -> tuple[PathType, bool, int]:
            nic = item[0]
            nic_numa = nic.pci.numa_node if nic.pci else None
            rank = ROLE_RANK[roles.get(nic.name, "compute")]
            return (path_type(gpu.pci, nic.pci), numa is None or nic_numa != numa, rank)

        best = min(key(item) for item in endpoints)
        winners.append((gpu, tuple(item for item in endpoints if key(item) == best)))
    groups: dict[tuple[NicPort, ...], list[GpuLike]] = {}
    for gpu, items in winners:
        groups.setdefault(tuple(port for _, port in items), []).append(gpu)
    by_port = {port: nic for nic, port in endpoints}
    assigned: dict[str, list[NicPort]] = {}
    for ports, members in groups.items():
        for k, gpu in enumerate(members):
            if len(ports) >= len(members):
                mine = [p for i, p in enumerate(ports) if i % len(members) == k]
            else:
                mine = [ports[k % len(ports)]]
            assigned[gpu.bdf] = mine
    pairs = []
    for gpu, _ in winners:
        for port in assigned[gpu.bdf]:
            nic = by_port[port]
            pairs.append(
                GpuHcaPair(
                    gpu=gpu.bdf, hca=nic.name, port=port.port, path=path_type(gpu.pci, nic.pci)
                )
            )
    return tuple(pairs)
