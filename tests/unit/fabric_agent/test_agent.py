"""The agent loop on a fake sysfs tree: what it publishes, and how often it writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tpfabric_core import labels
from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    FabricPublication,
    parse_detail,
)
from tpfabric_fabric_agent.__main__ import build_parser, settings_from_args
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent, fabric_rails
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_fabric_agent.memory_node import MemoryNode


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """Keeps each new verdict's publication, and each new timeline apart from them."""

    def __init__(self) -> None:
        self.published: list[FabricPublication] = []
        self.timelines: list[str] = []

    def publish(self, publication: FabricPublication) -> int:
        if publication.timeline and publication.timeline not in self.timelines[-1:]:
            self.timelines.append(publication.timeline)
        verdict = replace(publication, timeline=None)
        changed = not self.published or self.published[-1] != verdict
        if changed:
            self.published.append(verdict)
        return int(changed)


def agent(tmp_path: Path, **judge: Any) -> tuple[FakeSysfs, FabricAgent, Recorder, Clock]:
    sysfs = FakeSysfs(tmp_path, hcas=8, ports=2, gpus=8)
    config = LinkJudgeConfig.model_validate({"window_seconds": 60, "recover_seconds": 30, **judge})
    clock, recorder = Clock(), Recorder()
    settings = AgentSettings(node="n1", sys_root=tmp_path, judge=config)
    return sysfs, FabricAgent(settings, recorder, clock=clock, wall=clock), recorder, clock


def test_rails_are_the_infiniband_hcas_in_natural_order_unless_named(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path, hcas=11, gpus=0)
    (sysfs.port_dir("mlx5_10") / "link_layer").write_text("Ethernet\n")
    rails = fabric_rails(tmp_path)
    assert list(rails) == [f"mlx5_{i}" for i in range(10)]
    assert fabric_rails(tmp_path, ("mlx5_4", "mlx5_2")) == {"mlx5_4": 0, "mlx5_2": 1}


def test_a_quiet_fabric_publishes_once(tmp_path: Path) -> None:
    _, fabric_agent, recorder, clock = agent(tmp_path)
    for _ in range(30):
        fabric_agent.step()
        clock.now += 10
    assert [p.status for p in recorder.published] == ["True"]
    assert len(fabric_agent.last.ports if fabric_agent.last else ()) == 16


def test_climbing_symbol_errors_flip_within_two_intervals_and_clear_after_hysteresis(
    tmp_path: Path,
) -> None:
    sysfs, fabric_agent, recorder, clock = agent(tmp_path)
    fabric_agent.step()
    for _ in range(2):
        clock.now += 10
        sysfs.add_errors("mlx5_3", 1, "symbol_error", 200)
        fabric_agent.step()
    assert [p.label for p in recorder.published] == ["ok", "degraded"]
    assert recorder.published[-1].message == (
        "symbol errors 12,000/h on mlx5_3 port 1 (limit 120/h, IBTA)"
    )
    metrics = fabric_agent.metrics.registry
    assert (
        metrics.get_sample_value(
            "tpfabric_fabric_port_state", {"hca": "mlx5_3", "port": "1", "rail": "3"}
        )
        == 1
    )
    assert metrics.get_sample_value(
        "tpfabric_fabric_port_errors_per_minute",
        {"hca": "mlx5_3", "port": "1", "counter": "symbol_error"},
    ) == pytest.approx(1200.0)
    assert metrics.get_sample_value("tpfabric_fabric_node_healthy") == 0
    for _ in range(12):  # the counters stop climbing
        clock.now += 10
        fabric_agent.step()
    assert [p.label for p in recorder.published] == ["ok", "degraded", "ok"]


