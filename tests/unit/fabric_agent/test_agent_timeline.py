"""The agent on a fake sysfs series with injected retransmission bursts: the timeline it keeps on
its node, the verdict, and the counters it exports under node_exporter's names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.link_publish import CONDITION_TYPE
from tpfabric_core.fabric.link_timeline import TIMELINE_ANNOTATION, read_timeline
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_fabric_agent.memory_node import MemoryNode

T0 = 1_700_000_000.0
INTERVAL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def agent_on(
    tmp_path: Path, **sysfs_options: object
) -> tuple[FakeSysfs, FabricAgent, MemoryNode, Clock]:
    sysfs = FakeSysfs(tmp_path, hcas=4, gpus=4, **sysfs_options)  # type: ignore[arg-type]
    clock, node = Clock(), MemoryNode()
    publisher = NodePublisher("dgx-07", node, clock=clock, wall=clock)
    settings = AgentSettings(
        node="dgx-07", sys_root=tmp_path, interval_seconds=INTERVAL, judge=LinkJudgeConfig()
    )
    return sysfs, FabricAgent(settings, publisher, clock=clock, wall=clock), node, clock


def war_story(sysfs: FakeSysfs, agent: FabricAgent, clock: Clock, minutes: int = 12) -> None:
    """One transceiver with bit errors: 400 NAK sequence errors in one interval every 180 s on
    mlx5_2 port 1, the rest of the node quiet."""
    for step in range(minutes * 6):
        if step % 18 == 9:
            sysfs.add_hw("mlx5_2", 1, "packet_seq_err", 400)
        agent.step()
        clock.now += INTERVAL


def test_periodic_retransmission_bursts_land_in_the_nodes_timeline_at_their_times(
    tmp_path: Path,
) -> None:
    sysfs, agent, node, clock = agent_on(tmp_path)
    war_story(sysfs, agent, clock)
    timeline, problem = read_timeline(node.annotations[TIMELINE_ANNOTATION])
    assert problem == ""
    assert timeline is not None
    assert timeline.since == T0
    sick = timeline.port(guid=sysfs.port_guid("mlx5_2"))
    assert sick is not None
    assert (sick.hca, sick.rail) == ("mlx5_2", 2)
    assert [(b.counter, b.start - T0, b.end - T0, b.events) for b in sick.bursts] == [
        ("packet_seq_err", 80.0, 90.0, 400),
        ("packet_seq_err", 260.0, 270.0, 400),
        ("packet_seq_err", 440.0, 450.0, 400),
        ("packet_seq_err", 620.0, 630.0, 400),
    ]
    quiet = [p for p in timeline.ports if p.hca != "mlx5_2"]
    assert len(quiet) == 3
    assert all(p.bursts == () and p.unread == () for p in quiet)


def test_the_node_is_degraded_for_the_retransmissions_while_the_bursts_come(tmp_path: Path) -> None:
    sysfs, agent, node, clock = agent_on(tmp_path)
    war_story(sysfs, agent, clock)
    condition = next(c for c in node.conditions if c["type"] == CONDITION_TYPE)
    assert condition["status"] == "False"
    # the words are those of the first burst (400 over the 90 s the window then held)
    assert condition["message"] == (
        "retransmissions (NAK sequence errors) 267/min on mlx5_2 port 1 (limit 60/min)"
    )


def test_the_timeline_costs_two_writes_per_burst_and_none_between(tmp_path: Path) -> None:
    sysfs, agent, node, clock = agent_on(tmp_path)
    war_story(sysfs, agent, clock, minutes=2)  # one burst, seen at 90 s, closed at 100 s
    assert node.writes == ["metadata", "status", "metadata", "status", "metadata"]
    first = len(node.writes)
    for _ in range(40):  # quiet: the burst leaves the window at 390 s, ok 120 s after that
        agent.step()
        clock.now += INTERVAL
    assert node.writes[first:] == ["metadata", "status"]  # ok again, after the hysteresis


def test_counters_the_driver_does_not_expose_are_unknown_in_the_timeline_and_the_metrics(
    tmp_path: Path,
) -> None:
    older = ("rnr_nak_retry_err", "local_ack_timeout_err", "packet_seq_err", "out_of_sequence")
    _sysfs, agent, node, _clock = agent_on(tmp_path, hw_counters=older)
    agent.step()
    timeline, _ = read_timeline(node.annotations[TIMELINE_ANNOTATION])
    assert timeline is not None
    assert timeline.ports[0].unread == (
        "roce_slow_restart",
        "implied_nak_seq_err",
        "duplicate_request",
        "roce_adp_retrans",
        "np_cnp_sent",
        "rp_cnp_handled",
        "np_ecn_marked_roce_packets",
    )
    metrics = agent.metrics.registry
    labels = {"device": "mlx5_0", "port": "1"}
    assert metrics.get_sample_value("node_infiniband_packet_sequence_errors_total", labels) == 0
    assert metrics.get_sample_value("node_infiniband_roce_adp_retransmits_total", labels) is None


def test_raw_counters_go_out_under_node_exporters_names_with_a_rail_join(tmp_path: Path) -> None:
    sysfs, agent, _, _ = agent_on(tmp_path)
    sysfs.add_hw("mlx5_1", 1, "packet_seq_err", 40)
    sysfs.add_hw("mlx5_1", 1, "np_cnp_sent", 7)
    sysfs.add_errors("mlx5_1", 1, "port_xmit_wait", 123)
    agent.step()
    metrics = agent.metrics.registry
    labels = {"device": "mlx5_1", "port": "1"}
    assert metrics.get_sample_value("node_infiniband_packet_sequence_errors_total", labels) == 40
    assert metrics.get_sample_value("node_infiniband_np_cnp_packets_sent_total", labels) == 7
    assert metrics.get_sample_value("node_infiniband_port_transmit_wait_total", labels) == 123
    info = {**labels, "rail": "1", "port_guid": sysfs.port_guid("mlx5_1")}
    assert metrics.get_sample_value("tpfabric_fabric_port_info", info) == 1


def test_the_config_file_sets_the_timeline_and_a_bad_field_is_named(tmp_path: Path) -> None:
    from tpfabric_fabric_agent.__main__ import build_parser, settings_from_args  # noqa: PLC0415

    config = tmp_path / "judgement.yaml"
    config.write_text("timeline:\n  keep_seconds: 600\n  max_characters: 8192\n")
    args = build_parser().parse_args(["--node=n", f"--config={config}"])
    timeline = settings_from_args(args).timeline
    assert (timeline.keep_seconds, timeline.max_characters) == (600, 8192)
    config.write_text("timeline:\n  floors: {made_up: 1}\n")
    with pytest.raises(ValueError, match=r"judgement.yaml: timeline.floors: .*made_up"):
        settings_from_args(build_parser().parse_args(["--node=n", f"--config={config}"]))


def test_every_metadata_write_stamps_the_timeline_with_the_agents_clock(tmp_path: Path) -> None:
    sysfs, agent, node, clock = agent_on(tmp_path)
    agent.step()
    clock.now += INTERVAL
    sysfs.set_rate("mlx5_1", 1, "200 Gb/sec (2X NDR)")  # degraded: no burst, a health write
    agent.step()
    timeline, _ = read_timeline(node.annotations[TIMELINE_ANNOTATION])
    assert timeline is not None
    assert timeline.at == clock.now
