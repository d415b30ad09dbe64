"""One rail numbering from discovery to the pod: a node's rails by port GUID, a pod's from its plan.

Rail *i* is the fabric's rail *i*: the rail-*i* leaf a port is cabled to, numbered 0..n-1 by
discovery (:mod:`tpfabric_core.fabric.ibnetdiscover`), whatever the node calls its devices. The
numbering travels as annotations, each parsed defensively (written by another program):

- the node's ``topology.tpfabric.io/rail-ports``: ``0=0x<port GUID>,1=0x...``, one entry per rail
  (at most :data:`MAX_RAILS`), written by ``tpfabric topology label`` from a source that knows
  port GUIDs (an ``ibnetdiscover`` dump). The fabric agent numbers its ports by it; the placer
  and the operator copy it into each pod's rails;
- the pod's ``tpfabric.io/rails``: comma-separated rail indices, each optionally pinned to a
  port: ``=<hca>``, ``=<hca>:<port>`` or ``=0x<port GUID>`` (what ``rdma-init`` reads through
  the downward API), written from the plan by the placer when it releases a gated pod and by
  the operator on workers born released;
- the pod's ``tpfabric.io/plan-level``: the topology level whose one domain holds the whole gang
  (``node`` on one node, else ``leaf``, ``spine``, ``block`` ... or ``cluster``).

Pure: labels, annotations and placements in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tpfabric_core import labels

if TYPE_CHECKING:  # the components that only read annotations never import the fabric graph
    from tpfabric_core.fabric.model import Fabric

__all__ = [
    "MAX_RAILS",
    "PLAN_LEVEL_ANNOTATION",
    "RAILS_ANNOTATION",
    "RAIL_PORTS_ANNOTATION",
    "format_rail_ports",
    "node_rails",
    "parse_rail_ports",
    "pod_rails",
    "rail_ports_of",
]

RAIL_PORTS_ANNOTATION = labels.PREFIX + "rail-ports"
RAILS_ANNOTATION = "tpfabric.io/rails"
PLAN_LEVEL_ANNOTATION = "tpfabric.io/plan-level"
#: the most rails a node's map may name (a label value per rail is kept per node too)
MAX_RAILS = 64
_ENTRY = re.compile(r"^(?P<rail>\d{1,2})=0x(?P<guid>[0-9a-f]{16})$")
_RAIL_KEY = re.compile(rf"^{re.escape(labels.PREFIX)}rail-(\d+)$")
_FIX = (
    "label the node again from a fresh dump (tpfabric topology label --ibnetdiscover DUMP "
    "--apply), or remove the annotation"
)


def format_rail_ports(ports: Mapping[int, str]) -> str:
    """Return the annotation value of ``{rail: port GUID}`` (GUIDs as 16 hex digits)."""
    return ",".join(f"{rail}=0x{guid.lower().zfill(16)}" for rail, guid in sorted(ports.items()))


def rail_ports_of(fabric: Fabric, node: str) -> str | None:
    """Return the ``topology.tpfabric.io/rail-ports`` value of ``node``, None when the source
    does not know the port GUID of each of its rails (a fabric description, a Slurm file)."""
    ports: dict[int, str] = {}
    for hca in fabric.hcas_of(node):
        if hca.rail is None or hca.rail in ports or hca.rail not in fabric.rail_leaves(node):
            continue
        if hca.port_guid is None:
            return None
        ports[hca.rail] = hca.port_guid
    if not ports or len(ports) > MAX_RAILS:
        return None
    return format_rail_ports(ports)


def parse_rail_ports(text: object) -> tuple[dict[int, str], str | None]:
    """Return ``({rail: port GUID}, None)`` from an annotation value, or ``({}, problem)``:
    what is wrong with it, the key named, and the fix (the caller adds the node)."""
    if not isinstance(text, str) or not text.strip():
        return {}, f"annotation {RAIL_PORTS_ANNOTATION} is empty; {_FIX}"
    entries = [part.strip().lower() for part in text.split(",")]
    if len(entries) > MAX_RAILS:
        return {}, (
            f"annotation {RAIL_PORTS_ANNOTATION} names {len(entries)} rails, more than "
            f"{MAX_RAILS}; {_FIX}"
        )
    ports: dict[int, str] = {}
    for entry in entries:
        match = _ENTRY.match(entry)
        if match is None:
            return {}, (
                f"annotation {RAIL_PORTS_ANNOTATION}: {entry[:40]!r} is not <rail>=0x<16 hex "
                f"digits>; {_FIX}"
            )
        rail, guid = int(match["rail"]), match["guid"]
        if rail in ports or guid in ports.values():
            return {}, (
                f"annotation {RAIL_PORTS_ANNOTATION}: rail {rail} or port 0x{guid} is named "
                f"twice; {_FIX}"
            )
        ports[rail] = guid
    return ports, None


def node_rails(
    node_labels: Mapping[str, str], node_annotations: Mapping[str, str]
) -> tuple[tuple[tuple[int, str | None], ...], str | None]:
    """Return a node's rails in order, each with its port GUID when its rail map gives one, and
    what is wrong with the map (None: nothing, or no map). Rails come from the map when it is
    readable, else from the node's ``topology.tpfabric.io/rail-<i>`` labels."""
    from_labels = sorted(
        int(match.group(1)) for key in node_labels if (match := _RAIL_KEY.match(key))
    )
    text = node_annotations.get(RAIL_PORTS_ANNOTATION)
    if text is None:
        return tuple((rail, None) for rail in from_labels), None
    ports, problem = parse_rail_ports(text)
    if problem is not None:
        return tuple((rail, None) for rail in from_labels), problem
    if from_labels and set(ports) != set(from_labels):
        problem = (
            f"annotation {RAIL_PORTS_ANNOTATION} names rails {sorted(ports)}, the node's "
            f"topology.tpfabric.io/rail-<i> labels {from_labels}; {_FIX}"
        )
        return tuple((rail, None) for rail in from_labels), problem
    return tuple(sorted(ports.items())), None


def pod_rails(
    rails: tuple[tuple[int, str | None], ...], pod_gpus: int, node_gpus: int
) -> str | None:
    """Return the ``tpfabric.io/rails`` value of a pod planned onto a node with ``rails``.

    Pinned by port GUID where the node's map gives them (``rdma-init`` uses the pins that name
    its own ports, so a pod of part of the node is served too); without a map only a pod that
    takes every GPU of the node gets its rails (bare indices), as the rest of a node's ports
    are not known to be its. None: nothing to write."""
    if not rails:
        return None
    if all(guid is not None for _, guid in rails):
        return ",".join(f"{rail}=0x{guid}" for rail, guid in rails)
    if pod_gpus > 0 and pod_gpus >= node_gpus:
        return ",".join(str(rail) for rail, _ in rails)
    return None
