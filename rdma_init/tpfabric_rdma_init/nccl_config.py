"""The NCCL settings of a pod and their files: ``nccl.conf`` and the optional topology XML.

Settings written (NCCL >= 2.23.4 reads ``NCCL_CONF_FILE``, older NCCL ``~/.nccl.conf``, where
the operator puts this file, then ``/etc/nccl.conf`` for the keys still unset; the environment
wins over every file):

- ``NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,...`` — fabric ports in rail order with the leading ``=`` that
  makes NCCL match names exactly (without it ``mlx5_1`` also selects ``mlx5_10`` and ``mlx5_11``);
  every port of every plane a GPU is paired with is listed;
- ``NCCL_CROSS_NIC=0`` when the pod is rail-aligned (rails from the placement annotation, or each
  GPU paired with its own ports) and no rail was dropped;
- RoCE: ``NCCL_IB_GID_INDEX`` of the GID that carries one of the pod's own addresses on each
  rail, when every rail has it at the same index; when the indexes differ NCCL (>= 2.21) picks
  per device (``NCCL_IB_ADDR_FAMILY`` AF_INET, or AF_INET6 on an IPv6-only fabric), which is
  right only where its pick (the first RoCE v2 GID of the family) is the pod's: any other rail
  is a problem (``foreign-gid``), so nothing is left to a wrong guess; an index the user pins
  in spec.nccl is judged the same way (``gid-index``);
- ``NCCL_SOCKET_IFNAME==<if>`` for bootstrap and the TCP fallback: the pod's primary interface;
- ``NCCL_NET_GDR_LEVEL=LOC`` only when GPUDirect is off: otherwise NCCL's own default applies
  (never a more permissive level; ``spec.nccl`` may still set one);
- TCP fallback: ``NCCL_IB_DISABLE=1`` and ``NCCL_NET=Socket``;
- a net plugin (``NCCL_NET`` other than IB/Socket, or ``NCCL_NET_PLUGIN``, in spec.nccl or the
  main container's env): no ``NCCL_NET`` nor ``NCCL_IB_*`` at all, whatever the policy.

The fabric's service level, traffic classes and ECMP spreading come from the fabric profile
(:mod:`~tpfabric_rdma_init.fabric_contract`). User overrides (a JSON object of ``NCCL_*`` keys
from the job's ``spec.nccl``) are applied last and win over both; ``null`` removes a key. Pure:
builds strings, never writes them (the init program does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from xml.etree import ElementTree as ET

from tpfabric_rdma_init.affinity import FabricSelection, NicPort, RailAssignment
from tpfabric_rdma_init.checks import RDMA, Problem, fabric_port, pod_gid_of, port_of
from tpfabric_rdma_init.discovery import ARPHRD_INFINIBAND, Hca, HostInventory, PciLocation

__all__ = [
    "OverridesError",
    "apply_overrides",
    "build_nccl_settings",
    "check_traffic_class",
    "gid_index_override",
    "net_plugin_in_use",
    "parse_overrides",
    "rdma_netdevs",
    "render_nccl_conf",
    "render_topology_xml",
    "roce_address_family",
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


_TC_RANGES = {"NCCL_IB_TC": 255, "NCCL_IB_SL": 15}


def check_traffic_class(
    overrides: Mapping[str, str | None], roce: bool
) -> tuple[dict[str, str], list[str]]:
    """Return (NCCL_IB_TC/NCCL_IB_SL as set in spec.nccl, warnings); raises on a bad value."""
    chosen: dict[str, str] = {}
    for key, top in _TC_RANGES.items():
        value = overrides.get(key)
        if value is None:
            continue
        if not value.isdigit() or int(value) > top:
            raise OverridesError(
                f"NCCL overrides: {key} must be an integer 0..{top}, not {value!r}"
            )
        chosen[key] = value
    warnings = []
    if roce and "NCCL_IB_TC" not in chosen:
        warnings.append(
            "RoCE without NCCL_IB_TC: NCCL's traffic uses class 0, which lossless fabrics "
            "usually do not protect; set spec.nccl NCCL_IB_TC (e.g. 106 for DSCP 26)"
        )
    return chosen, warnings


def _pinned_gid_problems(
    inventory: HostInventory, endpoints: tuple[NicPort, ...], pinned: int
) -> list[Problem]:
    """Return a problem per RoCE rail whose GID at the user's pinned index is not the pod's."""
    problems = []
    for endpoint in endpoints:
        port = port_of(inventory, endpoint)
        if port is None or port.link_layer != "Ethernet":
            continue
        own, _ = pod_gid_of(inventory, port)
        if own is None or own.index == pinned:
            continue  # a port without any GID of the pod is check_host's no-pod-gid
        gid = next((g for g in port.gids if g.index == pinned), None)
        what = (
            "no GID of this port"
            if gid is None
            else f"{gid.address or gid.gid} of {gid.netdev or 'no netdev'} ({gid.type})"
        )
        problems.append(
            Problem(
                code="gid-index",
                kind=RDMA,
                hca=endpoint.hca,
                port=endpoint.port,
                message=(
                    f"{endpoint}: spec.nccl NCCL_IB_GID_INDEX={pinned} is {what}, not an address "
                    f"of this pod (queue pairs on it fail at MODIFY_QP); this pod's RoCE v2 GID "
                    f"is index {own.index} ({own.address}): set NCCL_IB_GID_INDEX={own.index}, "
                    "or remove it when the rails' indexes differ"
                ),
            )
        )
    return problems


def roce_address_family(inventory: HostInventory, endpoints: tuple[NicPort, ...]) -> str:
    """Return ``AF_INET6`` when the pod's RoCE GIDs are IPv6 (an IPv6-only fabric), else AF_INET."""
    for endpoint in endpoints:
        port = port_of(inventory, endpoint)
        if port is not None and port.link_layer == "Ethernet":
            own, _ = pod_gid_of(inventory, port)
            if own is not None and not own.ipv4_mapped:
                return "AF_INET6"
    return "AF_INET"


