"""NCCL's own view of a node, checked against the pairing: which NIC NCCL sees beside each GPU.

NCCL writes the topology it detected to ``NCCL_TOPO_DUMP_FILE`` (the pod's shared volume, set by
``rdma-init``): ``<system>`` > ``<cpu numaid>`` > nested ``<pci busid class>`` (switches, then
devices) > ``<gpu dev rank>`` or ``<nic>`` > ``<net name dev port>``. For each GPU the NICs NCCL
will use first are the closest ones in that tree, by NCCL's path types: below the same PCIe
switch (``PIX``), below a common switch further up (``PXB``), through the same CPU (``PHB``),
across CPUs (``SYS``). :func:`compare_with_plan` puts them beside the pairing ``rdma-init``
reported (its ``fabric.pairs``) and says, per GPU, whether they agree
("NCCL put GPU 3 on mlx5_4, planned mlx5_5").

Pure: parses text; never reads a file or the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

from tpfabric_core.errors import InputError

__all__ = [
    "GpuView",
    "NcclTopology",
    "NicView",
    "TopologyCheck",
    "compare_with_plan",
    "parse_topology_dump",
]

_PATHS = ("PIX", "PXB", "PHB", "SYS")


@dataclass(frozen=True)
class GpuView:
    """A GPU as NCCL saw it: bus id, CUDA device index, rank (None when not in the dump)."""

    busid: str
    dev: int | None
    rank: int | None
    ancestors: tuple[str, ...]
    """Bus ids of the PCI switches above it, outermost first, under ``cpu:<numa>``."""


@dataclass(frozen=True)
class NicView:
    """A NIC's ports as NCCL saw them (``<net name>``), with its place in the tree."""

    busid: str
    nets: tuple[str, ...]
    ancestors: tuple[str, ...]


@dataclass(frozen=True)
class NcclTopology:
    """The GPUs and NICs of one NCCL topology dump."""

    gpus: tuple[GpuView, ...]
    nics: tuple[NicView, ...]

    def nearest(self, gpu: GpuView) -> tuple[str, tuple[str, ...]]:
        """Return (path type, net names) of the NICs closest to ``gpu`` in NCCL's tree."""
        best: tuple[int, list[str]] = (len(_PATHS), [])
        for nic in self.nics:
            kind = _path(gpu.ancestors, nic.ancestors)
            if kind < best[0]:
                best = (kind, list(nic.nets))
            elif kind == best[0]:
                best[1].extend(nic.nets)
        if best[0] == len(_PATHS):
            return "none", ()
        return _PATHS[best[0]], tuple(best[1])


def _path(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    if not a or not b or a[0] != b[0]:
        return 3  # SYS: another CPU
    common = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        common += 1
    if common <= 1:
        return 2  # PHB: the same CPU, no switch in common
    if common == len(a) == len(b):
        return 0  # PIX: siblings below one switch
    return 1  # PXB


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def parse_topology_dump(text: str, source: str) -> NcclTopology:
    """Return the GPUs and NICs of an NCCL topology XML; :class:`InputError` if unreadable."""
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise InputError(source, "declares entities, which NCCL never writes")
    try:
        # a file a pod wrote: no DTD or entity is accepted above, and expat resolves no external one
        root = ET.fromstring(text)  # noqa: S314
    except ET.ParseError as err:
        raise InputError(source, f"not NCCL's topology XML ({err})",
                         "was it written while NCCL still ran?") from err  # fmt: skip
    if root.tag != "system":
        raise InputError(source, f"<{root.tag}> is not NCCL's <system>")
    gpus: list[GpuView] = []
    nics: list[NicView] = []

    def walk(node: ET.Element, ancestors: tuple[str, ...]) -> None:
        for child in node:
            if child.tag == "cpu":
                walk(child, (f"cpu:{child.get('numaid', '?')}",))
            elif child.tag == "pci":
                busid = (child.get("busid") or "").lower()
                gpu = child.find("gpu")
                nic = child.find("nic")
                if gpu is not None:
                    gpus.append(GpuView(busid, _int(gpu.get("dev")), _int(gpu.get("rank")),
                                        ancestors))  # fmt: skip
                elif nic is not None:
                    nets = tuple(n.get("name", "") for n in nic.findall("net"))
                    nics.append(NicView(busid, nets, ancestors))
                else:
                    walk(child, (*ancestors, busid))
            elif child.tag == "nic":  # a NIC with no PCI place (NCCL puts some under the CPU)
                nets = tuple(n.get("name", "") for n in child.findall("net"))
                nics.append(NicView("", nets, ancestors))

    walk(root, ())
    return NcclTopology(tuple(gpus), tuple(nics))


@dataclass(frozen=True)
class TopologyCheck:
    """One GPU: the NICs NCCL put beside it and the ones the pairing planned."""

    gpu: str
    dev: int | None
    rank: int | None
    path: str
    nccl: tuple[str, ...]
    planned: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        """Return whether NCCL's nearest NICs are the planned ones (planned ⊆ NCCL's)."""
        return bool(self.planned) and set(self.planned) <= set(self.nccl)

    def words(self) -> str:
        """Return one line: ``GPU 3 (0000:c2:00.0): NCCL mlx5_4 (PIX), planned mlx5_5``."""
        name = f"GPU {self.dev}" if self.dev is not None else "GPU"
        nccl = ", ".join(self.nccl) or "no NIC"
        planned = ", ".join(self.planned) or "nothing (not in the pairing)"
        if self.agrees:
            return f"{name} ({self.gpu}): NCCL on {nccl} ({self.path}), as planned"
        return f"{name} ({self.gpu}): NCCL put {name} on {nccl} ({self.path}), planned {planned}"

    def document(self) -> dict[str, Any]:
        """Return the check as JSON."""
        return {
            "gpu": self.gpu,
            "dev": self.dev,
            "ncclRank": self.rank,
            "path": self.path,
            "ncclNics": list(self.nccl),
            "plannedNics": list(self.planned),
            "agrees": self.agrees,
        }


def compare_with_plan(
    topology: NcclTopology, pairs: Sequence[Mapping[str, Any]]
) -> tuple[TopologyCheck, ...]:
    """Return a check per GPU of the dump against ``pairs`` (``rdma-init``'s report
    ``fabric.pairs``: ``{"gpu": bus id, "hca": name, ...}``)."""
    planned: dict[str, list[str]] = {}
    for pair in pairs:
        names = planned.setdefault(str(pair.get("gpu", "")).lower(), [])
        if pair.get("hca") and pair["hca"] not in names:
            names.append(str(pair["hca"]))
    checks = []
    for gpu in sorted(topology.gpus, key=lambda g: (g.dev is None, g.dev, g.busid)):
        path, nets = topology.nearest(gpu)
        checks.append(TopologyCheck(gpu.busid, gpu.dev, gpu.rank, path, nets,
                                    tuple(planned.get(gpu.busid, ()))))  # fmt: skip
    return tuple(checks)
