"""The fabric profile filled from the fabric's own settings: opensm.conf and mlnx_qos output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.profile_discovery import from_mlnx_qos, from_opensm_conf

PUBLISHED = Path(__file__).resolve().parents[1] / "rdma_init" / "data" / "published"
OPENSM = (PUBLISHED / "opensm.conf").read_text()
MLNX_QOS = (PUBLISHED / "mlnx_qos-eth2.txt").read_text()


def test_opensm_conf_gives_the_adaptive_routing_service_levels() -> None:
    found = from_opensm_conf(OPENSM, "opensm.conf")
    assert found.profile == {
        "linkLayer": "infiniband",
        "infiniband": {"adaptiveRoutingServiceLevels": [1]},
    }
    assert "routing engine: ar_updn" in found.notes


def test_adaptive_routing_off_gives_no_service_level() -> None:
    found = from_opensm_conf(OPENSM.replace("ar_mode 2", "ar_mode 0"), "opensm.conf")
    assert found.profile["infiniband"] == {"adaptiveRoutingServiceLevels": []}


def test_a_bad_mask_names_the_line() -> None:
    with pytest.raises(InputError, match=r"opensm.conf:\d+: 'SL1' is not a number"):
        from_opensm_conf(OPENSM.replace("ar_sl_mask 0x0002", "ar_sl_mask SL1"), "opensm.conf")


def test_several_lossless_priorities_are_not_guessed_between() -> None:
    found = from_mlnx_qos(MLNX_QOS, "mlnx_qos")
    assert found.profile == {"linkLayer": "roce", "roce": {}}
    assert any("pass --dscp" in note for note in found.notes)


def test_a_dscp_on_a_lossless_priority_gives_the_traffic_class() -> None:
    found = from_mlnx_qos(MLNX_QOS, "mlnx_qos", dscp=16)
    assert found.profile["roce"] == {"trafficClass": 64, "dscp": 16, "pfcPriority": 2}


def test_one_lossless_priority_takes_roces_conventional_dscp() -> None:
    one = MLNX_QOS.replace("enabled     1   0   1   0   0   0   1   1",
                           "enabled     0   0   0   1   0   0   0   0")  # fmt: skip
    found = from_mlnx_qos(one, "mlnx_qos")
    assert found.profile["roce"] == {"trafficClass": 104, "dscp": 26, "pfcPriority": 3}


def test_a_dscp_without_pfc_is_said_not_filled() -> None:
    found = from_mlnx_qos(MLNX_QOS, "mlnx_qos", dscp=26)
    assert found.profile["roce"] == {}
    assert any("priority 3, which has no PFC" in note for note in found.notes)
