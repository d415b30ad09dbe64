"""Judge a fabric-wide counter snapshot: which cables are degraded, and so which leaves and nodes.

The one-shot judge of the ``tpfabric topology`` commands' ``--counters`` (a node's live series is
:mod:`.link_judge`'s). Counters come from a JSON snapshot (what a collector on the
UFM/fabric-manager side writes), parsed here, or from a sysfs-style tree (what
``/sys/class/infiniband`` on a node shows), read by
:func:`tpfabric_fabric_agent.link_read.read_sysfs_counters`. The JSON format::

    {"links": [
      {"switch": "S-2c5eab0300b87a80", "port": 7, "symbol_errors": 1250, "link_downed": 2,
       "rate_gbps": 200, "expected_rate_gbps": 400},
      {"hca": "e09d7303008594bc", "port": 1, "symbol_errors": 0},
      {"node": "dgx-01", "rail": 3, "link_downed": 5}
    ]}

Each entry names one cable by one of its ends: a switch port (``switch`` is an id such as
``S-<guid>`` or a bare GUID, plus ``port``), an HCA GUID (``hca``, port 1 by default), or a node
and rail. Counters default to 0; ``rate_gbps`` is the rate the port runs at, and
``expected_rate_gbps`` defaults to the cable's modelled rate (e.g. 400 for 4xNDR).

A cable is degraded when a counter is over its :class:`HealthThresholds` limit or it runs below
its expected rate; a leaf with a degraded cable makes every node on it ``degraded``
(:meth:`~tpfabric_core.fabric.model.Fabric.node_health`). Pure: text in, data out; no file,
tool or network access here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.ibnetdiscover import normalize_guid
from tpfabric_core.fabric.model import Fabric, Link, LinkKey, hca_id
from tpfabric_core.fabric_description import pydantic_error_path

__all__ = [
    "DegradedLink",
    "HealthReport",
    "HealthThresholds",
    "PortCounters",
    "apply_link_health",
    "assess_link_health",
    "parse_counters_json",
]


class HealthThresholds(BaseModel):
    """Limits above which a cable is degraded; counters are totals since the last clear."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    symbol_errors: int = Field(10, ge=0, description="degraded when symbol errors exceed this")
    link_downed: int = Field(0, ge=0, description="degraded when link-downed events exceed this")
    rate_tolerance: float = Field(
        0.0, ge=0, le=1, description="fraction of the expected rate a port may fall short by"
    )


class PortCounters(BaseModel):
    """One entry of the snapshot: a cable end and its counters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    switch: str | None = None
    hca: str | None = None
    node: str | None = None
    rail: int | None = Field(None, ge=0)
    port: int = Field(1, ge=0)
    symbol_errors: int = Field(0, ge=0)
    link_downed: int = Field(0, ge=0)
    rate_gbps: float | None = Field(None, ge=0)
    expected_rate_gbps: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_end(self) -> PortCounters:
        ends = [self.switch is not None, self.hca is not None, self.node is not None]
        if sum(ends) != 1 or (self.node is not None) != (self.rail is not None):
            raise ValueError("name the cable by exactly one of: switch+port, hca, node+rail")
        return self

    def where(self) -> str:
        """Return a short description of the cable end, for messages."""
        if self.switch is not None:
            return f"switch {self.switch} port {self.port}"
        if self.hca is not None:
            return f"HCA {self.hca} port {self.port}"
        return f"node {self.node} rail {self.rail}"


@dataclass(frozen=True, slots=True)
class DegradedLink:
    """A cable found degraded, and why."""

    key: LinkKey
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HealthReport:
    """Degraded cables, and the counter entries that matched no cable of the fabric."""

    degraded: tuple[DegradedLink, ...]
    unmatched: tuple[str, ...]


def parse_counters_json(text: str, source: str = "<counters>") -> list[PortCounters]:
    """Return the entries of a JSON counter snapshot; InputError names the bad entry."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{source}:{err.lineno}", f"not valid JSON: {err.msg}") from err
    if not isinstance(data, dict) or not isinstance(data.get("links"), list):
        raise InputError(source, "expected an object with a 'links' list")
    result: list[PortCounters] = []
    for index, entry in enumerate(data["links"]):
        try:
            result.append(PortCounters.model_validate(entry))
        except ValidationError as err:
            first = err.errors()[0]
            path = pydantic_error_path((f"links[{index}]", *first["loc"]))
            raise InputError(
                f"{source}: {path}", first["msg"].removeprefix("Value error, ")
            ) from err
    return result


def _find_link(fabric: Fabric, entry: PortCounters) -> Link | None:
    """Return the cable ``entry`` names, None when the fabric has no such cable."""
    if entry.switch is not None:
        vertex = entry.switch
        if vertex not in fabric.switches:
            try:
                vertex = "S-" + normalize_guid(vertex)
            except ValueError:
                return None
        port = entry.port
    elif entry.hca is not None:
        try:
            vertex, port = hca_id(normalize_guid(entry.hca)), entry.port
        except ValueError:
            return None
    else:
        try:
            hcas = fabric.hcas_of(entry.node or "")
        except KeyError:
            return None
        found = [h for h in hcas if h.rail == entry.rail]
        if not found:
            return None
        vertex, port = found[0].id, 1
    for link in fabric.links_of(vertex):
        if (link.a == vertex and link.a_port == port) or (link.b == vertex and link.b_port == port):
            return link
    return None


def assess_link_health(
    fabric: Fabric, counters: list[PortCounters], thresholds: HealthThresholds | None = None
) -> HealthReport:
    """Return which cables of ``fabric`` the counters show degraded, and the unmatched entries."""
    limits = thresholds or HealthThresholds()
    reasons: dict[LinkKey, list[str]] = {}
    unmatched: list[str] = []
    for entry in counters:
        link = _find_link(fabric, entry)
        if link is None:
            unmatched.append(entry.where())
            continue
        found = reasons.setdefault(link.key, [])
        if entry.symbol_errors > limits.symbol_errors:
            found.append(f"{entry.symbol_errors} symbol errors (limit {limits.symbol_errors})")
        if entry.link_downed > limits.link_downed:
            found.append(f"link downed {entry.link_downed} times (limit {limits.link_downed})")
        expected = entry.expected_rate_gbps or link.gbps
        if entry.rate_gbps is not None and entry.rate_gbps < expected * (1 - limits.rate_tolerance):
            found.append(f"runs at {entry.rate_gbps:g} Gb/s, expected {expected:g}")
    degraded = tuple(DegradedLink(k, tuple(r)) for k, r in sorted(reasons.items()) if r)
    return HealthReport(degraded, tuple(unmatched))


def apply_link_health(
    fabric: Fabric, counters: list[PortCounters], thresholds: HealthThresholds | None = None
) -> tuple[Fabric, HealthReport]:
    """Return ``fabric`` with exactly the cables the counters show degraded marked so (all others
    ok), and the report."""
    report = assess_link_health(fabric, counters, thresholds)
    return fabric.with_link_health(d.key for d in report.degraded), report