def test_a_port_retrained_to_2x_ndr_publishes_half_the_bandwidth_on_its_rail(
    tmp_path: Path,
) -> None:
    sysfs, fabric_agent, recorder, clock = agent(tmp_path)
    fabric_agent.step()
    healthy = recorder.published[-1].annotation
    assert "bandwidth" not in healthy
    sysfs.add_errors("mlx5_2", 1, "symbol_error", 200)  # errors only: no bandwidth fraction
    clock.now += 10
    sysfs.add_errors("mlx5_2", 1, "symbol_error", 200)
    sysfs.set_rate("mlx5_3", 1, "200 Gb/sec (2X NDR)")
    fabric_agent.step()
    rails = parse_detail(recorder.published[-1].annotation)
    by_rail = {r.rail: r for r in rails}
    assert by_rail[2].state == "degraded"
    assert by_rail[2].bandwidth is None
    assert (by_rail[3].state, by_rail[3].bandwidth) == ("degraded", 0.5)  # port 2 still 4X
    assert [r.bandwidth for r in rails if r.rail not in (2, 3)] == [None] * 6


def test_a_pcie_link_at_half_width_is_published(tmp_path: Path) -> None:
    sysfs, fabric_agent, recorder, _ = agent(tmp_path)
    sysfs.set_pcie("0000:43:00.0", speed=32.0, width=8)
    fabric_agent.step()
    assert recorder.published[-1].reason == "PcieDegraded"
    assert "on 0000:43:00.0" in recorder.published[-1].message


def test_options_build_the_settings_and_name_what_is_wrong(tmp_path: Path) -> None:
    config = tmp_path / "judge.yaml"
    config.write_text("window_seconds: 120\ncounter_limits: {symbol_error: 100}\n")
    args = build_parser().parse_args(
        ["--node", "n1", "--config", str(config), "--recover-seconds", "5", "--hcas", "mlx5_1"]
    )
    settings = settings_from_args(args)
    assert (settings.judge.window_seconds, settings.judge.recover_seconds) == (120, 5)
    assert settings.judge.counter_limits == {"symbol_error": 100}
    assert settings.hcas == ("mlx5_1",)
    config.write_text("window_seconds: -1\n")
    with pytest.raises(ValueError, match="window_seconds"):
        settings_from_args(args)
    with pytest.raises(ValueError, match="NODE_NAME"):
        settings_from_args(build_parser().parse_args(["--node", ""]))


def test_the_publisher_writes_on_change_only_and_repairs_after_a_resync(tmp_path: Path) -> None:
    sysfs, _, _, clock = agent(tmp_path)
    core = MemoryNode()
    node = NodePublisher("n1", core, resync_seconds=300, clock=clock)
    settings = AgentSettings(node="n1", sys_root=tmp_path)
    fabric_agent = FabricAgent(settings, node, clock=clock)
    for _ in range(60):  # an hour, one step a minute
        fabric_agent.step()
        clock.now += 60
    assert core.writes == ["metadata", "status"]  # the first publication, then nothing
    assert core.reads == 12  # one read per 5 min resync
    assert core.labels[labels.HEALTH] == "ok"
    assert core.conditions[0]["type"] == CONDITION_TYPE
    core.labels[labels.HEALTH] = "degraded"  # someone else overwrote the label
    for _ in range(6):
        fabric_agent.step()
        clock.now += 60
    assert core.labels[labels.HEALTH] == "ok"
    assert core.writes == ["metadata", "status", "metadata"]
    assert DETAIL_ANNOTATION in core.annotations
    sysfs.set_up("mlx5_5", 2, up=False)
    fabric_agent.step()
    assert core.writes[-2:] == ["metadata", "status"]
    assert core.conditions[0]["reason"] == "LinkDown"


def test_a_gen5_hca_in_a_gen4_slot_is_not_degraded_for_ever(tmp_path: Path) -> None:
    sysfs, fabric_agent, recorder, _ = agent(tmp_path)
    slot = sysfs.pci_root / "0000:00:01.0"  # the port mlx5_0 (and GPU 0) sit below
    (slot / "max_link_speed").write_text("16.0 GT/s PCIe\n")
    (slot / "max_link_width").write_text("16\n")
    sysfs.set_pcie("mlx5_0", speed=16.0, width=16)  # a Gen5 x16 NIC trained at Gen4: the slot's
    fabric_agent.step()
    assert recorder.published[-1].label == "ok", recorder.published[-1].message
    sysfs.set_pcie("mlx5_0", speed=8.0, width=16)  # below what the slot can do
    fabric_agent.step()
    assert recorder.published[-1].reason == "PcieDegraded"
