"""GPU <-> HCA affinity from the PCI tree, the fabric HCAs of a pod and the rail of each.

The distance between a GPU and an HCA follows NCCL's path types: ``PIX`` (one PCIe switch between
them), ``PXB`` (several switches, no host bridge), ``PHB`` (through the CPU's host bridge, same
NUMA node), ``SYS`` (across the inter-socket link). Each GPU is paired with its closest HCA:
closest common PCIe switch first, then the same NUMA node, then the least used HCA (so eight GPUs
spread over eight equally distant HCAs), then name order.

Which HCAs carry the job's collectives (decided here, documented in ``docs``):

- an HCA named by ``--exclude-hca`` never does;
- with GPUs visible, exactly the HCAs some GPU is paired with do: storage and frontend NICs are
  never the closest HCA of a GPU on DGX/HGX systems, so they drop out without a name list;
- without GPUs (kind, CPU-only debugging), the HCAs whose ``/dev/infiniband/uverbsN`` the device
  plugin put into the pod do (all of them if none has one, so the checks can say so).

Rails come from the pod's placement annotation (``tpfabric.io/rails``: comma-separated rail
indices, each optionally pinned to an HCA as ``<rail>=<hca>``), else rail *i* is the *i*-th
fabric HCA in natural name order (``mlx5_2`` before ``mlx5_10``).

Pure functions over the discovery inventory; this module must never read files.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import IntEnum

from tpfabric_rdma_init.discovery import Gpu, Hca, PciLocation, natural_key

__all__ = [
    "FabricSelection",
    "GpuHcaPair",
    "PathType",
    "RailAssignment",
    "RailsAnnotationError",
    "assign_rails",
    "pair_gpus_with_hcas",
    "parse_rails_annotation",
    "path_type",
    "select_fabric_hcas",
]


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


@dataclass(frozen=True)
class GpuHcaPair:
    """A GPU, its closest HCA and the NCCL path type between them."""

    gpu: str
    hca: str
    path: PathType


def pair_gpus_with_hcas(gpus: tuple[Gpu, ...], hcas: tuple[Hca, ...]) -> tuple[GpuHcaPair, ...]:
    """Return one pair per GPU (bus-id order) with its closest HCA; empty when either is missing."""
    if not hcas:
        return ()
    used: Counter[str] = Counter()
    pairs = []
    for gpu in gpus:
        gpu_numa = gpu.pci.numa_node if gpu.pci else None

        def closeness(
            hca: Hca, gpu: Gpu = gpu, gpu_numa: int | None = gpu_numa
        ) -> tuple[object, ...]:
            hca_numa = hca.pci.numa_node if hca.pci else None
            numa_mismatch = gpu_numa is None or hca_numa != gpu_numa
            return (
                path_type(gpu.pci, hca.pci),
                numa_mismatch,
                used[hca.name],
                natural_key(hca.name),
            )

        best = min(hcas, key=closeness)
        used[best.name] += 1
        pairs.append(GpuHcaPair(gpu=gpu.bdf, hca=best.name, path=path_type(gpu.pci, best.pci)))
    return tuple(pairs)


@dataclass(frozen=True)
class FabricSelection:
    """The HCAs that carry the job's collectives and why the others do not."""

    hcas: tuple[str, ...]
    """Fabric HCAs in natural name order."""
    pairs: tuple[GpuHcaPair, ...]
    excluded: dict[str, str]
    """HCA name -> the reason it is not used."""


def select_fabric_hcas(
    hcas: tuple[Hca, ...], gpus: tuple[Gpu, ...], exclude: frozenset[str] = frozenset()
) -> FabricSelection:
    """Return the fabric HCAs of a pod: GPU-affine ones with GPUs, allocated ones without."""
    excluded = {h.name: "excluded by --exclude-hca" for h in hcas if h.name in exclude}
    candidates = tuple(h for h in hcas if h.name not in exclude and h.ports)
    excluded.update({h.name: "has no ports" for h in hcas if h.name not in exclude and not h.ports})
    pairs = pair_gpus_with_hcas(gpus, candidates) if gpus else ()
    if pairs:
        chosen = {pair.hca for pair in pairs}
        reason = "not the closest HCA of any GPU (storage or frontend NIC)"
    else:
        allocated = {h.name for h in candidates if h.uverbs_present}
        chosen = allocated or {h.name for h in candidates}
        reason = "no /dev/infiniband device in this pod (not allocated to it)"
    for hca in candidates:
        if hca.name not in chosen:
            excluded[hca.name] = reason
    return FabricSelection(
        hcas=tuple(sorted(chosen, key=natural_key)),
        pairs=pairs,
        excluded=dict(sorted(excluded.items(), key=lambda item: natural_key(item[0]))),
    )


class RailsAnnotationError(ValueError):
    """The ``tpfabric.io/rails`` annotation cannot be applied; ``str()`` is one actionable line."""


@dataclass(frozen=True)
class RailAssignment:
    """Rail index -> HCA for the HCAs this pod uses, and where the mapping came from."""

    rails: tuple[tuple[int, str], ...]
    """(rail, hca) sorted by rail."""
    source: str
    """``annotation`` or ``hca-order``."""

    @property
    def hcas(self) -> tuple[str, ...]:
        """Return the HCAs in rail order (the order NCCL_IB_HCA lists them in)."""
        return tuple(hca for _, hca in self.rails)


def parse_rails_annotation(value: str) -> tuple[tuple[int, str | None], ...]:
    """Return (rail, pinned HCA or None) per entry of a rails annotation like ``0,1=mlx5_3``."""
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


def assign_rails(fabric_hcas: tuple[str, ...], annotation: str | None) -> RailAssignment:
    """Return the rail of each HCA: from the annotation when given, else the HCA order."""
    if annotation is None or not annotation.strip():
        return RailAssignment(rails=tuple(enumerate(fabric_hcas)), source="hca-order")
    rails: list[tuple[int, str]] = []
    for rail, pinned in parse_rails_annotation(annotation):
        if pinned is not None:
            hca = pinned
            if hca not in fabric_hcas:
                raise RailsAnnotationError(
                    f"annotation tpfabric.io/rails: rail {rail} names {hca}, which is not a fabric "
                    f"HCA of this pod ({', '.join(fabric_hcas) or 'none'})"
                )
        elif rail < len(fabric_hcas):
            hca = fabric_hcas[rail]
        else:
            raise RailsAnnotationError(
                f"annotation tpfabric.io/rails: rail {rail} has no HCA, this pod has "
                f"{len(fabric_hcas)} fabric HCA(s) ({', '.join(fabric_hcas) or 'none'})"
            )
        rails.append((rail, hca))
    if len({hca for _, hca in rails}) != len(rails):
        raise RailsAnnotationError("annotation tpfabric.io/rails: one HCA is given two rails")
    return RailAssignment(rails=tuple(sorted(rails)), source="annotation")
