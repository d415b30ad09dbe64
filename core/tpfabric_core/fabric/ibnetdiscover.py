"""Import an ``ibnetdiscover`` dump (the text ``ibnetdiscover`` prints) into a :class:`Fabric`.

The dump has one block per switch (``Switch 65 "S-<guid>" # "<description>" ...``) and per channel
adapter (``Ca 1 "H-<guid>" # "<description>"``), each followed by one line per cabled port::

    [1]	"H-e09d7303007a4bd8"[1](e09d7303007a4bd8) 		# "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR
    [1](e09d7303007a5a68) 	"S-2c5eab0300b87b40"[17]		# lid 657 lmc 0 "MF0;..." lid 73 4xNDR

Every cable appears twice (once from each end) and is kept once. When its two ends report
different rates (``4xSDR`` and ``1xSDR``: the link retrained while the scan ran), it is kept at the
lower rate, marked degraded, and a warning names both lines. Ports of a switch cabled to each other
(loopback cables) are left out, with a warning.

Who an HCA belongs to comes from its node description, never from guessing:

- ``"<host> HCA-<n>"`` is rail ``n - 1``; ``"<host> mlx<N>_<n>"`` (``mlx5_3``, ConnectX-3's
  ``mlx4_0``) is rail ``n``; ``"<host> <device>"`` (``hfi1_0``, ``qib0``) names the host and an HCA
  whose rail is the device's number;
- an optional GUID map (:func:`parse_guid_map`) names HCAs outright and wins over descriptions;
- an HCA whose rail neither says is on the rail most node HCAs of its leaf are on, and the one HCA
  of a node that has only one is on rail 0 (a single-rail cluster, as the Slurm importer has it);
- HCAs that report only the adapter model (``"MT4129 ConnectX7 ..."``) are *unassigned*: reported,
  and counted as compute ports of their leaf, but given to no node;
- management hosts are kept out of the node set and reported: SHARP aggregation nodes, hosts
  whose whole name matches a management pattern (a UFM server such as ``ufm01``, but not
  ``r-ufm100``; generic names such as ``localhost`` that many machines share), host names that are
  not valid Kubernetes node names (``B11-P1-CUFM-02``), and one-word descriptions that name no HCA.

A dump without any switch (taken from a lone adapter) yields an *empty* fabric and a warning in
the report rather than an error: it is well-formed, just useless; callers decide whether that is
fatal (the CLI exits non-zero). Lines that are not records -- the ``Chassis N`` / ``Non-Chassis
Nodes`` headers of ``ibnetdiscover -g``, an error message captured with ``2>&1`` -- are skipped
with a warning naming them. A record that cannot be read (a port or block line cut short by a
truncated file), or a file with no record at all, raises :class:`~tpfabric_core.errors.InputError`
naming ``<source>:<line>``.

This module reads text only; it never runs ``ibnetdiscover`` or touches the network.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.model import LANE_GBPS, Fabric, HcaRole, LinkKey
from tpfabric_core.hostlist import compress_hostlist
from tpfabric_core.input_limits import check_yaml_text

__all__ = [
    "GuidMapEntry",
    "IbnetdiscoverOptions",
    "IbnetdiscoverReport",
    "IgnoredHost",
    "UnassignedHca",
    "normalize_guid",
    "parse_guid_map",
    "parse_ibnetdiscover",
    "switch_name",
]

_BLOCK = re.compile(
    r'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<prefix>[SHR])-(?P<guid>[0-9a-fA-F]+)"'
    r'\s*(?:#\s*"(?P<desc>[^"]*)".*)?$'
)
_PORT = re.compile(
    r"^\[(?P<port>\d+)\](?:\[ext \d+\])?(?:\((?P<own_guid>[0-9a-fA-F]+)\))?\s+"
    r'"(?P<prefix>[SHR])-(?P<guid>[0-9a-fA-F]+)"\[(?P<peer_port>\d+)\](?:\[ext \d+\])?'
    r"(?:\s*\((?P<peer_guid>[0-9a-fA-F]+)\))?"
    r'\s*#\s*(?:lid\s+\d+\s+lmc\s+\d+\s+)?"(?P<desc>[^"]*)"\s+lid\s+\d+\s+'
    r"(?P<width>\d+)x(?P<speed>[A-Z0-9]+)(?:\s+\S.*)?$"
)
"""A port line; ``-g`` adds ``[ext N]`` after port numbers, ``-f`` ``s=.. w=.. v=..`` at the end.
The ``(guid)`` after a CA's port number is that port's GUID (a switch's ports share its GUID)."""
_HEADER = re.compile(
    r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid|Routerguid)=\S+(?:\s+#.*)?$"
)
"""An id line; with ``-g`` a switch's carries its chassis slot (``# ISR9288 Voltaire Line 3``)."""
_RAIL_TOKEN = re.compile(r"^(?:HCA-(?P<hca>\d+)|mlx\d+_(?P<mlx>\d+))$")
_SWITCH_NAMES = (
    re.compile(r"^MF0;(?P<name>[^:;\s]+):"),  # a managed NVIDIA/Mellanox switch: MF0;ib5:SX6036/U1
    re.compile(r"^.*\S\s+#\s+(?P<name>\S+)$"),  # a managed Voltaire 4036: "Voltaire 4036 # ib-sw3"
)
_DEVICE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
"""An RDMA device name (``hfi1_0``, ``qib0``, ``bnxt_re1``) as the second word of a description."""
_RECORD_START = re.compile(r"^(?:\[|(?:Switch|Ca|Rt)\s)")
_GROUPING = re.compile(r"^(?:Chassis\s+\S+.*|Non-Chassis Nodes)$")
_SAMPLES = 3
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GUID = re.compile(r"^[0-9a-f]{1,16}$")


class IbnetdiscoverOptions(BaseModel):
    """How HCA descriptions are read; every pattern is a regular expression (full match)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_pattern: str | None = None
    """When set, only hosts whose name matches are cluster nodes."""
    management_patterns: tuple[str, ...] = (
        r"(?i)c?ufm[-_]?\d*",
        r"localhost(?:\.localdomain)?",
        r"ubuntu",
    )
    """Whole host names that are never cluster nodes: UFM servers (``ufm``, ``ufm01``, ``cufm-02``;
    not ``r-ufm100``, an ordinary host), generic default host names."""
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
            check_yaml_text(text, source)
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


class _Cable(NamedTuple):
    """One port line: the cable from ``a`` to ``b`` as ``a``'s end reports it, on ``line``.

    A tuple, not a dataclass: a large dump has hundreds of thousands of port lines."""

    a: str
    a_port: int
    b: str
    b_port: int
    width: int
    speed: str
    line: int

    @property
    def rate(self) -> str:
        return f"{self.width}x{self.speed}"


@dataclass
class _Dump:
    """The raw contents of a dump: blocks, descriptions and cables, before interpretation."""

    switches: dict[str, str] = field(default_factory=dict)
    cas: dict[str, str] = field(default_factory=dict)
    peer_desc: dict[str, str] = field(default_factory=dict)
    cables: dict[LinkKey, _Cable] = field(default_factory=dict)
    """Each cable as the first of its two ends reports it, by its ends in sorted order."""
    disagreements: list[tuple[_Cable, _Cable]] = field(default_factory=list)
    """(first, second) reports of a cable whose ends report different rates."""
    loops: dict[str, set[tuple[int, int]]] = field(default_factory=lambda: defaultdict(set))
    """Ports of a switch (or HCA) cabled to each other, by vertex."""
    port_guids: dict[tuple[str, int], str] = field(default_factory=dict)
    """The GUID of each CA port a line shows, by (CA vertex, port)."""
    ports_of: dict[str, tuple[str, int]] = field(default_factory=dict)
    """A CA's second (third...) cabled port, split into an HCA of its own: its vertex
    (``H-<port guid>``) -> (the CA's vertex, the port)."""
    groupings: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    routers: int = 0


def _samples(lines: list[tuple[int, str]]) -> str:
    """Return the first few ``line N 'text'`` of ``lines``, and how many more there are."""
    shown = ", ".join(f"line {n} {text[:60]!r}" for n, text in lines[:_SAMPLES])
    more = len(lines) - _SAMPLES
    return shown + (f" and {more} more" if more > 0 else "")


def _read_block(dump: _Dump, block: re.Match[str]) -> str:
    """Record a Switch/Ca/Rt block header in ``dump``; return its vertex id."""
    vertex = f"{block['prefix']}-{block['guid'].lower()}"
    desc = block["desc"] or ""
    if block["kind"] == "Switch":
        dump.switches[vertex] = desc
    elif block["kind"] == "Ca":
        dump.cas[vertex] = desc
    else:
        dump.routers += 1
    return vertex


def _read_port(dump: _Dump, current: str, port: re.Match[str], number: int, source: str) -> None:
    """Record the port line ``port`` of block ``current`` in ``dump``: each cable once (the hot
    loop of a large dump: one dictionary look-up per line)."""
    speed = port["speed"]
    if speed not in LANE_GBPS:
        raise InputError(f"{source}:{number}", f"unknown link speed {speed!r} (truncated line?)")
    peer = f"{port['prefix']}-{port['guid'].lower()}"
    dump.peer_desc.setdefault(peer, port["desc"])
    own_port, peer_port = int(port["port"]), int(port["peer_port"])
    if port["own_guid"] is not None and current[0] == "H":
        dump.port_guids[(current, own_port)] = port["own_guid"].lower().zfill(16)
    if port["peer_guid"] is not None and peer[0] == "H":
        dump.port_guids[(peer, peer_port)] = port["peer_guid"].lower().zfill(16)
    if peer == current:
        dump.loops[current].add((min(own_port, peer_port), max(own_port, peer_port)))
        return
    if current.startswith("R-") or peer.startswith("R-"):
        return
    own, other = (current, own_port), (peer, peer_port)
    key = (own, other) if own <= other else (other, own)
    width = int(port["width"])
    known = dump.cables.get(key)
    if known is None:
        dump.cables[key] = _Cable(current, own_port, peer, peer_port, width, speed, number)
    elif known.width != width or known.speed != speed:
        report = _Cable(current, own_port, peer, peer_port, width, speed, number)
        dump.disagreements.append((known, report))


def _unreadable(line: str, where: str) -> InputError:
    return InputError(
        where,
        f"cannot read {line[:80]!r}",
        "expected a Switch/Ca block header, a port line or a comment; "
        "is the file truncated or not ibnetdiscover output?",
    )


def _read(text: str, source: str) -> _Dump:
    dump = _Dump()
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            port = _PORT.match(line)
            if port is None:
                raise _unreadable(line, f"{source}:{number}")
            if current is None:
                raise InputError(f"{source}:{number}", "port line before any Switch or Ca block")
            _read_port(dump, current, port, number, source)
        elif block := _BLOCK.match(line):
            current = _read_block(dump, block)
        elif _HEADER.match(line):
            continue
        elif _RECORD_START.match(line):
            raise _unreadable(line, f"{source}:{number}")
        else:
            # Not a record: a grouping header of `ibnetdiscover -g`, or a message on stderr
            # captured with 2>&1. A record cut short still starts like one and stays an error.
            (dump.groupings if _GROUPING.match(line) else dump.skipped).append((number, line))
    if not (dump.switches or dump.cas or dump.routers) and (dump.skipped or dump.groupings):
        number, line = min(dump.skipped + dump.groupings)
        raise InputError(
            f"{source}:{number}",
            f"cannot read {line[:80]!r}, and no line of the file is a Switch or Ca block",
            "is it ibnetdiscover output?",
        )
    return dump


def _read_warnings(dump: _Dump, source: str) -> list[str]:
    """Return the warnings about what reading skipped: non-records and loopback cables."""
    warnings = []
    if dump.groupings:
        warnings.append(
            f"{source}: skipped {len(dump.groupings)} grouping header(s) of "
            f"`ibnetdiscover -g`: {_samples(dump.groupings)}"
        )
    if dump.skipped:
        warnings.append(
            f"{source}: skipped {len(dump.skipped)} line(s) that are not records (an error "
            f"message captured with the dump?): {_samples(dump.skipped)}"
        )
    for vertex, pairs in sorted(dump.loops.items()):
        desc = dump.switches.get(vertex) or dump.cas.get(vertex) or dump.peer_desc.get(vertex, "")
        ports = ", ".join(f"{a}-{b}" for a, b in sorted(pairs))
        warnings.append(
            f"{vertex} ({desc!r}) has ports cabled to each other ({ports}): loopback cables, "
            "left out of the fabric"
        )
    return warnings


def _settle_disagreements(dump: _Dump, source: str, warnings: list[str]) -> set[LinkKey]:
    """Return the cables whose two ends report different rates, each now kept in ``dump`` at the
    lower rate, with a warning naming both lines: the link retrained while the scan ran."""
    degraded: set[LinkKey] = set()
    for first, second in dump.disagreements:
        slower = min((first, second), key=lambda c: (c.width * LANE_GBPS[c.speed], c.line))
        own, other = (first.a, first.a_port), (first.b, first.b_port)
        key = (own, other) if own <= other else (other, own)
        (a, a_port), (b, b_port) = key
        warnings.append(
            f"{source}: lines {first.line} and {second.line} report the cable {a}[{a_port}] - "
            f"{b}[{b_port}] as {first.rate} and {second.rate} (retrained during the scan?); "
            f"kept as {slower.rate} and marked degraded"
        )
        dump.cables[key] = slower
        degraded.add(key)
    return degraded


Order = tuple[tuple[int, str], ...]


def _natural(name: str) -> Order:
    """Return a key that orders ``mlx5_2`` before ``mlx5_10`` (digits compare as numbers)."""
    return tuple((int(p), "") if p.isdigit() else (0, p) for p in re.split(r"(\d+)", name) if p)


def _hca_of(tokens: list[str]) -> tuple[bool, Order | None]:
    """Return whether a description's words name an HCA, and where it comes in its node's own
    order of HCAs: the last word ``HCA-<n>`` or ``mlx<N>_<n>``, or, after a host name alone, a
    device name (``hfi1_0``, ``ibp12s0``), in natural order."""
    if len(tokens) < 2:
        return False, None
    if _RAIL_TOKEN.match(tokens[-1]) is not None:
        return True, _natural(tokens[-1])
    if len(tokens) == 2 and _DEVICE.match(tokens[1]):
        return True, _natural(tokens[1])
    return False, None


@dataclass(frozen=True, slots=True)
class _Role:
    """What an HCA of the dump is: a node's (``host``), unassigned, or a management host's."""

    role: HcaRole
    host: str
    #: the rail the GUID map gives it (the operators' own numbering: it wins)
    rail: int | None
    #: where it comes in its node's own order of HCAs (its device name); None: unknown
    order: Order | None
    reason: str


def _classify(desc: str, options: IbnetdiscoverOptions) -> tuple[HcaRole, str, Order | None, str]:
    """Return (role, host, order, reason) for an HCA description; reason only for non-nodes."""
    if re.fullmatch(options.aggregation_pattern, desc):
        return HcaRole.MANAGEMENT, desc, None, "SHARP aggregation node"
    if not desc.strip() or re.fullmatch(options.unnamed_pattern, desc):
        return HcaRole.UNASSIGNED, "", None, "no host name in the description"
    tokens = desc.split()
    host = tokens[0]
    names_hca, order = _hca_of(tokens)
    if any(re.fullmatch(p, host) for p in options.management_patterns):
        reason = "management or generic host name"
    elif not _NODE_NAME.match(host) or len(host) > 253:
        reason = "not a valid Kubernetes node name"
    elif options.node_pattern is not None and not re.fullmatch(options.node_pattern, host):
        reason = "does not match the node pattern"
    elif not names_hca:
        reason = "no rail token: the description names no HCA (HCA-<n>, mlx5_<n>, a device)"
    else:
        return HcaRole.NODE, host, order, ""
    return HcaRole.MANAGEMENT, host, order, reason


def _hca_locations(dump: _Dump) -> dict[str, tuple[str, int]]:
    """Return ``{hca vertex: (switch, port)}`` for every HCA cabled to a switch."""
    where: dict[str, tuple[str, int]] = {}
    for cable in dump.cables.values():
        if cable.a.startswith("S-") and cable.b.startswith("H-"):
            where.setdefault(cable.b, (cable.a, cable.a_port))
        elif cable.b.startswith("S-") and cable.a.startswith("H-"):
            where.setdefault(cable.a, (cable.b, cable.b_port))
    return where


def _hca_ports(dump: _Dump) -> dict[str, int]:
    """Return ``{hca vertex: its port cabled to a switch}`` (its first such port)."""
    ports: dict[str, int] = {}
    for (a, a_port), (b, b_port) in sorted(dump.cables):
        if a.startswith("H-") and b.startswith("S-"):
            ports.setdefault(a, a_port)
        elif b.startswith("H-") and a.startswith("S-"):
            ports.setdefault(b, b_port)
    return ports


def _split_ca_ports(dump: _Dump, degraded: set[LinkKey]) -> set[LinkKey]:
    """Make each further cabled port of a multi-port CA (a dual-port ConnectX-3 cabled twice) an
    HCA of its own, ``H-<its port GUID>``, when the dump gives that GUID; return ``degraded``
    with the renamed cables. A port whose GUID is not known stays with its CA (only the CA's
    first cabled port counts then, as before)."""
    cabled: dict[str, set[int]] = defaultdict(set)
    for (a, a_port), (b, b_port) in dump.cables:
        if a.startswith("H-") and b.startswith("S-"):
            cabled[a].add(a_port)
        elif b.startswith("H-") and a.startswith("S-"):
            cabled[b].add(b_port)
    renamed: dict[tuple[str, int], str] = {}
    for vertex, ports in cabled.items():
        for port in sorted(ports)[1:]:
            guid = dump.port_guids.get((vertex, port))
            split = f"H-{guid}" if guid else None
            if split and split != vertex and split not in dump.cas and split not in dump.ports_of:
                renamed[(vertex, port)] = split
                dump.ports_of[split] = (vertex, port)
    if not renamed:
        return degraded

    def end(vertex: str, port: int) -> tuple[str, int]:
        return renamed.get((vertex, port), vertex), port

    cables: dict[LinkKey, _Cable] = {}
    moved: set[LinkKey] = set()
    for key, cable in dump.cables.items():
        first, second = end(*key[0]), end(*key[1])
        new_key = (first, second) if first <= second else (second, first)
        cables[new_key] = cable._replace(
            a=end(cable.a, cable.a_port)[0], b=end(cable.b, cable.b_port)[0]
        )
        if key in degraded:
            moved.add(new_key)
    dump.cables = cables
    return moved


def switch_name(description: str) -> str | None:
    """Return the name a switch's node description gives it (``MF0;ib5:SX6036/U1`` is ``ib5``,
    a Voltaire ``Voltaire 4036 # ib-sw3`` is ``ib-sw3``), None when it gives none."""
    for pattern in _SWITCH_NAMES:
        if (match := pattern.match(description.strip())) is not None:
            return match["name"]
    return None


def _add_switches(builder: FabricBuilder, dump: _Dump, warnings: list[str]) -> None:
    """Add every switch of the dump, including cabled ones without a block (with a warning),
    each with the name its description gives it when no other switch has that name."""
    descs = dict(dump.switches)
    for cable in dump.cables.values():
        peer = cable.b
        if peer.startswith("S-") and peer not in descs:
            warnings.append(f"switch {peer} is cabled but has no block of its own (truncated?)")
            descs[peer] = dump.peer_desc.get(peer, "")
    names = {vertex: switch_name(desc) for vertex, desc in descs.items()}
    counts = Counter(name for name in names.values() if name)
    if shared := sorted(name for name, count in counts.items() if count > 1):
        warnings.append(
            f"switch name(s) {', '.join(shared[:_SAMPLES])} given to several switches: those "
            "switches are named by GUID"
        )
    for vertex, desc in descs.items():
        name = names[vertex]
        builder.add_switch(vertex, desc, name=name if name and counts[name] == 1 else None)


def _roles(
    hcas: list[str], descs: dict[str, str], mapping: dict[str, GuidMapEntry],
    options: IbnetdiscoverOptions, dump: _Dump,
) -> dict[str, _Role]:  # fmt: skip
    """Return what every HCA is; the GUID map (by port GUID, else the CA's GUID) wins."""
    roles: dict[str, _Role] = {}
    for vertex in hcas:
        role, host, order, reason = _classify(descs[vertex], options)
        ca = dump.ports_of.get(vertex, (vertex, 0))[0]
        rail = None
        entry = mapping.get(vertex.removeprefix("H-")) or mapping.get(ca.removeprefix("H-"))
        if entry is not None:
            role, host, reason, rail = HcaRole.NODE, entry.node, "", entry.rail
        roles[vertex] = _Role(role, host, rail, order, reason)
    return roles


def _port_indices(roles: dict[str, _Role], ports: dict[str, int]) -> dict[str, int]:
    """Return the port index of every node HCA whose name says where it comes: its place among
    the names of its kind (``mlx5_<n>``, ``HCA-<n>``, ``ibp<b>s<s>``: the words around the
    numbers) that the dump's nodes use, in natural order, then its port number. A unit whose
    nodes all lack one HCA keeps the others' indices; two naming schemes in one dump are
    numbered each on its own."""
    kinds: dict[tuple[str, ...], set[tuple[Order, int]]] = defaultdict(set)
    keyed: dict[str, tuple[tuple[str, ...], tuple[Order, int]]] = {}
    for vertex, role in roles.items():
        if role.role is HcaRole.NODE and role.order is not None:
            kind = tuple(text for _, text in role.order if text)
            key = (role.order, ports.get(vertex, 0))
            kinds[kind].add(key)
            keyed[vertex] = (kind, key)
    ranks = {kind: {key: i for i, key in enumerate(sorted(keys))} for kind, keys in kinds.items()}
    return {vertex: ranks[kind][key] for vertex, (kind, key) in keyed.items()}


def _switch_rails(votes: dict[str, Counter[int]], peers: dict[str, set[str]]) -> dict[str, int]:
    """Return the rail of each switch: the port index most of its nodes put there, each index
    once among the switches that share a node (the strongest votes first; a tie: the smaller
    index), so that half a unit swapped never makes two leaves one rail."""
    ranked = sorted(
        (-count, index, switch)
        for switch, counts in votes.items()
        for index, count in counts.items()
    )
    rails: dict[str, int] = {}
    for _, index, switch in ranked:
        if switch in rails:
            continue
        if all(rails.get(peer) != index for peer in peers.get(switch, ())):
            rails[switch] = index
    for switch, counts in votes.items():  # every index of it taken by a peer: its most voted
        rails.setdefault(switch, min(counts.items(), key=lambda item: (-item[1], item[0]))[0])
    return rails


def _node_rails(
    roles: dict[str, _Role], where: dict[str, tuple[str, int]], ports: dict[str, int]
) -> tuple[dict[str, int | None], dict[str, int], set[str]]:
    """Return the rail of every node HCA, its place in its node's own order (when its name
    says), and the nodes left with a rail-less HCA.

    Rails are numbered 0..n-1 in the fabric's order, whatever the devices are called: the port
    index of an HCA is the place of its device name among every name of its kind the dump's
    nodes use (:func:`_port_indices`: a DGX H100's mlx5_0,3,4,5,6,9,10,11 are 0-7); where each of
    a node's HCAs is on a switch of its own (rail-optimised), the rail of a switch is the index
    most of its nodes put there (a tie: the smaller; each index once among the switches a node
    spans), so every node agrees on it even when one node's names differ; a node with several
    HCAs on one switch keeps their indices; a node's only HCA is rail 0. The GUID map's rails
    win.
    """
    by_node: dict[str, list[str]] = defaultdict(list)
    for vertex, role in roles.items():
        if role.role is HcaRole.NODE:
            by_node[role.host].append(vertex)
    local = _port_indices(roles, ports)
    spread: dict[str, bool] = {}
    for host, vertices in by_node.items():
        switches = [where[v][0] for v in vertices if v in where]
        spread[host] = len(switches) > 1 and len(set(switches)) == len(switches)
    votes: dict[str, Counter[int]] = defaultdict(Counter)
    peers: dict[str, set[str]] = defaultdict(set)
    for host, vertices in by_node.items():
        if not spread[host]:
            continue
        used = {where[v][0] for v in vertices if v in where}
        for vertex in vertices:
            said = roles[vertex].rail if roles[vertex].rail is not None else local.get(vertex)
            if said is not None and vertex in where:
                votes[where[vertex][0]][said] += 1
                peers[where[vertex][0]].update(used - {where[vertex][0]})
    switch_rail = _switch_rails(votes, peers)
    rails: dict[str, int | None] = {}
    railless: set[str] = set()
    for host, vertices in by_node.items():
        for vertex in vertices:
            switch = where[vertex][0] if vertex in where else ""
            rail = roles[vertex].rail
            if rail is None and spread[host]:
                rail = switch_rail.get(switch)
            for fallback in (
                local.get(vertex),
                switch_rail.get(switch),
                0 if len(vertices) == 1 else None,
            ):
                rail = fallback if rail is None else rail
            if rail is None:
                railless.add(host)
            rails[vertex] = rail
    return rails, local, railless


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - _SAMPLES} more" if len(items) > _SAMPLES else ""
    return ", ".join(items[:_SAMPLES]) + more


def parse_ibnetdiscover(
    text: str,
    source: str = "<ibnetdiscover>",
    *,
    guid_map: dict[str, GuidMapEntry] | None = None,
    options: IbnetdiscoverOptions | None = None,
) -> tuple[Fabric, IbnetdiscoverReport]:
    """Return the fabric of an ibnetdiscover dump and a report of what is not a cluster node.

    An HCA's rail is the GUID map's, else the description's, else the one rail the other node HCAs
    of its leaf are on, else 0 when it is its node's only HCA; failing all, it has no rail, and one
    warning names every node with such HCAs.
    """
    dump = _read(text, source)
    warnings = _read_warnings(dump, source)
    degraded = _split_ca_ports(dump, _settle_disagreements(dump, source, warnings))
    if dump.routers:
        warnings.append(f"{dump.routers} router block(s) ignored")
    if not dump.switches:
        warnings.append("no switch in the dump: the fabric is empty (dump taken from a lone HCA?)")

    builder = FabricBuilder()
    _add_switches(builder, dump, warnings)

    hcas = sorted(
        set(dump.cas) | {p for p in dump.peer_desc if p.startswith("H-")} | set(dump.ports_of)
    )
    ca_of = {v: dump.ports_of.get(v, (v, 0))[0] for v in hcas}
    descs = {v: dump.cas.get(ca_of[v]) or dump.peer_desc.get(ca_of[v], "") for v in hcas}
    where = _hca_locations(dump)
    ports = _hca_ports(dump)
    roles = _roles(hcas, descs, guid_map or {}, options or IbnetdiscoverOptions(), dump)
    rails, orders, railless = _node_rails(roles, where, ports)

    unassigned: list[UnassignedHca] = []
    ignored: dict[tuple[str, str], list[str]] = defaultdict(list)
    for vertex in hcas:
        guid, desc = vertex.removeprefix("H-"), descs[vertex]
        what = roles[vertex]
        role, host = what.role, what.host
        switch, port = where.get(vertex, (None, None))
        if role is HcaRole.UNASSIGNED:
            unassigned.append(UnassignedHca(guid, desc, switch, port))
        elif role is HcaRole.MANAGEMENT:
            ignored[(host, what.reason)].append(guid)
        node = host if role is HcaRole.NODE else None
        port_guid = dump.port_guids.get((ca_of[vertex], ports[vertex])) if vertex in ports else None
        rail = rails.get(vertex, what.rail)
        order = orders.get(vertex)
        builder.add_hca(guid, desc, node, rail, role, port_guid=port_guid, order=order)
    if uncabled := [f"{v.removeprefix('H-')} ({descs[v]!r})" for v in hcas if v not in where]:
        warnings.append(f"{len(uncabled)} HCA(s) not cabled to any switch: {_listed(uncabled)}")
    if railless:
        warnings.append(
            f"{len(railless)} node(s) have several HCAs and no known rail on some: "
            f"{compress_hostlist(sorted(railless))}; give the rails in the node map "
            "('guid node rail')"
        )

    for key, cable in dump.cables.items():
        builder.add_link(
            cable.a, cable.a_port, cable.b, cable.b_port, width=cable.width, speed=cable.speed,
            health="degraded" if key in degraded else "ok",
        )  # fmt: skip
    report = IbnetdiscoverReport(
        unassigned_hcas=tuple(unassigned),
        ignored_hosts=tuple(
            IgnoredHost(host, tuple(guids), reason)
            for (host, reason), guids in sorted(ignored.items())
        ),
        warnings=tuple(warnings),
    )
    return builder.build(), report
