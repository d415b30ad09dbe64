from __future__ import annotations

from pathlib import Path

import pytest
from rdma_host_builder import DGX_COMPUTE_HCAS, DGX_STORAGE_HCAS, UNLIMITED_MEMLOCK, dgx_h100

from tpfabric_rdma_init.affinity import (
    PathType,
    RailsAnnotationError,
    assign_rails,
    parse_rails_annotation,
    select_fabric_hcas,
)
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


def test_rails_follow_hca_order_without_annotation() -> None:
    rails = assign_rails(("mlx5_0", "mlx5_3", "mlx5_10"), None)
    assert rails.source == "hca-order"
    assert rails.rails == ((0, "mlx5_0"), (1, "mlx5_3"), (2, "mlx5_10"))


def test_rails_annotation_selects_and_pins_hcas() -> None:
    rails = assign_rails(("mlx5_0", "mlx5_3", "mlx5_4"), "1, 0=mlx5_4")
    assert rails.source == "annotation"
    assert rails.rails == ((0, "mlx5_4"), (1, "mlx5_3"))
    assert rails.hcas == ("mlx5_4", "mlx5_3")


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
        assign_rails(("mlx5_0", "mlx5_3"), value)


def test_rails_annotation_parser_keeps_pins() -> None:
    assert parse_rails_annotation("0,1=mlx5_3,") == ((0, None), (1, "mlx5_3"))
