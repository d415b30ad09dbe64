"""`tpfabric topology profile`: the chart's fabric.profile values from the fabric's own files."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cli_runner import tpfabric

from tpfabric_cli.errors import EXIT_INPUT
from tpfabric_core.fabric_profile import parse_fabric_profile

PUBLISHED = Path(__file__).parents[1] / "rdma_init" / "data" / "published"


def test_opensm_conf_prints_values_the_chart_takes() -> None:
    result = tpfabric("topology", "profile", "--opensm-conf", PUBLISHED / "opensm.conf")
    assert result.exit_code == 0, result.output
    values = yaml.safe_load(result.stdout)
    profile = parse_fabric_profile(json.dumps(values["fabric"]["profile"]), "printed")
    assert profile.infiniband.chosen_service_level() == 1
    assert "ar_sl_mask 0x0002" in result.stderr


def test_mlnx_qos_with_a_dscp_and_ecmp_levels() -> None:
    result = tpfabric("topology", "profile", "--mlnx-qos", PUBLISHED / "mlnx_qos-eth2.txt",
                      "--dscp", "16", "--ecmp-level", "spine")  # fmt: skip
    assert result.exit_code == 0, result.output
    profile = yaml.safe_load(result.stdout)["fabric"]["profile"]
    assert profile["roce"]["trafficClass"] == 64
    assert profile["ecmp"] == {"levels": ["spine"]}


def test_both_files_or_none_is_refused() -> None:
    result = tpfabric("topology", "profile")
    assert result.exit_code == EXIT_INPUT
    assert "give exactly one of them" in result.stderr


def test_a_bad_ecmp_level_is_refused_with_the_field() -> None:
    result = tpfabric("topology", "profile", "--opensm-conf", PUBLISHED / "opensm.conf",
                      "--ecmp-level", "leaf")  # fmt: skip
    assert result.exit_code == EXIT_INPUT
    assert "fabric.profile.ecmp" in result.stderr
