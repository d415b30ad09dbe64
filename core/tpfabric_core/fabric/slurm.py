"""Slurm topology: read ``topology.conf`` and ``topology.yaml``, write ``topology.conf``, and turn
a tree or a block topology into a :class:`~tpfabric_core.fabric.model.Fabric`.

Tree (``topology/tree``)::

    SwitchName=s1 Switches=l[1-2] LinkSpeed=400
    SwitchName=l1 Nodes=dgx-[01-08]

Block (``topology/block``)::

    BlockName=b1 Nodes=dgx-[01-18]
    BlockSizes=18,36

Keys are case-insensitive as in Slurm; ``#`` starts a comment; a trailing ``\\`` continues a line.
Slurm 25.05's ``topology.yaml`` holds the same trees and blocks (read by
:mod:`tpfabric_core.fabric.slurm_yaml`); :func:`parse_slurm_topology` takes either. Host lists use
:mod:`tpfabric_core.hostlist`. :func:`format_topology_conf` writes names and host lists in a
canonical form (nodes sorted and compressed), so parse -> format is a fixed point after the first
round.

What Slurm itself refuses is refused here too, naming ``file:line``: a switch defined twice, a
``Switches=`` naming an unknown switch, switches that are their own ancestors (Slurm: "Switch
configuration is not a tree"), ``BlockSizes`` that are not the base size times powers of two.

:func:`fabric_from_slurm` builds the fabric (one HCA per node, on rail 0) and says what it left
out. Its rules, where Slurm is lenient and tpfabric cannot be:

- a node name Kubernetes cannot accept (an RFC 1123 subdomain: ``H-003048c749450000`` has upper
  case) is skipped with a warning naming the line and the rule: such a host can never be a node
  of the cluster under that name, and the rest of the file still labels the nodes it names;
- a node under two leaf switches, or in two blocks, is an error naming both lines: a node has one
  leaf domain and either choice would be a guess (Slurm only warns, "Multiple leaf switches
  contain nodes");
- a switch with ``Nodes=`` is a leaf and its ``Switches=`` are ignored with a warning, as Slurm
  does; switches with no node below them are left out (an empty leaf is not a core);
- each block is a leaf domain (what :func:`slurm_blocks_from_fabric` writes); ``BlockSizes``
  beyond the base size aggregate consecutive blocks exactly as Slurm's topology/block does, and the
  first two aggregation levels become the spine and block domains (named ``first..last`` block).

Text in, data out: never reads ``scontrol``, a file or the Slurm controller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.model import Fabric, HcaRole, hca_id
from tpfabric_core.fabric.slurm_yaml import looks_like_topology_yaml, read_topology_yaml
from tpfabric_core.fabric_description import NODE_NAME_RULE, node_name_problem
from tpfabric_core.hostlist import HostlistError, compress_hostlist, expand_hostlist

__all__ = [
    "SlurmBlock",
    "SlurmImport",
    "SlurmSwitch",
    "SlurmTopology",
    "fabric_from_slurm",
    "fabric_from_slurm_tree",
    "format_topology_conf",
    "parse_slurm_topology",
    "parse_topology_conf",
    "parse_topology_yaml",
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
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class SlurmBlock:
    """A ``BlockName=`` line."""

    name: str
    nodes: tuple[str, ...]
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class SlurmTopology:
    """A parsed topology: tree switches, or blocks with their ``BlockSizes``."""

    switches: tuple[SlurmSwitch, ...] = ()
    blocks: tuple[SlurmBlock, ...] = ()
    block_sizes: tuple[int, ...] = ()
    source: str = field(default="topology.conf", compare=False)


@dataclass(frozen=True, slots=True)
class SlurmImport:
    """The fabric of a Slurm topology, and what the import left out (one warning per line)."""

    fabric: Fabric
    warnings: tuple[str, ...] = ()
    skipped_nodes: tuple[str, ...] = ()


# -- topology.conf ------------------------------------------------------------------------------


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


def _block_sizes(value: str, where: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError as err:
        raise InputError(where, "BlockSizes must be comma-separated integers") from err
    return sizes


def parse_topology_conf(text: str, source: str = "topology.conf") -> SlurmTopology:
    """Return the switches or blocks of a topology.conf; InputError names ``source:line``."""
    switches: list[SlurmSwitch] = []
    blocks: list[SlurmBlock] = []
    sizes: tuple[int, ...] = ()
    sizes_where = source
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
                number,
            )
            switches.append(switch)
        elif "blockname" in fields:
            unknown = set(fields) - {"blockname", "nodes"}
            nodes = _hosts(fields.get("nodes", ""), where)
            blocks.append(SlurmBlock(fields["blockname"], nodes, number))
        elif set(fields) == {"blocksizes"}:
            unknown = set()
            sizes, sizes_where = _block_sizes(fields["blocksizes"], where), where
        elif "ringname" in fields:
            raise InputError(
                where, "RingName (topology/ring) orders nodes in rings, not in a switch tree",
                "import a topology/tree or topology/block file",
            )  # fmt: skip
        else:
            unknown = set(fields)
        if unknown:
            raise InputError(
                where, f"unknown key(s) {', '.join(sorted(unknown))}",
                "use SwitchName/Switches/Nodes/LinkSpeed or BlockName/Nodes or BlockSizes",
            )  # fmt: skip
    if switches and blocks:
        raise InputError(source, "mixes SwitchName (tree) and BlockName (block) lines")
    topology = SlurmTopology(tuple(switches), tuple(blocks), sizes, source)
    _check(topology, sizes_where)
    return topology


def parse_topology_yaml(
    text: str, source: str = "topology.yaml", topology: str | None = None
) -> SlurmTopology:
    """Return the tree or block topology of a Slurm ``topology.yaml``: the one named
    ``topology``, else the ``cluster_default`` one, else the only one. InputError names
    ``source:line``, with the same checks as :func:`parse_topology_conf`."""
    chosen = read_topology_yaml(text, source, topology)
    if chosen.kind == "tree":
        switches = tuple(
            SlurmSwitch(
                e.name,
                _hosts(e.children, f"{source}:{e.line}"),
                _hosts(e.nodes, f"{source}:{e.line}"),
                line=e.line,
            )
            for e in chosen.entries
        )
        result = SlurmTopology(switches=switches, source=source)
    else:
        blocks = tuple(
            SlurmBlock(e.name, _hosts(e.nodes, f"{source}:{e.line}"), e.line)
            for e in chosen.entries
        )
        result = SlurmTopology(blocks=blocks, block_sizes=chosen.block_sizes, source=source)
    _check(result, f"{source}:{chosen.line}")
    return result


def parse_slurm_topology(text: str, source: str = "topology.conf") -> SlurmTopology:
    """Return the topology of a ``topology.conf`` or a ``topology.yaml`` (told apart by content:
    YAML starts with a list item or ``key:``, topology.conf with ``Key=value``)."""
    if looks_like_topology_yaml(text):
        return parse_topology_yaml(text, source)
    return parse_topology_conf(text, source)


# -- what Slurm refuses -------------------------------------------------------------------------


def _check(topology: SlurmTopology, sizes_where: str) -> None:
    source = topology.source
    for kind, entries in (("SwitchName", topology.switches), ("BlockName", topology.blocks)):
        first: dict[str, int] = {}
        for entry in entries:
            if entry.name in first:
                raise InputError(
                    f"{source}:{entry.line}",
                    f"{kind}={entry.name} is defined twice (first on line {first[entry.name]})",
                )
            first[entry.name] = entry.line
    _check_children(topology.switches, source)
    _check_cycles(topology.switches, source)
    if topology.block_sizes:
        if not topology.blocks:
            raise InputError(sizes_where, "BlockSizes without any BlockName line")
        _block_levels(topology.block_sizes, sizes_where)


def _check_children(switches: Sequence[SlurmSwitch], source: str) -> None:
    known = {s.name for s in switches}
    for switch in switches:
        where = f"{source}:{switch.line}"
        missing = [c for c in switch.switches if c not in known]
        if missing:
            raise InputError(
                where,
                f"Switches= of SwitchName={switch.name} names undefined switch(es) "
                f"{', '.join(missing)}",
            )
        if switch.name in switch.switches:
            raise InputError(where, f"SwitchName={switch.name} lists itself in its Switches=")


def _check_cycles(switches: Sequence[SlurmSwitch], source: str) -> None:
    """Raise when switches are their own ancestors through ``Switches=``, naming one cycle."""
    by_name = {s.name: s for s in switches}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in switches:
        if root.name in state:
            continue
        path: list[str] = [root.name]
        children = [iter(root.switches)]
        state[root.name] = 1
        while path:
            child = next(children[-1], None)
            if child is None:
                state[path.pop()] = 2
                children.pop()
                continue
            if state.get(child) == 1:
                cycle = [*path[path.index(child) :], child]
                steps = " -> ".join(f"{n} (line {by_name[n].line})" for n in cycle[:-1])
                raise InputError(
                    f"{source}:{by_name[child].line}",
                    f"Switches= form a cycle: {steps} -> {child}",
                    "a switch lists only the switches below it; remove the one that points back "
                    "up (Slurm refuses this file too: 'Switch configuration is not a tree')",
                )
            if child not in state:
                state[child] = 1
                path.append(child)
                children.append(iter(by_name[child].switches))


def _block_levels(sizes: Sequence[int], where: str) -> list[int]:
    """Return the aggregation sizes, in blocks, that ``BlockSizes`` asks for (1 first).

    Slurm's rule: the first size is the planning base; every other one must be the base times a
    power of two, and ``base * 2**k`` aggregates ``2**k`` consecutive blocks.
    """
    base = sizes[0]
    if base < 1:
        raise InputError(where, f"BlockSizes must be positive, got {base}")
    levels = {1}
    for size in sizes[1:]:
        ratio = size // base if size % base == 0 else 0
        if ratio < 1 or ratio & (ratio - 1):
            raise InputError(
                where,
                f"BlockSizes: {size} is not the base size {base} times a power of two",
                f"use sizes such as {base},{base * 2},{base * 4}",
            )
        levels.add(ratio)
    return sorted(levels)


# -- the fabric ---------------------------------------------------------------------------------


def _node_hca(builder: FabricBuilder, node: str, leaf: str, port: int) -> None:
    guid = hashlib.sha256(f"slurm/{node}".encode()).hexdigest()[:16]
    builder.add_hca(guid, f"{node} HCA-1", node, 0, HcaRole.NODE)
    builder.add_link(hca_id(guid), 1, leaf, port)


class _Ports:
    """The next free port of every switch (a Slurm file names no ports)."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}

    def __call__(self, vertex: str) -> int:
        self._used[vertex] = self._used.get(vertex, 0) + 1
        return self._used[vertex]


