"""GPU <-> NIC-port affinity from the PCI tree, the fabric ports of a pod and the rail of each.

The distance between a GPU and an HCA follows NCCL's path types: ``PIX`` (one PCIe switch between
them), ``PXB`` (several switches, no host bridge), ``PHB`` (through the CPU's host bridge, same
NUMA node), ``SYS`` (across the inter-socket link).

Pairing keeps bandwidth: a fabric *endpoint* is one port of one HCA (``mlx5_0:1``), so a
dual-port ConnectX-7, the two PCI functions of a dual-PF design and the two planes of a
ConnectX-8 are all kept. For each GPU of the pod:

1. the candidates at the smallest path type (then the same NUMA node) win;
2. among those, the NIC's *role*, read from its type and never from its name, breaks the tie:
   a compute ConnectX first, then a slower port (storage/frontend runs below the fabric rate),
   then a BlueField DPU (``0xa2d6``/``0xa2dc``: north-south);
3. GPUs whose winners are the same set share them in PCIe order: with as many ports as GPUs
   each GPU gets its own (switchless GB200-like trays: every device on its own root complex,
   all PHB, so the k-th GPU of a NUMA node gets its k-th NIC in bus order); with more ports than
   GPUs every GPU keeps several (planes, dual ports); with fewer, GPUs share round-robin.

Which ports carry the job's collectives: those some GPU is paired with; an HCA or port named by
``--exclude-hca`` (``mlx5_1`` or ``mlx5_1:2``) never does; HCAs whose ``/dev/infiniband/uverbsN``
is not in the pod are not the pod's (exclusive device plugins) unless none is, so the checks can
say so. Without GPUs (kind, CPU-only debugging) every allocated HCA's ports are used.

Rails come from the pod's placement annotation (``tpfabric.io/rails``: comma-separated rail
indices, each optionally pinned as ``<rail>=<hca>`` or ``<rail>=<hca>:<port>``), else rail *i*
is the *i*-th endpoint in pairing order (GPU bus order, then the GPU's ports in PCIe order), which
is what a rail-optimised fabric cables: GPU *i*'s NIC to rail leaf *i*.

Pure functions over the discovery inventory; this module must never read files. Data Direct
NICs (a DMA function separate from the NIC function, found through ``mlx5dv``) are not modelled:
the NIC's own PCI function is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from tpfabric_rdma_init.discovery import Gpu, Hca, PciLocation, natural_key

__all__ = [
    "FabricSelection",
    "GpuHcaPair",
    "NicPort",
    "PathType",
    "RailAssignment",
    "RailsAnnotationError",
    "assign_rails",
    "nic_role",
    "pair_gpus_with_hcas",
    "parse_rails_annotation",
    "path_type",
    "select_fabric_hcas",
]

BLUEFIELD_DEVICE_IDS = frozenset({"0xa2d2", "0xa2d6", "0xa2dc", "0xa2df"})
BLUEFIELD_HCA_TYPES = ("MT41682", "MT41686", "MT41692")
ROLE_RANK = {"compute": 0, "slower": 1, "dpu": 2}


class PathType(IntEnum):
    """NCCL's path types between a GPU and a NIC, closest first (names as NCCL spells them)."""

    LOC = 0
    PIX = 1
    PXB = 2
    PHB = 3
    SYS = 4


def path_type(a: PciLocation | None, b: PciLocation | None) -> PathType:
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


def nic_role(hca: Hca, fastest_gbps: float | None) -> str:
    """Return ``dpu`` (BlueField by PCI id or hca_type), ``slower`` (below the fastest port's
    rate: storage/frontend) or ``compute``; the name is never looked at."""
    if (hca.pci_device_id or "").lower() in BLUEFIELD_DEVICE_IDS or (hca.hca_type or "").startswith(
        BLUEFIELD_HCA_TYPES
    ):
        return "dpu"
    rates = [port.rate_gbps for port in hca.ports if port.rate_gbps]
    if fastest_gbps and rates and max(rates) < fastest_gbps:
        return "slower"
    return "compute"


@dataclass(frozen=True)
class GpuHcaPair:
    """A GPU, one of its fabric ports and the NCCL path type between them."""

    gpu: str
    hca: str
    path: PathType
    port: int = 1


