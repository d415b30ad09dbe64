"""The init program end to end on each fixture host: files written, exit code, error lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rdma_host_builder import (
    DGX_COMPUTE_HCAS,
    DGX_IB_HCA,
    UNLIMITED_MEMLOCK,
    HostTree,
    PodView,
    dgx_h100,
    make_nccl_wheel,
    memlock_of,
    roce_v2_host,
)

from tpfabric_rdma_init.cli import main, parse_size
from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

Run = Callable[..., tuple[int, str, str, dict[str, Any]]]


@pytest.fixture
def run(
    shared_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Run:
    for name in ("TPFABRIC_RDMA_POLICY", "TPFABRIC_NCCL_OVERRIDES", "TPFABRIC_EXCLUDE_HCAS"):
        monkeypatch.delenv(name, raising=False)

    def run(root: Path, *flags: str, memlock: Callable[[], tuple[int, int]] = UNLIMITED_MEMLOCK):
        code = main(
            [
                "--root",
                str(root),
                "--shared-dir",
                str(shared_dir),
                "--annotations-file",
                "",
                *flags,
            ],
            memlock,
        )
        out, err = capsys.readouterr()
        report = json.loads((shared_dir / "rdma-init-report.json").read_text())
        return code, out, err, report

    return run


def conf(shared_dir: Path) -> dict[str, str]:
    lines = (shared_dir / "nccl.conf").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if not line.startswith("#"))


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


def test_healthy_dgx_h100_under_required_policy(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    code, out, err, report = run(dgx_h100(host_root).root, "--policy", "required")
    assert code == 0
    assert errors(err) == []
    assert conf(shared_dir) == {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_HCA": DGX_IB_HCA,
        "NCCL_CROSS_NIC": "0",
        "NCCL_TOPO_DUMP_FILE": f"{shared_dir}/nccl-topo-dump.xml",
    }
    assert report["outcome"] == "rdma"
    assert report["fabric"]["rail_aligned"] is True
    assert report["fabric"]["rails"][6] == {"rail": 6, "hca": "mlx5_10", "port": 1}
    assert {c["result"] for c in report["checks"]} == {"pass"}
    assert (
        (shared_dir / "nccl.env")
        .read_text()
        .startswith(f"export NCCL_CONF_FILE={shared_dir}/nccl.conf\n")
    )
    assert "rdma (policy required)" in out


@pytest.mark.parametrize(
    ("build", "memlock", "expected_error"),
    [
        (
            lambda root: dgx_h100(root, port_down="mlx5_4"),
            UNLIMITED_MEMLOCK,
            "rail 2 (mlx5_4:1): mlx5_4 port 1 is DOWN (physical state Disabled); check the cable",
        ),
        (
            lambda root: dgx_h100(root, peermem=False),
            UNLIMITED_MEMLOCK,
            "GPUDirect RDMA unavailable: nvidia_peermem is not loaded",
        ),
        (
            lambda root: dgx_h100(root, ipc_lock=False),
            memlock_of(64 * 1024),
            "memlock limit is 64 KiB (needs unlimited) and CAP_IPC_LOCK is not in the effective",
        ),
        (
            lambda root: dgx_h100(root, dev_infiniband=False),
            UNLIMITED_MEMLOCK,
            "/dev/infiniband is missing in this pod",
        ),
    ],
    ids=["port-down", "no-peermem", "memlock-64KiB", "no-dev-infiniband"],
)
def test_broken_hosts_fail_required_with_one_line_per_problem(
    build: Callable[[Path], HostTree],
    memlock: Callable[[], tuple[int, int]],
    expected_error: str,
    host_root: Path,
    shared_dir: Path,
    run: Run,
) -> None:
    (shared_dir).mkdir()
    (shared_dir / "nccl.conf").write_text("NCCL_IB_HCA=stale\n")
    code, _, err, report = run(build(host_root).root, "--policy", "required", memlock=memlock)
    assert code == 1
    assert len(errors(err)) == 1
    assert expected_error in errors(err)[0]
    assert not (shared_dir / "nccl.conf").exists()
    assert report["outcome"] == "failed"
    assert report["exit_code"] == 1


def test_one_down_port_under_preferred_keeps_the_seven_healthy_rails(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    code, _, err, report = run(dgx_h100(host_root, port_down="mlx5_4").root)
    assert code == 0
    assert conf(shared_dir) == {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_HCA": "=" + ",".join(f"{n}:1" for n in DGX_COMPUTE_HCAS if n != "mlx5_4"),
        "NCCL_TOPO_DUMP_FILE": f"{shared_dir}/nccl-topo-dump.xml",
    }
    assert report["outcome"] == "rdma-degraded"
    assert report["fabric"]["dropped_rails"] == [{"rail": 2, "endpoint": "mlx5_4:1"}]
    assert report["fabric"]["rail_aligned"] is False
    assert "dropping rail 2 (mlx5_4:1) and keeping 7 of 8 rails" in err


def test_every_port_down_under_preferred_falls_back_to_tcp(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    root = dgx_h100(host_root).root
    for name in DGX_COMPUTE_HCAS:
        (root / f"sys/class/infiniband/{name}/ports/1/state").write_text("1: DOWN\n")
    _, _, _, report = run(root)
    assert report["outcome"] == "tcp-fallback"
    assert conf(shared_dir)["NCCL_IB_DISABLE"] == "1"


def test_missing_peermem_under_preferred_keeps_ib_without_gpudirect(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    code, _, _, report = run(dgx_h100(host_root, peermem=False).root)
    assert code == 0
    assert conf(shared_dir)["NCCL_NET_GDR_LEVEL"] == "LOC"
    assert conf(shared_dir)["NCCL_IB_HCA"] == DGX_IB_HCA
    assert report["outcome"] == "rdma-without-gpudirect"


def test_several_problems_give_several_lines(host_root: Path, run: Run) -> None:
    root = dgx_h100(host_root, port_down="mlx5_0", peermem=False, ipc_lock=False).root
    code, _, err, report = run(root, "--policy", "required", memlock=memlock_of(65536))
    assert code == 1
    assert [p["code"] for p in report["problems"]] == ["port-down", "no-peermem", "memlock"]
    assert len(errors(err)) == 3


def test_roce_v2_host_passes_with_dma_buf_and_gid_index(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    code, _, _, report = run(roce_v2_host(host_root).root, "--policy", "required")
    assert code == 0
    assert conf(shared_dir) == {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "NCCL_CROSS_NIC": "0",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_TOPO_DUMP_FILE": f"{shared_dir}/nccl-topo-dump.xml",
    }
    assert report["host"]["gpudirect"]["dma_buf"] is True


def test_host_without_rdma_fails_required_and_falls_back_under_preferred(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    HostTree(host_root).interface("eth0", default_route=True)
    code, _, err, _ = run(host_root, "--policy", "required")
    assert code == 1
    assert "no RDMA device" in errors(err)[0]
    code, _, _, report = run(host_root)
    assert code == 0
    assert report["outcome"] == "tcp-fallback"
    assert conf(shared_dir)["NCCL_IB_DISABLE"] == "1"


def test_disabled_policy_checks_nothing(host_root: Path, shared_dir: Path, run: Run) -> None:
    code, _, _, report = run(dgx_h100(host_root, port_down="mlx5_0").root, "--policy", "disabled")
    assert code == 0
    assert report["problems"] == []
    assert conf(shared_dir)["NCCL_IB_DISABLE"] == "1"


def test_a_pod_without_rdma_devices_says_why_it_runs_over_tcp(
    host_root: Path, tmp_path: Path, run: Run
) -> None:
    annotations = tmp_path / "annotations"
    decision = {
        "resource": "rdma/ib",
        "count": 0,
        "reason": "NodesOfferNone",
        "message": "none of the 4 GPU node(s) that could hold the pod offers rdma/ib",
    }
    annotations.write_text(f"tpfabric.io/rdma={json.dumps(json.dumps(decision))}\n")
    root = dgx_h100(host_root).root
    code, out, _, report = run(root, "--policy", "disabled", "--annotations-file", str(annotations))
    assert code == 0
    assert report["outcome"] == "tcp"
    assert report["rdma_decision"] == decision
    assert report["transport_reason"] == (
        "policy disabled: the pod got no RDMA devices (NodesOfferNone: none of the 4 GPU "
        "node(s) that could hold the pod offers rdma/ib)"
    )
    assert f"why tcp: {report['transport_reason']}" in out


def test_a_pod_with_rdma_devices_has_no_tcp_reason_and_a_bad_decision_reads_as_none(
    host_root: Path, tmp_path: Path, run: Run
) -> None:
    annotations = tmp_path / "annotations"
    annotations.write_text('tpfabric.io/rdma="{not json"\n')
    root = dgx_h100(host_root).root
    _, _, _, report = run(root, "--annotations-file", str(annotations))
    assert (report["transport_reason"], report["rdma_decision"]) == (None, None)
    _, _, _, report = run(root, "--policy", "disabled")
    assert "its job or gang asks none" in report["transport_reason"]


def test_report_only_prints_everything_and_changes_nothing(
    host_root: Path,
    shared_dir: Path,
    fake_nccl_wheel: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = dgx_h100(host_root, port_down="mlx5_0").root
    shared_dir.mkdir()
    (shared_dir / "nccl.conf").write_text("NCCL_IB_HCA=kept\n")
    argv = ["--root", str(root), "--shared-dir", str(shared_dir), "--annotations-file", ""]
    assert main([*argv, "--policy", "required", "--report-only"], UNLIMITED_MEMLOCK) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in shared_dir.iterdir()) == ["nccl.conf"]
    assert (shared_dir / "nccl.conf").read_text() == "NCCL_IB_HCA=kept\n"
    assert "0000:13:00.0 -> mlx5_0:1: PIX (same PCIe switch)" in out
    assert "ports: fail (mlx5_0 port 1 is DOWN" in out
    assert "memlock: pass" in out
    assert "exit code of a real run: 1" in out
    assert "none: a real run fails" in out
    assert main([*argv, "--report-only"], UNLIMITED_MEMLOCK) == 0
    assert "    NCCL_IB_HCA==mlx5_3:1," in capsys.readouterr().out


def test_memlock_is_judged_for_a_non_root_main_container(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    root = dgx_h100(host_root).memlock(64 * 1024).root  # this init container holds IPC_LOCK
    main_container = '{"runAsUser": 1000, "capabilitiesAdd": ["IPC_LOCK"]}'
    code, _, err, _ = run(root, "--policy", "required", "--main-container", main_container)
    assert code == 1
    assert "runs as non-root user 1000 (IPC_LOCK stays in its bounding set)" in errors(err)[0]
    root_user = '{"runAsUser": 0, "capabilitiesAdd": ["IPC_LOCK"]}'
    assert run(root, "--policy", "required", "--main-container", root_user)[0] == 0


def test_memlock_from_the_tree_fails_when_ipc_lock_is_only_in_the_bounding_set(
    host_root: Path, run: Run
) -> None:
    root = dgx_h100(host_root, ipc_lock=False).memlock(64 * 1024).root
    code, _, err, report = run(root, "--policy", "required")  # the probe says unlimited
    assert code == 1
    assert "memlock limit is 64 KiB" in errors(err)[0]
    assert report["host"]["memlock_source"] == "proc/self/limits"


def test_four_gpus_of_eight_give_four_rails(host_root: Path, shared_dir: Path, run: Run) -> None:
    root = dgx_h100(host_root).gpu_device_nodes((0, 1, 2, 3)).root
    code, _, _, report = run(root, "--policy", "required")
    assert code == 0
    assert conf(shared_dir)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1"
    assert report["host"]["gpus_on_node"] == 8


def test_exclusive_hca_allocation_gives_no_spurious_failure(host_root: Path, run: Run) -> None:
    root = dgx_h100(host_root).drop_uverbs({"uverbs0", "uverbs3"}).gpu_device_nodes((0, 1)).root
    code, _, err, _ = run(root, "--policy", "required")
    assert code == 0, err


def test_library_of_the_main_containers_cuda_major_is_shipped(
    host_root: Path, shared_dir: Path, tmp_path: Path
) -> None:
    cu12 = make_nccl_wheel(tmp_path / "cu12", 12, "2.21.5")
    cu13 = make_nccl_wheel(tmp_path / "cu13", 13, "2.28.3")
    options = InitOptions(
        shared_dir=shared_dir,
        root=dgx_h100(host_root, driver="580.65.06").root,
        library_search_path=[str(cu12), str(cu13)],
        main_container='{"runAsUser": 0, "cudaMajor": 13}',
    )
    library = prepare_pod(options, UNLIMITED_MEMLOCK).report["nccl"]["library"]
    assert (library["version"], library["cuda_major"]) == ("2.28.3", 13)
    assert library["reads_nccl_conf_file"] is True
    old_driver = dgx_h100(tmp_path / "old", driver="550.90.07").root
    result = prepare_pod(replace(options, root=old_driver), UNLIMITED_MEMLOCK)
    assert result.report["nccl"]["library"] is None
    assert any("runs CUDA <= 12; not shipped" in w for w in result.warnings)


def test_image_library_mode_ships_nothing(
    host_root: Path, shared_dir: Path, fake_nccl_wheel: Path
) -> None:
    options = InitOptions(
        shared_dir=shared_dir,
        root=dgx_h100(host_root).root,
        library_search_path=[str(fake_nccl_wheel)],
        nccl_library="image",
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert result.report["nccl"]["env"] == {"NCCL_CONF_FILE": f"{shared_dir}/nccl.conf"}
    assert not (shared_dir / "lib").exists()


def test_socket_interface_follows_the_network_status_annotation(
    host_root: Path, shared_dir: Path, tmp_path: Path, run: Run
) -> None:
    annotations = tmp_path / "annotations"
    status = (
        '[{"name":"cbr0","interface":"eth0","default":true},{"name":"rail0","interface":"net1"}]'
    )
    annotations.write_text(f"k8s.v1.cni.cncf.io/network-status={json.dumps(status)}\n")
    pod = PodView(tmp_path / "pod").interface("net1", default_route=True).interface("eth0")
    root = dgx_h100(host_root).root
    run(root, "--annotations-file", str(annotations), "--process-root", str(pod.root))
    assert conf(shared_dir)["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_nccl_library_is_copied_from_the_wheel_with_its_version(
    host_root: Path, shared_dir: Path, fake_nccl_wheel: Path, tmp_path: Path
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "libnccl-net-ofi.so").write_bytes(b"plugin")
    result = prepare_pod(
        InitOptions(
            shared_dir=shared_dir,
            root=dgx_h100(host_root).root,
            mount_path="/opt/tpfabric",
            net_plugin_dir=plugins,
            library_search_path=[str(fake_nccl_wheel)],
        ),
        UNLIMITED_MEMLOCK,
    )
    library = result.report["nccl"]["library"]
    assert library["version"] == "2.27.3"
    assert library["source"] == "wheel nvidia-nccl-cu12"
    assert (shared_dir / "lib" / "libnccl.so.2").read_bytes() == b"\x7fELF fake libnccl 2.27.3"
    assert (shared_dir / "lib" / "libnccl-net-ofi.so").exists()
    assert result.settings["NCCL_NET_PLUGIN"] == "ofi"
    assert (shared_dir / "nccl.env").read_text().splitlines() == [
        "export NCCL_CONF_FILE=/opt/tpfabric/nccl.conf",
        "export LD_LIBRARY_PATH=/opt/tpfabric/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
    ]


def test_explicit_nccl_lib_records_version_from_file_name(
    host_root: Path, shared_dir: Path, tmp_path: Path, run: Run
) -> None:
    library = tmp_path / "libnccl.so.2.21.5"
    library.write_bytes(b"lib")
    (tmp_path / "libnccl.so.2").symlink_to(library.name)
    _, _, _, report = run(dgx_h100(host_root).root, "--nccl-lib", str(tmp_path / "libnccl.so.2"))
    assert report["nccl"]["library"]["version"] == "2.21.5"
    assert report["nccl"]["env"]["LD_LIBRARY_PATH"] == f"{shared_dir}/lib"


def test_missing_explicit_nccl_lib_is_a_usage_error(
    host_root: Path, tmp_path: Path, shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--root", str(dgx_h100(host_root).root), "--shared-dir", str(shared_dir)]
    assert main([*argv, "--nccl-lib", str(tmp_path / "nope.so")], UNLIMITED_MEMLOCK) == 2
    assert "--nccl-lib" in capsys.readouterr().err


def test_rails_annotation_from_the_downward_api_file(
    host_root: Path, shared_dir: Path, tmp_path: Path, run: Run
) -> None:
    annotations = tmp_path / "annotations"
    annotations.write_text(
        'kubectl.kubernetes.io/default-container="main"\ntpfabric.io/rails="0,1,2,3"\n'
    )
    _, _, _, report = run(dgx_h100(host_root).root, "--annotations-file", str(annotations))
    assert report["fabric"]["rail_source"] == "annotation"
    assert conf(shared_dir)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1"


def test_a_bad_rails_annotation_fails_required(host_root: Path, tmp_path: Path, run: Run) -> None:
    annotations = tmp_path / "annotations"
    annotations.write_text('tpfabric.io/rails="9"\n')
    root = dgx_h100(host_root).root
    code, _, err, _ = run(root, "--policy", "required", "--annotations-file", str(annotations))
    assert code == 1
    assert "rail 9 has no HCA" in errors(err)[0]


def test_user_overrides_win_and_are_reported(host_root: Path, shared_dir: Path, run: Run) -> None:
    overrides = '{"NCCL_DEBUG": "INFO", "NCCL_CROSS_NIC": null}'
    _, _, _, report = run(dgx_h100(host_root).root, "--nccl-overrides", overrides)
    assert conf(shared_dir)["NCCL_DEBUG"] == "INFO"
    assert "NCCL_CROSS_NIC" not in conf(shared_dir)
    assert report["nccl"]["overridden"] == ["NCCL_CROSS_NIC", "NCCL_DEBUG"]


def test_bad_overrides_exit_2_with_one_line(
    host_root: Path, shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--root", str(host_root), "--shared-dir", str(shared_dir), "--nccl-overrides", "{"]
    assert main(argv, UNLIMITED_MEMLOCK) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_topology_xml_is_written_and_referenced(
    host_root: Path, shared_dir: Path, run: Run
) -> None:
    run(dgx_h100(host_root).root, "--topology-xml", "--mount-path", "/opt/tp")
    assert conf(shared_dir)["NCCL_TOPO_FILE"] == "/opt/tp/nccl-topo.xml"
    assert (shared_dir / "nccl-topo.xml").read_text().startswith("<system")


@pytest.mark.parametrize(
    ("text", "value"), [("unlimited", -1), ("64Ki", 65536), ("8G", 8 << 30), ("4096", 4096)]
)
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


def pinned(names: list[str]) -> str:
    """The plan's tpfabric.io/rails for ports 1 of ``names`` in rail order, by port GUID."""
    return ",".join(
        f"{rail}=0x{0xB83FD20300000000 + int(name.split('_')[1]):016x}"
        for rail, name in enumerate(names)
    )


