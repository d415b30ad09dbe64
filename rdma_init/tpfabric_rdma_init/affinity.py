"""GPU <-> NIC-port affinity from the PCI tree, the fabric ports of a pod and the rail of each.

The distance between a GPU and an HCA follows NCCL's path types: ``PIX`` (one PCIe switch between
them), ``PXB`` (several switches, no host bridge), ``PHB`` (through the CPU's host bridge, same
NUMA node), ``SYS`` (across the inter-socket link).

Pairing keeps bandwidth: a fabric *endpoint* is one port of one HCA (``mlx5_0:1``), so a
dual-port ConnectX-7, the two PCI functions of a dual-PF design and the two planes of a
ConnectX-8 are all kept. For each GPU of the pod:

1. the candidates at the smallest path type (then the same NUMA node) win;
2. among those, the NIC's *role* breaks the tie: what the NIC is and where it sits, never its
   name or live state (a down port's ``10 Gb/sec (4X SDR)`` or a retrained port's rate does not
   demote it; :mod:`~tpfabric_rdma_init.checks` reports that port): a NIC on a GPU's PCIe switch
   first, then any other (storage, frontend). A BlueField on no GPU's switch is a north-south
   DPU and never a candidate; a BlueField-3 SuperNIC on its GPU's switch is a compute NIC. The
   uncabled port of a dual-port card (not ACTIVE while its sibling is, where no card runs two
   ports) is not a rail. The rule is :mod:`tpfabric_rdma_init.compute_rails`, the fabric agent's
   too;
3. GPUs whose winners are the same set share them in PCIe order: with as many ports as GPUs
   each GPU gets its own (switchless GB200-like trays: every device on its own root complex,
   all PHB, so the k-th GPU of a NUMA node gets its k-th NIC in bus order); with more ports than
   GPUs every GPU keeps several (planes, dual ports); with fewer, GPUs share round-robin.

Which ports carry the job's collectives: those some GPU is paired with; an HCA or port named by
``--exclude-hca`` (``mlx5_1`` or ``mlx5_1:2``) never does; HCAs whose ``/dev/infiniband/uverbsN``
is not in the pod are not the pod's (exclusive device plugins) unless none is, so the checks can
say so. Without GPUs (kind, CPU-only debugging) every allocated HCA's ports are used.

Rails come from the pod's placement annotation (``tpfabric.io/rails``, written by the placer
from its plan: comma-separated rail indices, each optionally pinned as ``<rail>=<hca>``,
``<rail>=<hca>:<port>`` or ``<rail>=0x<port GUID>``), else rail *i* is the *i*-th endpoint in
pairing order (GPU bus order, then the GPU's ports in PCIe order), which is what a rail-optimised
fabric cables: GPU *i*'s NIC to rail leaf *i*. Pins by port GUID carry the fabric's numbering
(discovery's, by the port each rail leaf is cabled to): the node's whole rail map, of which a pod
takes the rails of its own ports; a pod that has every GPU of its node must find every pinned
port, and every port it uses must be on a pinned rail.

Pure functions over the discovery inventory; this module must never read files. Data Direct
NICs (a DMA function separate from the NIC function, found through ``mlx5dv``) are not modelled:
the NIC's own PCI function is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpfabric_rdma_init.compute_rails import (
    GpuHcaPair,
    NicPort,
    PathType,
    compute_nic_roles,
    path_type,
    uncabled_ports,
)
from tpfabric_rdma_init.compute_rails import (
    pair_gpus_with_hcas as _pair,
)
from tpfabric_rdma_init.discovery import Gpu, Hca, natural_key

__all__ = [
    "FabricSelection",
    "GpuHcaPair",
    "NicPort",
    "PathType",
    "RailAssignment",
    "RailsAnnotationError",
    "assign_rails",
    "nic_roles",
    "pair_gpus_with_hcas",
    "parse_rails_annotation",
    "path_type",
    "select_fabric_hcas",
]

_GUID_PIN = re.compile(r"^0x[0-9a-f]{16}$")
_ROLE_WORDS = {
    "dpu": "a BlueField DPU (north-south: on no GPU's PCIe switch); never a rail",
    "vf": "an SR-IOV virtual function of a PF of this node",
}


def nic_roles(hcas: tuple[Hca, ...], gpus: tuple[Gpu, ...]) -> dict[str, str]:
    """Return ``{hca: role}`` by what each NIC is and where it sits, never its live state:
    ``compute`` (on a GPU's PCIe switch), ``other`` (storage, frontend), ``dpu`` (a BlueField on
    no GPU's switch), ``vf``. Without GPUs, every PF but a BlueField is ``compute``."""
    roles = compute_nic_roles(hcas, gpus)
    # a pod's VF is its share of the fabric (SR-IOV device plugin): a candidate like a PF
    return {name: "compute" if role == "vf" else role for name, role in roles.items()}


def pair_gpus_with_hcas(
    gpus: tuple[Gpu, ...], hcas: tuple[Hca, ...], exclude: frozenset[str] = frozenset()
) -> tuple[GpuHcaPair, ...]:
    """Return the pairs of every GPU (bus-id order) with each of its closest ports."""
    return _pair(gpus, hcas, nic_roles(hcas, gpus), exclude)


def _endpoints(hcas: tuple[Hca, ...], exclude: frozenset[str]) -> list[tuple[Hca, NicPort]]:
    return [
        (hca, NicPort(hca.name, port.number))
        for hca in sorted(
            hcas, key=lambda h: (h.pci is None, h.pci.bdf if h.pci else "", natural_key(h.name))
        )
        for port in hca.ports
        if f"{hca.name}:{port.number}" not in exclude
    ]


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
    roles = nic_roles(hcas, gpus)
    for hca in hcas:
        if hca.name not in whole and roles[hca.name] in _ROLE_WORDS:
            excluded[hca.name] = _ROLE_WORDS[roles[hca.name]]
    candidates = tuple(h for h in hcas if h.name not in excluded and h.ports)
    excluded.update(
        {h.name: "has no ports" for h in hcas if h.name not in excluded and not h.ports}
    )
    allocated = tuple(h for h in candidates if h.uverbs_present)
    if allocated:
        for hca in candidates:
            if not hca.uverbs_present:
                excluded[hca.name] = "no /dev/infiniband device in this pod (not allocated to it)"
        candidates = allocated
    # the one-port-per-card rule is judged on the compute NICs (a dual-port storage card with
    # both ports up says nothing about how the compute cards are cabled)
    compute = tuple(h for h in candidates if roles[h.name] == "compute") or candidates
    uncabled = {str(port): reason for port, reason in uncabled_ports(compute).items()}
    excluded.update(uncabled)
    port_excludes = port_excludes | frozenset(uncabled)
    pairs = _pair(gpus, candidates, roles, port_excludes) if gpus else ()
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
        if hca.name not in chosen and not all(
            f"{hca.name}:{p.number}" in uncabled for p in hca.ports
        ):
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
    """Return (rail, pinned HCA[:port], port GUID ``0x...`` or None) per entry of an annotation
    like ``0,1=mlx5_3,2=0xb83fd20300000004``."""
    entries: list[tuple[int, str | None]] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            continue
        rail_text, _, hca = token.partition("=")
        if not rail_text.strip().isdigit():
            raise RailsAnnotationError(
                f"annotation tpfabric.io/rails: {token!r} is not a rail index; "
                "write comma-separated indices, each optionally '=<hca>' or '=0x<port GUID>', "
                "e.g. '0,1,2=mlx5_4'"
            )
        pin = hca.strip() or None
        if pin is not None and pin.lower().startswith("0x") and not _GUID_PIN.match(pin.lower()):
            raise RailsAnnotationError(
                f"annotation tpfabric.io/rails: rail {rail_text.strip()} names {pin!r}, not a "
                "port GUID (0x and 16 hex digits)"
            )
        entries.append(
            (int(rail_text), pin.lower() if pin and _GUID_PIN.match(pin.lower()) else pin)
        )
    rails = [rail for rail, _ in entries]
    if len(set(rails)) != len(rails):
        raise RailsAnnotationError(f"annotation tpfabric.io/rails: rail listed twice in {value!r}")
    return tuple(entries)


def _pinned(pinned: str, endpoints: tuple[NicPort, ...]) -> NicPort | None:
    if ":" in pinned:
        return next((p for p in endpoints if str(p) == pinned), None)
    return next((p for p in endpoints if p.hca == pinned), None)


def _by_guid(
    rail: int,
    guid: str,
    endpoints: tuple[NicPort, ...],
    port_guids: dict[str, NicPort],
    whole_node: bool,
) -> NicPort | None:
    """Return the pod's port a GUID pin names, None when it is another pod's rail (a port of
    this node the pod does not use); raise when a pod that has the whole node lacks it."""
    port = port_guids.get(guid.removeprefix("0x"))
    if port is None:
        if whole_node:
            known = ", ".join(f"{p}=0x{g}" for g, p in sorted(port_guids.items())) or "none"
            raise RailsAnnotationError(
                f"annotation tpfabric.io/rails: rail {rail} is port {guid}, which this pod does "
                f"not have (its ports: {known}); the node's rail map (topology.tpfabric.io/"
                "rail-ports) is stale: label the node again from a fresh dump"
            )
        return None
    return port if port in endpoints else None


def assign_rails(
    endpoints: tuple[NicPort, ...],
    annotation: str | None,
    *,
    port_guids: dict[str, NicPort] | None = None,
    whole_node: bool = True,
) -> RailAssignment:
    """Return the rail of each fabric port: from the annotation when given, else pairing order.

    ``port_guids``: every port of the pod's HCAs by port GUID (16 hex digits), to resolve GUID
    pins; ``whole_node``: the pod has every GPU of its node (so every pinned port is its own).
    """
    if annotation is None or not annotation.strip():
        return RailAssignment(rails=tuple(enumerate(endpoints)), source="pairing")
    listed = ", ".join(str(p) for p in endpoints) or "none"
    rails: list[tuple[int, NicPort]] = []
    by_guid = False
    for rail, pinned in parse_rails_annotation(annotation):
        if pinned is not None and pinned.startswith("0x"):
            by_guid = True
            found = _by_guid(rail, pinned, endpoints, port_guids or {}, whole_node)
            if found is not None:
                rails.append((rail, found))
            continue
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
    if by_guid and (left := [p for p in endpoints if p not in {port for _, port in rails}]):
        raise RailsAnnotationError(
            f"annotation tpfabric.io/rails: port {left[0]} of this pod is on none of the plan's "
            "rails; the node's rail map (topology.tpfabric.io/rail-ports) is stale or misses it: "
            "label the node again from a fresh dump"
        )
    return RailAssignment(rails=tuple(sorted(rails)), source="annotation")
