"""The domain tree ``topology show`` prints and draws: blocks -> spines -> leaf domains -> nodes.

Pure arrangement of a :class:`~tpfabric_cli.topology.sources.Discovery` for display (ordering,
each rail's majority leaf switch, who departs from it, what is degraded); it never reads or prints.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from tpfabric_cli.topology.node_health import DEGRADED, DOWN, NodeHealth
from tpfabric_cli.topology.sources import Discovery
from tpfabric_core import labels
from tpfabric_core.fabric.model import Fabric
from tpfabric_core.hostlist import compress_hostlist

__all__ = [
    "BlockView",
    "DomainTree",
    "IgnoredGroup",
    "LeafDomainView",
    "SpineView",
    "domain_tree",
    "ignored_groups",
]

_RAIL_KEY = re.compile(rf"^{re.escape(labels.PREFIX)}rail-(\d+)$")
_UNKNOWN = "(none)"


@dataclass(frozen=True, slots=True)
class LeafDomainView:
    """A leaf domain: its nodes, the leaf switch of each rail, and what is off."""

    name: str
    nodes: tuple[str, ...]
    rails: tuple[tuple[int, str], ...]
    """(rail, leaf switch most of the domain's nodes use on it)."""
    odd_rails: tuple[tuple[str, int, str], ...] = ()
    """(node, rail, leaf switch) where a node departs from its domain."""
    degraded_nodes: tuple[str, ...] = ()
    """Nodes that are degraded or down (by their health label or the cluster's condition)."""
    degraded_switches: frozenset[str] = frozenset()
    down_nodes: tuple[str, ...] = ()
    """The subset of ``degraded_nodes`` that is down."""
    health_notes: tuple[tuple[str, str], ...] = ()
    """(hostlist, what is wrong) for the unhealthy nodes the cluster explains, grouped."""


@dataclass(frozen=True, slots=True)
class SpineView:
    """A spine domain, its leaf domains and, when the cabling is known, its switch count."""

    name: str
    leaves: tuple[LeafDomainView, ...]
    switches: int | None = None

    @property
    def node_count(self) -> int:
        """Return the number of nodes under this spine domain."""
        return sum(len(leaf.nodes) for leaf in self.leaves)


@dataclass(frozen=True, slots=True)
class BlockView:
    """A block (core-tier domain) and its spine domains."""

    name: str
    spines: tuple[SpineView, ...]

    @property
    def node_count(self) -> int:
        """Return the number of nodes in this block."""
        return sum(spine.node_count for spine in self.spines)


@dataclass(frozen=True, slots=True)
class DomainTree:
    """Blocks -> spine domains -> leaf domains -> nodes, plus what the source reported."""

    title: str
    blocks: tuple[BlockView, ...]
    anomalies: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def leaf_domains(self) -> tuple[LeafDomainView, ...]:
        """Return every leaf domain, in display order."""
        return tuple(leaf for b in self.blocks for s in b.spines for leaf in s.leaves)

    @property
    def flat_blocks(self) -> bool:
        """Return whether every block is a single spine domain of the same name (no core tier)."""
        return all(len(b.spines) == 1 and b.spines[0].name == b.name for b in self.blocks)


@dataclass(frozen=True, slots=True)
class IgnoredGroup:
    """The hosts kept out of the node set for one reason, as one hostlist."""

    hosts: str
    reason: str
    hcas: int


def ignored_groups(discovery: Discovery) -> tuple[IgnoredGroup, ...]:
    """Return the ignored hosts grouped by reason, each group's names compressed into a hostlist
    (a dump can ignore hundreds of hosts), ordered by the groups' first host."""
    hosts: dict[str, list[str]] = defaultdict(list)
    hcas: Counter[str] = Counter()
    for host in discovery.ignored_hosts:
        hosts[host.reason].append(host.host)
        hcas[host.reason] += len(host.guids)
    groups = [IgnoredGroup(compress_hostlist(names), r, hcas[r]) for r, names in hosts.items()]
    return tuple(sorted(groups, key=lambda g: (min(hosts[g.reason]), g.reason)))


def _rails_of(node_labels: Mapping[str, str]) -> dict[int, str]:
    """Return ``{rail: leaf switch}`` from a node's ``rail-<i>`` labels."""
    return {
        int(match[1]): value
        for key, value in node_labels.items()
        if (match := _RAIL_KEY.match(key)) is not None
    }


def _leaf_view(
    name: str,
    nodes: list[str],
    all_labels: Mapping[str, Mapping[str, str]],
    degraded: frozenset[str],
    health: Mapping[str, NodeHealth],
) -> LeafDomainView:
    """Return the view of one leaf domain: each rail's majority leaf, who departs from it, and
    which nodes and rail switches (of ``degraded``) are unhealthy."""
    per_rail: dict[int, Counter[str]] = defaultdict(Counter)
    node_rails = {node: _rails_of(all_labels[node]) for node in nodes}
    for rails in node_rails.values():
        for rail, switch in rails.items():
            per_rail[rail][switch] += 1
    main = {rail: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for rail, c in per_rail.items()}
    odd = tuple(
        (node, rail, switch)
        for node in nodes
        for rail, switch in sorted(node_rails[node].items())
        if switch != main[rail]
    )
    used = set(main.values()) | {switch for _, _, switch in odd}
    state = {node: _health_state(all_labels[node], health.get(node)) for node in nodes}
    unhealthy = {node for node, s in state.items() if s is not None}
    described: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        if node in health:
            described[health[node].describe()].append(node)
    return LeafDomainView(
        name=name,
        nodes=tuple(nodes),
        rails=tuple(sorted(main.items())),
        odd_rails=odd,
        degraded_nodes=tuple(n for n in nodes if n in unhealthy),
        degraded_switches=frozenset(used & degraded),
        down_nodes=tuple(n for n in nodes if state[n] == DOWN),
        health_notes=tuple((compress_hostlist(on), what) for what, on in described.items()),
    )


def _health_state(node_labels: Mapping[str, str], health: NodeHealth | None) -> str | None:
    """Return ``degraded`` or ``down`` for an unhealthy node, else ``None``."""
    if health is not None:
        return health.state
    value = node_labels.get(labels.HEALTH)
    return value if value in (DEGRADED, DOWN) else None


def _spine_switch_counts(fabric: Fabric) -> dict[str, int]:
    """Return the number of spine switches above each spine domain's leaves."""
    spines: dict[str, set[str]] = defaultdict(set)
    seen: set[str] = set()
    for node in fabric.nodes:
        domain = fabric.spine_domain_of(node)
        for leaf in fabric.leaves_of(node):
            if leaf in seen:
                continue
            seen.add(leaf)
            spines[domain].update(link.other(leaf) for link in fabric.uplinks(leaf))
    return {domain: len(switches) for domain, switches in spines.items()}


def domain_tree(discovery: Discovery) -> DomainTree:
    """Return the blocks -> spines -> leaf domains -> nodes tree of a discovery, ordered by the
    first node name of each domain (ids are often hashes; host names read better)."""
    all_labels = discovery.labels
    grouped: dict[str, dict[str, dict[str, list[str]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for node in sorted(all_labels):
        lbl = all_labels[node]
        block = lbl.get(labels.BLOCK, _UNKNOWN)
        spine = lbl.get(labels.SPINE, _UNKNOWN)
        grouped[block][spine][lbl.get(labels.LEAF, _UNKNOWN)].append(node)
    fabric = discovery.fabric
    # Switches only where the source knows them: its cabling's degraded leaves, or rail switches
    # several nodes' sick rails point at. A whole leaf domain of degraded nodes does not say
    # which of its rail switches is at fault.
    sick = fabric.degraded_leaves if fabric is not None else frozenset()
    degraded = discovery.suspect_switches | frozenset(
        fabric.switch_label(leaf) for leaf in sick if fabric is not None
    )
    switch_counts = _spine_switch_counts(fabric) if fabric is not None else {}
    blocks = []
    for block, spines in grouped.items():
        spine_views = []
        for spine, leaves in spines.items():
            leaf_views = sorted(
                (
                    _leaf_view(name, nodes, all_labels, degraded, discovery.health)
                    for name, nodes in leaves.items()
                ),
                key=lambda view: view.nodes[0],
            )
            spine_views.append(SpineView(spine, tuple(leaf_views), switch_counts.get(spine)))
        spine_views.sort(key=lambda view: view.leaves[0].nodes[0])
        blocks.append(BlockView(block, tuple(spine_views)))
    blocks.sort(key=lambda view: view.spines[0].leaves[0].nodes[0])

    leaves_count = sum(len(s.leaves) for b in blocks for s in b.spines)
    rails = sorted({r for lbl in all_labels.values() for r in _rails_of(lbl)})
    facts = [f"{len(all_labels)} nodes", f"{leaves_count} leaf domains"]
    if rails:
        facts.append(f"rails {compress_hostlist([str(r) for r in rails]).strip('[]')}")
    if unhealthy := sum(len(leaf.degraded_nodes) for b in blocks for s in b.spines
                        for leaf in s.leaves):  # fmt: skip
        facts.append(f"{unhealthy} unhealthy")
    if fabric is not None:
        facts.append("rail-optimized" if any(len(fabric.leaves_of(n)) > 1 for n in fabric.nodes)
                     else "one leaf per node")  # fmt: skip
    notes = list(discovery.warnings)
    if discovery.unassigned_hcas:
        switches = {h.switch for h in discovery.unassigned_hcas if h.switch}
        notes.append(
            f"{len(discovery.unassigned_hcas)} unassigned HCAs (no host name) on "
            f"{len(switches)} switches: add them with --node-map"
        )
    notes.extend(
        f"ignored {g.hosts} ({g.reason}, {g.hcas} HCAs)" for g in ignored_groups(discovery)
    )
    return DomainTree(
        title=f"{discovery.title}: {', '.join(facts)}",
        blocks=tuple(blocks),
        anomalies=tuple(a.detail for a in discovery.anomalies),
        notes=tuple(notes),
    )