def _pci_order(hca: Hca) -> tuple[object, ...]:
    if hca.pci is None:
        return (1, "", natural_key(hca.name))
    return (0, hca.pci.bdf, natural_key(hca.name))


def _endpoints(hcas: tuple[Hca, ...], exclude: frozenset[str]) -> list[tuple[Hca, NicPort]]:
    return [
        (hca, NicPort(hca.name, port.number))
        for hca in sorted(hcas, key=_pci_order)
        for port in hca.ports
        if f"{hca.name}:{port.number}" not in exclude
    ]


def pair_gpus_with_hcas(
    gpus: tuple[Gpu, ...], hcas: tuple[Hca, ...], exclude: frozenset[str] = frozenset()
) -> tuple[GpuHcaPair, ...]:
    """Return the pairs of every GPU (bus-id order) with each of its closest ports."""
    endpoints = _endpoints(hcas, exclude)
    if not endpoints or not gpus:
        return ()
    fastest = max((p.rate_gbps or 0.0 for h in hcas for p in h.ports), default=0.0) or None
    roles = {hca.name: ROLE_RANK[nic_role(hca, fastest)] for hca in hcas}
    winners: list[tuple[Gpu, tuple[tuple[Hca, NicPort], ...]]] = []
    for gpu in sorted(gpus, key=lambda g: g.bdf):
        gpu_numa = gpu.pci.numa_node if gpu.pci else None

        def key(
            item: tuple[Hca, NicPort], gpu: Gpu = gpu, numa: int | None = gpu_numa
        ) -> tuple[PathType, bool, int]:
            hca = item[0]
            hca_numa = hca.pci.numa_node if hca.pci else None
            return (path_type(gpu.pci, hca.pci), numa is None or hca_numa != numa, roles[hca.name])

        best = min(key(item) for item in endpoints)
        winners.append((gpu, tuple(item for item in endpoints if key(item) == best)))
    groups: dict[tuple[NicPort, ...], list[Gpu]] = {}
    for gpu, items in winners:
        groups.setdefault(tuple(port for _, port in items), []).append(gpu)
    by_port = {port: hca for hca, port in endpoints}
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
            hca = by_port[port]
            pairs.append(
                GpuHcaPair(
                    gpu=gpu.bdf, hca=hca.name, port=port.port, path=path_type(gpu.pci, hca.pci)
                )
            )
    return tuple(pairs)


@dataclass(frozen=True)
class FabricSelection:
    """The ports that carry the job's collectives and why the others do not."""

    hcas: tuple[str, ...]
    """Fabric HCAs in natural name order."""
    pairs: tuple[GpuHcaPair, ...]
    excluded: dict[str, str]
    """HCA name (or ``hca:port``) -> the reason it is not used."""
    endpoints: tuple[NicPort, ...] = ()
    """Fabric ports in rail order (pairing order with GPUs, natural name order without)."""


def _split_exclusions(exclude: frozenset[str]) -> tuple[set[str], frozenset[str]]:
    whole = {item for item in exclude if ":" not in item}
    ports = frozenset(item for item in exclude if ":" in item)
    return whole, ports


def select_fabric_hcas(
    hcas: tuple[Hca, ...], gpus: tuple[Gpu, ...], exclude: frozenset[str] = frozenset()
) -> FabricSelection:
    """Return the fabric ports of a pod: GPU-affine ones with GPUs, allocated ones without."""
    whole, port_excludes = _split_exclusions(exclude)
    excluded = {h.name: "excluded by --exclude-hca" for h in hcas if h.name in whole}
    excluded.update(dict.fromkeys(sorted(port_excludes), "excluded by --exclude-hca"))
    candidates = tuple(h for h in hcas if h.name not in whole and h.ports)
    excluded.update({h.name: "has no ports" for h in hcas if h.name not in whole and not h.ports})
    allocated = tuple(h for h in candidates if h.uverbs_present)
    if allocated:
        for hca in candidates:
            if not hca.uverbs_present:
                excluded[hca.name] = "no /dev/infiniband device in this pod (not allocated to it)"
        candidates = allocated
    pairs = pair_gpus_with_hcas(gpus, candidates, port_excludes) if gpus else ()
    if pairs:
        endpoints = tuple(dict.fromkeys(NicPort(p.hca, p.port) for p in pairs))
        reason = "not the closest port of any GPU of this pod (storage, frontend or DPU)"
    else:
        endpoints = tuple(
            port
            for _, port in sorted(
                _endpoints(candidates, port_excludes), key=lambda i: natural_key(str(i[1]))
            )
        )
        reason = "no /dev/infiniband device in this pod (not allocated to it)"
    chosen = {port.hca for port in endpoints}
    for hca in candidates:
        if hca.name not in chosen:
            excluded[hca.name] = reason
    return FabricSelection(
        hcas=tuple(sorted(chosen, key=natural_key)),
        pairs=pairs,
        excluded=dict(sorted(excluded.items(), key=lambda item: natural_key(item[0]))),
        endpoints=endpoints,
    )


