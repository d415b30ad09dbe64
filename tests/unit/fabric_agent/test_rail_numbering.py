"""One rail numbering, from a dump to the fabric agent: a DGX H100 unit whose compute HCAs are
``mlx5_0,3,4,5,6,9,10,11`` (storage and in-band HCAs take the gaps), discovered from an
``ibnetdiscover`` dump of it and judged by the agent on each node's own sysfs. Three nodes sick
on the port cabled to one rail leaf make that leaf the suspect, whatever the devices are called
and however one node's cables run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tpfabric_core import labels
from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover
from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.link_publish import (
    FabricPublication,
    parse_detail,
    publication_of,
    suspect_rail_switches,
)
from tpfabric_core.fabric.node_labels import fabric_node_labels
from tpfabric_core.rail_ports import RAIL_PORTS_ANNOTATION, rail_ports_of
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import DGX_H100_COMPUTE, FakeSysfs

NODES = ("dgx-01", "dgx-02", "dgx-03", "dgx-04")


def node_guid(node: str) -> int:
    """Each node's first HCA GUID (its FakeSysfs and the dump agree on them)."""
    return 0xB83FD20300000001 + (NODES.index(node) << 32)


def dump(cabling: dict[str, Sequence[str]]) -> str:
    """Return an ``ibnetdiscover`` dump of one DGX H100 unit: eight rail leaves (``su1-r<i>``,
    named as managed switches name themselves) under one spine; ``cabling[node][i]`` is the HCA
    of ``node`` cabled to the rail-*i* leaf (PCI order unless a test swaps two)."""
    lines = []
    spine = "S-2c5eab0300000100"
    for rail in range(8):
        leaf = f"S-2c5eab03000000{rail:02x}"
        lines.append(f'Switch\t41 "{leaf}"\t\t# "MF0;su1-r{rail}:MQM9700/U1" enhanced port 0 lid '
                     f"{10 + rail} lmc 0")  # fmt: skip
        for port, node in enumerate(NODES, 1):
            hca = cabling[node][rail]
            guid = f"{node_guid(node) + (DGX_H100_COMPUTE.index(hca) << 16):016x}"
            lines.append(f'[{port}]\t"H-{guid}"[1]({guid}) \t\t# "{node} {hca}" lid 99 4xNDR')
        lines.append(f'[33]\t"{spine}"[{rail + 1}]\t\t# "MF0;su1-spine:MQM9700/U1" lid 1 4xNDR')
        lines.append("")
    lines.append(
        f'Switch\t41 "{spine}"\t\t# "MF0;su1-spine:MQM9700/U1" enhanced port 0 lid 1 lmc 0'
    )
    lines += [
        f'[{rail + 1}]\t"S-2c5eab03000000{rail:02x}"[33]\t\t# "MF0;su1-r{rail}:MQM9700/U1" lid '
        f"{10 + rail} 4xNDR"
        for rail in range(8)
    ]
    return "\n".join(lines) + "\n"


class Recorder:
    def __init__(self) -> None:
        self.published: list[FabricPublication] = []

    def publish(self, publication: FabricPublication) -> int:
        self.published.append(publication)
        return 1


def judged(root: Path, node: str, sick: str, rail_map: str | None) -> FabricPublication:
    """Return what the agent on ``node`` publishes once port 1 of its ``sick`` HCA is down."""
    sysfs = FakeSysfs.dgx_h100(root / node, node_guid=node_guid(node))
    sysfs.set_up(sick, 1, up=False)
    settings = AgentSettings(node=node, sys_root=root / node, judge=LinkJudgeConfig())
    agent = FabricAgent(settings, Recorder(), rail_map=lambda: rail_map)
    return publication_of(agent.step())


def suspects(
    root: Path, cabling: dict[str, Sequence[str]], sick: dict[str, str], *, use_map: bool = True
) -> list[str]:
    fabric, _ = parse_ibnetdiscover(dump(cabling))
    node_labels = fabric_node_labels(fabric)
    seen = {}
    for node, hca in sick.items():
        rail_map = rail_ports_of(fabric, node) if use_map else None
        detail = parse_detail(judged(root, node, hca, rail_map).annotation)
        seen[node] = (node_labels[node], detail)
    return [s.switch for s in suspect_rail_switches(seen, min_nodes=3)]


