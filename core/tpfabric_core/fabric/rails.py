"""Rail detection and cabling anomalies of a fabric.

Rail-optimized wiring (DGX SuperPOD) puts HCA *i* of every node of a unit on that unit's rail-*i*
leaf. :func:`analyze_rails` finds out whether a fabric is wired that way, which rail each leaf and
each HCA (unassigned ones included) serves, and reports every departure from the pattern as a
:class:`CablingAnomaly`. Nothing is repaired or hidden: the model keeps the cabling as found, and
the anomalies say where it differs from what the rest of the unit shows.

Compute HCAs cabled to a switch that is not a leaf (a storage or login host on a spine) are
``outside-leaf-domains`` anomalies: they give their node no leaf or rail label.

How "the rest of the unit" is decided: each leaf's *home* is the leaf domain most of its nodes
belong to; a node's home is the home of most of its leaves. A minority never outvotes a unit, so
one miscabled HCA is reported instead of redefining the unit. All of it is O(HCAs).

Pure: takes a :class:`~tpfabric_core.fabric.model.Fabric`, returns data.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, TypeVar

from tpfabric_core.fabric.model import Fabric, HcaRole, tier_name

__all__ = ["AnomalyKind", "CablingAnomaly", "RailReport", "analyze_rails"]

_K = TypeVar("_K")
AnomalyKind = Literal[
    "foreign-leaf", "mixed-rail-leaf", "missing-hca", "duplicate-rail", "outside-leaf-domains"
]


@dataclass(frozen=True, slots=True)
class CablingAnomaly:
    """One departure from the unit's wiring; ``switch`` is where it shows."""

    kind: AnomalyKind
    node: str | None
    rail: int | None
    switch: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class RailReport:
    """Rail wiring of a fabric: per-leaf and per-HCA rails, and the anomalies found."""

    rail_optimized: bool
    leaf_rail: Mapping[str, int]
    hca_rail: Mapping[str, int]
    anomalies: tuple[CablingAnomaly, ...]


def _majority(counts: Counter[_K]) -> _K | None:
    """Return the key holding more than half of ``counts``, None when there is none."""
    if not counts:
        return None
    key, count = counts.most_common(1)[0]
    return key if 2 * count > counts.total() else None


def analyze_rails(fabric: Fabric) -> RailReport:
    """Return the rail wiring of ``fabric`` and its cabling anomalies, sorted by node and rail."""
    leaf_rails: dict[str, Counter[int]] = defaultdict(Counter)
    for node in fabric.nodes:
        for rail, leaf in fabric.rail_leaves(node).items():
            leaf_rails[leaf][rail] += 1
    leaf_rail = {leaf: r for leaf, c in leaf_rails.items() if (r := _majority(c)) is not None}
    spanning = sum(1 for node in fabric.nodes if len(fabric.leaves_of(node)) > 1)
    rail_optimized = 2 * spanning > len(fabric.nodes)

    anomalies: list[CablingAnomaly] = []
    hca_rail: dict[str, int] = {}
    for hca in fabric.hcas.values():
        links = fabric.links_of(hca.id)
        switch = links[0].other(hca.id) if links else None
        if hca.rail is not None and hca.role is HcaRole.NODE:
            hca_rail[hca.guid] = hca.rail
        elif switch in leaf_rail and hca.role is not HcaRole.MANAGEMENT and rail_optimized:
            hca_rail[hca.guid] = leaf_rail[switch]
    if rail_optimized:
        anomalies.extend(_mixed_rail_leaves(fabric, leaf_rails, leaf_rail))
        anomalies.extend(_out_of_order(fabric))
    anomalies.extend(_duplicate_rails(fabric))
    anomalies.extend(_unit_anomalies(fabric, leaf_rail, rail_optimized))
    anomalies.extend(_outside_leaf_domains(fabric))
    anomalies.sort(key=lambda a: (a.node or "", a.rail if a.rail is not None else -1, a.kind))
    return RailReport(
        rail_optimized=rail_optimized,
        leaf_rail=MappingProxyType(leaf_rail),
        hca_rail=MappingProxyType(hca_rail),
        anomalies=tuple(anomalies),
    )


def _mixed_rail_leaves(
    fabric: Fabric, leaf_rails: Mapping[str, Counter[int]], leaf_rail: Mapping[str, int]
) -> list[CablingAnomaly]:
    """Return an anomaly per HCA on a leaf of another rail, and per leaf with no main rail."""
    found: list[CablingAnomaly] = []
    for leaf, counts in leaf_rails.items():
        main = leaf_rail.get(leaf)
        if main is None and len(counts) > 1:
            found.append(
                CablingAnomaly(
                    "mixed-rail-leaf", None, None, leaf,
                    f"leaf {leaf} carries rails {sorted(counts)} and none of them is a majority",
                )
            )  # fmt: skip
            continue
        for node in sorted(fabric.nodes_on(leaf)):
            for rail, where in fabric.rail_leaves(node).items():
                if where == leaf and rail != main:
                    found.append(
                        CablingAnomaly(
                            "mixed-rail-leaf", node, rail, leaf,
                            f"rail {rail} of {node} is cabled to {leaf}, a rail-{main} leaf",
                        )
                    )  # fmt: skip
    return found