def roce_gid_index(
    inventory: HostInventory, endpoints: tuple[NicPort, ...], pinned: int | None = None
) -> tuple[int | None, list[Problem], list[str]]:
    """Return (the pod's GID index to pin or None, rail problems, warnings) for RoCE ports.

    ``pinned`` is the user's ``NCCL_IB_GID_INDEX`` (spec.nccl): it is judged, not replaced.
    """
    if pinned is not None:
        return pinned, _pinned_gid_problems(inventory, endpoints, pinned), []
    own_index: dict[NicPort, int] = {}
    nccl_pick: dict[NicPort, int | None] = {}
    for endpoint in endpoints:
        port = port_of(inventory, endpoint)
        if port is None or port.link_layer != "Ethernet":
            continue
        own, first = pod_gid_of(inventory, port)
        if own is not None:  # ports without one are reported by check_host
            own_index[endpoint] = own.index
            nccl_pick[endpoint] = first.index if first else None
    distinct = set(own_index.values())
    if len(distinct) == 1:
        return distinct.pop(), [], []
    problems = [
        Problem(
            code="foreign-gid",
            kind=RDMA,
            hca=e.hca,
            port=e.port,
            message=(
                f"{e}: the pod's RoCE v2 GID is index {index} but NCCL, unpinned, would take "
                f"index {nccl_pick[e]} (another namespace's netdev) and one NCCL_IB_GID_INDEX "
                "cannot serve every rail; give every rail's secondary network the same GID "
                "index or set spec.nccl NCCL_IB_GID_INDEX"
            ),
        )
        for e, index in own_index.items()
        if nccl_pick[e] != index
    ]
    warnings = []
    if len(distinct) > 1:
        warnings.append(
            "RoCE v2 GID index differs between rails ("
            + ", ".join(f"{e}={i}" for e, i in own_index.items())
            + "); NCCL_IB_GID_INDEX left to NCCL (>= 2.21 picks per device)"
        )
    return None, problems, warnings


def gid_index_override(overrides: Mapping[str, str | None]) -> int | None:
    """Return the user's ``NCCL_IB_GID_INDEX`` from spec.nccl, None when unset."""
    value = overrides.get("NCCL_IB_GID_INDEX")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise OverridesError(f"NCCL overrides: NCCL_IB_GID_INDEX must be an integer, not {value!r}")
    return int(value)


def rdma_netdevs(inventory: HostInventory) -> set[str]:
    """Return every netdev that belongs to an HCA: IPoIB, RoCE rails, storage, in host or pod."""
    names = {netdev for hca in inventory.hcas for netdev in hca.netdevs}
    names |= {g.netdev for hca in inventory.hcas for p in hca.ports for g in p.gids if g.netdev}
    return names


