"""The immutable cluster topology the placement engine plans on, built from node labels.

The scheduler side only sees node labels, so this is built from the canonical
``topology.tpfabric.io/`` labels (levels, ``rail-<i>``), once per change of the node set, and is
then shared read-only by every plan (kueue-style: immutable tree here, a cheap mutable
:class:`~tpfabric_core.placement.snapshot.CapacitySnapshot` beside it). The levels are data
(:class:`LevelSpec`), not code: any other label convention maps onto them.

Nodes are stored in hierarchical order (top level value, ..., leaf value, node name), so every
domain is one contiguous index range ``[start, end)``: a domain's free capacity is the sum of one
list slice. Building costs one sort of the nodes (O(n log n)); lookups are O(1).

This module must never hold per-plan state, read health or free capacity, or do any I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tpfabric_core import labels

__all__ = [
    "CLUSTER_LEVEL",
    "DEFAULT_LEVELS",
    "ClusterTopology",
    "Domain",
    "LevelSpec",
]

CLUSTER_LEVEL = "cluster"
"""The implicit root above the top level: a plan there spreads over the whole cluster."""

_RAIL_PREFIX = labels.PREFIX + "rail-"


@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One topology level: its name (``leaf``) and the node label key that names its domains."""

    name: str
    label_key: str


DEFAULT_LEVELS: tuple[LevelSpec, ...] = (
    LevelSpec("block", labels.BLOCK),
    LevelSpec("spine", labels.SPINE),
    LevelSpec("leaf", labels.LEAF),
)
"""The canonical levels, top to bottom."""


@dataclass(frozen=True, slots=True)
class Domain:
    """A topology domain: the nodes ``[start, end)`` of the hierarchical node order.

    ``depth`` counts from the bottom: 0 is the lowest level (leaf), the top level is
    ``len(levels) - 1`` and the cluster root is ``len(levels)``. ``children`` index the domains
    one depth lower; ``path`` holds the label values from the top level down to this domain.
    """

    level: str
    depth: int
    index: int
    name: str
    path: tuple[str, ...]
    start: int
    end: int
    children: tuple[int, ...]
    parent: int | None

    @property
    def size(self) -> int:
        """Return the number of nodes in the domain."""
        return self.end - self.start