def test_the_plans_rails_pinned_by_port_guid_order_nccl_ib_hca(
    host_root: Path, shared_dir: Path, tmp_path: Path, run: Run
) -> None:
    order = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_6", "mlx5_5", "mlx5_9", "mlx5_10", "mlx5_11"]
    annotations = tmp_path / "annotations"
    annotations.write_text(f'tpfabric.io/rails="{pinned(order)}"\n')
    root = dgx_h100(host_root).root
    code, _, _, report = run(root, "--policy", "required", "--annotations-file", str(annotations))
    assert code == 0
    assert report["fabric"]["rail_source"] == "annotation"
    assert conf(shared_dir)["NCCL_IB_HCA"] == "=" + ",".join(f"{n}:1" for n in order)


def test_a_pinned_port_the_pod_lacks_fails_required_and_falls_back_under_preferred(
    host_root: Path, tmp_path: Path, run: Run
) -> None:
    annotations = tmp_path / "annotations"
    stale = pinned(list(DGX_COMPUTE_HCAS[:7])) + ",7=0x00000000000000ff"
    annotations.write_text(f'tpfabric.io/rails="{stale}"\n')
    root = dgx_h100(host_root).root
    code, _, err, _ = run(root, "--policy", "required", "--annotations-file", str(annotations))
    assert code == 1
    (line,) = [e for e in errors(err) if "tpfabric.io/rails" in e]
    assert "rail 7 is port 0x00000000000000ff, which this pod does not have" in line
    code, _, err, report = run(
        root, "--policy", "preferred", "--annotations-file", str(annotations)
    )
    assert code == 0
    assert report["fabric"]["rail_source"] == "pairing"
    assert "rail 7 is port 0x00000000000000ff" in err


