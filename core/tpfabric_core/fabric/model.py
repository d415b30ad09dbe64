"""The immutable fabric model: switches, HCAs, nodes and links on a frozen networkx graph.

A :class:`Fabric` is built once per change of the fabric (by
:class:`~tpfabric_core.fabric.builder.FabricBuilder`, which every importer and the generator use)
and then shared read-only. Everything a query needs is precomputed at build time in
O(switches + HCAs + links): the leaf of each node's rail, the level of each switch, the
leaf/spine/block domain of each node and the members of each domain, so the queries are dictionary
look-ups. The one exception is :meth:`Fabric.hops` between two different leaves: a breadth-first
search over the switch graph, done on first use per source leaf and then remembered (O(1) after).

Levels come from the graph, never from switch names: leaves are the switches that compute HCAs
(of cluster nodes, or unassigned ones) plug into; every other switch's level is its distance in
switch hops from the nearest leaf (1: spine, 2: core, 3+: ``tier-N``). Two exceptions keep odd
fabrics from skewing the tiers:

- a switch with compute HCAs that is cabled to two or more such switches carrying more of them
  is a spine with a few hosts on it (storage, login), not a leaf: its HCAs are *outside the leaf
  domains* (:attr:`Fabric.off_leaf_hcas`), reported, and give their node no leaf or rail;
- a switch without hosts above the spines is a core only when it joins two spine domains or
  reaches every spine of its one domain; otherwise it is a leaf-level switch that happens to have
  no hosts (level 0), and it names no block.

Domains: a node's *leaf domain* is the set of leaves its HCAs plug into (in a rail-optimized unit
all nodes share the same set of rail leaves; in a classic fat tree it is the one leaf). The *spine
domain* is the set of connected components of the leaf+spine tiers that its leaves belong to, the
*block* the same over the tiers up to core. A node whose set is a strict subset of exactly one
other set (it lacks an HCA) joins that domain. Nodes with the same set share one id: a valid label
value, derived deterministically from switch ids, or from the ``group`` given to the switches
(which is how ``fabric_from_description`` keeps a description's names).

This module must never do I/O; it takes data and returns data.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

import networkx as nx

from tpfabric_core.labels import encode_label_value

__all__ = [
    "DOMAIN_LEVELS",
    "LANE_GBPS",
    "Fabric",
    "Hca",
    "HcaRole",
    "Health",
    "Link",
    "LinkKey",
    "Switch",
    "hca_id",
    "tier_name",
]

Health = Literal["ok", "degraded"]
LinkKey = tuple[tuple[str, int], tuple[str, int]]

#: Gb/s per lane of each InfiniBand speed (nominal data rate: 4xNDR is 400 Gb/s).
LANE_GBPS: Mapping[str, float] = MappingProxyType(
    {
        "SDR": 2.5,
        "DDR": 5.0,
        "QDR": 10.0,
        "FDR10": 10.0,
        "FDR": 14.0,
        "EDR": 25.0,
        "HDR": 50.0,
        "NDR": 100.0,
        "XDR": 200.0,
    }
)

#: The domain levels of a node, smallest first.
DOMAIN_LEVELS: tuple[str, ...] = ("leaf", "spine", "block")
_TIER_NAMES = ("leaf", "spine", "core")
_NODE_VERTEX = "node/"
_HASH_CHARS = 8


class HcaRole(StrEnum):
    """What an HCA belongs to: a cluster node, nobody known yet, or a management host."""

    NODE = "node"
    UNASSIGNED = "unassigned"
    MANAGEMENT = "management"


@dataclass(frozen=True, slots=True)
class Switch:
    """A switch; ``group`` names the domain it belongs to when the source knows one; ``name`` is
    what the switch calls itself (a managed switch's node description), unique in its fabric."""

    id: str
    description: str = ""
    group: str | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        """Return the switch as label values name it: its name, else its id (label-encoded)."""
        return encode_label_value(self.name or self.id)


@dataclass(frozen=True, slots=True)
class Hca:
    """A host channel adapter (one port cabled to a switch); ``rail`` is 0-based;
    ``port_guid`` identifies the cabled port (as sysfs shows it in the port's GID 0), when the
    source says (an ``ibnetdiscover`` dump does); ``order`` is its place in its node's own order
    of ports (device names), which differs from ``rail`` where the node's cables are out of
    that order (two rails swapped)."""

    guid: str
    description: str = ""
    node: str | None = None
    rail: int | None = None
    role: HcaRole = HcaRole.NODE
    port_guid: str | None = None
    order: int | None = None

    @property
    def id(self) -> str:
        """Return the HCA's vertex id in the graph, ``H-<guid>``."""
        return hca_id(self.guid)


@dataclass(frozen=True, slots=True)
class Link:
    """One cable between two ports; ``a``/``b`` are switch ids or HCA ids (``H-<guid>``)."""

    a: str
    a_port: int
    b: str
    b_port: int
    width: int = 4
    speed: str = "NDR"
    health: Health = "ok"

    @property
    def key(self) -> LinkKey:
        """Return the link's identity: its two (vertex, port) ends, in sorted order."""
        a, b = (self.a, self.a_port), (self.b, self.b_port)
        return (a, b) if a <= b else (b, a)

    @property
    def gbps(self) -> float:
        """Return the link's nominal rate in Gb/s (``width`` lanes of ``speed``)."""
        return self.width * LANE_GBPS.get(self.speed, 0.0)

    def other(self, end: str) -> str:
        """Return the end of the link that is not ``end``."""
        return self.b if self.a == end else self.a


def hca_id(guid: str) -> str:
    """Return the graph vertex id of the HCA with ``guid``."""
    return f"H-{guid}"


def tier_name(level: int) -> str:
    """Return the name of switch level ``level``: leaf, spine, core, then ``tier-N``."""
    return _TIER_NAMES[level] if level < len(_TIER_NAMES) else f"tier-{level}"


def _domain_id(
    members: Iterable[str],
    groups: Mapping[str, str | None],
    names: Mapping[str, str] | None = None,
) -> str:
    """Return the id of a domain made of ``members``: their common group, the one member (by its
    name in ``names``, else its id), or a readable prefix plus a hash of all of them; always a
    valid label value."""
    ids = sorted(set(members))
    common = {groups.get(m) for m in ids}
    if len(common) == 1 and (group := common.pop()) is not None:
        return encode_label_value(group)
    if len(ids) == 1:
        return encode_label_value((names or {}).get(ids[0]) or ids[0])
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:_HASH_CHARS]
    return encode_label_value(f"{ids[0]}-{digest}")