def _usable_nodes(
    members: Iterable[tuple[str, int, tuple[str, ...]]], source: str, what: str
) -> tuple[dict[str, tuple[str, ...]], list[str], list[str]]:
    """Return the nodes of each switch or block that Kubernetes can name, the warnings about the
    others (one per line) and those others; InputError when a node is listed twice."""
    usable: dict[str, tuple[str, ...]] = {}
    owner: dict[str, tuple[str, int]] = {}
    warnings: list[str] = []
    skipped: list[str] = []
    for name, line, nodes in members:
        bad = [node for node in nodes if node_name_problem(node)]
        if bad:
            skipped.extend(bad)
            hint = ""
            if not node_name_problem(bad[0].lower()):
                hint = f"; kubelet registers a host name in lower case ({bad[0].lower()}): "
                hint += "write the node's name in the cluster"
            warnings.append(
                f"{source}:{line}: skipped {len(bad)} node(s) that cannot be Kubernetes node "
                f"names: {compress_hostlist(bad)} ({NODE_NAME_RULE}){hint}"
            )
        rejected = set(bad)
        good = tuple(node for node in nodes if node not in rejected)
        for node in good:
            if node in owner:
                other, other_line = owner[node]
                raise InputError(
                    f"{source}:{line}",
                    f"node {node} is in {what}={other} (line {other_line}) and {what}={name}",
                    "list each node once: tpfabric gives a node one leaf domain",
                )
            owner[node] = (name, line)
        usable[name] = good
    return usable, warnings, skipped


