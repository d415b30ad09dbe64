"""Publish, the last stage of link health: how a node's verdict (:mod:`.link_judge`) is
published, and read back: condition, label, annotation.

The fabric agent publishes, per node, three things, and writes them only when they change:

- the node condition ``FabricHealthy`` (Kubernetes condition conventions: positive polarity,
  CamelCase reason, a sentence of a message). ``True``/``LinksHealthy``; ``False`` with reason
  ``LinkDown`` (a fabric port is not ACTIVE/LinkUp), ``LinkDegraded`` (errors over their limits,
  a port below the expected rate or width) or ``PcieDegraded`` (only a PCIe link trained below
  its capability); ``Unknown``/``NoFabricPorts`` when the node shows no fabric port. The message
  is the reasons joined by ``; ``, e.g. ``symbol errors 12,000/h on mlx5_3 port 1 (limit
  120/h, IBTA)``. ``lastHeartbeatTime`` moves only with ``lastTransitionTime``: a heartbeat per
  interval would be an API write per node per interval on a quiet fabric (the agent's liveness
  is a Lease of its own, :mod:`.agent_heartbeat`; the placer writes ``Unknown``/``AgentSilent``
  here when it stops);
- the label ``topology.tpfabric.io/health``: ``ok`` or ``degraded`` (any port degraded or down,
  or a degraded PCIe link); left alone while the condition is ``Unknown``;
- the annotation ``topology.tpfabric.io/fabric-health``: compact JSON, per rail::

    {"state": "degraded",
     "rails": {"3": {"hca": "mlx5_3", "state": "degraded",
                     "reasons": ["symbol errors 12,000/h on mlx5_3 port 1 (limit 120/h, IBTA)"]},
               "5": {"hca": "mlx5_5", "state": "degraded", "bandwidth": 0.5,
                     "reasons": ["rate 200 Gb/s, expected 400, on mlx5_5 port 1", "..."]},
               "0": {"hca": "mlx5_0", "state": "ok"}},
     "pcie": ["PCIe x8 at 32 GT/s, capable of x16 at 32 GT/s, on mlx5_3 (0000:17:00.0)"]}

  ``state`` per rail is ``ok``, ``degraded`` or ``down``; ``reasons`` and ``pcie`` are absent
  when empty. ``bandwidth`` is the fraction of the expected rate that a port up below it keeps
  (:attr:`.PortVerdict.bandwidth`, rounded to 3 decimals; of a rail with several such ports, the
  smallest): how much slower the rail moves data. Absent when no port of the rail is up below
  the expected rate (a rail that is ok, down, or degraded only by errors or width);
- the annotation ``topology.tpfabric.io/link-timeline``: the recent bursts of each port's
  counters (:mod:`.link_timeline`), rewritten only when a burst opens or closes.

:func:`suspect_rail_switches` reads the same data back for many nodes and names the rail leaf
switches that several nodes blame at once. Pure functions; the agent and the operator do the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core import labels
from tpfabric_core.fabric.link_judge import NodeVerdict
from tpfabric_core.fabric.link_timeline import TIMELINE_ANNOTATION
from tpfabric_core.fabric.node_condition import condition_to_write, message_of
from tpfabric_core.fabric.roce_contract import ContractVerdict
from tpfabric_core.input_limits import bounded_json, whole_number

__all__ = [
    "AGENT_FIELD_MANAGER",
    "CONDITION_TYPE",
    "DETAIL_ANNOTATION",
    "FabricPublication",
    "RailDetail",
    "SuspectSwitch",
    "bandwidth_kept",
    "condition_patch",
    "metadata_patch",
    "parse_detail",
    "publication_of",
    "read_detail",
    "suspect_rail_switches",
]

CONDITION_TYPE = "FabricHealthy"
#: the field manager of the fabric agent's writes (``tpfabric diagnose`` finds its last write
#: time in the node's managedFields by it)
AGENT_FIELD_MANAGER = "tpfabric-fabric-agent"
DETAIL_ANNOTATION = labels.PREFIX + "fabric-health"


@dataclass(frozen=True, slots=True)
class FabricPublication:
    """What the agent publishes for one node (everything but timestamps)."""

    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    label: str | None  # topology.tpfabric.io/health value; None leaves the label alone
    annotation: str
    #: the ``topology.tpfabric.io/link-timeline`` text; None leaves the annotation alone
    timeline: str | None = None
    #: the node's ``FabricContractMet`` condition; None: the profile declares nothing to check
    contract: ContractVerdict | None = None


@dataclass(frozen=True, slots=True)
class RailDetail:
    """One rail of a node as the annotation shows it."""

    rail: int
    hca: str
    state: str
    reasons: tuple[str, ...] = ()
    #: the fraction of the expected rate the rail keeps; None when absent or unreadable
    bandwidth: float | None = None


@dataclass(frozen=True, slots=True)
class SuspectSwitch:
    """A rail leaf switch that several nodes' degraded rails point at."""

    switch: str  # the rail label value (the leaf's name, label-encoded)
    rails: tuple[int, ...]
    nodes: tuple[str, ...]

    @property
    def message(self) -> str:
        """Return a sentence for an Event or a log line."""
        rails = ", ".join(str(r) for r in self.rails)
        return (
            f"rail switch {self.switch} suspect: {len(self.nodes)} nodes degraded on rail "
            f"{rails} at once ({', '.join(self.nodes)}); check the switch and its cables "
            "before the nodes"
        )


