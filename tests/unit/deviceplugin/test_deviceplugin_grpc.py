"""The fake RDMA device plugin over real gRPC on unix sockets, against a test kubelet."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from deviceplugin_harness import FakeKubelet, device_plugin_stub, wait_for

from tpfabric_deviceplugin import api_pb2
from tpfabric_deviceplugin.plugin import FakeRdmaDevicePlugin, preferred_allocation

pytestmark = pytest.mark.timeout(60)

MakePlugin = Callable[..., FakeRdmaDevicePlugin]


def test_registration_payload(kubelet: FakeKubelet, make_plugin: MakePlugin) -> None:
    make_plugin(resource_name="rdma/hca_shared_devices_a", pre_start_required=True)
    request = kubelet.next_registration()
    assert request.version == "v1beta1"
    assert request.endpoint == "tpfabric-fake-rdma.sock"
    assert request.resource_name == "rdma/hca_shared_devices_a"
    assert request.options.get_preferred_allocation_available
    assert request.options.pre_start_required


def test_kubelet_reads_options_and_devices_with_numa_topology(
    kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin()
    kubelet.next_registration()
    channel, stub = device_plugin_stub(plugin.socket_path)
    with channel:
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        assert options.get_preferred_allocation_available
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=20)
        first = next(stream)
        stream.cancel()
    assert [d.ID for d in first.devices] == [f"mlx5_{i}" for i in range(8)]
    assert {d.health for d in first.devices} == {"Healthy"}
    assert [d.topology.nodes[0].ID for d in first.devices] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_list_and_watch_pushes_the_list_again_on_health_change(
    kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin()
    channel, stub = device_plugin_stub(plugin.socket_path)
    with channel:
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=20)
        next(stream)
        plugin.set_health("mlx5_3", healthy=False)
        update = next(stream)
        plugin.set_health("mlx5_3", healthy=True)
        healed = next(stream)
        stream.cancel()
    assert {d.ID: d.health for d in update.devices}["mlx5_3"] == "Unhealthy"
    assert {d.ID: d.health for d in healed.devices}["mlx5_3"] == "Healthy"


def test_unhealthy_device_has_its_fake_port_down(make_plugin: MakePlugin) -> None:
    plugin = make_plugin()
    plugin.set_health("mlx5_2", healthy=False)
    port = plugin.world.root / "sys/class/infiniband/mlx5_2/ports/1"
    assert (port / "state").read_text() == "1: DOWN\n"


def test_health_file_changes_reach_the_stream(
    workdir: Path, kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    health_file = workdir / "health"
    plugin = make_plugin(health_file=health_file)
    channel, stub = device_plugin_stub(plugin.socket_path)
    with channel:
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=20)
        next(stream)
        health_file.write_text("# maintenance\nmlx5_1 Unhealthy\n")
        update = next(stream)
        stream.cancel()
    assert [d.ID for d in update.devices if d.health == "Unhealthy"] == ["mlx5_1"]


def test_allocate_mounts_the_fake_tree_and_the_allocated_devices(
    kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin()
    channel, stub = device_plugin_stub(plugin.socket_path)
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=["mlx5_0", "mlx5_5"])]
    )
    with channel:
        response = stub.Allocate(request, timeout=5).container_responses[0]
    world = plugin.world.root
    assert dict(response.envs) == {
        "TPFABRIC_HOST_ROOT": "/run/tpfabric/fake-rdma",
        "TPFABRIC_PROCESS_ROOT": "/",
        "TPFABRIC_FAKE_RDMA_DEVICES": "mlx5_0,mlx5_5",
    }
    fake = "/run/tpfabric/fake-rdma"
    assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
        (f"{fake}/sys", str(world / "sys"), True),
        *(
            (f"{fake}/dev/infiniband/{name}", str(world / "dev/infiniband" / name), True)
            for name in ("uverbs0", "umad0", "uverbs5", "umad5", "rdma_cm")
        ),
    ]
    assert all(Path(m.host_path).exists() for m in response.mounts)
    assert list(response.devices) == []  # file mode: no device nodes for runc to create


def test_allocate_with_device_nodes_returns_device_specs(make_plugin: MakePlugin) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating character devices needs root")
    plugin = make_plugin(device_nodes=True)
    channel, stub = device_plugin_stub(plugin.socket_path)
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=["mlx5_1"])]
    )
    with channel:
        response = stub.Allocate(request, timeout=5).container_responses[0]
    assert [(d.container_path, d.permissions) for d in response.devices] == [
        ("/dev/infiniband/uverbs1", "rw"),
        ("/dev/infiniband/umad1", "rw"),
        ("/dev/infiniband/rdma_cm", "rw"),
    ]


def test_allocate_rejects_unknown_devices(make_plugin: MakePlugin) -> None:
    plugin = make_plugin()
    channel, stub = device_plugin_stub(plugin.socket_path)
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=["mlx5_99"])]
    )
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub.Allocate(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mlx5_99" in caught.value.details()


def test_preferred_allocation_packs_onto_the_numa_node_of_must_include(
    make_plugin: MakePlugin,
) -> None:
    plugin = make_plugin()
    channel, stub = device_plugin_stub(plugin.socket_path)
    request = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=[f"mlx5_{i}" for i in range(8)],
                must_include_deviceIDs=["mlx5_5"],
                allocation_size=3,
            )
        ]
    )
    with channel:
        response = stub.GetPreferredAllocation(request, timeout=5)
    assert list(response.container_responses[0].deviceIDs) == ["mlx5_5", "mlx5_4", "mlx5_6"]


def test_preferred_allocation_prefers_the_node_with_most_free_devices() -> None:
    numa = {"mlx5_0": 0, "mlx5_1": 0, "mlx5_2": 1, "mlx5_3": 1, "mlx5_4": 1}
    assert preferred_allocation(["mlx5_0", "mlx5_2", "mlx5_3", "mlx5_4"], [], 2, numa) == [
        "mlx5_2",
        "mlx5_3",
    ]


def test_pre_start_container_answers(make_plugin: MakePlugin) -> None:
    plugin = make_plugin()
    channel, stub = device_plugin_stub(plugin.socket_path)
    with channel:
        response = stub.PreStartContainer(
            api_pb2.PreStartContainerRequest(devices_ids=["mlx5_0"]), timeout=5
        )
    assert response == api_pb2.PreStartContainerResponse()


def test_registers_when_the_kubelet_comes_up_after_the_plugin(
    plugin_dir: Path, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin()
    assert not plugin.registered
    kubelet = FakeKubelet(plugin_dir / "kubelet.sock").start()
    try:
        assert kubelet.next_registration().resource_name == "rdma/ib"
    finally:
        kubelet.stop()


def test_re_registers_after_the_kubelet_socket_is_removed_and_recreated(
    plugin_dir: Path, kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin()
    kubelet.next_registration()
    kubelet.stop()
    wait_for(lambda: not plugin.registered, what="the plugin to notice the kubelet left")
    restarted = FakeKubelet(plugin_dir / "kubelet.sock").start()
    try:
        assert restarted.next_registration().endpoint == "tpfabric-fake-rdma.sock"
        wait_for(lambda: plugin.registrations == 2, what="the second registration")
        channel, stub = device_plugin_stub(plugin.socket_path)
        with channel:
            assert stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5) is not None
    finally:
        restarted.stop()


def test_re_serves_and_re_registers_when_a_new_kubelet_wiped_the_folder(
    plugin_dir: Path, kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin()
    kubelet.next_registration()
    kubelet.stop()
    plugin.socket_path.unlink()  # the kubelet removes every socket when it starts
    restarted = FakeKubelet(plugin_dir / "kubelet.sock").start()
    try:
        restarted.next_registration()
        wait_for(plugin.socket_path.exists, what="the plugin socket to come back")
        channel, stub = device_plugin_stub(plugin.socket_path)
        with channel:
            stream = stub.ListAndWatch(api_pb2.Empty(), timeout=20)
            assert len(next(stream).devices) == 8
            stream.cancel()
    finally:
        restarted.stop()


def allocate(plugin: FakeRdmaDevicePlugin, *containers: list[str]) -> api_pb2.AllocateResponse:
    channel, stub = device_plugin_stub(plugin.socket_path)
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
    )
    with channel:
        return stub.Allocate(request, timeout=5)


def test_shared_mode_advertises_rdma_hca_max_interchangeable_ids(
    kubelet: FakeKubelet, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin(mode="shared", rdma_hca_max=63, resource_name="rdma/shared_a")
    request = kubelet.next_registration()
    assert request.resource_name == "rdma/shared_a"
    assert not request.options.get_preferred_allocation_available
    channel, stub = device_plugin_stub(plugin.socket_path)
    with channel:
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=20)
        first = next(stream)
        stream.cancel()
    assert [d.ID for d in first.devices] == [str(n) for n in range(63)]
    assert not any(d.topology.nodes for d in first.devices)


def test_shared_mode_gives_every_container_all_hcas_with_umad(make_plugin: MakePlugin) -> None:
    plugin = make_plugin(mode="shared", rdma_hca_max=10, hca_count=2)
    response = allocate(plugin, ["0"], ["7", "8"])
    for container in response.container_responses:
        names = [Path(m.container_path).name for m in container.mounts[1:]]
        assert names == ["uverbs0", "umad0", "uverbs1", "umad1", "rdma_cm"]
        assert container.envs["TPFABRIC_FAKE_RDMA_DEVICES"] == "mlx5_0,mlx5_1"


def test_shared_mode_device_specs_are_rwm(make_plugin: MakePlugin) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating character devices needs root")
    plugin = make_plugin(mode="shared", rdma_hca_max=4, hca_count=1, device_nodes=True)
    devices = allocate(plugin, ["3"]).container_responses[0].devices
    assert [(d.container_path, d.permissions) for d in devices] == [
        ("/dev/infiniband/uverbs0", "rwm"),
        ("/dev/infiniband/umad0", "rwm"),
        ("/dev/infiniband/rdma_cm", "rwm"),
    ]


def test_shared_mode_rejects_ids_beyond_rdma_hca_max(make_plugin: MakePlugin) -> None:
    plugin = make_plugin(mode="shared", rdma_hca_max=2)
    with pytest.raises(grpc.RpcError) as caught:
        allocate(plugin, ["2"])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_shared_mode_writes_a_cdi_spec_and_allocates_by_annotation(
    workdir: Path, make_plugin: MakePlugin
) -> None:
    plugin = make_plugin(
        mode="shared", hca_count=2, resource_name="rdma/shared_a", cdi_dir=workdir / "cdi"
    )
    spec = json.loads((workdir / "cdi" / "rdma_shared_a.json").read_text())
    assert spec["kind"] == "rdma/shared_a"
    assert [d["name"] for d in spec["devices"]] == ["0000:11:00.0", "0000:21:00.0"]
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in nodes] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/umad0",
        "/dev/infiniband/rdma_cm",
    ]
    container = allocate(plugin, ["0"]).container_responses[0]
    assert container.annotations["cdi.k8s.io/rdma_shared_a"] == (
        "rdma/shared_a=0000:11:00.0,rdma/shared_a=0000:21:00.0"
    )
    assert list(container.devices) == []


def test_exclusive_mode_is_kept_as_the_default(make_plugin: MakePlugin) -> None:
    plugin = make_plugin()
    assert not plugin.shared
    response = allocate(plugin, ["mlx5_2"]).container_responses[0]
    assert response.envs["TPFABRIC_FAKE_RDMA_DEVICES"] == "mlx5_2"