def socket_interface(
    inventory: HostInventory, explicit: str | None = None, primary: str | None = None
) -> str | None:
    """Return the interface for NCCL's sockets: explicit, else the pod's primary interface.

    Primary: the network-status annotation's ``default`` interface, else the default route's,
    else ``eth0`` (what every CNI names the pod's primary). Never IPoIB nor any netdev of an HCA
    (RDMA rails, storage): those carry no bootstrap traffic for the job.
    """
    if explicit:
        return explicit
    rdma = rdma_netdevs(inventory)
    usable = [
        iface
        for iface in inventory.interfaces
        if not iface.name.startswith(_VIRTUAL_PREFIXES)
        and iface.type != ARPHRD_INFINIBAND
        and iface.name not in rdma
    ]
    names = [iface.name for iface in usable]
    if primary in names:
        return primary
    for iface in usable:
        if iface.default_route:
            return iface.name
    return "eth0" if "eth0" in names else None


NCCL_OWN_NETS = ("IB", "Socket")


def net_plugin_in_use(
    overrides: Mapping[str, str | None],
    main_env: Mapping[str, str],
    efa_devices: tuple[str, ...] = (),
) -> str | None:
    """Return what says NCCL runs on a net plugin (``NCCL_NET=gIB`` in spec.nccl), else None.

    Cloud fabrics reach NCCL through a plugin (aws-ofi-nccl on EFA, GCP's TCPX/TCPXO and gIB),
    named by ``NCCL_NET`` (anything but NCCL's own ``IB``/``Socket``) or ``NCCL_NET_PLUGIN``.
    The main container's env wins over spec.nccl, as the environment wins over NCCL's config
    file. The plugin lives in the main container's image, which this init container cannot
    see: the job says so through either. AWS EFA adapters on the node need no word: NCCL's own
    IB transport cannot drive them (SRD, not RC), only aws-ofi-nccl can.
    """
    effective = {key: value for key, value in overrides.items() if value is not None}
    effective.update(main_env)
    net = (effective.get("NCCL_NET") or "").strip()
    plugin = (effective.get("NCCL_NET_PLUGIN") or "").strip()
    source = "the main container's env" if "NCCL_NET" in main_env else "spec.nccl"
    if net and net not in NCCL_OWN_NETS:
        return f"NCCL_NET={net} ({source})"
    plugin_source = "the main container's env" if "NCCL_NET_PLUGIN" in main_env else "spec.nccl"
    if plugin and plugin.lower() != "none" and not net:
        return f"NCCL_NET_PLUGIN={plugin} ({plugin_source})"
    if efa_devices and not net:
        return f"aws-ofi-nccl for the node's EFA devices ({', '.join(efa_devices)})"
    return None


def build_nccl_settings(
    inventory: HostInventory,
    selection: FabricSelection,
    rails: RailAssignment,
    *,
    transport: str,
    socket_ifname: str | None,
    rails_dropped: bool = False,
    gid_index: int | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Return (NCCL settings, warnings) for ``transport`` ``ib``, ``ib-no-gdr``, ``tcp`` or
    ``net-plugin`` (then no ``NCCL_NET``/``NCCL_IB_*``: those would switch the plugin off)."""
    settings: dict[str, str] = {}
    warnings: list[str] = []
    if socket_ifname:
        settings["NCCL_SOCKET_IFNAME"] = "=" + socket_ifname
    else:
        warnings.append(
            "no primary network interface found for NCCL's sockets; NCCL picks one itself "
            "(set --socket-ifname)"
        )
    if transport == "net-plugin":
        return settings, warnings
    if transport == "tcp":
        settings["NCCL_IB_DISABLE"] = "1"
        settings["NCCL_NET"] = "Socket"
        return settings, warnings
    endpoints = rails.endpoints
    settings["NCCL_IB_HCA"] = "=" + ",".join(str(e) for e in endpoints)
    gpus = {p.gpu for p in selection.pairs}
    own_ports = bool(selection.pairs) and all(
        sum(1 for p in selection.pairs if (p.hca, p.port) == (q.hca, q.port)) == 1
        for q in selection.pairs
    )
    if (
        len(endpoints) > 1
        and not rails_dropped
        and (rails.source == "annotation" or (own_ports and len(gpus) > 0))
    ):
        settings["NCCL_CROSS_NIC"] = "0"
    ports = [port for e in endpoints if (port := port_of(inventory, e)) is not None]
    if ports and all(port.link_layer == "Ethernet" for port in ports):
        index, _, gid_warnings = roce_gid_index(inventory, endpoints, gid_index)
        warnings.extend(gid_warnings)
        if index is not None:
            settings["NCCL_IB_GID_INDEX"] = str(index)
        else:
            settings["NCCL_IB_ADDR_FAMILY"] = roce_address_family(inventory, endpoints)
            settings["NCCL_IB_ROCE_VERSION_NUM"] = "2"
    if transport == "ib-no-gdr":
        settings["NCCL_NET_GDR_LEVEL"] = "LOC"
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