def _absorb_subsets(keys: set[frozenset[str]]) -> dict[frozenset[str], frozenset[str]]:
    """Return each set mapped to the one maximal set that contains it (itself when there are none
    or several): a node that lacks an HCA stays in its unit's domain. Cost: O(sets x leaves),
    and there are about as many distinct sets as units."""
    by_member: dict[str, list[frozenset[str]]] = defaultdict(list)
    home: dict[frozenset[str], frozenset[str]] = {}
    for key in sorted(keys, key=lambda k: (-len(k), sorted(k))):
        first = min(key) if key else ""
        supersets = [k for k in by_member.get(first, ()) if key < k]
        if len(supersets) == 1:
            home[key] = supersets[0]
            continue
        home[key] = key
        for member in key:
            by_member[member].append(key)
    return home


def _leaf_switches(
    compute_ports: Mapping[str, int], adj: Mapping[str, frozenset[str]]
) -> frozenset[str]:
    """Return the leaves: the switches with compute HCAs, less those cabled to two or more switches
    that carry more compute HCAs than they do (a spine with a storage or login host on it is not
    where the compute hosts are). O(switch cables)."""
    return frozenset(
        switch
        for switch, count in compute_ports.items()
        if sum(1 for peer in adj.get(switch, ()) if compute_ports.get(peer, 0) > count) < 2
    )


