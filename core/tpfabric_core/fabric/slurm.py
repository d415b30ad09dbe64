"""Slurm ``topology.conf``: parse and write the tree and block plugins' formats.

Tree (``topology/tree``)::

    SwitchName=s1 Switches=l[1-2] LinkSpeed=400
    SwitchName=l1 Nodes=dgx-[01-08]

Block (``topology/block``)::

    BlockName=b1 Nodes=dgx-[01-18]
    BlockSizes=18,36

Keys are case-insensitive as in Slurm; ``#`` starts a comment; a trailing ``\\`` continues a line.
Host lists use :mod:`tpfabric_core.hostlist`. :func:`format_topology_conf` writes names and host
lists in a canonical form (nodes sorted and compressed), so parse -> format is a fixed point after
the first round. :func:`fabric_from_slurm_tree` turns a tree into a
:class:`~tpfabric_core.fabric.model.Fabric` (one HCA per node, on rail 0);
:func:`slurm_tree_from_fabric` / :func:`slurm_blocks_from_fabric` export a fabric.

Text in, text out: never reads ``scontrol`` or the Slurm controller.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.model import Fabric, HcaRole, hca_id
from tpfabric_core.hostlist import HostlistError, compress_hostlist, expand_hostlist

__all__ = [
    "SlurmBlock",
    "SlurmSwitch",
    "SlurmTopology",
    "fabric_from_slurm_tree",
    "format_topology_conf",
    "parse_topology_conf",
    "slurm_blocks_from_fabric",
    "slurm_tree_from_fabric",
]


@dataclass(frozen=True, slots=True)
class SlurmSwitch:
    """A ``SwitchName=`` line: child switches, nodes, and the link speed if given."""

    name: str
    switches: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    link_speed: int | None = None


@dataclass(frozen=True, slots=True)
class SlurmBlock:
    """A ``BlockName=`` line."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SlurmTopology:
    """A parsed topology.conf: tree switches, or blocks with their ``BlockSizes``."""

    switches: tuple[SlurmSwitch, ...] = ()
    blocks: tuple[SlurmBlock, ...] = ()
    block_sizes: tuple[int, ...] = ()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Return (first line number, text) of each logical line, comments and continuations done."""
    result: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(pending).strip()
        pending = []
        if joined:
            result.append((start, joined))
    if pending and " ".join(pending).strip():
        result.append((start, " ".join(pending).strip()))
    return result


def _hosts(value: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(expand_hostlist(value))
    except HostlistError as err:
        raise InputError(where, str(err)) from err


def _fields(line: str, where: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep or not value:
            raise InputError(where, f"expected KEY=VALUE, got {token!r}")
        if key.lower() in fields:
            raise InputError(where, f"{key} is given twice")
        fields[key.lower()] = value
    return fields


def parse_topology_conf(text: str, source: str = "topology.conf") -> SlurmTopology:
    """Return the switches or blocks of a topology.conf; InputError names ``source:line``."""
    switches: list[SlurmSwitch] = []
    blocks: list[SlurmBlock] = []
    sizes: tuple[int, ...] = ()
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        fields = _fields(line, where)
        if "switchname" in fields:
            unknown = set(fields) - {"switchname", "switches", "nodes", "linkspeed"}
            speed = fields.get("linkspeed")
            if speed is not None and not speed.isdigit():
                raise InputError(where, f"LinkSpeed must be an integer, got {speed!r}")
            switch = SlurmSwitch(
                fields["switchname"],
                _hosts(fields.get("switches", ""), where),
                _hosts(fields.get("nodes", ""), where),
                int(speed) if speed is not None else None,
            )
            switches.append(switch)
        elif "blockname" in fields:
            unknown = set(fields) - {"blockname", "nodes"}
            blocks.append(SlurmBlock(fields["blockname"], _hosts(fields.get("nodes", ""), where)))
        elif set(fields) == {"blocksizes"}:
            unknown = set()
            try:
                sizes = tuple(int(v) for v in fields["blocksizes"].split(","))
            except ValueError as err:
                raise InputError(where, "BlockSizes must be comma-separated integers") from err
        else:
            unknown = set(fields)
        if unknown:
            raise InputError(
                where, f"unknown key(s) {', '.join(sorted(unknown))}",
                "use SwitchName/Switches/Nodes/LinkSpeed or BlockName/Nodes or BlockSizes",
            )  # fmt: skip
    if switches and blocks:
        raise InputError(source, "mixes SwitchName (tree) and BlockName (block) lines")
    _check_tree(switches, source)
    return SlurmTopology(tuple(switches), tuple(blocks), sizes)


def _check_tree(switches: list[SlurmSwitch], source: str) -> None:
    names = [s.name for s in switches]
    if len(set(names)) != len(names):
        raise InputError(source, "a SwitchName is defined twice")
    known = set(names)
    for switch in switches:
        missing = [c for c in switch.switches if c not in known]
        if missing:
            raise InputError(
                f"{source}: SwitchName={switch.name}",
                f"Switches= names undefined switch(es) {', '.join(missing)}",
            )


def format_topology_conf(topology: SlurmTopology) -> str:
    """Return topology.conf text: one line per switch or block, host lists compressed."""
    lines: list[str] = []
    for switch in topology.switches:
        parts = [f"SwitchName={switch.name}"]
        if switch.switches:
            parts.append(f"Switches={compress_hostlist(list(switch.switches))}")
        if switch.nodes:
            parts.append(f"Nodes={compress_hostlist(list(switch.nodes))}")
        if switch.link_speed is not None:
            parts.append(f"LinkSpeed={switch.link_speed}")
        lines.append(" ".join(parts))
    lines.extend(
        f"BlockName={block.name} Nodes={compress_hostlist(list(block.nodes))}"
        for block in topology.blocks
    )
    if topology.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in topology.block_sizes))
    return "\n".join(lines) + "\n"


def fabric_from_slurm_tree(topology: SlurmTopology) -> Fabric:
    """Return the fabric of a tree topology: each node one HCA (rail 0) on its switch.

    Switches that list nodes are leaves; a parent's ``Switches=`` become cables to its children.
    A node listed under several switches keeps the first. Switch ids are the Slurm names, and
    each switch is its own group, so the leaf domain ids are the leaf switch names.
    """
    if not topology.switches:
        raise InputError("topology.conf", "no SwitchName lines: not a tree topology")
    builder = FabricBuilder()
    ports: dict[str, int] = {}

    def port(vertex: str) -> int:
        ports[vertex] = ports.get(vertex, 0) + 1
        return ports[vertex]

    seen: set[str] = set()
    for switch in topology.switches:
        builder.add_switch(switch.name, group=switch.name)
    for switch in topology.switches:
        for child in switch.switches:
            builder.add_link(switch.name, port(switch.name), child, port(child))
        for node in switch.nodes:
            if node in seen:
                continue
            seen.add(node)
            guid = hashlib.sha256(f"slurm/{node}".encode()).hexdigest()[:16]
            builder.add_hca(guid, f"{node} HCA-1", node, 0, HcaRole.NODE)
            builder.add_link(hca_id(guid), 1, switch.name, port(switch.name))
    return builder.build()


def slurm_tree_from_fabric(fabric: Fabric) -> SlurmTopology:
    """Return a tree topology of ``fabric``: a switch per leaf domain (its nodes), per spine
    domain (its leaf domains) and, when a block holds several spine domains, per block. Names are
    the domain ids; one already taken by a lower level gets a ``spine-``/``block-`` prefix."""
    leaf_nodes: dict[str, list[str]] = {}
    spine_leaves: dict[str, set[str]] = {}
    block_spines: dict[str, set[str]] = {}
    for node in fabric.nodes:
        leaf, spine, block = (fabric.domain_of(node, lv) for lv in ("leaf", "spine", "block"))
        leaf_nodes.setdefault(leaf, []).append(node)
        spine_leaves.setdefault(spine, set()).add(leaf)
        block_spines.setdefault(block, set()).add(spine)
    used = set(leaf_nodes)

    def unique(value: str, level: str) -> str:
        name = value if value not in used else f"{level}-{value}"
        used.add(name)
        return name

    spine_name = {spine: unique(spine, "spine") for spine in sorted(spine_leaves)}
    switches: list[SlurmSwitch] = []
    if any(len(spines) > 1 for spines in block_spines.values()):
        switches.extend(
            SlurmSwitch(unique(block, "block"), tuple(sorted(spine_name[s] for s in spines)))
            for block, spines in sorted(block_spines.items())
        )
    switches.extend(
        SlurmSwitch(spine_name[spine], tuple(sorted(leaves)))
        for spine, leaves in sorted(spine_leaves.items())
    )
    switches.extend(
        SlurmSwitch(leaf, (), tuple(sorted(nodes))) for leaf, nodes in sorted(leaf_nodes.items())
    )
    return SlurmTopology(tuple(switches))


def slurm_blocks_from_fabric(fabric: Fabric, block_sizes: tuple[int, ...] = ()) -> SlurmTopology:
    """Return a block topology of ``fabric``: one block per leaf domain."""
    return SlurmTopology(
        blocks=tuple(
            SlurmBlock(domain, tuple(sorted(nodes)))
            for domain, nodes in sorted(fabric.domains("leaf").items())
        ),
        block_sizes=block_sizes,
    )