class RailsAnnotationError(ValueError):
    """The ``tpfabric.io/rails`` annotation cannot be applied; ``str()`` is one actionable line."""


@dataclass(frozen=True)
class RailAssignment:
    """Rail index -> fabric port for the ports this pod uses, and where the mapping came from."""

    rails: tuple[tuple[int, NicPort], ...]
    """(rail, port) sorted by rail."""
    source: str
    """``annotation`` or ``pairing``."""

    @property
    def endpoints(self) -> tuple[NicPort, ...]:
        """Return the ports in rail order (the order NCCL_IB_HCA lists them in)."""
        return tuple(port for _, port in self.rails)

    @property
    def hcas(self) -> tuple[str, ...]:
        """Return the HCAs in rail order, each once."""
        return tuple(dict.fromkeys(port.hca for port in self.endpoints))

    def rail_of(self, port: NicPort) -> int | None:
        """Return the rail of ``port``, None when it carries none."""
        return next((rail for rail, p in self.rails if p == port), None)

    def without(self, dropped: set[NicPort]) -> RailAssignment:
        """Return the assignment without ``dropped`` ports (rails keep their numbers)."""
        return RailAssignment(
            rails=tuple((r, p) for r, p in self.rails if p not in dropped), source=self.source
        )


def parse_rails_annotation(value: str) -> tuple[tuple[int, str | None], ...]:
    """Return (rail, pinned HCA[:port] or None) per entry of an annotation like ``0,1=mlx5_3``."""
    entries: list[tuple[int, str | None]] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            continue
        rail_text, _, hca = token.partition("=")
        if not rail_text.strip().isdigit():
            raise RailsAnnotationError(
                f"annotation tpfabric.io/rails: {token!r} is not a rail index; "
                "write comma-separated indices, each optionally '=<hca>', e.g. '0,1,2=mlx5_4'"
            )
        entries.append((int(rail_text), hca.strip() or None))
    rails = [rail for rail, _ in entries]
    if len(set(rails)) != len(rails):
        raise RailsAnnotationError(f"annotation tpfabric.io/rails: rail listed twice in {value!r}")
    return tuple(entries)


def _pinned(pinned: str, endpoints: tuple[NicPort, ...]) -> NicPort | None:
    if ":" in pinned:
        return next((p for p in endpoints if str(p) == pinned), None)
    return next((p for p in endpoints if p.hca == pinned), None)


def assign_rails(endpoints: tuple[NicPort, ...], annotation: str | None) -> RailAssignment:
    """Return the rail of each fabric port: from the annotation when given, else pairing order."""
    if annotation is None or not annotation.strip():
        return RailAssignment(rails=tuple(enumerate(endpoints)), source="pairing")
    listed = ", ".join(str(p) for p in endpoints) or "none"
    rails: list[tuple[int, NicPort]] = []
    for rail, pinned in parse_rails_annotation(annotation):
        if pinned is not None:
            port = _pinned(pinned, endpoints)
            if port is None:
                raise RailsAnnotationError(
                    f"annotation tpfabric.io/rails: rail {rail} names {pinned}, which is not a "
                    f"fabric HCA of this pod ({listed})"
                )
        elif rail < len(endpoints):
            port = endpoints[rail]
        else:
            raise RailsAnnotationError(
                f"annotation tpfabric.io/rails: rail {rail} has no HCA, this pod has "
                f"{len(endpoints)} fabric port(s) ({listed})"
            )
        rails.append((rail, port))
    if len({port for _, port in rails}) != len(rails):
        raise RailsAnnotationError("annotation tpfabric.io/rails: one HCA is given two rails")
    return RailAssignment(rails=tuple(sorted(rails)), source="annotation")
