from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from rdma_host_builder import (
    UNLIMITED_MEMLOCK,
    HostTree,
    PodView,
    dgx_h100,
    gb200_like,
    roce_multus_host,
    roce_v2_host,
)

from tpfabric_rdma_init.affinity import assign_rails, select_fabric_hcas
from tpfabric_rdma_init.discovery import discover_host
from tpfabric_rdma_init.nccl_config import (
    OverridesError,
    apply_overrides,
    build_nccl_settings,
    check_traffic_class,
    parse_overrides,
    render_nccl_conf,
    render_topology_xml,
    roce_gid_index,
    socket_interface,
)

# Spelled out on purpose: the exact-match '=' and mlx5_10/11 without mlx5_1 are the point.
DGX_IB_HCA = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"


def settings_for(root: Path, transport: str = "ib") -> tuple[dict[str, str], list[str]]:
    inventory = discover_host(root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    rails = assign_rails(selection.endpoints, None)
    return build_nccl_settings(
        inventory,
        selection,
        rails,
        transport=transport,
        socket_ifname=socket_interface(inventory),
    )


def test_dgx_h100_settings(host_root: Path) -> None:
    settings, warnings = settings_for(dgx_h100(host_root).root)
    assert settings == {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_HCA": DGX_IB_HCA,
        "NCCL_CROSS_NIC": "0",
    }
    assert warnings == []


def test_ib_hca_uses_exact_match_so_mlx5_1_cannot_pull_in_mlx5_10(host_root: Path) -> None:
    settings, _ = settings_for(dgx_h100(host_root).root)
    assert settings["NCCL_IB_HCA"].startswith("=")
    assert "mlx5_1:" not in settings["NCCL_IB_HCA"].split(",")


def test_roce_v2_picks_the_ipv4_mapped_v2_gid_index(host_root: Path) -> None:
    settings, warnings = settings_for(roce_v2_host(host_root).root)
    assert settings["NCCL_IB_GID_INDEX"] == "3"
    assert settings["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert settings["NCCL_CROSS_NIC"] == "0"
    assert warnings == []


def test_roce_gid_indexes_that_differ_are_left_to_nccl(host_root: Path) -> None:
    settings, warnings = settings_for(roce_v2_host(host_root, second_gid_index=4).root)
    assert "NCCL_IB_GID_INDEX" not in settings
    assert settings["NCCL_IB_ADDR_FAMILY"] == "AF_INET"
    assert any("differs between rails (mlx5_0:1=3, mlx5_1:1=4)" in w for w in warnings)


def pod_settings(root: Path, pod: Path) -> tuple[dict[str, str], list[str]]:
    inventory = discover_host(root, UNLIMITED_MEMLOCK, process_root=pod)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    rails = assign_rails(selection.endpoints, None)
    return build_nccl_settings(
        inventory, selection, rails, transport="ib", socket_ifname=socket_interface(inventory)
    )


def test_roce_gid_is_the_one_of_the_pods_own_netdev_per_rail(
    host_root: Path, tmp_path: Path
) -> None:
    pod = PodView(tmp_path / "pod").interface("eth0", default_route=True)
    pod.interface("net1").interface("net2")
    settings, _ = pod_settings(roce_multus_host(host_root).root, pod.root)
    assert settings["NCCL_IB_GID_INDEX"] == "5"  # not 3: that GID is the host's ens*f0np0


def test_rails_whose_pod_gid_nccl_would_miss_are_problems(host_root: Path, tmp_path: Path) -> None:
    pod = PodView(tmp_path / "pod").interface("eth0", default_route=True)
    pod.interface("net1").interface("net2")
    inventory = discover_host(
        roce_multus_host(host_root, same_index=False).root, UNLIMITED_MEMLOCK, process_root=pod.root
    )
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    index, problems, _ = roce_gid_index(inventory, selection.endpoints)
    assert index is None
    assert [(p.code, p.hca) for p in problems] == [
        ("foreign-gid", "mlx5_0"),
        ("foreign-gid", "mlx5_1"),
    ]


def test_gdr_level_is_never_written_more_permissive_than_nccls_default(host_root: Path) -> None:
    settings, _ = settings_for(gb200_like(host_root).root)  # every pair is PHB
    assert "NCCL_NET_GDR_LEVEL" not in settings


def test_socket_interface_is_the_pods_primary_never_a_storage_netdev(host_root: Path) -> None:
    tree = HostTree(host_root).interface("eth0")  # primary, but no default route in this netns
    tree.hca(
        "mlx5_0",
        "0000:0c:00.0",
        ("0000:0c:01.0",),
        root_complex="pci0000:0c",
        numa=0,
        uverbs=0,
        link_layer="Ethernet",
        netdev="enp12s0np0",
    )
    tree.interface("ib0", kind=32)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    assert socket_interface(inventory) == "eth0"
    assert socket_interface(inventory, primary="eth0") == "eth0"
    assert socket_interface(inventory, primary="enp12s0np0") == "eth0"


def test_traffic_class_comes_from_spec_nccl_and_is_checked() -> None:
    chosen, warnings = check_traffic_class({"NCCL_IB_TC": "106", "NCCL_IB_SL": "3"}, roce=True)
    assert chosen == {"NCCL_IB_TC": "106", "NCCL_IB_SL": "3"}
    assert warnings == []
    assert check_traffic_class({}, roce=True)[1][0].startswith("RoCE without NCCL_IB_TC")
    with pytest.raises(OverridesError, match=r"NCCL_IB_SL must be an integer 0\.\.15"):
        check_traffic_class({"NCCL_IB_SL": "16"}, roce=True)


def test_tcp_transport_disables_ib(host_root: Path) -> None:
    settings, _ = settings_for(dgx_h100(host_root).root, transport="tcp")
    assert settings == {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}


def test_ib_without_gpudirect_sets_gdr_level_loc(host_root: Path) -> None:
    settings, _ = settings_for(dgx_h100(host_root).root, transport="ib-no-gdr")
    assert settings["NCCL_NET_GDR_LEVEL"] == "LOC"


def test_conf_file_lines_and_comments_without_equal_signs() -> None:
    text = render_nccl_conf({"NCCL_IB_HCA": "=mlx5_0:1"}, ("policy=required",))
    assert text == "# policy:required\nNCCL_IB_HCA==mlx5_0:1\n"


def test_overrides_replace_add_and_remove() -> None:
    overrides = parse_overrides('{"NCCL_DEBUG": "INFO", "NCCL_CROSS_NIC": null, "NCCL_X": true}')
    merged = apply_overrides({"NCCL_CROSS_NIC": "0", "NCCL_IB_HCA": "=a:1"}, overrides)
    assert merged == {"NCCL_IB_HCA": "=a:1", "NCCL_DEBUG": "INFO", "NCCL_X": "1"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ("[1]", "expected a JSON object"),
        ('{"LD_PRELOAD": "x"}', "not an NCCL_\\* variable"),
        ('{"NCCL_DEBUG": [1]}', "must be a string, number, bool or null"),
        ('{"NCCL_DEBUG": "a\\nb"}', "line break"),
    ],
)
def test_bad_overrides_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(OverridesError, match=problem):
        parse_overrides(text)


def test_topology_xml_nests_gpu_and_nic_under_their_switch(host_root: Path) -> None:
    inventory = discover_host(dgx_h100(host_root).root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    system = ET.fromstring(render_topology_xml(inventory, selection, gdr=True))
    assert [cpu.get("numaid") for cpu in system.findall("cpu")] == ["0", "1"]
    switch = system.find("cpu/pci[@busid='0000:11:00.0']")
    assert switch is not None
    assert [pci.get("busid") for pci in switch.findall("pci")] == ["0000:13:00.0", "0000:14:00.0"]
    nets = [net.get("name") for net in system.iter("net")]
    assert nets == list(selection.hcas)
    net0 = next(system.iter("net"))
    assert (net0.get("speed"), net0.get("gdr")) == ("400000", "1")
