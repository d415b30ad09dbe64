"""The NCCL settings of a pod and their files: ``nccl.conf`` and the optional topology XML.

Settings written (NCCL reads ``KEY=VALUE`` lines from ``NCCL_CONF_FILE``; the environment wins
over the file, the file wins over NCCL's defaults):

- ``NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,...`` — fabric HCAs in rail order with the leading ``=`` that
  makes NCCL match names exactly (without it ``mlx5_1`` also selects ``mlx5_10`` and ``mlx5_11``);
- ``NCCL_CROSS_NIC=0`` when the pod is rail-aligned (rails from the placement annotation, or each
  GPU paired with its own HCA), so ring/tree channels keep GPU *i* on rail *i* across nodes;
- ``NCCL_IB_GID_INDEX`` on RoCE: the lowest index whose ``gid_attrs/types`` is ``RoCE v2`` and
  whose GID is IPv4-mapped, when every fabric port agrees (else ``NCCL_IB_ADDR_FAMILY=AF_INET``
  and NCCL >= 2.21 picks per device);
- ``NCCL_SOCKET_IFNAME==<if>`` for bootstrap and the TCP fallback (default-route interface);
- ``NCCL_NET_GDR_LEVEL``: the worst GPU<->HCA path of the pairs, at least ``PXB`` (NCCL's own
  default) and at most ``PHB`` (never across sockets); ``LOC`` switches GPUDirect off;
- TCP fallback: ``NCCL_IB_DISABLE=1`` and ``NCCL_NET=Socket``.

User overrides (a JSON object of ``NCCL_*`` keys from the job) are applied last; ``null`` removes a
key. Pure: builds strings, never writes them (the init program does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from xml.etree import ElementTree as ET

from tpfabric_rdma_init.affinity import FabricSelection, PathType, RailAssignment
from tpfabric_rdma_init.checks import fabric_port
from tpfabric_rdma_init.discovery import ARPHRD_INFINIBAND, Hca, HostInventory, PciLocation

__all__ = [
    "OverridesError",
    "apply_overrides",
    "build_nccl_settings",
    "gdr_level",
    "parse_overrides",
    "render_nccl_conf",
    "render_topology_xml",
    "roce_gid_index",
    "socket_interface",
]

_NCCL_KEY = re.compile(r"^NCCL_[A-Z0-9_]+$")
_VIRTUAL_PREFIXES = ("lo", "docker", "veth", "virbr", "cni", "flannel", "cali", "kube", "tunl")


class OverridesError(ValueError):
    """User NCCL overrides are unusable; ``str()`` is one actionable line."""


def parse_overrides(text: str | None) -> dict[str, str | None]:
    """Return the NCCL overrides of a JSON object text (``None`` values mean: remove the key)."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise OverridesError(
            f"NCCL overrides: not JSON ({err.msg} at column {err.colno}); "
            'pass an object such as {"NCCL_DEBUG": "INFO"}'
        ) from err
    if not isinstance(data, dict):
        raise OverridesError(
            'NCCL overrides: expected a JSON object such as {"NCCL_DEBUG": "INFO"}'
        )
    overrides: dict[str, str | None] = {}
    for key, value in data.items():
        if not _NCCL_KEY.match(key):
            raise OverridesError(f"NCCL overrides: {key!r} is not an NCCL_* variable name")
        if value is None:
            overrides[key] = None
        elif isinstance(value, bool):
            overrides[key] = "1" if value else "0"
        elif isinstance(value, int | float | str):
            text_value = str(value)
            if "\n" in text_value:
                raise OverridesError(f"NCCL overrides: {key} contains a line break")
            overrides[key] = text_value
        else:
            raise OverridesError(f"NCCL overrides: {key} must be a string, number, bool or null")
    return overrides


def apply_overrides(
    settings: Mapping[str, str], overrides: Mapping[str, str | None]
) -> dict[str, str]:
    """Return ``settings`` with the user's overrides applied (set, replace, or remove on None)."""
    merged = dict(settings)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def roce_gid_index(hcas: tuple[Hca, ...]) -> tuple[int | None, list[str]]:
    """Return (the RoCE v2 IPv4-mapped GID index all fabric ports share or None, warnings)."""
    indexes: dict[str, int] = {}
    warnings = []
    for hca in hcas:
        port = fabric_port(hca)
        if port is None:
            continue
        found = sorted(gid.index for gid in port.gids if gid.type == "RoCE v2" and gid.ipv4_mapped)
        if found:
            indexes[hca.name] = found[0]
        else:
            warnings.append(
                f"{hca.name} port {port.number} has no RoCE v2 GID with an IPv4 address; "
                "configure an IPv4 address on its netdev"
            )
    distinct = set(indexes.values())
    if len(distinct) == 1 and not warnings:
        return distinct.pop(), warnings
    if len(distinct) > 1:
        warnings.append(
            "RoCE v2 GID index differs between HCAs ("
            + ", ".join(f"{name}={index}" for name, index in indexes.items())
            + "); NCCL_IB_GID_INDEX left to NCCL"
        )
    return None, warnings


