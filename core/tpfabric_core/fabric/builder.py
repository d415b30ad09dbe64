"""Building a :class:`~tpfabric_core.fabric.model.Fabric`: the builder every importer uses, and
the fabric of a fabric description file.

:class:`FabricBuilder` collects switches, HCAs and cables, keeps a cable reported from both ends
once (its ends in a canonical order, so equal cabling gives equal links), rejects conflicting
repeats, and builds the immutable fabric. Pure: data in, data out.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Self, TypeVar

from tpfabric_core.fabric.model import Fabric, Hca, HcaRole, Health, Link, LinkKey, Switch, hca_id
from tpfabric_core.fabric_description import FabricDescription

__all__ = ["FabricBuilder", "fabric_from_description"]

_T = TypeVar("_T")


class FabricBuilder:
    """Collects switches, HCAs and links, checks them, and builds a :class:`Fabric`."""

    def __init__(self) -> None:
        self._switches: dict[str, Switch] = {}
        self._hcas: dict[str, Hca] = {}
        self._links: dict[LinkKey, Link] = {}

    def add_switch(
        self,
        switch_id: str,
        description: str = "",
        group: str | None = None,
        name: str | None = None,
    ) -> Self:
        """Return the builder with a switch added (a repeat with the same data is a no-op);
        ``name``: what the switch calls itself (its node description), unique in the fabric."""
        switch = Switch(switch_id, description, group, name)
        return self._add(self._switches, switch_id, switch)

    def add_hca(
        self,
        guid: str,
        description: str = "",
        node: str | None = None,
        rail: int | None = None,
        role: HcaRole = HcaRole.NODE,
        *,
        port_guid: str | None = None,
        order: int | None = None,
    ) -> Self:
        """Return the builder with an HCA added; ``role`` NODE needs a ``node``; ``port_guid``:
        the GUID of its cabled port, ``order``: its place in its node's own order, when the
        source says."""
        if role is HcaRole.NODE and node is None:
            raise ValueError(f"HCA {guid}: role 'node' needs a node name")
        if rail is not None and rail < 0:
            raise ValueError(f"HCA {guid}: rail must be >= 0, got {rail}")
        hca = Hca(guid, description, node, rail, role, port_guid, order)
        return self._add(self._hcas, hca_id(guid), hca)

    def add_link(
        self,
        a: str,
        a_port: int,
        b: str,
        b_port: int,
        *,
        width: int = 4,
        speed: str = "NDR",
        health: Health = "ok",
    ) -> Self:
        """Return the builder with a cable added; a cable seen from both ends is kept once, with
        its ends in :attr:`Link.key` order so that equal cabling gives equal links."""
        if (b, b_port) < (a, a_port):
            a, a_port, b, b_port = b, b_port, a, a_port
        link = Link(a, a_port, b, b_port, width, speed, health)
        known = self._links.get(link.key)
        if known is not None and (known.width, known.speed) != (width, speed):
            raise ValueError(
                f"link {link.key}: reported as {known.width}x{known.speed} and {width}x{speed}"
            )
        if known is None:
            self._links[link.key] = link
        return self

    def has_switch(self, switch_id: str) -> bool:
        """Return whether switch ``switch_id`` was added."""
        return switch_id in self._switches

    def _add(self, table: dict[str, _T], key: str, item: _T) -> Self:
        if key in self._switches or key in self._hcas:
            if table.get(key) == item:
                return self
            raise ValueError(f"{key!r} is added twice with different data or kinds")
        table[key] = item
        return self

    def build(self) -> Fabric:
        """Return the fabric; every link end must be a known switch or HCA."""
        for link in self._links.values():
            for end in (link.a, link.b):
                if end not in self._switches and end not in self._hcas:
                    raise ValueError(f"link {link.key}: unknown end {end!r}")
        return Fabric(self._switches.values(), self._hcas.values(), self._links.values())


def fabric_from_description(description: FabricDescription) -> Fabric:
    """Return the fabric of a fabric description file, with the description's names as domain ids.

    Rail switches are named by :meth:`FabricDescription.rail_switch`; each spine group gets one
    spine switch per rail (``<spine>-rail<i>``, or ``<spine>`` when not rail-optimized), each block
    one core switch per rail (``<block>-core...``), and when there are several blocks a top tier
    (``<name>-top...``) joins them. HCA GUIDs are derived from node name and rail.
    """
    rails = range(description.rails)
    planes = list(rails) if description.rail_optimized else [None]
    builder = FabricBuilder()
    ports: dict[str, int] = defaultdict(int)

    def cable(a: str, b: str) -> None:
        ports[a] += 1
        ports[b] += 1
        builder.add_link(a, ports[a], b, ports[b])

    def per_plane(name: str, plane: int | None) -> str:
        return name if plane is None else f"{name}-rail{plane}"

    multi_block = len(description.blocks) > 1
    for plane in planes:
        if multi_block:
            builder.add_switch(per_plane(f"{description.name}-top", plane), group=description.name)
    for block in description.blocks:
        for plane in planes:
            core = per_plane(f"{block.name}-core", plane)
            builder.add_switch(core, group=block.name)
            if multi_block:
                cable(core, per_plane(f"{description.name}-top", plane))
        for spine in block.spines:
            for plane in planes:
                switch = per_plane(spine.name, plane)
                builder.add_switch(switch, group=spine.name)
                cable(switch, per_plane(f"{block.name}-core", plane))
            for leaf in spine.leaves:
                for plane in planes:
                    switch = description.rail_switch(leaf.name, plane or 0)
                    builder.add_switch(switch, group=leaf.name)
                    cable(switch, per_plane(spine.name, plane))
                for node in leaf.nodes:
                    for rail in rails:
                        guid = hashlib.sha256(f"{node}/{rail}".encode()).hexdigest()[:16]
                        builder.add_hca(guid, f"{node} HCA-{rail + 1}", node, rail)
                        switch = description.rail_switch(leaf.name, rail)
                        ports[switch] += 1
                        builder.add_link(hca_id(guid), 1, switch, ports[switch])
    return builder.build()
