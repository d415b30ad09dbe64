"""Import an ``ibnetdiscover`` dump (the text ``ibnetdiscover`` prints) into a :class:`Fabric`.

The dump has one block per switch (``Switch 65 "S-<guid>" # "<description>" ...``) and per channel
adapter (``Ca 1 "H-<guid>" # "<description>"``), each followed by one line per cabled port::

    [1]	"H-e09d7303007a4bd8"[1](e09d7303007a4bd8) 		# "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR
    [1](e09d7303007a5a68) 	"S-2c5eab0300b87b40"[17]		# lid 657 lmc 0 "MF0;..." lid 73 4xNDR

Every cable appears twice (once from each end) and is kept once.

Who an HCA belongs to comes from its node description, never from guessing:

- ``"<host> HCA-<n>"`` is rail ``n - 1``; ``"<host> mlx5_<n>"`` is rail ``n``;
- an optional GUID map (:func:`parse_guid_map`) names HCAs outright and wins over descriptions;
- HCAs that report only the adapter model (``"MT4129 ConnectX7 ..."``) are *unassigned*: reported,
  and counted as compute ports of their leaf, but given to no node;
- management hosts are kept out of the node set and reported: SHARP aggregation nodes, hosts
  matching a management pattern (UFM; generic names such as ``localhost`` that many machines
  share), host names that are not valid Kubernetes node names (``B11-P1-CUFM-02``), and hosts
  whose description has no rail token.

A dump without any switch (taken from a lone adapter) yields an *empty* fabric and a warning in
the report rather than an error: it is well-formed, just useless; callers decide whether that is
fatal (the CLI exits non-zero). A line that fits none of the forms above -- garbage, or a line cut
short by a truncated file -- raises :class:`~tpfabric_core.errors.InputError` naming
``<source>:<line>``.

This module reads text only; it never runs ``ibnetdiscover`` or touches the network.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.model import LANE_GBPS, Fabric, HcaRole

__all__ = [
    "GuidMapEntry",
    "IbnetdiscoverOptions",
    "IbnetdiscoverReport",
    "IgnoredHost",
    "UnassignedHca",
    "normalize_guid",
    "parse_guid_map",
    "parse_ibnetdiscover",
]

_BLOCK = re.compile(
    r'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<prefix>[SHR])-(?P<guid>[0-9a-fA-F]+)"'
    r'\s*(?:#\s*"(?P<desc>[^"]*)".*)?$'
)
_PORT = re.compile(
    r"^\[(?P<port>\d+)\](?:\([0-9a-fA-F]+\))?\s+"
    r'"(?P<prefix>[SHR])-(?P<guid>[0-9a-fA-F]+)"\[(?P<peer_port>\d+)\](?:\([0-9a-fA-F]+\))?'
    r'\s*#\s*(?:lid\s+\d+\s+lmc\s+\d+\s+)?"(?P<desc>[^"]*)"\s+lid\s+\d+\s+'
    r"(?P<width>\d+)x(?P<speed>[A-Z0-9]+)\s*$"
)
_HEADER = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid|Routerguid)=\S+$")
_RAIL_TOKEN = re.compile(r"^(?:HCA-(?P<hca>\d+)|mlx5_(?P<mlx>\d+))$")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GUID = re.compile(r"^[0-9a-f]{1,16}$")


class IbnetdiscoverOptions(BaseModel):
    """How HCA descriptions are read; every pattern is a regular expression (full match)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_pattern: str | None = None
    """When set, only hosts whose name matches are cluster nodes."""
    management_patterns: tuple[str, ...] = (r"(?i).*ufm.*", r"localhost", r"ubuntu")
    """Host names that are never cluster nodes (UFM servers, generic default host names)."""
    unnamed_pattern: str = r"MT\d+\b.*"
    """Descriptions that carry no host name, only the adapter model."""
    aggregation_pattern: str = r"(?i).*aggregation node.*"
    """Descriptions of the switches' SHARP aggregation nodes."""

    @field_validator("node_pattern", "unnamed_pattern", "aggregation_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value

    @field_validator("management_patterns")
    @classmethod
    def _all_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            re.compile(pattern)
        return value


@dataclass(frozen=True, slots=True)
class GuidMapEntry:
    """The node (and, when known, rail) a GUID map gives an HCA."""

    node: str
    rail: int | None = None


@dataclass(frozen=True, slots=True)
class UnassignedHca:
    """A compute HCA that no description or map names; ``switch``/``port`` say where it is."""

    guid: str
    description: str
    switch: str | None
    port: int | None


@dataclass(frozen=True, slots=True)
class IgnoredHost:
    """A host kept out of the node set, with its HCA GUIDs and the reason."""

    host: str
    guids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class IbnetdiscoverReport:
    """What the import could not turn into cluster nodes, and what it warns about."""

    unassigned_hcas: tuple[UnassignedHca, ...] = ()
    ignored_hosts: tuple[IgnoredHost, ...] = ()
    warnings: tuple[str, ...] = field(default=())


def normalize_guid(text: str) -> str:
    """Return a GUID as 16 lower-case hex digits; accepts ``0x``, ``H-``/``S-`` and ``:`` forms."""
    guid = text.strip().lower().removeprefix("0x").removeprefix("h-").removeprefix("s-")
    guid = guid.replace(":", "")
    if not _GUID.match(guid):
        raise ValueError(f"{text!r} is not a GUID (up to 16 hex digits)")
    return guid.zfill(16)


def _map_entry(value: Any, where: str) -> GuidMapEntry:
    if isinstance(value, str):
        return GuidMapEntry(value)
    if isinstance(value, dict) and isinstance(value.get("node"), str):
        rail = value.get("rail")
        if rail is not None and (not isinstance(rail, int) or rail < 0):
            raise InputError(where, f"rail must be an integer >= 0, got {rail!r}")
        return GuidMapEntry(value["node"], rail)
    raise InputError(where, f"expected a node name or {{node: ..., rail: ...}}, got {value!r}")


def parse_guid_map(text: str, source: str = "<guid-map>") -> dict[str, GuidMapEntry]:
    """Return ``{guid: entry}`` from a GUID map: ``guid node [rail]`` lines, or a YAML mapping
    ``guid: node`` / ``guid: {node: ..., rail: ...}``. Rails are 0-based."""
    lines = [(n, ln.split("#", 1)[0].strip()) for n, ln in enumerate(text.splitlines(), 1)]
    lines = [(n, ln) for n, ln in lines if ln]
    result: dict[str, GuidMapEntry] = {}
    if lines and lines[0][1].split()[0].endswith(":"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise InputError(source, f"not valid YAML: {err}") from err
        if not isinstance(data, dict):
            raise InputError(source, "expected a mapping of GUID to node")
        for key, value in data.items():
            raw = f"{key:016x}" if isinstance(key, int) else str(key)
            try:
                guid = normalize_guid(raw)
            except ValueError as err:
                raise InputError(f"{source}: {key}", str(err)) from err
            result[guid] = _map_entry(value, f"{source}: {key}")
        return result
    for number, line in lines:
        where = f"{source}:{number}"
        parts = line.split()
        if len(parts) not in (2, 3) or (len(parts) == 3 and not parts[2].isdigit()):
            raise InputError(where, f"expected 'guid node [rail]', got {line!r}")
        try:
            guid = normalize_guid(parts[0])
        except ValueError as err:
            raise InputError(where, str(err)) from err
        result[guid] = GuidMapEntry(parts[1], int(parts[2]) if len(parts) == 3 else None)
    return result


@dataclass
class _Dump:
    """The raw contents of a dump: blocks, descriptions and cables, before interpretation."""

    switches: dict[str, str] = field(default_factory=dict)
    cas: dict[str, str] = field(default_factory=dict)
    peer_desc: dict[str, str] = field(default_factory=dict)
    cables: list[tuple[str, int, str, int, int, str]] = field(default_factory=list)
    routers: int = 0


def _read(text: str, source: str) -> _Dump:
    dump = _Dump()
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or _HEADER.match(line):
            continue
        if block := _BLOCK.match(line):
            guid = block["guid"].lower()
            vertex = f"{block['prefix']}-{guid}"
            desc = block["desc"] or ""
            if block["kind"] == "Switch":
                dump.switches[vertex] = desc
            elif block["kind"] == "Ca":
                dump.cas[vertex] = desc
            else:
                dump.routers += 1
            current = vertex
            continue
        port = _PORT.match(line)
        where = f"{source}:{number}"
        if port is None:
            raise InputError(
                where,
                f"cannot read {line[:80]!r}",
                "expected a Switch/Ca block header, a port line or a comment; "
                "is the file truncated or not ibnetdiscover output?",
            )
        if current is None:
            raise InputError(where, "port line before any Switch or Ca block")
        if port["speed"] not in LANE_GBPS:
            raise InputError(where, f"unknown link speed {port['speed']!r} (truncated line?)")
        peer = f"{port['prefix']}-{port['guid'].lower()}"
        dump.peer_desc.setdefault(peer, port["desc"])
        if not current.startswith("R-") and not peer.startswith("R-"):
            dump.cables.append(
                (current, int(port["port"]), peer, int(port["peer_port"]), int(port["width"]),
                 port["speed"])
            )  # fmt: skip
    return dump


def _rail_token(token: str) -> int | None:
    match = _RAIL_TOKEN.match(token)
    if match is None:
        return None
    return int(match["hca"]) - 1 if match["hca"] is not None else int(match["mlx"])


def _classify(desc: str, options: IbnetdiscoverOptions) -> tuple[HcaRole, str, int | None, str]:
    """Return (role, host, rail, reason) for an HCA description; reason only for non-nodes."""
    if re.fullmatch(options.aggregation_pattern, desc):
        return HcaRole.MANAGEMENT, desc, None, "SHARP aggregation node"
    if not desc.strip() or re.fullmatch(options.unnamed_pattern, desc):
        return HcaRole.UNASSIGNED, "", None, "no host name in the description"
    tokens = desc.split()
    host, rail = tokens[0], _rail_token(tokens[-1]) if len(tokens) > 1 else None
    if any(re.fullmatch(p, host) for p in options.management_patterns):
        reason = "management or generic host name"
    elif not _NODE_NAME.match(host) or len(host) > 253:
        reason = "not a valid Kubernetes node name"
    elif options.node_pattern is not None and not re.fullmatch(options.node_pattern, host):
        reason = "does not match the node pattern"
    elif rail is None:
        reason = "no rail token (HCA-<n> or mlx5_<n>)"
    else:
        return HcaRole.NODE, host, rail, ""
    return HcaRole.MANAGEMENT, host, rail, reason


def _hca_locations(dump: _Dump) -> dict[str, tuple[str, int]]:
    """Return ``{hca vertex: (switch, port)}`` for every HCA cabled to a switch."""
    where: dict[str, tuple[str, int]] = {}
    for a, a_port, b, b_port, _, _ in dump.cables:
        if a.startswith("S-") and b.startswith("H-"):
            where.setdefault(b, (a, a_port))
        elif b.startswith("S-") and a.startswith("H-"):
            where.setdefault(a, (b, b_port))
    return where


def _dominant_rail(rails: Counter[int]) -> int | None:
    """Return the rail most HCAs of a leaf are on, None when there is no single one."""
    common = rails.most_common(2)
    if len(common) == 1 or (len(common) == 2 and common[0][1] > common[1][1]):
        return common[0][0]
    return None


def _add_switches(builder: FabricBuilder, dump: _Dump, warnings: list[str]) -> None:
    """Add every switch of the dump, including cabled ones without a block (with a warning)."""
    for vertex, desc in dump.switches.items():
        builder.add_switch(vertex, desc)
    for _, _, peer, _, _, _ in dump.cables:
        if peer.startswith("S-") and not builder.has_switch(peer):
            warnings.append(f"switch {peer} is cabled but has no block of its own (truncated?)")
            builder.add_switch(peer, dump.peer_desc.get(peer, ""))


def parse_ibnetdiscover(
    text: str,
    source: str = "<ibnetdiscover>",
    *,
    guid_map: dict[str, GuidMapEntry] | None = None,
    options: IbnetdiscoverOptions | None = None,
) -> tuple[Fabric, IbnetdiscoverReport]:
    """Return the fabric of an ibnetdiscover dump and a report of what is not a cluster node.

    A GUID map entry without a rail takes the rail of the description, else the one rail the
    other node HCAs of its leaf are on; failing both, the HCA gets no rail and a warning.
    """
    opts = options or IbnetdiscoverOptions()
    dump = _read(text, source)
    mapping = guid_map or {}
    warnings: list[str] = []
    if dump.routers:
        warnings.append(f"{dump.routers} router block(s) ignored")
    if not dump.switches:
        warnings.append("no switch in the dump: the fabric is empty (dump taken from a lone HCA?)")

    builder = FabricBuilder()
    _add_switches(builder, dump, warnings)

    hcas = sorted(set(dump.cas) | {p for p in dump.peer_desc if p.startswith("H-")})
    descs = {v: dump.cas.get(v) or dump.peer_desc.get(v, "") for v in hcas}
    where = _hca_locations(dump)
    classified = {v: _classify(descs[v], opts) for v in hcas}
    leaf_rails: dict[str, Counter[int]] = defaultdict(Counter)
    for vertex, (role, _, rail, _) in classified.items():
        if role is HcaRole.NODE and rail is not None and vertex in where:
            leaf_rails[where[vertex][0]][rail] += 1

    unassigned: list[UnassignedHca] = []
    ignored: dict[tuple[str, str], list[str]] = defaultdict(list)
    for vertex in hcas:
        guid, desc = vertex.removeprefix("H-"), descs[vertex]
        role, host, rail, reason = classified[vertex]
        switch, port = where.get(vertex, (None, None))
        if (entry := mapping.get(guid)) is not None:
            role, host = HcaRole.NODE, entry.node
            rail = next(
                (r for r in (entry.rail, rail, _dominant_rail(leaf_rails[switch or ""]))
                 if r is not None),
                None,
            )  # fmt: skip
            if rail is None:
                warnings.append(f"HCA {guid} mapped to {host} has no known rail; add it to the map")
        if switch is None:
            warnings.append(f"HCA {guid} ({desc!r}) is not cabled to any switch")
        if role is HcaRole.UNASSIGNED:
            unassigned.append(UnassignedHca(guid, desc, switch, port))
        elif role is HcaRole.MANAGEMENT:
            ignored[(host, reason)].append(guid)
        builder.add_hca(guid, desc, host if role is HcaRole.NODE else None, rail, role)

    for a, a_port, b, b_port, width, speed in dump.cables:
        builder.add_link(a, a_port, b, b_port, width=width, speed=speed)
    report = IbnetdiscoverReport(
        unassigned_hcas=tuple(unassigned),
        ignored_hosts=tuple(
            IgnoredHost(host, tuple(guids), reason)
            for (host, reason), guids in sorted(ignored.items())
        ),
        warnings=tuple(warnings),
    )
    return builder.build(), report