def _distances_from(sources: Iterable[str], adj: Mapping[str, frozenset[str]]) -> dict[str, int]:
    """Return the switch-hop distance of every switch reachable from ``sources`` (multi-source
    breadth-first search)."""
    level = dict.fromkeys(sources, 0)
    queue = deque(sorted(level))
    while queue:
        switch = queue.popleft()
        for peer in adj.get(switch, ()):
            if peer not in level:
                level[peer] = level[switch] + 1
                queue.append(peer)
    return level


def _spine_domains(level: Mapping[str, int], adj: Mapping[str, frozenset[str]]) -> dict[str, str]:
    """Return the connected component (a representative switch) of every switch of level <= 1."""
    domain: dict[str, str] = {}
    for start in sorted(s for s, lv in level.items() if lv <= 1):
        if start in domain:
            continue
        domain[start] = start
        queue = deque([start])
        while queue:
            switch = queue.popleft()
            for peer in adj.get(switch, ()):
                if peer not in domain and level.get(peer, 2) <= 1:
                    domain[peer] = start
                    queue.append(peer)
    return domain


def _switch_levels(
    leaves: frozenset[str], adj: Mapping[str, frozenset[str]], hosted: set[str]
) -> dict[str, int]:
    """Return the level of every switch a leaf reaches: its distance from the nearest leaf, except
    that a switch without hosts two hops up is a core only when it joins two spine domains or
    reaches every spine of its one domain. Otherwise it is cabled like a leaf (to some of the
    spines) and is one whose hosts are gone: level 0, and the levels are counted again from it.
    Each round adds a leaf, so this ends; real fabrics take one or two rounds."""
    sources = set(leaves)
    while True:
        level = _distances_from(sources, adj)
        domain = _spine_domains(level, adj)
        spines: dict[str, set[str]] = defaultdict(set)
        for switch, root in domain.items():
            if level[switch] == 1:
                spines[root].add(switch)
        leaf_like = set()
        for switch, lv in level.items():
            if lv != 2 or switch in hosted:
                continue
            below = {peer for peer in adj.get(switch, ()) if level.get(peer) == 1}
            roots = {domain[peer] for peer in below}
            if len(roots) == 1 and below != spines[roots.pop()]:
                leaf_like.add(switch)
        if not leaf_like:
            return level
        sources |= leaf_like