def fabric_from_slurm(topology: SlurmTopology) -> SlurmImport:
    """Return the fabric of a tree or block topology (see the module docstring for the rules),
    each node one HCA on rail 0, with warnings naming ``file:line`` for what was left out."""
    _check(topology, topology.source)  # a topology built in code was never parsed
    if topology.switches:
        return _tree_fabric(topology)
    if topology.blocks:
        return _block_fabric(topology)
    raise InputError(
        topology.source,
        "names no switch and no block (no SwitchName or BlockName line)",
        "give a topology/tree (SwitchName=...) or topology/block (BlockName=...) file",
    )


def fabric_from_slurm_tree(topology: SlurmTopology) -> Fabric:
    """Return the fabric of a tree topology; :func:`fabric_from_slurm` also says what it left
    out. Switch ids are the Slurm names and each switch is its own group, so the leaf domain ids
    are the leaf switch names."""
    if not topology.switches:
        raise InputError(topology.source, "no SwitchName lines: not a tree topology")
    return fabric_from_slurm(topology).fabric


def _tree_fabric(topology: SlurmTopology) -> SlurmImport:
    source = topology.source
    leaves = [s for s in topology.switches if s.nodes]
    usable, warnings, skipped = _usable_nodes(
        ((s.name, s.line, s.nodes) for s in leaves), source, "SwitchName"
    )
    warnings.extend(
        f"{source}:{s.line}: SwitchName={s.name} has Nodes=, so it is a leaf: its Switches= "
        "are ignored (as Slurm does)"
        for s in leaves
        if s.switches
    )
    children = {s.name: () if s.nodes else s.switches for s in topology.switches}
    live: dict[str, bool] = {}

    def has_nodes(name: str) -> bool:  # acyclic (checked); memoised
        if name not in live:
            live[name] = bool(usable.get(name)) or any(has_nodes(c) for c in children[name])
        return live[name]

    builder = FabricBuilder()
    port = _Ports()
    kept = [s for s in topology.switches if has_nodes(s.name)]
    for switch in kept:
        builder.add_switch(switch.name, group=switch.name)
    for switch in kept:
        for child in children[switch.name]:
            if live[child]:
                builder.add_link(switch.name, port(switch.name), child, port(child))
        for node in usable.get(switch.name, ()):
            _node_hca(builder, node, switch.name, port(switch.name))
    return SlurmImport(builder.build(), tuple(warnings), tuple(skipped))


