"""The fabric's contract per pod: which keys it writes, why, and when it stays out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rdma_host_builder import (
    UNLIMITED_MEMLOCK,
    cx8_two_plane,
    dgx_h100,
    make_nccl_wheel,
    roce_v2_host,
)

from tpfabric_rdma_init.cli import main
from tpfabric_rdma_init.nccl_versions import KEY_SINCE, RAIL_PLANE_SINCE, parse_version
from tpfabric_rdma_init.prepare import InitOptions, InitResult, prepare_pod

IB_AR = {"linkLayer": "infiniband", "infiniband": {"adaptiveRoutingServiceLevels": [1, 3]}}
ROCE = {
    "linkLayer": "roce",
    "roce": {"trafficClass": 106, "fifoTrafficClass": 84},
    "ecmp": {"levels": ["spine", "cluster"], "qpsPerConnection": 8},
}


def run(
    tmp_path: Path,
    root: Path,
    profile: dict[str, Any] | None,
    *,
    annotations: dict[str, str] | None = None,
    nccl: str | None = "2.27.3",
    **extra: Any,
) -> InitResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    annotation_file = tmp_path / "annotations"
    annotation_file.write_text("".join(f'{k}="{v}"\n' for k, v in (annotations or {}).items()))
    search = [str(make_nccl_wheel(tmp_path / "site", 12, nccl))] if nccl else None
    options = InitOptions(
        shared_dir=tmp_path / "shared",
        root=root,
        annotations_file=annotation_file,
        fabric_profile=json.dumps(profile) if profile else None,
        nccl_library="shipped" if nccl else "image",
        library_search_path=search,
        **extra,
    )
    return prepare_pod(options, UNLIMITED_MEMLOCK)


def test_infiniband_gets_the_lowest_adaptive_routing_sl_with_reasons(tmp_path: Path) -> None:
    result = run(tmp_path, dgx_h100(tmp_path / "h").root, IB_AR)
    assert result.settings["NCCL_IB_SL"] == "1"
    assert result.settings["NCCL_IB_ADAPTIVE_ROUTING"] == "1"
    reasons = result.report["nccl"]["reasons"]
    assert "lowest adaptive-routing service level" in reasons["NCCL_IB_SL"]
    assert "ar_sl_mask" in reasons["NCCL_IB_ADAPTIVE_ROUTING"]
    assert set(reasons) == set(result.settings)


def test_a_declared_sl_without_adaptive_routing_gets_no_ar_key(tmp_path: Path) -> None:
    profile = {"linkLayer": "infiniband", "infiniband": {"serviceLevel": 4}}
    result = run(tmp_path, dgx_h100(tmp_path / "h").root, profile)
    assert result.settings["NCCL_IB_SL"] == "4"
    assert "NCCL_IB_ADAPTIVE_ROUTING" not in result.settings
    assert (
        "not among" in result.report["fabric_contract"]["not_written"]["NCCL_IB_ADAPTIVE_ROUTING"]
    )


def test_lossless_roce_gets_its_classes_and_ecmp_queue_pairs_across_a_spine(
    tmp_path: Path,
) -> None:
    result = run(
        tmp_path,
        roce_v2_host(tmp_path / "h").root,
        ROCE,
        annotations={"tpfabric.io/plan-level": "spine"},
    )
    assert {k: result.settings[k] for k in ("NCCL_IB_TC", "NCCL_IB_FIFO_TC")} == {
        "NCCL_IB_TC": "106",
        "NCCL_IB_FIFO_TC": "84",
    }
    assert result.settings["NCCL_IB_QPS_PER_CONNECTION"] == "8"
    assert result.settings["NCCL_IB_SPLIT_DATA_ON_QPS"] == "0"
    assert "ECMP" in result.report["nccl"]["reasons"]["NCCL_IB_QPS_PER_CONNECTION"]
    assert not any("without NCCL_IB_TC" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("annotations", "why"),
    [({}, "the plan's level is unknown"), ({"tpfabric.io/plan-level": "leaf"}, "within one leaf")],
    ids=["no-plan-level", "within-a-leaf"],
)
def test_no_ecmp_keys_without_a_plan_that_crosses_an_ecmp_tier(
    tmp_path: Path, annotations: dict[str, str], why: str
) -> None:
    result = run(tmp_path, roce_v2_host(tmp_path / "h").root, ROCE, annotations=annotations)
    assert "NCCL_IB_QPS_PER_CONNECTION" not in result.settings
    not_written = result.report["fabric_contract"]["not_written"]
    assert why in not_written["NCCL_IB_QPS_PER_CONNECTION"]


def test_per_communicator_traffic_classes_leave_sl_and_tc_to_the_job(tmp_path: Path) -> None:
    mode = {"tpfabric.io/traffic-class": "per-communicator"}
    roce = run(tmp_path / "r", roce_v2_host(tmp_path / "rh").root, ROCE, annotations=mode)
    ib = run(tmp_path / "i", dgx_h100(tmp_path / "ih").root, IB_AR, annotations=mode)
    assert not {"NCCL_IB_TC", "NCCL_IB_FIFO_TC"} & set(roce.settings)
    assert not {"NCCL_IB_SL", "NCCL_IB_ADAPTIVE_ROUTING"} & set(ib.settings)
    assert "per-communicator" in roce.report["fabric_contract"]["not_written"]["NCCL_IB_TC"]


def test_the_jobs_own_spec_nccl_still_wins(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        dgx_h100(tmp_path / "h").root,
        IB_AR,
        nccl_overrides='{"NCCL_IB_SL": "5", "NCCL_IB_ADAPTIVE_ROUTING": null}',
    )
    assert result.settings["NCCL_IB_SL"] == "5"
    assert "NCCL_IB_ADAPTIVE_ROUTING" not in result.settings
    assert result.report["nccl"]["reasons"]["NCCL_IB_SL"].startswith("spec.nccl")


def test_a_profile_of_the_other_link_layer_writes_nothing_and_says_so(tmp_path: Path) -> None:
    result = run(tmp_path, roce_v2_host(tmp_path / "h").root, IB_AR)
    assert "NCCL_IB_SL" not in result.settings
    assert any("declares linkLayer infiniband but" in w for w in result.warnings)


def test_an_nccl_before_fifo_tc_gets_no_fifo_tc(tmp_path: Path) -> None:
    result = run(tmp_path, roce_v2_host(tmp_path / "h").root, ROCE, nccl="2.21.5")
    assert result.settings["NCCL_IB_TC"] == "106"
    assert "NCCL_IB_FIFO_TC" not in result.settings
    assert (
        "predates NCCL_IB_FIFO_TC"
        in (result.report["fabric_contract"]["not_written"]["NCCL_IB_FIFO_TC"])
    )


def test_rail_and_plane_fields_only_for_an_nccl_known_to_read_them(tmp_path: Path) -> None:
    old = run(tmp_path / "a", cx8_two_plane(tmp_path / "ah").root, IB_AR, nccl="2.30.4")
    image = run(tmp_path / "b", cx8_two_plane(tmp_path / "bh").root, IB_AR, nccl=None)
    new = run(tmp_path / "c", cx8_two_plane(tmp_path / "ch").root, IB_AR, nccl="2.30.7")
    assert old.settings["NCCL_IB_HCA"].split(",")[0] == "=mlx5_0:1"
    assert image.settings["NCCL_IB_HCA"] == old.settings["NCCL_IB_HCA"]
    assert new.settings["NCCL_IB_HCA"].startswith("=mlx5_0:1:0:0,mlx5_1:1:0:1,mlx5_2:1:1:0")
    assert "2.30.7 reads" in new.report["nccl"]["reasons"]["NCCL_IB_HCA"]


def test_the_images_nccl_version_comes_from_the_job(tmp_path: Path) -> None:
    facts = json.dumps({"ncclVersion": "2.30.7"})
    result = run(
        tmp_path, cx8_two_plane(tmp_path / "h").root, IB_AR, nccl=None, main_container=facts
    )
    assert result.report["fabric_contract"]["nccl_version"] == "2.30.7"
    assert ":0:1" in result.settings["NCCL_IB_HCA"]


def test_the_version_gates_match_the_published_lists() -> None:
    from published_lists import NCCL_TAGS, nccl_keys, tag_of  # noqa: PLC0415

    for key, since in KEY_SINCE.items():
        assert key in nccl_keys(tag_of(since)), key
        older = [t for t in NCCL_TAGS if parse_version(t.lstrip("v")) < since]  # type: ignore[operator]
        assert all(key not in nccl_keys(t) for t in older), key
    assert parse_version("2.30.7-1") == RAIL_PLANE_SINCE


def test_a_bad_profile_stops_rdma_init_with_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = '{"linkLayer": "infiniband", "infiniband": {"serviceLevel": 16}}'
    root = str(dgx_h100(tmp_path / "h").root)
    argv = ["--root", root, "--shared-dir", str(tmp_path / "s"), "--annotations-file", ""]
    code = main([*argv, "--fabric-profile", profile])
    assert code == 2
    err = capsys.readouterr().err
    assert "fabric.profile.infiniband.serviceLevel must be an integer 0..15, not 16" in err


def test_fabric_env_leaves_the_containers_own_values_alone(tmp_path: Path) -> None:
    run(tmp_path, roce_v2_host(tmp_path / "h").root, ROCE)
    fabric_env = tmp_path / "shared" / "fabric.env"
    script = "echo $UCX_NET_DEVICES $UCX_IB_GID_INDEX $VLLM_HOST_IP $GLOO_SOCKET_IFNAME"
    env = {"BASH_ENV": str(fabric_env), "PATH": "/usr/bin:/bin", "TPFABRIC_POD_IP": "10.4.0.7",
           "UCX_NET_DEVICES": "mlx5_9:1"}  # fmt: skip
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["mlx5_9:1", "3", "10.4.0.7", "eth0"]
    bare = subprocess.run(
        ["bash", "-c", script],
        env={"BASH_ENV": str(fabric_env)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert bare.stdout.split() == ["mlx5_0:1,mlx5_1:1", "3", "eth0"]
