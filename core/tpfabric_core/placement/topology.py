"""The immutable cluster topology the placement engine plans on, built from node labels.

The scheduler side only sees node labels, so this is built from the canonical
``topology.tpfabric.io/`` labels (levels, ``rail-<i>``), once per change of the node set, and is
then shared read-only by every plan (kueue-style: immutable tree here, a cheap mutable
:class:`~tpfabric_core.placement.snapshot.CapacitySnapshot` beside it). The levels are data
(:class:`LevelSpec`, or :func:`parse_levels` of ``name=label-key,...`` text), not code: any other
label convention (GKE ``cloud.google.com/gce-topology-*``, topograph, AWS) maps onto them.

Nodes are stored in hierarchical order (top level value, ..., leaf value, node name), so every
domain is one contiguous index range ``[start, end)``: a domain's free capacity is the sum of one
list slice. Building costs one sort of the nodes (O(n log n)); lookups are O(1).

Domains are identified by their full label path: two leaves called ``l1`` under two spines are
two domains (``Domain.path``), never one.

**Nodes outside the labelled fabric.** A node that lacks the label of *any* configured level
(or has it empty) is not part of the fabric as far as placement knows: it sits in
``ClusterTopology.outside`` and, so that every depth still partitions the nodes, in synthetic
singleton domains flagged ``labelled=False`` at every level, sorted after every labelled node.
The search never picks an unlabelled domain: such nodes are usable only by a plan at the
``cluster`` level (the last resort a ``preferred`` policy climbs to), never by a leaf, spine or
block plan and never as a best fit. :meth:`ClusterTopology.span_depth` of any set holding one of
them is the cluster depth.

**Tensor-parallel groups and NVLink domains.** A level with ``keep_tp_groups`` (by default the
level named ``nvlink``, or any level written ``name!=label-key``) is a hard boundary for
tensor-parallel groups that span several workers: no plan ever splits such a group across two of
its domains (``ClusterTopology.tp_group_depth``).

This module must never hold per-plan state, read health or free capacity, or do any I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.input_limits import whole_number

__all__ = [
    "CLUSTER_LEVEL",
    "DEFAULT_LEVELS",
    "LEVEL_NAME_PATTERN",
    "NVLINK_LEVEL",
    "ClusterTopology",
    "Domain",
    "LevelSpec",
    "parse_levels",
]

CLUSTER_LEVEL = "cluster"
"""The implicit root above the top level: a plan there spreads over the whole cluster."""

_RAIL_PREFIX = labels.PREFIX + "rail-"
#: rail labels read per node (rail-0 .. rail-63): more rails than any node has HCAs
MAX_RAIL_LABELS = 64


LEVEL_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
"""What a level name looks like (the API's ``topologyPolicy.level`` has the same pattern)."""

NVLINK_LEVEL = "nvlink"
"""A level of this name keeps tensor-parallel groups whole by default (an NVLink domain)."""

_LEVEL_NAME = re.compile(LEVEL_NAME_PATTERN)
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One topology level: its name (``leaf``) and the node label key that names its domains.

    ``keep_tp_groups``: a tensor-parallel group spanning several workers must sit inside one
    domain of this level (an NVLink domain such as a GB200 NVL72 rack); plans that cannot do that
    do not exist.
    """

    name: str
    label_key: str
    keep_tp_groups: bool = False


DEFAULT_LEVELS: tuple[LevelSpec, ...] = (
    LevelSpec("block", labels.BLOCK),
    LevelSpec("spine", labels.SPINE),
    LevelSpec("leaf", labels.LEAF),
)
"""The canonical levels, top to bottom."""


def parse_levels(text: str) -> tuple[LevelSpec, ...]:
    """Return the level specs of ``name=label-key,...`` text, top level first.

    ``zone=cloud.google.com/gce-topology-block,leaf=cloud.google.com/gce-topology-subblock`` is a
    two-level cloud; the canonical keys plus ``nvlink=nvidia.com/gpu.clique`` add an NVLink
    level below the leaf. A level named ``nvlink``, or any level written ``name!=label-key``,
    keeps tensor-parallel groups whole (:attr:`LevelSpec.keep_tp_groups`). InputError (where
    ``--levels``) on empty entries, bad or duplicate names, the reserved name ``cluster``, and
    empty, invalid or duplicate label keys.
    """
    where = "--levels"
    example = "write name=label-key pairs, top level first, e.g. spine=example.com/spine,leaf=..."
    entries = [entry.strip() for entry in text.split(",")]
    if not text.strip():
        raise InputError(where, "no topology level given", example)
    specs: list[LevelSpec] = []
    for entry in entries:
        if not entry:
            raise InputError(where, f"empty entry in {text!r}", example)
        keep = "!=" in entry
        name, sep, key = entry.partition("!=" if keep else "=")
        name, key = name.strip(), key.strip()
        if not sep:
            raise InputError(where, f"{entry!r} has no '='", example)
        if not _LEVEL_NAME.match(name):
            raise InputError(
                where,
                f"level name {name!r} is not valid",
                "use lower-case letters, digits and '-', starting with a letter (at most 63)",
            )
        if name == CLUSTER_LEVEL:
            raise InputError(
                where,
                f"{CLUSTER_LEVEL!r} is the implicit root above the top level",
                "name the level something else",
            )
        if not key:
            raise InputError(where, f"level {name!r} has an empty label key", example)
        problem = _label_key_problem(key)
        if problem:
            raise InputError(where, f"label key {key!r} of level {name!r} {problem}")
        if any(spec.name == name for spec in specs):
            raise InputError(where, f"level {name!r} is given twice", "name every level once")
        if any(spec.label_key == key for spec in specs):
            raise InputError(
                where, f"label key {key!r} is given twice", "give every level its own label key"
            )
        specs.append(LevelSpec(name, key, keep_tp_groups=keep or name == NVLINK_LEVEL))
    return tuple(specs)


def _label_key_problem(key: str) -> str:
    """Return why ``key`` is not a Kubernetes label key ('' when it is one)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "has an invalid prefix (a DNS subdomain such as example.com is needed)"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            "has an invalid name part (at most 63 letters, digits, '-', '_' or '.', "
            "alphanumeric at both ends)"
        )
    return ""


