"""The canonical ``topology.tpfabric.io/`` node labels of a fabric, and the diff that applies them.

:func:`fabric_node_labels` turns a :class:`~tpfabric_core.fabric.model.Fabric` into
``{node: {key: value}}`` in the scheme of :mod:`tpfabric_core.labels`; :func:`label_diff` says
which labels to set and which to remove so that a node carries exactly those. The diff only ever
touches keys under ``topology.tpfabric.io/``: labels of other owners are left alone, and stale
tpfabric labels (a rail the node lost, a node that moved) are removed. Applying the diff twice
changes nothing the second time.

Pure functions; the adapter that patches Node objects lives outside core.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpfabric_core import labels
from tpfabric_core.fabric.model import Fabric

__all__ = ["fabric_node_labels", "label_diff", "labels_of_node"]


def labels_of_node(fabric: Fabric, node: str) -> dict[str, str]:
    """Return the canonical labels of ``node``: block, spine, leaf domain, one per rail, health."""
    result = {
        labels.BLOCK: fabric.block_of(node),
        labels.SPINE: fabric.spine_domain_of(node),
        labels.LEAF: fabric.leaf_domain_of(node),
        labels.HEALTH: fabric.node_health(node),
    }
    for rail, leaf in fabric.rail_leaves(node).items():
        result[labels.rail_key(rail)] = fabric.switch_label(leaf)
    return result


def fabric_node_labels(fabric: Fabric) -> dict[str, dict[str, str]]:
    """Return ``{node: {label key: value}}`` for every node of ``fabric``, in node order."""
    return {node: labels_of_node(fabric, node) for node in fabric.nodes}


def label_diff(
    current: Mapping[str, str], desired: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Return ``(to_set, to_remove)`` that make the node's ``topology.tpfabric.io/`` labels equal
    ``desired``; other labels are never touched. ``to_remove`` is sorted."""
    foreign = sorted(k for k in desired if not k.startswith(labels.PREFIX))
    if foreign:
        raise ValueError(f"desired labels outside {labels.PREFIX}: {', '.join(foreign)}")
    to_set = {k: v for k, v in desired.items() if current.get(k) != v}
    to_remove = sorted(k for k in current if k.startswith(labels.PREFIX) and k not in desired)
    return to_set, to_remove