def _aggregates(count: int, levels: Sequence[int]) -> list[list[range]]:
    """Return, per aggregation level above the base, the ranges of block indices Slurm joins.

    Slurm's topology/block: level sizes stop at the first that covers every block; at each level
    consecutive blocks are grouped from index 0, and a short group at the end is left out when
    the level below already covers it.
    """
    sizes: list[int] = []
    for size in levels:
        sizes.append(size)
        if size >= count:
            break
    result: list[list[range]] = []
    for j in range(1, len(sizes)):
        groups = []
        for start in range(0, count, sizes[j]):
            remaining = count - start
            if sizes[j] > remaining and sizes[j - 1] >= remaining:
                continue
            groups.append(range(start, min(start + sizes[j], count)))
        result.append(groups)
    return result


def _block_fabric(topology: SlurmTopology) -> SlurmImport:
    source = topology.source
    blocks = topology.blocks
    usable, warnings, skipped = _usable_nodes(
        ((b.name, b.line, b.nodes) for b in blocks), source, "BlockName"
    )
    levels = _block_levels(topology.block_sizes, source) if topology.block_sizes else [1]
    builder = FabricBuilder()
    port = _Ports()
    # below[i]: the switch block i reaches the next level up through (its own, at first).
    below = {i: b.name for i, b in enumerate(blocks) if usable[b.name]}
    for index in below:
        name = blocks[index].name
        builder.add_switch(name, group=name)
        for node in usable[name]:
            _node_hca(builder, node, name, port(name))
    for depth, groups in enumerate(_aggregates(len(blocks), levels), 1):
        reached: dict[int, str] = {}
        for group in groups:
            members = [i for i in group if i in below]
            if not members:
                continue
            name = f"{blocks[group[0]].name}..{blocks[group[-1]].name}"
            switch = f"aggregate-{depth}/{name}"
            builder.add_switch(switch, group=name)
            for child in dict.fromkeys(below[i] for i in members):
                builder.add_link(switch, port(switch), child, port(child))
            reached.update(dict.fromkeys(members, switch))
        below.update(reached)
    return SlurmImport(builder.build(), tuple(warnings), tuple(skipped))


# -- writing ------------------------------------------------------------------------------------


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