def _out_of_order(fabric: Fabric) -> list[CablingAnomaly]:
    """Return an anomaly per node HCA on another rail than its place in its node's own order
    (two rails of a node swapped): its rail is its leaf's, its port is not where the unit
    puts that port. ``rail`` is the port's place in the node's order."""
    found: list[CablingAnomaly] = []
    for node in fabric.nodes:
        for hca in fabric.hcas_of(node):
            if hca.order is None or hca.rail is None or hca.order == hca.rail:
                continue
            leaf = fabric.leaf_of(node, hca.rail)
            name = hca.description.split()[-1] if hca.description else hca.guid
            found.append(
                CablingAnomaly(
                    "mixed-rail-leaf", node, hca.order, leaf,
                    f"port {hca.order} of {node} ({name}) is cabled to "
                    f"{fabric.switch_label(leaf) if leaf else '?'}, the rail-{hca.rail} leaf of "
                    f"its unit, where its other nodes cable their port {hca.rail}",
                )
            )  # fmt: skip
    return found


def _duplicate_rails(fabric: Fabric) -> list[CablingAnomaly]:
    """Return an anomaly per node with two HCAs that claim the same rail."""
    found: list[CablingAnomaly] = []
    for node in fabric.nodes:
        rails = Counter(h.rail for h in fabric.hcas_of(node) if h.rail is not None)
        found.extend(
            CablingAnomaly(
                "duplicate-rail",
                node,
                rail,
                None,
                f"{node} has {count} HCAs that claim rail {rail}",
            )
            for rail, count in sorted(rails.items())
            if count > 1
        )
    return found


def _unit_anomalies(
    fabric: Fabric, leaf_rail: Mapping[str, int], rail_optimized: bool
) -> list[CablingAnomaly]:
    """Return foreign-leaf and missing-hca anomalies, judged against each node's home unit."""
    leaf_home: dict[str, str] = {}
    for leaf in fabric.leaves:
        votes = Counter(fabric.leaf_domain_of(n) for n in fabric.nodes_on(leaf))
        if votes:
            leaf_home[leaf] = min(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    unit_rails: dict[str, dict[int, str]] = defaultdict(dict)
    for leaf, home in sorted(leaf_home.items()):
        rail = leaf_rail.get(leaf)
        if rail is not None and rail_optimized:
            unit_rails[home].setdefault(rail, leaf)
    unit_size: dict[str, int] = defaultdict(int)
    for node in fabric.nodes:
        unit_size[fabric.leaf_domain_of(node)] = max(
            unit_size[fabric.leaf_domain_of(node)], len(fabric.rail_leaves(node))
        )

    found: list[CablingAnomaly] = []
    for node in fabric.nodes:
        rails = fabric.rail_leaves(node)
        votes = Counter(leaf_home[leaf] for leaf in fabric.leaves_of(node))
        home = min(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        for rail, leaf in rails.items():
            if leaf_home[leaf] != home:
                found.append(
                    CablingAnomaly(
                        "foreign-leaf", node, rail, leaf,
                        f"rail {rail} of {node} lands on {leaf}, a leaf of unit {leaf_home[leaf]}"
                        f" (its unit is {home})",
                    )
                )  # fmt: skip
        expected = unit_rails.get(home, {})
        found.extend(
            CablingAnomaly(
                "missing-hca", node, rail, expected[rail],
                f"{node} has no HCA on rail {rail}; its unit uses {expected[rail]}",
            )
            for rail in sorted(set(expected) - set(rails))
        )  # fmt: skip
        if not rail_optimized and len(rails) < unit_size[home]:
            found.append(
                CablingAnomaly(
                    "missing-hca", node, None, None,
                    f"{node} has {len(rails)} HCAs, other nodes of its leaf {unit_size[home]}",
                )
            )  # fmt: skip
    return found


def _outside_leaf_domains(fabric: Fabric) -> list[CablingAnomaly]:
    """Return an anomaly per compute HCA cabled to a switch above the leaves."""
    found: list[CablingAnomaly] = []
    for hca in fabric.off_leaf_hcas:
        links = fabric.links_of(hca.id)
        switch = next(link.other(hca.id) for link in links if link.other(hca.id) in fabric.switches)
        level = fabric.level_of(switch)
        tier = "unconnected" if level is None else tier_name(level)
        who = hca.node if hca.node is not None else f"unassigned HCA {hca.guid}"
        rail = "" if hca.rail is None else f" (rail {hca.rail})"
        found.append(
            CablingAnomaly(
                "outside-leaf-domains", hca.node, hca.rail, switch,
                f"{who}{rail} is cabled to {switch}, a {tier} switch: outside the leaf domains, "
                "so it gives no leaf or rail label",
            )
        )  # fmt: skip
    return found