def publication_of(verdict: NodeVerdict) -> FabricPublication:
    """Return what to publish for ``verdict``; the same verdict always gives the same text."""
    rails: dict[str, dict[str, Any]] = {}
    severity = {"ok": 0, "degraded": 1, "down": 2}
    for port in verdict.ports:
        key = str(port.rail) if port.rail is not None else port.hca
        entry = rails.setdefault(key, {"hca": port.hca, "state": "ok"})
        if severity[port.state] > severity[entry["state"]]:
            entry["state"] = port.state
        if port.reasons:
            entry.setdefault("reasons", []).extend(port.reasons)
        if port.bandwidth is not None:
            share = round(port.bandwidth, 3)
            entry["bandwidth"] = min(entry.get("bandwidth", share), share)
    detail: dict[str, Any] = {"state": verdict.state, "rails": rails}
    if verdict.pcie:
        detail["pcie"] = [v.reason for v in verdict.pcie]
    annotation = json.dumps(detail, separators=(",", ":"), sort_keys=True)
    if not verdict.ports:
        return FabricPublication(
            "Unknown",
            "NoFabricPorts",
            "no fabric port found under /sys/class/infiniband",
            None,
            annotation,
        )
    state = verdict.state
    if state == "ok":
        return FabricPublication(
            "True",
            "LinksHealthy",
            "every fabric port is up at the expected rate and width, no error counter over its "
            "limit, PCIe links at full width",
            "ok",
            annotation,
        )
    ports = {p.state for p in verdict.ports}
    reason = "LinkDown" if "down" in ports else "LinkDegraded" if "degraded" in ports else ""
    return FabricPublication(
        "False", reason or "PcieDegraded", message_of(verdict.reasons), "degraded", annotation
    )


def condition_patch(
    publication: FabricPublication, current: Mapping[str, Any] | None, now: str
) -> dict[str, Any] | None:
    """Return the ``FabricHealthy`` condition to write (strategic merge on ``type``), or None
    when ``current`` (the node's condition as read) already says the same."""
    return condition_to_write(
        CONDITION_TYPE,
        status=publication.status,
        reason=publication.reason,
        message=publication.message,
        current=current,
        now=now,
    )


def metadata_patch(
    publication: FabricPublication,
    current_labels: Mapping[str, str],
    current_annotations: Mapping[str, str],
) -> dict[str, Any] | None:
    """Return the node metadata merge patch (health label, detail and timeline annotations), or
    None when the node already carries them."""
    patch: dict[str, Any] = {}
    if publication.label is not None and current_labels.get(labels.HEALTH) != publication.label:
        patch["labels"] = {labels.HEALTH: publication.label}
    annotations = {}
    if current_annotations.get(DETAIL_ANNOTATION) != publication.annotation:
        annotations[DETAIL_ANNOTATION] = publication.annotation
    timeline = publication.timeline
    if timeline is not None and current_annotations.get(TIMELINE_ANNOTATION) != timeline:
        annotations[TIMELINE_ANNOTATION] = timeline
    if annotations:
        patch["annotations"] = annotations
    return {"metadata": patch} if patch else None