def socket_interface(inventory: HostInventory, explicit: str | None = None) -> str | None:
    """Return the interface for NCCL's sockets: explicit, else default route, else first up NIC."""
    if explicit:
        return explicit
    usable = [
        iface
        for iface in inventory.interfaces
        if not iface.name.startswith(_VIRTUAL_PREFIXES) and iface.type != ARPHRD_INFINIBAND
    ]
    for iface in usable:
        if iface.default_route:
            return iface.name
    for iface in usable:
        if (iface.operstate or "").lower() == "up":
            return iface.name
    return None


def gdr_level(selection: FabricSelection) -> str:
    """Return NCCL_NET_GDR_LEVEL covering every GPU's own HCA: PXB at least, PHB at most."""
    worst = max((pair.path for pair in selection.pairs), default=PathType.PXB)
    return PathType(min(max(worst, PathType.PXB), PathType.PHB)).name


def build_nccl_settings(
    inventory: HostInventory,
    selection: FabricSelection,
    rails: RailAssignment,
    *,
    transport: str,
    socket_ifname: str | None,
) -> tuple[dict[str, str], list[str]]:
    """Return (NCCL settings, warnings) for ``transport`` ``ib``, ``ib-no-gdr`` or ``tcp``."""
    settings: dict[str, str] = {}
    warnings: list[str] = []
    if socket_ifname:
        settings["NCCL_SOCKET_IFNAME"] = "=" + socket_ifname
    if transport == "tcp":
        settings["NCCL_IB_DISABLE"] = "1"
        settings["NCCL_NET"] = "Socket"
        return settings, warnings
    by_name = {hca.name: hca for hca in inventory.hcas}
    fabric = tuple(by_name[name] for name in rails.hcas)
    entries = []
    for hca in fabric:
        port = fabric_port(hca)
        entries.append(f"{hca.name}:{port.number if port else 1}")
    settings["NCCL_IB_HCA"] = "=" + ",".join(entries)
    one_hca_per_gpu = bool(selection.pairs) and len({p.hca for p in selection.pairs}) == len(
        selection.pairs
    )
    if len(fabric) > 1 and (rails.source == "annotation" or one_hca_per_gpu):
        settings["NCCL_CROSS_NIC"] = "0"
    ports = [port for hca in fabric if (port := fabric_port(hca)) is not None]
    if ports and all(port.link_layer == "Ethernet" for port in ports):
        index, gid_warnings = roce_gid_index(fabric)
        warnings.extend(gid_warnings)
        if index is not None:
            settings["NCCL_IB_GID_INDEX"] = str(index)
        else:
            settings["NCCL_IB_ADDR_FAMILY"] = "AF_INET"
    settings["NCCL_NET_GDR_LEVEL"] = "LOC" if transport == "ib-no-gdr" else gdr_level(selection)
    return settings, warnings


def render_nccl_conf(settings: Mapping[str, str], comments: tuple[str, ...] = ()) -> str:
    """Return ``nccl.conf`` text: ``#`` comment lines, then one ``KEY=VALUE`` line per setting."""
    # NCCL splits each line at its first '='; a comment with '=' would become a variable.
    lines = [f"# {comment.replace('=', ':')}" for comment in comments]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _top_bridge(bridges: tuple[str, ...]) -> str | None:
    # The switch's upstream port sits below the root port; without a switch, the root port.
    if len(bridges) >= 2:
        return bridges[1]
    return bridges[0] if bridges else None


def render_topology_xml(inventory: HostInventory, selection: FabricSelection, gdr: bool) -> str:
    """Return an NCCL topology XML skeleton: CPUs, PCIe switches, GPUs and fabric NICs.

    NCCL fills in every attribute it can detect (GPU ranks, link speeds, CPU model) for nodes
    matched by bus id, so the skeleton fixes only what detection gets wrong in containers: which
    devices share a switch and which NICs exist.
    """
    system = ET.Element("system", version="1")
    cpus: dict[int, ET.Element] = {}
    switches: dict[tuple[int, str], ET.Element] = {}
    fabric = set(selection.hcas)
    endpoints: list[tuple[PciLocation | None, str, Hca | None]]
    endpoints = [(gpu.pci, "0x030200", None) for gpu in inventory.gpus]
    endpoints += [(hca.pci, "0x020700", hca) for hca in inventory.hcas if hca.name in fabric]
    for pci, pci_class, hca in endpoints:
        if pci is None:
            continue
        numa = pci.numa_node if pci.numa_node is not None else 0
        if numa not in cpus:
            cpus[numa] = ET.SubElement(system, "cpu", numaid=str(numa))
        parent = cpus[numa]
        top = _top_bridge(pci.bridges)
        if top is not None:
            if (numa, top) not in switches:
                switches[(numa, top)] = ET.SubElement(
                    parent, "pci", {"busid": top, "class": "0x060400"}
                )
            parent = switches[(numa, top)]
        node = ET.SubElement(parent, "pci", {"busid": pci.bdf, "class": pci_class})
        if hca is not None:
            port = fabric_port(hca)
            speed = int((port.rate_gbps or 0) * 1000) if port else 0
            nic = ET.SubElement(node, "nic")
            ET.SubElement(
                nic,
                "net",
                name=hca.name,
                port=str(port.number if port else 1),
                speed=str(speed),
                gdr="1" if gdr else "0",
            )
    ET.indent(system)
    return ET.tostring(system, encoding="unicode") + "\n"