@dataclass(frozen=True, slots=True)
class Domain:
    """A topology domain: the nodes ``[start, end)`` of the hierarchical node order.

    ``depth`` counts from the bottom: 0 is the lowest level (leaf), the top level is
    ``len(levels) - 1`` and the cluster root is ``len(levels)``. ``children`` index the domains
    one depth lower; ``path`` holds the label values from the top level down to this domain (its
    identity: names repeat under different parents). ``labelled`` is False for the synthetic
    singleton domains of a node outside the labelled fabric (named after the node): no plan below
    the cluster level ever uses one.
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
    labelled: bool = True

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
    - ``outside``: indices of the nodes outside the labelled fabric (a level label missing);
      ``outside_missing``: label key -> how many of them lack it.
    - ``tp_group_depth``: the lowest depth whose level keeps tensor-parallel groups whole
      (:attr:`LevelSpec.keep_tp_groups`), or ``None``.
    """

    __slots__ = (
        "domains",
        "index_of",
        "level_names",
        "levels",
        "name_order",
        "node_domain",
        "node_names",
        "outside",
        "outside_missing",
        "rail_anomaly",
        "rail_switches",
        "rails",
        "tp_group_depth",
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
        outside: frozenset[int] = frozenset(),
        outside_missing: Mapping[str, int] | None = None,
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
        self.outside = outside
        self.outside_missing: Mapping[str, int] = MappingProxyType(dict(outside_missing or {}))
        keeping = [depth for depth, spec in enumerate(reversed(levels)) if spec.keep_tp_groups]
        self.tp_group_depth: int | None = min(keeping) if keeping else None

    @classmethod
    def from_node_labels(
        cls,
        node_labels: Mapping[str, Mapping[str, str]],
        levels: Iterable[LevelSpec] = DEFAULT_LEVELS,
    ) -> ClusterTopology:
        """Return the topology of nodes given as ``{node name: its labels}``.

        A node without a (non-empty) label for some level is outside the labelled fabric: see
        the module docstring.
        """
        specs = tuple(levels)
        if not specs:
            raise ValueError("at least one topology level is needed")
        depth_count = len(specs)
        missing: Counter[str] = Counter()
        # (outside?, path values top-down, node name): outside nodes sort last, and their path
        # is their own name at every level, so each is a singleton domain at every depth.
        keyed: list[tuple[bool, tuple[str, ...], str]] = []
        for name, node in node_labels.items():
            values = tuple(node.get(spec.label_key) or "" for spec in specs)
            if all(values):
                keyed.append((False, values, name))
                continue
            missing.update(spec.label_key for spec, v in zip(specs, values, strict=True) if not v)
            keyed.append((True, (name,) * depth_count, name))
        keyed.sort()
        names = tuple(name for _, _, name in keyed)
        built: list[list[Domain]] = [[] for _ in range(depth_count + 1)]
        node_domain: list[list[int]] = [[0] * len(names) for _ in range(depth_count + 1)]
        # Walk top level first; a domain ends where its path prefix changes.
        bounds: list[list[tuple[tuple[bool, tuple[str, ...]], int, int]]] = [
            [] for _ in range(depth_count)
        ]
        for top_index in range(depth_count):
            depth = depth_count - 1 - top_index
            current: tuple[bool, tuple[str, ...]] | None = None
            for i, (out, path, _) in enumerate(keyed):
                key = (out, path[: top_index + 1])
                if key != current:
                    bounds[depth].append((key, i, i + 1))
                    current = key
                else:
                    key_, start, _end = bounds[depth][-1]
                    bounds[depth][-1] = (key_, start, i + 1)
                node_domain[depth][i] = len(bounds[depth]) - 1
        root_children = tuple(range(len(bounds[depth_count - 1])))
        for depth in range(depth_count):
            level = specs[depth_count - 1 - depth].name
            upper = node_domain[depth + 1] if depth + 1 < depth_count else None
            children_of: list[list[int]] = [[] for _ in bounds[depth]]
            if depth > 0:
                for child_index, (_, start, _end) in enumerate(bounds[depth - 1]):
                    children_of[node_domain[depth][start]].append(child_index)
            for index, ((out, prefix), start, end) in enumerate(bounds[depth]):
                built[depth].append(
                    Domain(
                        level=level,
                        depth=depth,
                        index=index,
                        name=prefix[-1],
                        path=prefix,
                        start=start,
                        end=end,
                        children=tuple(children_of[index]),
                        parent=upper[start] if upper is not None else 0,
                        labelled=not out,
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
        anomaly = _rail_anomalies(rails, [(start, end) for _, start, end in bounds[0]])
        return cls(
            levels=specs,
            node_names=names,
            domains=tuple(tuple(d) for d in built),
            node_domain=tuple(tuple(nd) for nd in node_domain),
            rail_switches=rails,
            rail_anomaly=anomaly,
            outside=frozenset(i for i, (out, _, _) in enumerate(keyed) if out),
            outside_missing=missing,
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
        """Return the first labelled domain called ``name`` at ``level``; KeyError if none.

        Names may repeat under different parents: use :meth:`domain_at` for an exact path.
        """
        for domain in self.domains[self.depth_of(level)]:
            if domain.name == name and domain.labelled:
                return domain
        raise KeyError(f"no {level} domain named {name!r}")

    def domain_at(self, level: str, path: Sequence[str]) -> Domain:
        """Return the labelled domain of ``level`` with label values ``path`` (top level down).

        KeyError if there is none.
        """
        wanted = tuple(path)
        for domain in self.domains[self.depth_of(level)]:
            if domain.path == wanted and domain.labelled:
                return domain
        raise KeyError(f"no {level} domain at {'/'.join(wanted) or CLUSTER_LEVEL}")

    def domain_labels(self, domain: Domain) -> tuple[tuple[str, str], ...]:
        """Return (label key, value) of every level from the top down to ``domain``'s level.

        Empty for the cluster root. Selecting on all of them picks exactly this domain.
        """
        if not domain.labelled:
            raise ValueError(f"{domain.level} {domain.name!r} is outside the labelled fabric")
        return tuple(
            (spec.label_key, value) for spec, value in zip(self.levels, domain.path, strict=False)
        )

    def outside_note(self) -> str:
        """Return e.g. ``3 node(s) outside the labelled fabric (no <key> label)``; '' if none."""
        if not self.outside:
            return ""
        order = {spec.label_key: k for k, spec in enumerate(self.levels)}
        keys = sorted(self.outside_missing, key=order.__getitem__)
        count = len(self.outside)
        if all(self.outside_missing[k] == count for k in keys):
            why = "no " + " or ".join(keys) + " label"
        else:
            why = ", ".join(f"{self.outside_missing[k]} without {k}" for k in keys)
        return f"{count} node(s) outside the labelled fabric ({why})"

    def common_depth(self, a: int, b: int) -> int:
        """Return the depth of the lowest domain holding both node indices ``a`` and ``b``."""
        for depth, per_node in enumerate(self.node_domain):
            if per_node[a] == per_node[b]:
                return depth
        return self.cluster_depth

    def span_depth(self, nodes: Iterable[int]) -> int:
        """Return the depth of the lowest labelled domain holding every node index in ``nodes``.

        A set holding a node outside the labelled fabric spans the cluster.
        """
        distinct = set(nodes)
        if self.outside and not self.outside.isdisjoint(distinct):
            return self.cluster_depth
        for depth, per_node in enumerate(self.node_domain):
            if len({per_node[i] for i in distinct}) <= 1:
                return depth
        return self.cluster_depth

    def __len__(self) -> int:
        """Return the number of nodes."""
        return len(self.node_names)


def _rail_values(node: Mapping[str, str]) -> tuple[str | None, ...]:
    """Return the rail-leaf switch per rail index found in ``node``'s labels."""
    found: dict[int, str] = {}
    for key, value in node.items():
        rail = whole_number(key[len(_RAIL_PREFIX) :]) if key.startswith(_RAIL_PREFIX) else None
        if rail is not None and rail < MAX_RAIL_LABELS:  # a label rail-99999999 makes no tuple
            found[rail] = value
    if not found:
        return ()
    return tuple(found.get(rail) for rail in range(max(found) + 1))


def _rail_anomalies(
    rails: tuple[tuple[str | None, ...], ...],
    leaves: list[tuple[int, int]],
) -> tuple[bool, ...]:
    """Return per node whether its rails differ from the majority of its leaf domain."""
    anomaly = [False] * len(rails)
    for start, end in leaves:
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