class Fabric:
    """An immutable fabric; build it with a ``FabricBuilder``. See the module docstring."""

    __slots__ = (
        "_degraded_leaves",
        "_distances",
        "_domain_members",
        "_graph",
        "_hcas",
        "_incident",
        "_leaf_nodes",
        "_level",
        "_links",
        "_node_domains",
        "_node_hcas",
        "_node_leaves",
        "_node_rails",
        "_off_leaf_hcas",
        "_switch_adj",
        "_switches",
    )

    def __init__(
        self, switches: Iterable[Switch], hcas: Iterable[Hca], links: Iterable[Link]
    ) -> None:
        self._switches = MappingProxyType({s.id: s for s in switches})
        self._hcas = MappingProxyType({h.id: h for h in hcas})
        self._links = tuple(sorted(links, key=lambda link: link.key))
        self._distances: dict[str, dict[str, int]] = {}
        self._index()
        self._graph = self._build_graph()

    # -- build-time precomputation -------------------------------------------------------------

    def _index(self) -> None:
        incident: dict[str, list[Link]] = defaultdict(list)
        adj: dict[str, set[str]] = defaultdict(set)
        hca_switch: dict[str, str] = {}
        for link in self._links:
            incident[link.a].append(link)
            incident[link.b].append(link)
            if link.a in self._switches and link.b in self._switches and link.a != link.b:
                adj[link.a].add(link.b)
                adj[link.b].add(link.a)
            for end in (link.a, link.b):
                if end in self._hcas and link.other(end) in self._switches:
                    hca_switch.setdefault(end, link.other(end))
        self._incident = {k: tuple(v) for k, v in incident.items()}
        self._switch_adj = {k: frozenset(v) for k, v in adj.items()}

        compute_ports: Counter[str] = Counter(
            switch
            for hca_vertex, switch in hca_switch.items()
            if self._hcas[hca_vertex].role is not HcaRole.MANAGEMENT
        )
        leaves = _leaf_switches(compute_ports, self._switch_adj)

        node_hcas: dict[str, list[Hca]] = defaultdict(list)
        node_leaves: dict[str, set[str]] = defaultdict(set)
        node_rails: dict[str, dict[int, str]] = defaultdict(dict)
        leaf_nodes: dict[str, set[str]] = defaultdict(set)
        off_leaf: list[Hca] = []
        for hca in sorted(self._hcas.values(), key=lambda h: h.guid):
            switch = hca_switch.get(hca.id)
            if hca.node is not None:
                node_hcas[hca.node].append(hca)
            if switch is None or hca.role is HcaRole.MANAGEMENT:
                continue
            if switch not in leaves:
                off_leaf.append(hca)
                continue
            if hca.node is not None and hca.role is HcaRole.NODE:
                node_leaves[hca.node].add(switch)
                leaf_nodes[switch].add(hca.node)
                if hca.rail is not None:
                    node_rails[hca.node].setdefault(hca.rail, switch)
        self._off_leaf_hcas = tuple(off_leaf)
        self._node_hcas = {n: tuple(h) for n, h in node_hcas.items() if n in node_leaves}
        self._node_leaves = {n: frozenset(v) for n, v in node_leaves.items()}
        self._node_rails = {
            n: MappingProxyType(dict(sorted(r.items()))) for n, r in node_rails.items()
        }
        self._leaf_nodes = {k: frozenset(v) for k, v in leaf_nodes.items()}
        level = _switch_levels(leaves, self._switch_adj, set(compute_ports))
        self._level = level
        self._index_domains()
        self._degraded_leaves = frozenset(
            end
            for link in self._links
            if link.health == "degraded"
            for end in (link.a, link.b)
            if self._level.get(end) == 0
        )

    def _components(self, top: int) -> dict[str, str]:
        """Return the component id of every switch of level <= ``top`` (union-find)."""
        parent = {s: s for s, lv in self._level.items() if lv <= top}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for switch in parent:
            for peer in self._switch_adj.get(switch, ()):
                if peer in parent:
                    ra, rb = find(switch), find(peer)
                    if ra != rb:
                        parent[max(ra, rb)] = min(ra, rb)
        members: dict[str, list[str]] = defaultdict(list)
        for switch in parent:
            members[find(switch)].append(switch)
        groups = {s.id: s.group for s in self._switches.values()}
        names = {s.id: s.name for s in self._switches.values() if s.name}
        ids: dict[str, str] = {}
        for group in members.values():
            highest = max(self._level[s] for s in group)
            name = _domain_id((s for s in group if self._level[s] == highest), groups, names)
            ids.update(dict.fromkeys(group, name))
        return ids

    def _index_domains(self) -> None:
        groups = {s.id: s.group for s in self._switches.values()}
        switch_names = {s.id: s.name for s in self._switches.values() if s.name}
        per_level: list[Mapping[str, str]] = [
            {
                leaf: _domain_id([leaf], groups, switch_names)
                for leaf, lv in self._level.items()
                if lv == 0
            },
            self._components(1),
            self._components(2),
        ]
        node_domains: dict[str, dict[str, str]] = {}
        members: dict[str, dict[str, set[str]]] = {}
        for level_name, component in zip(DOMAIN_LEVELS, per_level, strict=True):
            by_node: dict[str, str] = {}
            by_domain: dict[str, set[str]] = defaultdict(set)
            parts = {
                node: frozenset(component[leaf] for leaf in node_leaves)
                for node, node_leaves in self._node_leaves.items()
            }
            home = _absorb_subsets(set(parts.values()))
            names = {key: _domain_id(key, {}) for key in set(home.values())}
            for node, key in parts.items():
                by_node[node] = names[home[key]]
                by_domain[by_node[node]].add(node)
            node_domains[level_name] = by_node
            members[level_name] = by_domain
        self._node_domains = node_domains
        self._domain_members = {
            lv: {d: frozenset(n) for d, n in m.items()} for lv, m in members.items()
        }

    def _build_graph(self) -> Any:
        graph = nx.MultiGraph()
        for switch in self._switches.values():
            graph.add_node(switch.id, kind="switch", level=self._level.get(switch.id))
        for hca in self._hcas.values():
            graph.add_node(hca.id, kind="hca", role=hca.role.value, rail=hca.rail)
            if hca.node is not None and hca.role is HcaRole.NODE:
                graph.add_node(_NODE_VERTEX + hca.node, kind="node")
                graph.add_edge(_NODE_VERTEX + hca.node, hca.id, kind="host")
        for link in self._links:
            graph.add_edge(link.a, link.b, key=link.key, kind="cable", link=link)
        return nx.freeze(graph)

    # -- contents --------------------------------------------------------------------------------

    @property
    def graph(self) -> Any:
        """Return the frozen networkx MultiGraph (vertices: switch ids, ``H-<guid>``, and
        ``node/<name>``; cable edges carry their :class:`Link` as ``link``)."""
        return self._graph

    @property
    def switches(self) -> Mapping[str, Switch]:
        """Return the switches by id."""
        return self._switches

    @property
    def hcas(self) -> Mapping[str, Hca]:
        """Return the HCAs by vertex id (``H-<guid>``)."""
        return self._hcas

    @property
    def links(self) -> tuple[Link, ...]:
        """Return every cable, sorted by :attr:`Link.key`."""
        return self._links

    @property
    def nodes(self) -> tuple[str, ...]:
        """Return the cluster nodes (those with at least one cabled HCA), sorted."""
        return tuple(sorted(self._node_leaves))

    @property
    def rails(self) -> tuple[int, ...]:
        """Return the rail indices present on any node, sorted."""
        return tuple(sorted({r for rails in self._node_rails.values() for r in rails}))

    @property
    def off_leaf_hcas(self) -> tuple[Hca, ...]:
        """Return the compute HCAs (of nodes, or unassigned) cabled to a switch that is not a leaf,
        such as a storage host on a spine: outside the leaf domains, they give no leaf or rail."""
        return self._off_leaf_hcas

    def level_of(self, switch: str) -> int | None:
        """Return the level of ``switch`` (0 leaf, 1 spine, ...), None when no leaf reaches it."""
        return self._level.get(switch)

    def switches_at(self, level: int) -> tuple[str, ...]:
        """Return the ids of the switches at ``level``, sorted."""
        return tuple(sorted(s for s, lv in self._level.items() if lv == level))

    @property
    def leaves(self) -> tuple[str, ...]:
        """Return the leaf switch ids, sorted."""
        return self.switches_at(0)

    # -- node queries ----------------------------------------------------------------------------

    def hcas_of(self, node: str) -> tuple[Hca, ...]:
        """Return the HCAs of ``node`` (KeyError for an unknown node)."""
        return self._node_hcas[node]

    def rail_leaves(self, node: str) -> Mapping[int, str]:
        """Return ``{rail: leaf switch}`` for ``node`` (KeyError for an unknown node)."""
        if node not in self._node_leaves:
            raise KeyError(node)
        return self._node_rails.get(node, MappingProxyType({}))

    def switch_label(self, switch: str) -> str:
        """Return the label value naming ``switch``: its name when it has one, else its id."""
        known = self._switches.get(switch)
        return known.label if known is not None else encode_label_value(switch)

    def leaf_of(self, node: str, rail: int) -> str | None:
        """Return the leaf that rail ``rail`` of ``node`` plugs into, None if it has no such HCA."""
        return self.rail_leaves(node).get(rail)

    def leaves_of(self, node: str) -> frozenset[str]:
        """Return every leaf the HCAs of ``node`` plug into (KeyError for an unknown node)."""
        return self._node_leaves[node]

    def nodes_on(self, switch: str) -> frozenset[str]:
        """Return the nodes with an HCA on leaf ``switch`` (empty for any other switch)."""
        return self._leaf_nodes.get(switch, frozenset())

    def domain_of(self, node: str, level: str) -> str:
        """Return the id of the ``level`` domain (leaf, spine or block) of ``node``."""
        return self._node_domains[level][node]

    def leaf_domain_of(self, node: str) -> str:
        """Return the id of the leaf domain of ``node`` (the set of leaves it plugs into)."""
        return self._node_domains["leaf"][node]

    def spine_domain_of(self, node: str) -> str:
        """Return the id of the spine domain of ``node``."""
        return self._node_domains["spine"][node]

    def block_of(self, node: str) -> str:
        """Return the id of the block (core-tier domain) of ``node``."""
        return self._node_domains["block"][node]

    def domains(self, level: str) -> Mapping[str, frozenset[str]]:
        """Return ``{domain id: its nodes}`` for ``level`` (leaf, spine or block)."""
        return MappingProxyType(self._domain_members[level])

    def smallest_common_domain(self, nodes: Iterable[str]) -> tuple[str, str] | None:
        """Return ``(level, id)`` of the smallest domain holding all ``nodes``, else None."""
        wanted = list(nodes)
        if not wanted:
            return None
        for level in DOMAIN_LEVELS:
            by_node = self._node_domains[level]
            ids = {by_node[n] for n in wanted}
            if len(ids) == 1:
                return level, ids.pop()
        return None

    def hops(self, a: str, b: str, rail: int) -> int | None:
        """Return the switches crossed between ``a`` and ``b`` on ``rail`` (1: same leaf), None if
        either lacks that rail or no path joins them."""
        source, target = self.leaf_of(a, rail), self.leaf_of(b, rail)
        if source is None or target is None:
            return None
        if source == target:
            return 1
        distances = self._distances.get(source)
        if distances is None:
            distances = {source: 0}
            queue = deque([source])
            while queue:
                switch = queue.popleft()
                for peer in self._switch_adj.get(switch, ()):
                    if peer not in distances:
                        distances[peer] = distances[switch] + 1
                        queue.append(peer)
            self._distances[source] = distances
        distance = distances.get(target)
        return None if distance is None else distance + 1

    # -- links, bandwidth, health ------------------------------------------------------------------

    def links_of(self, vertex: str) -> tuple[Link, ...]:
        """Return the cables of a switch or HCA (``H-<guid>``)."""
        return self._incident.get(vertex, ())

    def uplinks(self, switch: str) -> tuple[Link, ...]:
        """Return the cables from ``switch`` to switches of a higher level."""
        level = self._level.get(switch)
        if level is None:
            return ()
        return tuple(
            link
            for link in self.links_of(switch)
            if (self._level.get(link.other(switch), -1)) > level
        )

    def downlinks(self, switch: str) -> tuple[Link, ...]:
        """Return the cables from ``switch`` to compute HCAs (management hosts left out)."""
        return tuple(
            link
            for link in self.links_of(switch)
            if (hca := self._hcas.get(link.other(switch))) is not None
            and hca.role is not HcaRole.MANAGEMENT
        )

    def oversubscription(self, leaf: str) -> float | None:
        """Return down-port over up-port bandwidth of ``leaf`` (1.0: non-blocking), None without
        uplinks."""
        up = sum(link.gbps for link in self.uplinks(leaf))
        if up == 0:
            return None
        return sum(link.gbps for link in self.downlinks(leaf)) / up

    @property
    def degraded_links(self) -> tuple[Link, ...]:
        """Return the cables marked degraded."""
        return tuple(link for link in self._links if link.health == "degraded")

    @property
    def degraded_leaves(self) -> frozenset[str]:
        """Return the leaves with at least one degraded cable."""
        return self._degraded_leaves

    def node_health(self, node: str) -> Health:
        """Return ``degraded`` if any leaf of ``node`` has a degraded cable, else ``ok``."""
        return "degraded" if self._node_leaves[node] & self._degraded_leaves else "ok"

    def with_link_health(self, degraded: Iterable[LinkKey]) -> Fabric:
        """Return a copy of this fabric whose links in ``degraded`` are degraded, all others ok."""
        marked = set(degraded)
        links = [
            replace(link, health="degraded" if link.key in marked else "ok") for link in self._links
        ]
        return Fabric(self._switches.values(), self._hcas.values(), links)
