"""Where a port is cabled: its port GUID -> the leaf switch and switch port at the other end of
its cable -> that leaf's uplinks, on discovery's graph (:class:`~tpfabric_core.fabric.model.
Fabric`, built from an ``ibnetdiscover`` dump, which knows port GUIDs).

A fabric description (YAML) or a Slurm file knows no port GUIDs and no switch ports: there a
node's rail still resolves to its leaf (:func:`leaf_of_rail`), without the port number.

Pure: the graph in, the path out. :class:`FabricPaths` indexes the graph once (O(HCAs)), then
each look-up is O(uplinks of one leaf).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpfabric_core.fabric.model import Fabric, Link, tier_name

__all__ = ["CablePath", "FabricPaths", "SwitchPort", "Uplink"]


@dataclass(frozen=True, slots=True)
class SwitchPort:
    """One port of a switch: its id (``S-<guid>``), what it calls itself, the port, its tier."""

    switch: str
    name: str
    port: int | None
    tier: str

    @property
    def words(self) -> str:
        """Return ``S-2c5eab0300b87b40 port 17 (ib5)``, or without the port when unknown."""
        port = f" port {self.port}" if self.port is not None else ""
        named = f" ({self.name})" if self.name and self.name != self.switch else ""
        return f"{self.tier} {self.switch}{port}{named}"


@dataclass(frozen=True, slots=True)
class Uplink:
    """One cable from a leaf up the tree: the leaf's port, the switch above and its port."""

    leaf_port: int
    peer: SwitchPort
    gbps: float
    degraded: bool


@dataclass(frozen=True, slots=True)
class CablePath:
    """A host port's way into the fabric."""

    guid: str | None
    node: str | None
    rail: int | None
    hca_description: str
    leaf: SwitchPort
    uplinks: tuple[Uplink, ...]
    cable_degraded: bool = False


def _port_on(link: Link, switch: str) -> int:
    return link.a_port if link.a == switch else link.b_port


class FabricPaths:
    """Resolves port GUIDs on one fabric."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self._by_guid = {
            hca.port_guid.lower(): hca for hca in fabric.hcas.values() if hca.port_guid is not None
        }

    def _switch_port(self, switch: str, port: int | None) -> SwitchPort:
        known = self.fabric.switches.get(switch)
        level = self.fabric.level_of(switch)
        return SwitchPort(
            switch,
            (known.name or "") if known is not None else "",
            port,
            tier_name(level) if level is not None else "switch",
        )

    def _uplinks(self, leaf: str) -> tuple[Uplink, ...]:
        return tuple(
            Uplink(
                _port_on(link, leaf),
                self._switch_port(link.other(leaf), _port_on(link, link.other(leaf))),
                link.gbps,
                link.health == "degraded",
            )
            for link in sorted(self.fabric.uplinks(leaf), key=lambda ln: _port_on(ln, leaf))
        )

    def by_guid(self, guid: str) -> CablePath | None:
        """Return where the port with ``guid`` (16 hex digits) is cabled, None when the fabric
        has no such port or it is cabled to no switch."""
        hca = self._by_guid.get(guid.lower().removeprefix("0x").zfill(16))
        if hca is None:
            return None
        cables = [
            link
            for link in self.fabric.links_of(hca.id)
            if link.other(hca.id) in self.fabric.switches
        ]
        if not cables:
            return None
        cable = cables[0]
        switch = cable.other(hca.id)
        return CablePath(
            guid=hca.port_guid,
            node=hca.node,
            rail=hca.rail,
            hca_description=hca.description,
            leaf=self._switch_port(switch, _port_on(cable, switch)),
            uplinks=self._uplinks(switch),
            cable_degraded=cable.health == "degraded",
        )

    def leaf_of_rail(self, node: str, rail: int) -> CablePath | None:
        """Return the leaf of ``node``'s rail ``rail`` (no switch port: the source names none),
        None when the fabric does not know the node or the rail."""
        try:
            leaf = self.fabric.leaf_of(node, rail)
        except KeyError:
            return None
        if leaf is None:
            return None
        return CablePath(None, node, rail, "", self._switch_port(leaf, None), self._uplinks(leaf))
