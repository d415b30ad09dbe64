from __future__ import annotations

from pathlib import Path

import pytest
from rdma_host_builder import (
    DGX_COMPUTE_HCAS,
    DGX_STORAGE_HCAS,
    GB200_GPUS,
    UNLIMITED_MEMLOCK,
    cx8_two_plane,
    dgx_h100,
    gb200_like,
    gb200_nic_name,
    gpu_uuid,
    hgx_dual_port_cx7,
    hgx_dual_port_one_cabled,
    hgx_shared_switch,
    spectrum_x_bf3,
)

from tpfabric_rdma_init.affinity import (
    FabricSelection,
    NicPort,
    PathType,
    RailsAnnotationError,
    assign_rails,
    parse_rails_annotation,
    select_fabric_hcas,
)
from tpfabric_rdma_init.checks import check_host
from tpfabric_rdma_init.discovery import HostInventory, discover_host


def dgx_inventory(root: Path) -> HostInventory:
    return discover_host(dgx_h100(root).root, UNLIMITED_MEMLOCK)


def test_every_dgx_gpu_pairs_with_the_hca_behind_its_own_switch(host_root: Path) -> None:
    inventory = dgx_inventory(host_root)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    assert [pair.hca for pair in selection.pairs] == list(DGX_COMPUTE_HCAS)
    assert {pair.path for pair in selection.pairs} == {PathType.PIX}


def test_storage_hcas_are_never_fabric_hcas(host_root: Path) -> None:
    inventory = dgx_inventory(host_root)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    assert selection.hcas == DGX_COMPUTE_HCAS
    assert set(selection.excluded) == set(DGX_STORAGE_HCAS)
    assert "storage" in selection.excluded["mlx5_1"]


def test_an_excluded_hca_is_replaced_by_the_next_closest(host_root: Path) -> None:
    inventory = dgx_inventory(host_root)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus, frozenset({"mlx5_0"}))
    assert selection.excluded["mlx5_0"] == "excluded by --exclude-hca"
    # GPU 0 falls back to a PHB HCA on its own NUMA node, the least used one first
    assert selection.pairs[0].path == PathType.PHB
    assert selection.pairs[0].hca != "mlx5_0"


def test_without_gpus_the_hcas_allocated_to_the_pod_are_used(host_root: Path) -> None:
    dgx_h100(host_root)
    allocated = {"uverbs0", "uverbs3"}
    for uverbs in (host_root / "dev" / "infiniband").iterdir():
        if uverbs.name.startswith("uverbs") and uverbs.name not in allocated:
            uverbs.unlink()
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, ())
    assert selection.hcas == ("mlx5_0", "mlx5_3")
    assert selection.pairs == ()
    assert "not allocated" in selection.excluded["mlx5_4"]


def ports(*names: str) -> tuple[NicPort, ...]:
    return tuple(NicPort(name, 1) for name in names)


def test_rails_follow_the_pairing_order_without_annotation() -> None:
    rails = assign_rails(ports("mlx5_0", "mlx5_3", "mlx5_10"), None)
    assert rails.source == "pairing"
    assert [(rail, str(port)) for rail, port in rails.rails] == [
        (0, "mlx5_0:1"),
        (1, "mlx5_3:1"),
        (2, "mlx5_10:1"),
    ]


def test_rails_annotation_selects_and_pins_hcas_and_ports() -> None:
    rails = assign_rails(ports("mlx5_0", "mlx5_3", "mlx5_4"), "1, 0=mlx5_4")
    assert rails.source == "annotation"
    assert rails.endpoints == ports("mlx5_4", "mlx5_3")
    assert rails.hcas == ("mlx5_4", "mlx5_3")
    two_ports = (NicPort("mlx5_0", 1), NicPort("mlx5_0", 2))
    assert assign_rails(two_ports, "0=mlx5_0:2").endpoints == (NicPort("mlx5_0", 2),)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0,x", "'x' is not a rail index"),
        ("1,1", "rail listed twice"),
        ("5", "rail 5 has no HCA"),
        ("0=mlx5_7", "rail 0 names mlx5_7, which is not a fabric HCA"),
        ("0=mlx5_0,1=mlx5_0", "one HCA is given two rails"),
    ],
)
def test_bad_rails_annotations_say_what_is_wrong(value: str, problem: str) -> None:
    with pytest.raises(RailsAnnotationError, match=problem):
        assign_rails(ports("mlx5_0", "mlx5_3"), value)


