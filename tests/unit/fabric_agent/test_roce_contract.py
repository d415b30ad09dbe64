"""The node against the fabric's contract: where the profile makes RoCE lossless on a priority,
each RoCE port's PFC, ECN and trust; the FabricContractMet condition the agent publishes."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.roce_contract import (
    CONTRACT_CONDITION,
    NetdevQos,
    contract_condition_patch,
    judge_contract,
)
from tpfabric_core.fabric_profile import FabricProfile, parse_fabric_profile
from tpfabric_fabric_agent.__main__ import main
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_fabric_agent.memory_node import MemoryNode
from tpfabric_fabric_agent.roce_qos import dcb_request, decode_ieee_pfc

LOSSLESS = FabricProfile.model_validate(
    {"linkLayer": "roce", "roce": {"trafficClass": 104, "dscp": 26, "pfcPriority": 3}}
)
ALL_ON = dict.fromkeys(range(8), True)


def qos(**fields: object) -> NetdevQos:
    values: dict[str, object] = {
        "netdev": "ens1f0np0",
        "ecn_np": ALL_ON,
        "ecn_rp": ALL_ON,
        "trust": "dscp",
        "pfc": frozenset({3}),
    }
    return NetdevQos(**(values | fields))  # type: ignore[arg-type]


def test_a_node_as_the_profile_says_meets_the_contract() -> None:
    verdict = judge_contract(LOSSLESS, [qos(), qos(netdev="ens2f0np0")])
    assert verdict is not None
    assert (verdict.status, verdict.reason) == ("True", "SettingsMatch")
    assert verdict.message == (
        "PFC and ECN on priority 3 and trust dscp on every RoCE fabric port (ens1f0np0, ens2f0np0)"
    )


def test_each_mismatch_is_named_with_its_netdev_and_priority() -> None:
    off = {**ALL_ON, 3: False}
    verdict = judge_contract(
        LOSSLESS, [qos(pfc=frozenset({4})), qos(netdev="ens2f0np0", ecn_rp=off, trust="pcp")]
    )
    assert verdict is not None
    assert (verdict.status, verdict.reason) == ("False", "SettingsMismatch")
    assert verdict.mismatches == (
        "PFC off on priority 3 on ens1f0np0",
        "ECN (reaction point) off on priority 3 on ens2f0np0",
        "trust pcp, not dscp, on ens2f0np0 (the profile marks RoCE with DSCP 26)",
    )


def test_what_cannot_be_read_is_unknown_never_a_match() -> None:
    verdict = judge_contract(
        LOSSLESS, [qos(pfc=None, pfc_unknown="not in the agent's network namespace", ecn_np=None)]
    )
    assert verdict is not None
    assert (verdict.status, verdict.reason) == ("Unknown", "SettingsUnreadable")
    assert verdict.message == (
        "PFC of ens1f0np0 unknown (not in the agent's network namespace); ECN (notification "
        "point) of ens1f0np0 not in sysfs"
    )


@pytest.mark.parametrize(
    "profile",
    [FabricProfile(), FabricProfile.model_validate({"linkLayer": "infiniband"}),
     FabricProfile.model_validate({"linkLayer": "roce"})],
)  # fmt: skip
def test_nothing_to_check_publishes_no_condition(profile: FabricProfile) -> None:
    assert judge_contract(profile, [qos()]) is None


def test_the_condition_is_rewritten_only_when_it_changes() -> None:
    verdict = judge_contract(LOSSLESS, [qos(pfc=frozenset())])
    assert verdict is not None
    first = contract_condition_patch(verdict, None, "2026-01-01T00:00:00Z")
    assert first is not None
    assert first["type"] == CONTRACT_CONDITION
    assert contract_condition_patch(verdict, first, "2026-01-01T00:01:00Z") is None


# -- DCB netlink --------------------------------------------------------------------------------


def answer(pfc_en: int | None, kind: int = 78) -> bytes:
    """Return a DCB netlink answer as the kernel builds it (include/uapi/linux/dcbnl.h)."""
    attributes = b""
    if pfc_en is not None:
        ieee_pfc = struct.pack("=BBBxH", 8, pfc_en, 0, 0) + b"\0" * 128  # requests, indications
        pfc = struct.pack("=HH", 4 + len(ieee_pfc), 2) + ieee_pfc
        attributes = struct.pack("=HH", 4 + len(pfc), 13 | 1 << 15) + pfc
    body = struct.pack("=BBH", socket.AF_UNSPEC, 21, 0) + attributes
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 1, 0) + body


def test_the_pfc_bitmap_of_a_dcb_answer_gives_the_enabled_priorities() -> None:
    assert decode_ieee_pfc(answer(0b0000_1000)) == frozenset({3})
    assert decode_ieee_pfc(answer(0b1000_1001)) == frozenset({0, 3, 7})
    assert decode_ieee_pfc(answer(None)) == (
        "the driver answers no IEEE DCB settings (DCBX not in IEEE mode?)"
    )
    error = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -95) + b"\0" * 16
    assert decode_ieee_pfc(error) == "DCB netlink refused: Operation not supported"
    assert decode_ieee_pfc(b"\0" * 4) == "a DCB netlink answer too short to read"


def test_the_request_names_the_interface() -> None:
    request = dcb_request("ens1f0np0")
    length, kind, flags = struct.unpack_from("=IHH", request)
    assert (length, kind, flags) == (len(request), 78, 1)
    assert b"ens1f0np0\0" in request


# -- the agent on a RoCE node -------------------------------------------------------------------


def roce_agent(
    tmp_path: Path, profile: FabricProfile = LOSSLESS
) -> tuple[FakeSysfs, FabricAgent, MemoryNode]:
    sysfs = FakeSysfs(tmp_path, hcas=2, gpus=2, link_layer="Ethernet")
    node = MemoryNode()
    settings = AgentSettings(
        node="roce-1", sys_root=tmp_path, judge=LinkJudgeConfig(), profile=profile
    )
    agent = FabricAgent(settings, NodePublisher("roce-1", node), pfc=sysfs.pfc_enabled)
    return sysfs, agent, node


def contract_of(node: MemoryNode) -> dict[str, str]:
    return next(c for c in node.conditions if c["type"] == CONTRACT_CONDITION)


def test_the_agent_publishes_pfc_off_on_the_lossless_priority_naming_the_netdev(
    tmp_path: Path,
) -> None:
    sysfs, agent, node = roce_agent(tmp_path)
    agent.step()
    assert contract_of(node)["status"] == "True"
    sysfs.set_pfc("mlx5_1", 1, [4])
    agent.step()
    condition = contract_of(node)
    assert (condition["status"], condition["reason"]) == ("False", "SettingsMismatch")
    assert condition["message"] == f"PFC off on priority 3 on {sysfs.netdev('mlx5_1')}"
    fabric = next(c for c in node.conditions if c["type"] == "FabricHealthy")
    assert fabric["status"] == "True"  # the links are fine: the settings are not


def test_the_agent_reads_ecn_and_trust_from_sysfs(tmp_path: Path) -> None:
    sysfs, agent, node = roce_agent(tmp_path)
    sysfs.set_ecn("mlx5_0", 1, 3, np=False, rp=True)
    sysfs.set_trust("mlx5_1", 1, "pcp")
    agent.step()
    assert contract_of(node)["message"] == (
        f"ECN (notification point) off on priority 3 on {sysfs.netdev('mlx5_0')}; trust pcp, "
        f"not dscp, on {sysfs.netdev('mlx5_1')} (the profile marks RoCE with DSCP 26)"
    )


def test_an_infiniband_profile_publishes_no_contract_condition(tmp_path: Path) -> None:
    _, agent, node = roce_agent(tmp_path, FabricProfile())
    agent.step()
    assert [c["type"] for c in node.conditions] == ["FabricHealthy"]


def test_a_bad_profile_stops_the_agent_at_start_naming_the_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        ["--node=n", "--once", '--fabric-profile={"linkLayer": "roce", "roce": {"pfcPriority": 9}}']
    )
    assert code == 2
    assert capsys.readouterr().err.startswith(
        "tpfabric-fabric-agent: --fabric-profile: fabric.profile.roce.pfcPriority: "
    )


def test_the_profile_comes_from_the_environment_as_the_operators_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tpfabric_fabric_agent.__main__ import build_parser, settings_from_args  # noqa: PLC0415

    monkeypatch.setenv(
        "TPFABRIC_FABRIC_PROFILE", '{"linkLayer": "roce", "roce": {"pfcPriority": 3}}'
    )
    settings = settings_from_args(build_parser().parse_args(["--node=n"]))
    assert settings.profile == parse_fabric_profile(
        '{"linkLayer": "roce", "roce": {"pfcPriority": 3}}', "x"
    )
