"""Synthetic fabrics for tests and benchmarks, and writers for the formats the importers read.

- :func:`generate_superpod`: rail-optimized units (up to 32 nodes x 8 rails, one leaf per rail per
  unit) under per-rail spine planes, optionally grouped into blocks joined by a core tier;
- :func:`generate_fat_tree`: classic fat trees, all HCAs of a node on one leaf;
- both can inject miscabling (an HCA moved to another unit's leaf, two rails of a node swapped) and
  degraded links, and say what they injected, so tests can check that it is found.

Everything is seeded and deterministic: the same arguments give the same fabric, GUIDs included.
:func:`write_ibnetdiscover` writes the text ``ibnetdiscover`` prints (what
:func:`~tpfabric_core.fabric.ibnetdiscover.parse_ibnetdiscover` reads back into the same fabric),
:func:`write_fabric_description` the YAML of the local cluster launcher.

Pure: builds data and text, writes no files.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from math import ceil
from typing import Any

import yaml

from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.ibnetdiscover import switch_name
from tpfabric_core.fabric.model import Fabric, HcaRole, LinkKey, hca_id
from tpfabric_core.hostlist import compress_hostlist

__all__ = [
    "GeneratedFabric",
    "generate_fat_tree",
    "generate_superpod",
    "write_fabric_description",
    "write_ibnetdiscover",
]

_SWITCH_GUID_BASE = 0x2C5EAB0300000000
_HCA_GUID_BASE = 0xE09D730300000000
_SWITCH_ID = re.compile(r"^S-[0-9a-f]{16}$")


@dataclass(frozen=True, slots=True)
class GeneratedFabric:
    """A generated fabric and the faults injected into it."""

    fabric: Fabric
    foreign: tuple[tuple[str, int], ...] = ()
    """(node, rail) HCAs moved to the same rail's leaf of another unit."""
    swapped: tuple[tuple[str, int, int], ...] = ()
    """(node, rail a, rail b) whose two HCAs were swapped between their leaves."""
    degraded: tuple[LinkKey, ...] = ()


class _Wiring:
    """Hands out switch GUIDs and port numbers while a generator cables a fabric."""

    def __init__(self, speed: str) -> None:
        self.builder = FabricBuilder()
        self.speed = speed
        self._switches = 0
        self._hcas = 0
        self._ports: dict[str, int] = defaultdict(int)

    def switch(self, description: str) -> str:
        switch_id = f"S-{_SWITCH_GUID_BASE + self._switches:016x}"
        self._switches += 1
        self.builder.add_switch(switch_id, description, name=switch_name(description))
        return switch_id

    def hca(self, node: str, rail: int, cabled_rail: int | None = None) -> str:
        """Return a new HCA of ``node``, its port ``rail`` (``HCA-<rail + 1>``); cabled to the
        leaf of ``cabled_rail`` (a swap), it is on that rail: the fabric's rail is its leaf's."""
        guid = f"{_HCA_GUID_BASE + self._hcas:016x}"
        self._hcas += 1
        on = rail if cabled_rail is None else cabled_rail
        self.builder.add_hca(guid, f"{node} HCA-{rail + 1}", node, on, HcaRole.NODE, order=rail)
        return hca_id(guid)

    def cable(self, a: str, b: str) -> None:
        ports = self._ports
        ports[a] += 1
        ports[b] += 1
        self.builder.add_link(a, ports[a], b, ports[b], speed=self.speed)


def _finish(
    wiring: _Wiring, foreign: list[tuple[str, int]], swapped: list[tuple[str, int, int]],
    degraded: int, rng: random.Random,
) -> GeneratedFabric:  # fmt: skip
    fabric = wiring.builder.build()
    keys: tuple[LinkKey, ...] = ()
    if degraded:
        links = sorted(link.key for link in fabric.links)
        keys = tuple(sorted(rng.sample(links, min(degraded, len(links)))))
        fabric = fabric.with_link_health(keys)
    return GeneratedFabric(fabric, tuple(foreign), tuple(swapped), keys)


def _uplinks_per_spine(down_ports: int, oversubscription: float, spines: int) -> int:
    """Return the cables from a leaf to each spine for the wanted down:up port ratio."""
    if oversubscription <= 0:
        raise ValueError("oversubscription must be > 0")
    return max(1, ceil(down_ports / oversubscription / spines))


def _pick_faults(
    rng: random.Random, nodes: list[list[str]], rails: int, foreign: int, swapped: int
) -> tuple[dict[tuple[int, int, int], int], list[tuple[str, int]], list[tuple[str, int, int]]]:
    """Return where miscabled HCAs go (``(unit, node, rail) -> unit * rails + rail`` of the leaf
    they land on) and the faults as reported; picked before cabling so each HCA is cabled once."""
    units = len(nodes)
    target: dict[tuple[int, int, int], int] = {}
    moved: list[tuple[str, int]] = []
    swaps: list[tuple[str, int, int]] = []
    candidates = [(u, n) for u in range(units) for n in range(len(nodes[u]))]
    picked = rng.sample(candidates, min(len(candidates), foreign + swapped))
    for u, n in picked[:foreign] if units > 1 else ():
        rail = rng.randrange(rails)
        target[(u, n, rail)] = rng.choice([v for v in range(units) if v != u]) * rails + rail
        moved.append((nodes[u][n], rail))
    for u, n in picked[foreign:] if rails > 1 else ():
        a, b = sorted(rng.sample(range(rails), 2))
        target[(u, n, a)], target[(u, n, b)] = u * rails + b, u * rails + a
        swaps.append((nodes[u][n], a, b))
    return target, moved, swaps


