"""Which ports the agent judges: the compute ports the init container pairs with GPUs, on the
init program's own host trees."""

from __future__ import annotations

from pathlib import Path

from rdma_host_builder import (
    DGX_COMPUTE_HCAS,
    add_virtual_function,
    dgx_h100,
    hgx_dual_port_one_cabled,
    spectrum_x_bf3,
)

from tpfabric_fabric_agent.__main__ import build_parser, settings_from_args
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent


class Quiet:
    def publish(self, publication: object) -> int:
        return 0


def agent_on(root: Path, **settings: object) -> FabricAgent:
    return FabricAgent(
        AgentSettings(node="n1", sys_root=root / "sys", **settings),  # type: ignore[arg-type]
        Quiet(),
        clock=lambda: 0.0,
    )


def test_the_dgx_h100_is_judged_on_its_eight_compute_ports_and_is_healthy(tmp_path: Path) -> None:
    fabric_agent = agent_on(dgx_h100(tmp_path).root)
    # the storage HCAs (200 Gb/s, two of them InfiniBand) are not rails: judged against the
    # 400 Gb/s compute ports they kept the node degraded for good
    assert list(fabric_agent.rails) == list(DGX_COMPUTE_HCAS)
    verdict = fabric_agent.step()
    assert verdict.state == "ok", verdict.reasons
    assert [(p.hca, p.rail) for p in verdict.ports] == [
        (name, rail) for rail, name in enumerate(DGX_COMPUTE_HCAS)
    ]


def test_an_sr_iov_virtual_function_is_not_judged(tmp_path: Path) -> None:
    root = dgx_h100(tmp_path).root
    add_virtual_function(root, "0000:14:00.0", "mlx5_12", 12)  # a VF of mlx5_0, unassigned
    fabric_agent = agent_on(root)
    assert "mlx5_12" not in fabric_agent.rails
    assert fabric_agent.step().state == "ok"


def test_the_uncabled_second_port_of_each_card_is_not_judged(tmp_path: Path) -> None:
    fabric_agent = agent_on(hgx_dual_port_one_cabled(tmp_path, separate_pfs=False).root)
    verdict = fabric_agent.step()
    assert [(p.hca, p.port) for p in verdict.ports] == [(f"mlx5_{i}", 1) for i in range(8)]
    assert verdict.state == "ok", verdict.reasons


def test_the_bluefield_dpu_is_not_judged_and_the_supernics_are(tmp_path: Path) -> None:
    fabric_agent = agent_on(spectrum_x_bf3(tmp_path).root)
    assert list(fabric_agent.rails) == ["mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"]


def test_a_node_override_by_pci_address_or_guid_names_the_compute_nics(tmp_path: Path) -> None:
    root = dgx_h100(tmp_path).root
    config = tmp_path / "agent.yaml"
    # mlx5_0 by PCI address, mlx5_3 by node GUID; another node's entry is not this node's
    config.write_text(
        "compute_nics:\n  n1: ['0000:14:00.0', 'b83f:d203:0000:0003']\n  n2: ['0000:34:00.0']\n"
    )
    args = build_parser().parse_args(
        ["--node", "n1", "--sys-root", str(root / "sys"), "--config", str(config)]
    )
    settings = settings_from_args(args)
    assert settings.compute_nics == ("0000:14:00.0", "b83f:d203:0000:0003")
    fabric_agent = FabricAgent(settings, Quiet(), clock=lambda: 0.0)
    assert fabric_agent.rails == {"mlx5_0": 0, "mlx5_3": 1}
    flag = build_parser().parse_args(
        ["--node", "n1", "--sys-root", str(root / "sys"), "--compute-nics", "0000:34:00.0"]
    )
    assert FabricAgent(settings_from_args(flag), Quiet()).rails == {"mlx5_3": 0}