def parse_detail(annotation: str | None) -> tuple[RailDetail, ...]:
    """Return the rails of a ``topology.tpfabric.io/fabric-health`` annotation; an absent or
    unreadable one has none (never raises: it is written by another program)."""
    return read_detail(annotation)[0]


def read_detail(annotation: str | None) -> tuple[tuple[RailDetail, ...], str]:
    """Return the rails of a ``topology.tpfabric.io/fabric-health`` annotation and why it could
    not be read ("" when it could, or is absent). Never raises, for any text: the annotation is
    bounded (:data:`~tpfabric_core.input_limits.MAX_ANNOTATION_JSON_BYTES`, nesting too)."""
    if not annotation:
        return (), ""
    try:
        data = bounded_json(annotation, DETAIL_ANNOTATION)
    except ValueError as err:
        return (), str(err)
    rails = data.get("rails") if isinstance(data, dict) else None
    if not isinstance(rails, dict):
        return (), "" if isinstance(data, dict) and rails is None else _NOT_DETAIL
    details = []
    for key, entry in sorted(rails.items(), key=lambda kv: str(kv[0])):
        rail = whole_number(key)
        if rail is None or not isinstance(entry, dict):
            continue
        reasons = entry.get("reasons")
        details.append(
            RailDetail(
                rail=rail,
                hca=str(entry.get("hca", "")),
                state=str(entry.get("state", "ok")),
                reasons=tuple(str(r) for r in reasons) if isinstance(reasons, list) else (),
                bandwidth=_fraction(entry.get("bandwidth")),
            )
        )
    return tuple(details), ""


_NOT_DETAIL = (
    f"{DETAIL_ANNOTATION}: not an object with a 'rails' object, as the fabric agent writes"
)


def bandwidth_kept(rails: tuple[RailDetail, ...]) -> float | None:
    """Return what a node's worst rail keeps of its rate: 0 with a rail down, else the least
    measured ``bandwidth``; None when no rail says (degraded by errors only, or healthy)."""
    if any(rail.state == "down" for rail in rails):
        return 0.0
    measured = [rail.bandwidth for rail in rails if rail.bandwidth is not None]
    return min(measured) if measured else None


def _fraction(value: object) -> float | None:
    """Return ``value`` when it is a number from 0 to 1, else None (NaN fails both bounds)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return None
    return float(value)


def suspect_rail_switches(
    nodes: Mapping[str, tuple[Mapping[str, str], tuple[RailDetail, ...]]], min_nodes: int = 3
) -> list[SuspectSwitch]:
    """Return the rail leaf switches under which at least ``min_nodes`` nodes have that rail
    degraded or down now, most nodes first.

    ``nodes`` maps a node name to (its labels, its annotation's rails). A switch is found through
    the ``topology.tpfabric.io/rail-<i>`` label of each degraded rail. One sick node is the node's
    problem; several nodes of one switch sick on the rail that switch serves point at the switch
    (or its uplinks), where one fix clears them all.
    """
    blamed: dict[str, tuple[set[int], set[str]]] = {}
    for name, (node_labels, rails) in nodes.items():
        for detail in rails:
            if detail.state == "ok":
                continue
            switch = node_labels.get(labels.rail_key(detail.rail))
            if switch:
                rail_set, node_set = blamed.setdefault(switch, (set(), set()))
                rail_set.add(detail.rail)
                node_set.add(name)
    found = [
        SuspectSwitch(switch, tuple(sorted(rails)), tuple(sorted(names)))
        for switch, (rails, names) in blamed.items()
        if len(names) >= min_nodes
    ]
    return sorted(found, key=lambda s: (-len(s.nodes), s.switch))