IN_ORDER = dict.fromkeys(NODES, DGX_H100_COMPUTE)


def test_a_dgx_h100_dump_gives_rails_0_to_7_named_after_its_switches() -> None:
    fabric, _ = parse_ibnetdiscover(dump(IN_ORDER))
    node_labels = fabric_node_labels(fabric)["dgx-01"]
    rails = {k: v for k, v in node_labels.items() if k.startswith(labels.PREFIX + "rail-")}
    assert rails == {labels.rail_key(i): f"su1-r{i}" for i in range(8)}
    assert rail_ports_of(fabric, "dgx-01") is not None


def test_three_nodes_sick_on_mlx5_5_make_the_leaf_of_its_rail_the_suspect(tmp_path: Path) -> None:
    """mlx5_5 is the fourth compute HCA: rail 3, cabled to su1-r3 (not su1-r5, not the leaf of
    mlx5_3)."""
    sick = dict.fromkeys(NODES[:3], "mlx5_5")
    assert suspects(tmp_path, IN_ORDER, sick) == ["su1-r3"]


def test_a_node_cabled_out_of_pci_order_is_judged_by_its_port_guids(tmp_path: Path) -> None:
    """dgx-03's mlx5_5 and mlx5_6 run to each other's leaf; su1-r3 goes bad, so its sick port is
    mlx5_6. Numbered by port GUID it reports rail 3 like the others; in GPU order it would report
    rail 4 and the switch would have only two nodes against it."""
    cabling = dict(IN_ORDER)
    swapped = list(DGX_H100_COMPUTE)
    swapped[3], swapped[4] = swapped[4], swapped[3]
    cabling["dgx-03"] = swapped
    sick = {"dgx-01": "mlx5_5", "dgx-02": "mlx5_5", "dgx-03": "mlx5_6"}
    assert suspects(tmp_path / "map", cabling, sick) == ["su1-r3"]
    assert suspects(tmp_path / "dense", cabling, sick, use_map=False) == []


def test_a_map_that_misses_a_compute_port_is_said_and_gpu_order_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fabric, _ = parse_ibnetdiscover(dump(IN_ORDER))
    rail_map = rail_ports_of(fabric, "dgx-01") or ""
    partial = ",".join(rail_map.split(",")[:7])  # mlx5_11 missing
    sysfs = FakeSysfs.dgx_h100(tmp_path, node_guid=node_guid("dgx-01"))
    settings = AgentSettings(node="dgx-01", sys_root=tmp_path, judge=LinkJudgeConfig())
    agent = FabricAgent(settings, Recorder(), rail_map=lambda: partial)
    assert agent.rails == {hca: rail for rail, hca in enumerate(DGX_H100_COMPUTE)}
    words = [r.getMessage() for r in caplog.records]
    assert any(
        "node dgx-01: annotation topology.tpfabric.io/rail-ports does not cover mlx5_11 port 1" in w
        and "tpfabric topology label --ibnetdiscover" in w
        for w in words
    ), words
    assert sysfs.port_guid("mlx5_11") in rail_map


def test_a_malformed_map_is_said_and_never_crashes_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    FakeSysfs.dgx_h100(tmp_path)
    settings = AgentSettings(node="dgx-01", sys_root=tmp_path, judge=LinkJudgeConfig())
    maps = iter(["not a map", "0=0x12"])
    agent = FabricAgent(settings, Recorder(), rail_map=lambda: next(maps))
    assert list(agent.rails.values()) == list(range(8))
    agent.step()  # the map changed again: still unusable, still judged
    said = [r.getMessage() for r in caplog.records if RAIL_PORTS_ANNOTATION in r.getMessage()]
    assert len(said) == 2
    assert all(w.startswith("node dgx-01: annotation ") for w in said), said
