"""What the device plugin allocates is a world the RDMA init program discovers and accepts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tpfabric_deviceplugin import api_pb2
from tpfabric_deviceplugin.plugin import FakeRdmaDevicePlugin
from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

pytestmark = pytest.mark.timeout(60)

CAPS_IPC_LOCK = 0x00000000A80465FB


def container_view(plugin: FakeRdmaDevicePlugin, devices: list[str], into: Path) -> Path:
    """Return the container root after "mounting" an Allocate response (symlinks for binds)."""
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=devices)]
    )
    response = plugin.allocate(request, context=None).container_responses[0]
    root = dict(response.envs)["TPFABRIC_HOST_ROOT"]
    for mount in response.mounts:
        target = into / Path(mount.container_path).relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(mount.host_path)
    return into


def process_root(into: Path) -> Path:
    (into / "proc/self").mkdir(parents=True)
    (into / "proc/self/status").write_text(f"CapEff:\t{CAPS_IPC_LOCK:016x}\n")
    return into


def test_init_program_uses_exactly_the_allocated_fake_hcas(
    workdir: Path, make_plugin: Callable[..., FakeRdmaDevicePlugin]
) -> None:
    plugin = make_plugin()
    root = container_view(plugin, ["mlx5_4", "mlx5_6"], workdir / "container")
    result = prepare_pod(
        InitOptions(
            shared_dir=workdir / "shared",
            root=root,
            process_root=process_root(workdir / "proc-root"),
            policy="required",
        ),
        lambda: (-1, -1),
    )
    assert result.exit_code == 0, result.problems
    assert result.settings["NCCL_IB_HCA"] == "=mlx5_4:1,mlx5_6:1"
    assert result.report["fabric"]["excluded"]["mlx5_0"].startswith("no /dev/infiniband device")
    assert result.report["host"]["hcas"][4]["ports"][0]["rate_gbps"] == 400.0


def test_an_unhealthy_fake_hca_fails_the_required_policy(
    workdir: Path, make_plugin: Callable[..., FakeRdmaDevicePlugin]
) -> None:
    plugin = make_plugin()
    plugin.set_health("mlx5_1", healthy=False)
    root = container_view(plugin, ["mlx5_0", "mlx5_1"], workdir / "container")
    result = prepare_pod(
        InitOptions(
            shared_dir=workdir / "shared",
            root=root,
            process_root=process_root(workdir / "proc-root"),
            policy="required",
        ),
        lambda: (-1, -1),
    )
    assert result.exit_code == 1
    assert [p.message.split(";")[0] for p in result.problems] == [
        "rail 1 (mlx5_1:1): mlx5_1 port 1 is DOWN (physical state Disabled)"
    ]


def test_init_program_uses_every_hca_the_shared_mode_gives(
    workdir: Path, make_plugin: Callable[..., FakeRdmaDevicePlugin]
) -> None:
    plugin = make_plugin(mode="shared", rdma_hca_max=100, hca_count=4)
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=["42"])]
    )
    response = plugin.allocate(request, context=None).container_responses[0]
    into = workdir / "container"
    for mount in response.mounts:
        target = into / Path(mount.container_path).relative_to(response.envs["TPFABRIC_HOST_ROOT"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(mount.host_path)
    result = prepare_pod(
        InitOptions(
            shared_dir=workdir / "shared",
            root=into,
            process_root=process_root(workdir / "proc-root"),
            policy="required",
        ),
        lambda: (-1, -1),
    )
    assert result.exit_code == 0, result.problems
    assert result.settings["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"