def test_rails_annotation_parser_keeps_pins() -> None:
    assert parse_rails_annotation("0,1=mlx5_3,") == ((0, None), (1, "mlx5_3"))


def fabric(root: Path, visible: str | None = None) -> tuple[str, ...]:
    inventory = discover_host(root, UNLIMITED_MEMLOCK, visible_devices=visible)
    return tuple(str(e) for e in select_fabric_hcas(inventory.hcas, inventory.gpus).endpoints)


def test_a_pod_with_four_of_eight_gpus_uses_only_their_hcas(host_root: Path) -> None:
    visible = ",".join(gpu_uuid(minor) for minor in (4, 5, 6, 7))
    assert fabric(dgx_h100(host_root).root, visible) == (
        "mlx5_6:1",
        "mlx5_9:1",
        "mlx5_10:1",
        "mlx5_11:1",
    )


def test_exclusively_allocated_hcas_are_the_only_candidates(host_root: Path) -> None:
    root = dgx_h100(host_root).drop_uverbs({"uverbs0", "uverbs3"}).gpu_device_nodes((0, 1)).root
    inventory = discover_host(root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    assert [str(e) for e in selection.endpoints] == ["mlx5_0:1", "mlx5_3:1"]
    assert "not allocated" in selection.excluded["mlx5_4"]


def test_hgx_dual_port_cx7_keeps_both_pci_functions_of_every_gpu(host_root: Path) -> None:
    endpoints = fabric(hgx_dual_port_cx7(host_root).root)
    assert endpoints == tuple(f"mlx5_{i}:1" for i in range(16))


def test_a_second_port_of_one_hca_is_kept(host_root: Path) -> None:
    endpoints = fabric(hgx_dual_port_cx7(host_root, separate_pfs=False).root)
    assert endpoints[:4] == ("mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_1:2")
    assert len(endpoints) == 16


def test_cx8_keeps_both_planes_of_every_gpu(host_root: Path) -> None:
    inventory = discover_host(cx8_two_plane(host_root).root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    per_gpu: dict[str, list[str]] = {}
    for pair in selection.pairs:
        per_gpu.setdefault(pair.gpu, []).append(pair.hca)
    assert list(per_gpu.values()) == [[f"mlx5_{2 * i}", f"mlx5_{2 * i + 1}"] for i in range(4)]
    assert {pair.path for pair in selection.pairs} == {PathType.PIX}


@pytest.mark.parametrize("reversed_names", [False, True], ids=["bus-order", "names-reversed"])
def test_switchless_gb200_pairs_by_pcie_root_and_never_with_the_bluefield(
    host_root: Path, reversed_names: bool
) -> None:
    inventory = discover_host(
        gb200_like(host_root, reversed_names=reversed_names).root, UNLIMITED_MEMLOCK
    )
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    expected_nics = ("0002:03:00.0", "0003:03:00.0", "0012:03:00.0", "0013:03:00.0")
    assert [(pair.gpu, pair.hca) for pair in selection.pairs] == [
        (gpu, gb200_nic_name(nic, reversed_names=reversed_names))
        for gpu, nic in zip(GB200_GPUS, expected_nics, strict=True)
    ]
    assert {pair.path for pair in selection.pairs} == {PathType.PHB}
    for bluefield in ("0000:03:00.0", "0010:03:00.0"):
        name = gb200_nic_name(bluefield, reversed_names=reversed_names)
        assert "DPU" in selection.excluded[name]


def test_rails_follow_gpu_order_when_names_run_against_the_bus(host_root: Path) -> None:
    endpoints = fabric(gb200_like(host_root, reversed_names=True).root)
    assert endpoints == ("mlx5_4:1", "mlx5_3:1", "mlx5_1:1", "mlx5_0:1")


def selection_of(root: Path, exclude: frozenset[str] = frozenset()) -> FabricSelection:
    inventory = discover_host(root, UNLIMITED_MEMLOCK)
    return select_fabric_hcas(inventory.hcas, inventory.gpus, exclude)


def one_nic_per_gpu(selection: FabricSelection) -> list[str]:
    return [pair.hca for pair in selection.pairs]


@pytest.mark.parametrize("problem", ["down", "retrained"])
def test_a_compute_nic_keeps_its_gpu_and_rail_when_its_port_is_down_or_retrained(
    host_root: Path, problem: str
) -> None:
    # two GPUs and two NICs per PCIe switch: the live rate (10 Gb/s SDR when down, 200 when
    # retrained) must not make mlx5_2 a "slower" NIC that loses the tie to its sibling mlx5_3
    root = hgx_shared_switch(host_root, **{problem: "mlx5_2"}).root
    selection = selection_of(root)
    assert one_nic_per_gpu(selection) == [f"mlx5_{i}" for i in range(8)]
    assert NicPort("mlx5_2", 1) in selection.endpoints
    assert "mlx5_2" not in selection.excluded


def test_a_retrained_compute_port_is_a_problem_of_its_rail(host_root: Path) -> None:
    root = hgx_shared_switch(host_root, retrained="mlx5_2").root
    inventory = discover_host(root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    problems, _ = check_host(inventory, selection.endpoints)
    assert [(p.code, p.hca, p.port) for p in problems] == [("port-degraded", "mlx5_2", 1)]
    assert "200 Gb/s" in problems[0].message
    assert "400 Gb/s" in problems[0].message


@pytest.mark.parametrize("separate_pfs", [False, True], ids=["two-ports", "two-functions"])
def test_the_uncabled_port_of_a_dual_port_card_is_not_a_rail(
    host_root: Path, separate_pfs: bool
) -> None:
    selection = selection_of(hgx_dual_port_one_cabled(host_root, separate_pfs=separate_pfs).root)
    if separate_pfs:
        assert [str(e) for e in selection.endpoints] == [f"mlx5_{2 * i}:1" for i in range(8)]
        assert "not cabled" in selection.excluded["mlx5_1:1"]
    else:
        assert [str(e) for e in selection.endpoints] == [f"mlx5_{i}:1" for i in range(8)]
        assert "not cabled" in selection.excluded["mlx5_0:2"]


def test_a_bluefield_supernic_on_the_gpu_switch_is_a_rail_and_the_dpu_never(
    host_root: Path,
) -> None:
    root = spectrum_x_bf3(host_root).root
    assert [str(e) for e in selection_of(root).endpoints] == [f"mlx5_{i}:1" for i in (2, 3, 4, 5)]
    # GPU 0's SuperNIC excluded: it falls back to the other SuperNICs, never to the DPU
    selection = selection_of(root, frozenset({"mlx5_2"}))
    assert "mlx5_0" not in selection.hcas
    assert "mlx5_1" not in selection.hcas
    assert "DPU" in selection.excluded["mlx5_0"]


def test_a_gpu_without_its_connectx_never_falls_back_to_the_bluefield_dpu(
    host_root: Path,
) -> None:
    root = gb200_like(host_root).root
    selection = selection_of(root, frozenset({"mlx5_1", "mlx5_2"}))  # socket 0's ConnectX-7
    assert "mlx5_0" not in selection.hcas
    assert "DPU" in selection.excluded["mlx5_0"]


def test_the_init_containers_rule_is_the_fabric_agents_rule() -> None:
    from tpfabric_fabric_agent import agent  # noqa: PLC0415
    from tpfabric_rdma_init import compute_rails  # noqa: PLC0415

    for name in ("compute_nic_roles", "matches_override", "pair_gpus_with_hcas", "uncabled_ports"):
        assert getattr(agent, name) is getattr(compute_rails, name), name
    here = Path(__file__).resolve().parents[3]
    assert not list((here / "core").rglob("compute_rails.py")), "one copy of the rule"


def guid_of(name: str) -> str:
    """The port GUID the fake host gives port 1 of ``name`` (node GUID b83fd203... + uverbs)."""
    return f"{0xB83FD20300000000 + int(name.split('_')[1]):016x}"


def test_rails_pinned_by_port_guid_follow_the_fabric_whatever_the_names(host_root: Path) -> None:
    """A DGX H100 (mlx5_0,3,4,5,6,9,10,11): the plan's map pins rail i to the port cabled to the
    rail-i leaf; here the fabric cables mlx5_5 and mlx5_6 the other way round from PCI order."""
    inventory = discover_host(dgx_h100(host_root).root, UNLIMITED_MEMLOCK)
    selection = select_fabric_hcas(inventory.hcas, inventory.gpus)
    fabric_order = [*DGX_COMPUTE_HCAS[:3], "mlx5_6", "mlx5_5", *DGX_COMPUTE_HCAS[5:]]
    annotation = ",".join(f"{rail}=0x{guid_of(name)}" for rail, name in enumerate(fabric_order))
    guids = {
        port.guid: NicPort(hca.name, port.number)
        for hca in inventory.hcas
        for port in hca.ports
        if port.guid
    }
    rails = assign_rails(selection.endpoints, annotation, port_guids=guids)
    assert rails.source == "annotation"
    assert [(rail, port.hca) for rail, port in rails.rails] == list(enumerate(fabric_order))


def test_a_pod_of_part_of_a_node_takes_the_pinned_rails_of_its_own_ports() -> None:
    mine = ports("mlx5_6", "mlx5_9")
    guids = {guid_of(n): NicPort(n, 1) for n in ("mlx5_0", "mlx5_6", "mlx5_9")}
    annotation = (
        "0=0x"
        + guid_of("mlx5_0")
        + ",4=0x"
        + guid_of("mlx5_6")
        + ",5=0x"
        + guid_of("mlx5_9")
        + ",7=0x"
        + guid_of("mlx5_11")
    )  # mlx5_11: another pod's, not even visible here
    rails = assign_rails(mine, annotation, port_guids=guids, whole_node=False)
    assert [(rail, port.hca) for rail, port in rails.rails] == [(4, "mlx5_6"), (5, "mlx5_9")]


def test_a_pinned_port_the_pod_does_not_have_is_one_line_naming_the_rail_and_the_port() -> None:
    guids = {guid_of("mlx5_0"): NicPort("mlx5_0", 1)}
    with pytest.raises(RailsAnnotationError) as caught:
        assign_rails(
            ports("mlx5_0"), "0=0x" + guid_of("mlx5_0") + ",1=0x00000000000000ff", port_guids=guids
        )
    words = str(caught.value)
    assert "rail 1 is port 0x00000000000000ff, which this pod does not have" in words
    assert "\n" not in words
    assert "topology.tpfabric.io/rail-ports" in words


def test_a_port_of_the_pod_on_no_pinned_rail_means_a_stale_map() -> None:
    guids = {guid_of(n): NicPort(n, 1) for n in ("mlx5_0", "mlx5_3")}
    with pytest.raises(RailsAnnotationError, match="port mlx5_3:1 of this pod is on none"):
        assign_rails(ports("mlx5_0", "mlx5_3"), "0=0x" + guid_of("mlx5_0"), port_guids=guids)


def test_a_pin_that_looks_like_a_guid_but_is_not_one_is_refused() -> None:
    with pytest.raises(RailsAnnotationError, match="not a port GUID"):
        assign_rails(ports("mlx5_0"), "0=0x12")
