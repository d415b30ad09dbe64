"""Reading HCA ports and PCIe links from a sysfs tree in the kernel's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_core.fabric.link_samples import (
    CONGESTION_COUNTERS,
    ERROR_COUNTERS,
    HW_COUNTERS,
    NETDEV_COUNTERS,
    RETRANSMISSION_COUNTERS,
    WATCHED_COUNTERS,
)
from tpfabric_core.fabric.link_snapshot_judge import PortCounters
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.link_read import (
    parse_rate,
    read_pcie_links,
    read_port_samples,
    read_sysfs_counters,
)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("400 Gb/sec (4X NDR)", (400.0, 4)),
        ("200 Gb/sec (2X NDR)", (200.0, 2)),
        ("53.125 Gb/sec (1X HDR)", (53.125, 1)),
        ("100 Gb/sec", (100.0, None)),
        ("garbage", (None, None)),
    ],
)
def test_parse_rate_reads_speed_and_lanes(
    text: str, parsed: tuple[float | None, int | None]
) -> None:
    assert parse_rate(text) == parsed


def test_every_port_is_read_with_state_rate_width_and_all_error_counters(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path, hcas=10, ports=2, gpus=0)
    sysfs.add_errors("mlx5_3", 1, "symbol_error", 7)
    sysfs.set_up("mlx5_2", 2, up=False)
    ports = read_port_samples(tmp_path)
    assert [(p.hca, p.port) for p in ports][:4] == [
        ("mlx5_0", 1),
        ("mlx5_0", 2),
        ("mlx5_1", 1),
        ("mlx5_1", 2),
    ]
    assert ports[-1].hca == "mlx5_9"  # natural order: mlx5_10 would come last if present
    three = next(p for p in ports if p.hca == "mlx5_3" and p.port == 1)
    assert (three.state, three.phys_state, three.rate_gbps, three.width) == (
        "ACTIVE",
        "LinkUp",
        400.0,
        4,
    )
    assert set(three.counters) == {
        *ERROR_COUNTERS,
        *HW_COUNTERS,
        *RETRANSMISSION_COUNTERS,
        *CONGESTION_COUNTERS,
        *NETDEV_COUNTERS,
    }
    assert three.unread == frozenset()
    assert three.counters["symbol_error"] == 7
    down = next(p for p in ports if p.hca == "mlx5_2" and p.port == 2)
    assert (down.state, down.phys_state, down.up) == ("DOWN", "Polling", False)


def test_a_missing_counter_is_left_out_not_zero(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path, hcas=1, gpus=0)
    (sysfs.port_dir("mlx5_0") / "counters" / "port_xmit_discards").unlink()
    sample = read_port_samples(tmp_path)[0]
    assert "port_xmit_discards" not in sample.counters
    assert "port_xmit_discards" in sample.unread


def test_driver_counters_an_older_driver_lacks_are_unread_not_zero(tmp_path: Path) -> None:
    FakeSysfs(tmp_path, hcas=1, gpus=0, hw_counters=("packet_seq_err", "out_of_sequence"))
    sample = read_port_samples(tmp_path)[0]
    assert {"packet_seq_err", "out_of_sequence", "port_xmit_wait"} <= set(sample.counters)
    assert sample.unread == frozenset(WATCHED_COUNTERS) - set(sample.counters)
    assert {"roce_adp_retrans", "np_cnp_sent", "rnr_nak_retry_err"} <= sample.unread


def test_pcie_links_of_hcas_and_gpus_are_read_through_the_device_links(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path, hcas=2, gpus=2)
    sysfs.set_pcie("mlx5_1", speed=16.0, width=8)
    links = read_pcie_links(tmp_path)
    assert [(link.role, link.name) for link in links] == [
        ("hca", "mlx5_0"),
        ("hca", "mlx5_1"),
        ("gpu", "0000:40:00.0"),
        ("gpu", "0000:41:00.0"),
    ]
    one = links[1]
    assert (one.bdf, one.speed_gts, one.max_speed_gts, one.width, one.max_width) == (
        "0000:11:00.0",
        16.0,
        32.0,
        8,
        16,
    )


def test_an_empty_root_has_no_ports_and_no_links(tmp_path: Path) -> None:
    assert read_port_samples(tmp_path) == []
    assert read_pcie_links(tmp_path) == []


def test_the_pcie_path_maximum_includes_the_upstream_ports(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path, hcas=1, gpus=0)
    slot = sysfs.pci_root / "0000:00:01.0"  # the root port the HCA sits below: a Gen4 slot
    (slot / "max_link_speed").write_text("16.0 GT/s PCIe\n")
    (slot / "max_link_width").write_text("16\n")
    sysfs.set_pcie("mlx5_0", speed=16.0, width=16)
    (link,) = read_pcie_links(tmp_path)
    assert (link.max_speed_gts, link.path_max_speed_gts, link.path_max_width) == (32.0, 16.0, 16)


def test_hw_counters_and_the_netdev_counters_are_read(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path, hcas=1, ports=2, gpus=0)
    hw = sysfs.port_dir("mlx5_0", 2) / "hw_counters"
    (hw / "rnr_nak_retry_err").write_text("3\n")
    (hw / "roce_slow_restart").write_text("5\n")
    net = (tmp_path / "class" / "infiniband" / "mlx5_0" / "device").resolve() / "net"
    second = net / "ibp10s0d1"  # port 2's netdev: dev_port 1
    (second / "carrier_changes").write_text("4\n")
    (second / "statistics" / "rx_crc_errors").write_text("9\n")
    one, two = read_port_samples(tmp_path)
    assert (one.counters["rnr_nak_retry_err"], one.counters["carrier_changes"]) == (0, 1)
    assert two.counters["rnr_nak_retry_err"] == 3
    assert two.counters["roce_slow_restart"] == 5
    assert two.counters["carrier_changes"] == 4
    assert two.counters["rx_crc_errors"] == 9


def test_sysfs_tree_is_read_by_guid_or_by_node_and_rail(tmp_path: Path) -> None:
    def port(device: str, symbol: int, rate: str, guid: str | None = None) -> None:
        counters = tmp_path / device / "ports" / "1" / "counters"
        counters.mkdir(parents=True)
        (counters / "symbol_error").write_text(f"{symbol}\n")
        (counters / "link_downed").write_text("0\n")
        (tmp_path / device / "ports" / "1" / "rate").write_text(rate)
        if guid:
            (tmp_path / device / "node_guid").write_text(guid)

    port("mlx5_0", 3, "400 Gb/sec (4X NDR)\n", guid="e09d:7303:0085:94bc\n")
    port("mlx5_1", 50, "200 Gb/sec (4X HDR)\n")
    counters = read_sysfs_counters(tmp_path, node="dgx-01")
    assert counters == [
        PortCounters(hca="e09d7303008594bc", port=1, symbol_errors=3, rate_gbps=400),
        PortCounters(node="dgx-01", rail=1, symbol_errors=50, rate_gbps=200),
    ]