def generate_superpod(
    *,
    units: int = 4,
    nodes_per_unit: int = 32,
    rails: int = 8,
    spines_per_rail: int = 4,
    units_per_block: int | None = None,
    cores_per_rail: int = 4,
    oversubscription: float = 1.0,
    foreign: int = 0,
    swapped: int = 0,
    degraded: int = 0,
    speed: str = "NDR",
    seed: int = 0,
) -> GeneratedFabric:
    """Return a rail-optimized fabric: ``units`` units, nodes ``su<u>-dgx-<n>``.

    Each unit has one leaf per rail; every rail-*i* leaf is cabled to the rail-*i* spines. Without
    ``units_per_block`` the spines of a rail span all units (two tiers); with it, each block of
    units has its own spines and ``cores_per_rail`` core switches per rail join the blocks. A
    leaf's uplinks are its node ports divided by ``oversubscription``, spread over the spines.
    """
    if not (1 <= nodes_per_unit <= 32 and 1 <= rails <= 8 and units >= 1 and spines_per_rail >= 1):
        raise ValueError("need units >= 1, 1..32 nodes per unit, 1..8 rails, >= 1 spine per rail")
    per_spine = _uplinks_per_spine(nodes_per_unit, oversubscription, spines_per_rail)
    rng = random.Random(seed)  # noqa: S311 -- seeded for reproducible fabrics, not for secrets
    wiring = _Wiring(speed)
    block_size = units_per_block or units
    blocks = ceil(units / block_size)
    cores = [
        [wiring.switch(f"MF0;CORE-R{r}-{c + 1:02d}:MQM9700/U1") for c in range(cores_per_rail)]
        for r in range(rails)
    ] if units_per_block else []  # fmt: skip
    spines = [
        [
            [wiring.switch(f"MF0;B{b + 1}-SPINE-R{r}-{s + 1:02d}:MQM9700/U1")
             for s in range(spines_per_rail)]
            for r in range(rails)
        ]
        for b in range(blocks)
    ]  # fmt: skip
    leaves: list[list[str]] = []
    nodes: list[list[str]] = []
    for u in range(units):
        unit_leaves = [
            wiring.switch(f"MF0;SU{u + 1:03d}-LEAF-R{r}:MQM9700/U1") for r in range(rails)
        ]
        leaves.append(unit_leaves)
        nodes.append([f"su{u + 1:03d}-dgx-{n + 1:02d}" for n in range(nodes_per_unit)])
    target, moved, swaps = _pick_faults(rng, nodes, rails, foreign, swapped)
    for u in range(units):
        for n, node in enumerate(nodes[u]):
            for r in range(rails):
                where = target.get((u, n, r), u * rails + r)
                hca = wiring.hca(node, r, where % rails)
                wiring.cable(hca, leaves[where // rails][where % rails])
        for r, leaf in enumerate(leaves[u]):
            for spine in spines[u // block_size][r]:
                for _ in range(per_spine):
                    wiring.cable(leaf, spine)
    for r, rail_cores in enumerate(cores):
        for block_spines in spines:
            for spine in block_spines[r]:
                for core in rail_cores:
                    wiring.cable(spine, core)
    return _finish(wiring, sorted(moved), sorted(swaps), degraded, rng)


def generate_fat_tree(
    *,
    nodes: int = 64,
    nodes_per_leaf: int = 16,
    hcas_per_node: int = 1,
    spines: int = 4,
    oversubscription: float = 1.0,
    degraded: int = 0,
    speed: str = "HDR",
    seed: int = 0,
) -> GeneratedFabric:
    """Return a two-tier fat tree, nodes ``node-<n>``, every HCA of a node on its one leaf."""
    if nodes < 1 or nodes_per_leaf < 1 or hcas_per_node < 1 or spines < 1:
        raise ValueError("nodes, nodes_per_leaf, hcas_per_node and spines must be >= 1")
    rng = random.Random(seed)  # noqa: S311 -- seeded for reproducible fabrics, not for secrets
    wiring = _Wiring(speed)
    spine_ids = [wiring.switch(f"MF0;SPINE-{s + 1:02d}:QM8700/U1") for s in range(spines)]
    width = max(4, len(str(nodes)))
    per_spine = _uplinks_per_spine(nodes_per_leaf * hcas_per_node, oversubscription, spines)
    for first in range(0, nodes, nodes_per_leaf):
        leaf = wiring.switch(f"MF0;LEAF-{first // nodes_per_leaf + 1:03d}:QM8700/U1")
        for n in range(first, min(first + nodes_per_leaf, nodes)):
            for r in range(hcas_per_node):
                wiring.cable(wiring.hca(f"node-{n + 1:0{width}d}", r), leaf)
        for spine in spine_ids:
            for _ in range(per_spine):
                wiring.cable(leaf, spine)
    return _finish(wiring, [], [], degraded, rng)


def _guid_of(vertex: str) -> str:
    """Return the GUID to print for a vertex: its own for ``S-``/``H-`` ids, else a hash of it."""
    if _SWITCH_ID.match(vertex) or vertex.startswith("H-"):
        return vertex[2:]
    return hashlib.sha256(vertex.encode()).hexdigest()[:16]


def write_ibnetdiscover(fabric: Fabric) -> str:
    """Return ``fabric`` as ibnetdiscover text (switch blocks first, then channel adapters).

    Switches whose id is not ``S-<16 hex digits>`` get a GUID hashed from the id and keep their
    name as the description.
    """
    names = {v: f"S-{_guid_of(v)}" for v in fabric.switches} | {v: v for v in fabric.hcas}
    lids = {v: i + 1 for i, v in enumerate(sorted(names))}
    descs = {s.id: s.description or s.id for s in fabric.switches.values()}
    for hca in fabric.hcas.values():
        default = f"{hca.node} HCA-{(hca.rail or 0) + 1}" if hca.node else hca.guid
        descs[hca.id] = hca.description or default
    out = ["#", "# Topology file: generated by tpfabric", "#", ""]
    for vertex in sorted(fabric.switches, key=lambda v: names[v]):
        guid = names[vertex][2:]
        ends = sorted(
            ((link.a_port, link) if link.a == vertex else (link.b_port, link))
            for link in fabric.links_of(vertex)
        )  # fmt: skip
        nports = max([65, *(p + 1 for p, _ in ends)])
        out += [
            "vendid=0x2c9",
            "devid=0xd2f2",
            f"sysimgguid=0x{guid}",
            f"switchguid=0x{guid}({guid})",
        ]
        out.append(
            f'Switch\t{nports} "{names[vertex]}"\t\t# "{descs[vertex]}" enhanced port 0 '
            f"lid {lids[vertex]} lmc 0"
        )
        for port, link in ends:
            peer = link.other(vertex)
            peer_port = link.b_port if link.a == vertex else link.a_port
            rate = f"{link.width}x{link.speed}"
            suffix = f'\t\t# "{descs[peer]}" lid {lids[peer]} {rate}'
            if peer in fabric.hcas:
                out.append(f'[{port}]\t"{peer}"[{peer_port}]({peer[2:]}) {suffix}')
            else:
                out.append(f'[{port}]\t"{names[peer]}"[{peer_port}]{suffix}')
        out.append("")
    for vertex in sorted(fabric.hcas):
        guid = vertex[2:]
        links = fabric.links_of(vertex)
        out += ["vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{guid}", f"caguid=0x{guid}"]
        out.append(f'Ca\t{max(1, len(links))} "{vertex}"\t\t# "{descs[vertex]}"')
        for link in links:
            own, peer_port = (
                (link.a_port, link.b_port) if link.a == vertex else (link.b_port, link.a_port)
            )
            peer = link.other(vertex)
            out.append(
                f'[{own}]({guid}) \t"{names[peer]}"[{peer_port}]\t\t# lid {lids[vertex]} lmc 0 '
                f'"{descs[peer]}" lid {lids[peer]} {link.width}x{link.speed}'
            )
        out.append("")
    return "\n".join(out)


def write_fabric_description(fabric: Fabric, name: str) -> str:
    """Return the launcher's fabric description YAML for ``fabric``: blocks, spine groups and leaf
    domains named by their domain ids (a name already used by a lower level gets a level prefix).
    """
    tree: dict[str, dict[str, dict[str, list[str]]]] = {}
    for node in fabric.nodes:
        block, spine = fabric.block_of(node), fabric.spine_domain_of(node)
        tree.setdefault(block, {}).setdefault(spine, {}).setdefault(
            fabric.leaf_domain_of(node), []
        ).append(node)
    used: set[str] = set()

    def unique(value: str, level: str) -> str:
        result = value if value not in used else f"{level}-{value}"
        used.add(result)
        return result

    blocks: list[dict[str, Any]] = []
    for block, spine_groups in sorted(tree.items()):
        spines = []
        for spine, leaf_groups in sorted(spine_groups.items()):
            leaves = [
                {"name": unique(leaf, "leaf"), "nodes": [compress_hostlist(members)]}
                for leaf, members in sorted(leaf_groups.items())
            ]
            spines.append({"name": unique(spine, "spine"), "leaves": leaves})
        blocks.append({"name": unique(block, "block"), "spines": spines})
    rail_optimized = any(len(fabric.leaves_of(n)) > 1 for n in fabric.nodes)
    document = {
        "name": name,
        "rails": max(len(fabric.rails), 1),
        "railOptimized": rail_optimized,
        "blocks": blocks,
    }
    return yaml.safe_dump(document, sort_keys=False)
