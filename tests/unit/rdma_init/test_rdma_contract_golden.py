"""Golden ``nccl.conf`` and ``fabric.env`` of every fake host x {no profile, InfiniBand with an
adaptive-routing SL, lossless RoCE}, and every key written is one its library publishes.

``TPFABRIC_UPDATE_GOLDEN=1 pytest tests/unit/rdma_init/test_rdma_contract_golden.py`` rewrites
the files in ``data/golden/`` (the one generator); review the diff. Each pod runs with the
shipped NCCL (a fake wheel of the version named) and the placer's ``tpfabric.io/plan-level:
spine`` annotation, so a RoCE fabric with ECMP above the leaf gets its queue pairs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from published_lists import LIBRARY_LISTS, NCCL_TAGS, names, nccl_keys
from rdma_host_builder import (
    UNLIMITED_MEMLOCK,
    HostTree,
    azure_nd_h100_v5,
    cx8_two_plane,
    dgx_h100,
    make_nccl_wheel,
    roce_v2_host,
    spectrum_x_bf3,
    sriov_vf_pod,
)

from tpfabric_rdma_init.nccl_versions import FLOOR
from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

GOLDEN = Path(__file__).parent / "data" / "golden"
UPDATE = os.environ.get("TPFABRIC_UPDATE_GOLDEN") == "1"

HOSTS: dict[str, Callable[[Path], HostTree]] = {
    "dgx-h100-ib": dgx_h100,
    "roce-v2": roce_v2_host,
    "spectrum-x-bf3": spectrum_x_bf3,
    "cx8-two-plane": cx8_two_plane,
    "azure-ndv5": azure_nd_h100_v5,
    "sriov-vf": sriov_vf_pod,
}

PROFILES: dict[str, dict[str, object] | None] = {
    "no-profile": None,
    "ib-ar-sl": {"linkLayer": "infiniband", "infiniband": {"adaptiveRoutingServiceLevels": [1]}},
    "lossless-roce": {
        "linkLayer": "roce",
        "roce": {"trafficClass": 106, "fifoTrafficClass": 84, "dscp": 26, "pfcPriority": 3},
        "ecmp": {"levels": ["spine", "block", "cluster"]},
    },
}

CASES = [(host, profile, "2.27.3") for host in HOSTS for profile in PROFILES]
CASES.append(("cx8-two-plane", "ib-ar-sl", "2.30.7"))  # rail and plane fields in NCCL_IB_HCA


def case_name(host: str, profile: str, nccl: str) -> str:
    return f"{host}--{profile}" + ("" if nccl == "2.27.3" else f"--nccl-{nccl}")


def run_pod(
    tmp_path: Path, host: str, profile: str, nccl: str | None
) -> tuple[str, str, dict[str, object]]:
    """Return (nccl.conf, fabric.env, report) of one pod on ``host`` under ``profile``; the
    shipped NCCL ``nccl`` (None: the image's, of unknown version)."""
    root = HOSTS[host](tmp_path / "host").root
    annotations = tmp_path / "annotations"
    annotations.write_text('tpfabric.io/plan-level="spine"\n')
    search = None
    if nccl is not None:
        search = [str(make_nccl_wheel(tmp_path / "site", 12, nccl))]
    spec = PROFILES[profile]
    options = InitOptions(
        shared_dir=tmp_path / "shared",
        mount_path="/tpfabric",
        root=root,
        annotations_file=annotations,
        fabric_profile=json.dumps(spec) if spec else None,
        nccl_library="shipped" if nccl else "image",
        library_search_path=search,
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    shared = tmp_path / "shared"
    return (shared / "nccl.conf").read_text(), (shared / "fabric.env").read_text(), result.report


def conf_keys(text: str) -> set[str]:
    return {line.split("=", 1)[0] for line in text.splitlines() if line and line[0] != "#"}


def env_keys(text: str) -> set[str]:
    return {line.split()[1] for line in text.splitlines() if line.strip().startswith("export ")}


@pytest.mark.parametrize(("host", "profile", "nccl"), CASES, ids=[case_name(*c) for c in CASES])
def test_golden_nccl_conf_and_fabric_env(
    tmp_path: Path, host: str, profile: str, nccl: str
) -> None:
    conf, env, _ = run_pod(tmp_path, host, profile, nccl)
    for suffix, text in ((".nccl.conf", conf), (".fabric.env", env)):
        golden = GOLDEN / (case_name(host, profile, nccl) + suffix)
        if UPDATE:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(text)
        assert golden.exists(), f"{golden} missing: rerun with TPFABRIC_UPDATE_GOLDEN=1"
        assert text == golden.read_text(), (
            f"{golden.name} differs; if meant, rerun with TPFABRIC_UPDATE_GOLDEN=1 and review"
        )


def test_no_golden_file_is_left_over() -> None:
    wanted = {case_name(*c) + s for c in CASES for s in (".nccl.conf", ".fabric.env")}
    assert {p.name for p in GOLDEN.iterdir()} == wanted


@pytest.mark.parametrize(("host", "profile", "nccl"), CASES, ids=[case_name(*c) for c in CASES])
def test_every_key_written_is_in_its_librarys_published_list(
    tmp_path: Path, host: str, profile: str, nccl: str
) -> None:
    conf, env, _ = run_pod(tmp_path, host, profile, nccl)
    assert conf_keys(conf) <= nccl_keys(f"v{nccl}-1")
    for key in env_keys(env):
        prefix = next(p for p in LIBRARY_LISTS if key.startswith(p))
        assert key in names(LIBRARY_LISTS[prefix]), key


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("host", list(HOSTS))
def test_an_image_of_unknown_nccl_gets_only_the_oldest_targeted_nccls_keys(
    tmp_path: Path, host: str, profile: str
) -> None:
    conf, _, report = run_pod(tmp_path, host, profile, None)
    floor = "v{}.{}.{}-1".format(*FLOOR)
    assert floor in NCCL_TAGS
    assert conf_keys(conf) <= nccl_keys(floor)
    assert report["fabric_contract"]["nccl_version"] == "unknown"  # type: ignore[index]
