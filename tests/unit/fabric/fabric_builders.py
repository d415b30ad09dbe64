"""Builders for small fabrics used across the fabric tests."""

from __future__ import annotations

from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.model import Fabric, HcaRole


class TinyFabric:
    """Fluent builder of small fabrics.

    ``TinyFabric().switch("l1").switch("s1", "l1").node("n1", "l1").build()``: leaf l1 under spine
    s1, node n1 with one HCA (rail 0) on l1.
    """

    def __init__(self) -> None:
        self.builder = FabricBuilder()
        self._guids = 0
        self._ports: dict[str, int] = {}

    def _port(self, vertex: str) -> int:
        self._ports[vertex] = self._ports.get(vertex, 0) + 1
        return self._ports[vertex]

    def switch(self, name: str, *below: str, cables: int = 1, speed: str = "NDR") -> TinyFabric:
        """Add switch ``name`` cabled (``cables`` times each) to the switches ``below``."""
        self.builder.add_switch(name, f"MF0;{name}")
        for child in below:
            for _ in range(cables):
                self.builder.add_link(child, self._port(child), name, self._port(name), speed=speed)
        return self

    def node(self, name: str, *leaves: str, first_rail: int = 0) -> TinyFabric:
        """Add node ``name`` with HCA ``i`` (rail ``first_rail + i``) on ``leaves[i]``."""
        for rail, leaf in enumerate(leaves, first_rail):
            self.hca(leaf, node=name, rail=rail)
        return self

    def hca(
        self,
        leaf: str,
        *,
        node: str | None = None,
        rail: int | None = None,
        role: HcaRole = HcaRole.NODE,
        description: str = "",
    ) -> TinyFabric:
        """Add one HCA cabled to ``leaf``."""
        self._guids += 1
        guid = f"{self._guids:016x}"
        self.builder.add_hca(guid, description, node, rail, role)
        self.builder.add_link(f"H-{guid}", 1, leaf, self._port(leaf))
        return self

    def build(self) -> Fabric:
        return self.builder.build()


def two_unit_rail_fabric() -> Fabric:
    """Return two units of two nodes x two rails; leaves u<u>r<r>, spines per rail."""
    tiny = TinyFabric()
    for u in (1, 2):
        for r in (0, 1):
            tiny.switch(f"u{u}r{r}")
    for r in (0, 1):
        tiny.switch(f"spine-r{r}", f"u1r{r}", f"u2r{r}", cables=2)
    for u in (1, 2):
        for n in (1, 2):
            tiny.node(f"u{u}-n{n}", f"u{u}r0", f"u{u}r1")
    return tiny.build()


def storage_on_a_spine() -> Fabric:
    """Return four leaves of eight nodes (l<i>-n<j>) under spines s1 and s2, two cables from each
    leaf to each spine, and a storage host (nfs-01) on s1."""
    tiny = TinyFabric()
    leaves = [f"l{i}" for i in range(1, 5)]
    for leaf in leaves:
        tiny.switch(leaf)
        for n in range(1, 9):
            tiny.node(f"{leaf}-n{n}", leaf)
    tiny.switch("s1", *leaves, cables=2).switch("s2", *leaves, cables=2)
    return tiny.hca("s1", node="nfs-01", rail=0, description="nfs-01 mlx5_0").build()
