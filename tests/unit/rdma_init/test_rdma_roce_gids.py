"""RoCE GIDs: IPv6 fabrics, the pod's GID told by its own addresses, the user's pinned index."""

from __future__ import annotations

from pathlib import Path

from rdma_host_builder import (
    UNLIMITED_MEMLOCK,
    PodView,
    pod_addresses,
    roce_ipv6_macvlan_host,
    roce_multus_host,
)

from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

TC = '"NCCL_IB_TC": "106"'


def _ipv6_pod(tmp_path: Path) -> PodView:
    pod = PodView(tmp_path / "pod").interface("eth0", default_route=True)
    return pod_addresses(pod, {"eth0": "10.244.1.5"}, {"net1": "fd77:0::9", "net2": "fd77:1::9"})


def _options(root: Path, shared_dir: Path, pod: PodView, overrides: str) -> InitOptions:
    return InitOptions(
        shared_dir=shared_dir,
        root=root,
        process_root=pod.root,
        policy="required",
        nccl_library="image",
        nccl_overrides="{" + overrides + "}",
    )


def test_ipv6_roce_pod_gid_is_chosen_by_the_pods_address(
    host_root: Path, shared_dir: Path, tmp_path: Path
) -> None:
    # Index 4 is another pod's net1/net2: same netdev name, another address.
    root = roce_ipv6_macvlan_host(host_root).root
    result = prepare_pod(_options(root, shared_dir, _ipv6_pod(tmp_path), TC), UNLIMITED_MEMLOCK)
    assert result.exit_code == 0, [p.message for p in result.problems]
    assert result.settings["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert result.settings["NCCL_IB_GID_INDEX"] == "5"


def test_ipv6_roce_unpinned_asks_nccl_for_the_ipv6_family(
    host_root: Path, shared_dir: Path, tmp_path: Path
) -> None:
    root = roce_ipv6_macvlan_host(host_root).root
    # Only this pod's macvlan GIDs are left on the ports: NCCL's own pick is the pod's.
    for hca in ("mlx5_0", "mlx5_1"):
        for index in ("2", "3", "4"):
            (root / f"sys/class/infiniband/{hca}/ports/1/gids/{index}").write_text(
                "0000:0000:0000:0000:0000:0000:0000:0000\n"
            )
    (root / "sys/class/infiniband/mlx5_1/ports/1/gids/5").rename(
        root / "sys/class/infiniband/mlx5_1/ports/1/gids/6"
    )
    for attr in ("types", "ndevs"):
        (root / f"sys/class/infiniband/mlx5_1/ports/1/gid_attrs/{attr}/5").rename(
            root / f"sys/class/infiniband/mlx5_1/ports/1/gid_attrs/{attr}/6"
        )
    result = prepare_pod(_options(root, shared_dir, _ipv6_pod(tmp_path), TC), UNLIMITED_MEMLOCK)
    assert result.exit_code == 0, [p.message for p in result.problems]
    assert "NCCL_IB_GID_INDEX" not in result.settings
    assert result.settings["NCCL_IB_ADDR_FAMILY"] == "AF_INET6"


def test_a_pinned_gid_index_of_another_namespace_fails_required(
    host_root: Path, shared_dir: Path, tmp_path: Path
) -> None:
    # spec.nccl pins index 3, the host's GID: MODIFY_QP would fail in the pod.
    pod = pod_addresses(
        PodView(tmp_path / "pod").interface("eth0", default_route=True),
        {"eth0": "10.244.1.5", "net1": "10.77.0.9", "net2": "10.77.1.9"},
        {},
    )
    root = roce_multus_host(host_root).root
    pinned = f'{TC}, "NCCL_IB_GID_INDEX": "3"'
    result = prepare_pod(_options(root, shared_dir, pod, pinned), UNLIMITED_MEMLOCK)
    assert result.exit_code == 1
    assert [p.code for p in result.problems] == ["gid-index", "gid-index"]
    assert "NCCL_IB_GID_INDEX=3" in result.problems[0].message
    assert "index 5" in result.problems[0].message
    right = f'{TC}, "NCCL_IB_GID_INDEX": "5"'
    assert prepare_pod(_options(root, shared_dir, pod, right), UNLIMITED_MEMLOCK).exit_code == 0


def test_a_pinned_gid_index_is_judged_on_ipv6_too(
    host_root: Path, shared_dir: Path, tmp_path: Path
) -> None:
    root = roce_ipv6_macvlan_host(host_root).root
    pinned = f'{TC}, "NCCL_IB_GID_INDEX": "4"'  # the other pod's macvlan
    result = prepare_pod(_options(root, shared_dir, _ipv6_pod(tmp_path), pinned), UNLIMITED_MEMLOCK)
    assert result.exit_code == 1
    assert {p.code for p in result.problems} == {"gid-index"}