# -- the pairing in the termination message ------------------------------------------------------


def test_the_pairing_summary_goes_to_the_termination_message_under_the_kubelets_cap(
    host_root: Path, shared_dir: Path, run: Run, tmp_path: Path
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("stale text from an earlier run, longer than the summary" * 200)
    host = dgx_h100(host_root)
    code, _, err, report = run(host.root, "--policy", "required", f"--termination-log={log}")
    assert code == 0
    assert "termination message" not in err
    text = log.read_text()
    assert len(text.encode()) < 4096  # the kubelet keeps 4096 bytes of a container's message
    summary = json.loads(text)
    assert (summary["v"], summary["outcome"], summary["rails"]) == (1, "rdma", "pairing")
    pairs = summary["pairs"]
    assert len(pairs) == 8 == len(report["fabric"]["pairs"])
    index, bus_id, hca, port, guid, rail = pairs[6]
    assert (index, hca, port, rail) == (6, "mlx5_10", 1, 6)
    assert bus_id == report["fabric"]["pairs"][6]["gpu"]
    assert guid is not None
    assert len(guid) == 16


def test_outside_kubernetes_no_termination_file_is_made(
    host_root: Path, run: Run, tmp_path: Path
) -> None:
    absent = tmp_path / "dev" / "termination-log"
    code, _, err, _ = run(dgx_h100(host_root).root, f"--termination-log={absent}")
    assert code == 0
    assert not absent.exists()
    assert "termination message not written" in err  # a path given by hand is reported


def test_report_only_writes_no_termination_message(
    host_root: Path, shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    argv = ["--root", str(dgx_h100(host_root).root), "--shared-dir", str(shared_dir)]
    main([*argv, "--annotations-file", "", "--report-only", f"--termination-log={log}"])
    capsys.readouterr()
    assert log.read_text() == ""