class ClusterTopology:
    """Precomputed, read-only topology indexes; build one with :meth:`from_node_labels`.

    Attributes (all read-only):

    - ``levels``: the level specs, top to bottom; ``level_names``: bottom-up names ending with
      ``cluster`` (index = depth).
    - ``node_names``: nodes in hierarchical order; ``index_of``: name -> index.
    - ``domains[depth]``: the domains of that depth, in hierarchical order.
    - ``node_domain[depth][i]``: index of node ``i``'s domain at ``depth``.
    - ``rail_switches[i]``: the rail-leaf switch of every rail of node ``i`` (``None`` unlabelled).
    - ``rail_anomaly[i]``: node ``i``'s rails disagree with the majority of its leaf domain (a
      cabling anomaly: its rail traffic leaves the shared rail leaves).
    - ``name_order``: node indices sorted by node name (for topology-unaware baselines).
    """

    __slots__ = (
        "domains",
        "index_of",
        "level_names",
        "levels",
        "name_order",
        "node_domain",
        "node_names",
        "rail_anomaly",
        "rail_switches",
        "rails",
    )

    def __init__(
        self,
        *,
        levels: tuple[LevelSpec, ...],
        node_names: tuple[str, ...],
        domains: tuple[tuple[Domain, ...], ...],
        node_domain: tuple[tuple[int, ...], ...],
        rail_switches: tuple[tuple[str | None, ...], ...],
        rail_anomaly: tuple[bool, ...],
    ) -> None:
        self.levels = levels
        self.level_names: tuple[str, ...] = (
            *(spec.name for spec in reversed(levels)),
            CLUSTER_LEVEL,
        )
        self.node_names = node_names
        self.index_of: Mapping[str, int] = MappingProxyType(
            {name: i for i, name in enumerate(node_names)}
        )
        self.domains = domains
        self.node_domain = node_domain
        self.rail_switches = rail_switches
        self.rail_anomaly = rail_anomaly
        self.rails = max((len(r) for r in rail_switches), default=0)
        self.name_order: tuple[int, ...] = tuple(
            sorted(range(len(node_names)), key=node_names.__getitem__)
        )

    @classmethod
    def from_node_labels(
        cls,
        node_labels: Mapping[str, Mapping[str, str]],
        levels: Iterable[LevelSpec] = DEFAULT_LEVELS,
    ) -> ClusterTopology:
        """Return the topology of nodes given as ``{node name: its labels}``.

        A node without a label for some level gets a domain of its own at that level and every
        level below it, so it is never mistaken for a neighbour of other nodes.
        """
        specs = tuple(levels)
        if not specs:
            raise ValueError("at least one topology level is needed")
        keyed: list[tuple[tuple[str, ...], str]] = []
        for name, node in node_labels.items():
            values: list[str] = []
            for spec in specs:
                value = node.get(spec.label_key)
                if not value or (values and values[-1].startswith("\x00")):
                    value = "\x00" + name  # a singleton domain; sorts before labelled ones
                values.append(value)
            keyed.append((tuple(values), name))
        keyed.sort()
        names = tuple(name for _, name in keyed)
        depth_count = len(specs)
        built: list[list[Domain]] = [[] for _ in range(depth_count + 1)]
        node_domain: list[list[int]] = [[0] * len(names) for _ in range(depth_count + 1)]
        # Walk top level first; a domain ends where its path prefix changes.
        bounds: list[list[tuple[tuple[str, ...], int, int]]] = [[] for _ in range(depth_count)]
        for top_index in range(depth_count):
            depth = depth_count - 1 - top_index
            current: tuple[str, ...] | None = None
            for i, (path, _) in enumerate(keyed):
                prefix = path[: top_index + 1]
                if prefix != current:
                    bounds[depth].append((prefix, i, i + 1))
                    current = prefix
                else:
                    prefix_, start, _end = bounds[depth][-1]
                    bounds[depth][-1] = (prefix_, start, i + 1)
                node_domain[depth][i] = len(bounds[depth]) - 1
        root_children = tuple(range(len(bounds[depth_count - 1])))
        for depth in range(depth_count):
            level = specs[depth_count - 1 - depth].name
            upper = node_domain[depth + 1] if depth + 1 < depth_count else None
            children_of: list[list[int]] = [[] for _ in bounds[depth]]
            if depth > 0:
                for child_index, (_, start, _end) in enumerate(bounds[depth - 1]):
                    children_of[node_domain[depth][start]].append(child_index)
            for index, (prefix, start, end) in enumerate(bounds[depth]):
                built[depth].append(
                    Domain(
                        level=level,
                        depth=depth,
                        index=index,
                        name=_display(prefix[-1]),
                        path=tuple(_display(p) for p in prefix),
                        start=start,
                        end=end,
                        children=tuple(children_of[index]),
                        parent=upper[start] if upper is not None else 0,
                    )
                )
        built[depth_count].append(
            Domain(
                level=CLUSTER_LEVEL,
                depth=depth_count,
                index=0,
                name=CLUSTER_LEVEL,
                path=(),
                start=0,
                end=len(names),
                children=root_children,
                parent=None,
            )
        )
        rails = tuple(_rail_values(node_labels[name]) for name in names)
        anomaly = _rail_anomalies(rails, bounds[0])
        return cls(
            levels=specs,
            node_names=names,
            domains=tuple(tuple(d) for d in built),
            node_domain=tuple(tuple(nd) for nd in node_domain),
            rail_switches=rails,
            rail_anomaly=anomaly,
        )

    @property
    def cluster_depth(self) -> int:
        """Return the depth of the cluster root (the number of configured levels)."""
        return len(self.levels)

    def depth_of(self, level: str) -> int:
        """Return the depth (0 = bottom) of level name ``level``; ValueError if unknown."""
        try:
            return self.level_names.index(level)
        except ValueError:
            known = ", ".join(self.level_names)
            raise ValueError(f"unknown topology level {level!r}; known levels: {known}") from None

    def domain_of(self, node: str, level: str) -> Domain:
        """Return the domain of ``level`` that holds ``node``."""
        depth = self.depth_of(level)
        return self.domains[depth][self.node_domain[depth][self.index_of[node]]]

    def leaf_of(self, node: str) -> Domain:
        """Return the bottom-level (leaf) domain of ``node``."""
        return self.domains[0][self.node_domain[0][self.index_of[node]]]

    def domain_path(self, node: str) -> tuple[str, ...]:
        """Return the domain names of ``node`` from the top level down to its leaf."""
        return self.leaf_of(node).path

    def rail_leaves(self, node: str) -> tuple[str | None, ...]:
        """Return the rail-leaf switch of every rail of ``node`` (``None`` where unlabelled)."""
        return self.rail_switches[self.index_of[node]]

    def find_domain(self, level: str, name: str) -> Domain:
        """Return the domain called ``name`` at ``level``; KeyError if there is none."""
        for domain in self.domains[self.depth_of(level)]:
            if domain.name == name:
                return domain
        raise KeyError(f"no {level} domain named {name!r}")

    def common_depth(self, a: int, b: int) -> int:
        """Return the depth of the lowest domain holding both node indices ``a`` and ``b``."""
        for depth, per_node in enumerate(self.node_domain):
            if per_node[a] == per_node[b]:
                return depth
        return self.cluster_depth

    def span_depth(self, nodes: Iterable[int]) -> int:
        """Return the depth of the lowest domain holding every node index in ``nodes``."""
        distinct = set(nodes)
        for depth, per_node in enumerate(self.node_domain):
            if len({per_node[i] for i in distinct}) <= 1:
                return depth
        return self.cluster_depth

    def __len__(self) -> int:
        """Return the number of nodes."""
        return len(self.node_names)


def _display(value: str) -> str:
    """Return a path value for people: singleton markers become the node name."""
    return value.removeprefix("\x00")


def _rail_values(node: Mapping[str, str]) -> tuple[str | None, ...]:
    """Return the rail-leaf switch per rail index found in ``node``'s labels."""
    found: dict[int, str] = {}
    for key, value in node.items():
        if key.startswith(_RAIL_PREFIX) and key[len(_RAIL_PREFIX) :].isdigit():
            found[int(key[len(_RAIL_PREFIX) :])] = value
    if not found:
        return ()
    return tuple(found.get(rail) for rail in range(max(found) + 1))


def _rail_anomalies(
    rails: tuple[tuple[str | None, ...], ...],
    leaves: list[tuple[tuple[str, ...], int, int]],
) -> tuple[bool, ...]:
    """Return per node whether its rails differ from the majority of its leaf domain."""
    anomaly = [False] * len(rails)
    for _, start, end in leaves:
        if end - start < 2:
            continue
        members = rails[start:end]
        width = max(len(r) for r in members)
        for rail in range(width):
            counts = Counter(r[rail] if rail < len(r) else None for r in members)
            majority = min(counts.items(), key=lambda item: (-item[1], item[0] or ""))[0]
            for offset, node_rails in enumerate(members):
                value = node_rails[rail] if rail < len(node_rails) else None
                if value != majority:
                    anomaly[start + offset] = True
    return tuple(anomaly)
