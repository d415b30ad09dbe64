"""Clouds whose NCCL uses a net plugin (AWS EFA via aws-ofi-nccl, GCP TCPX/TCPXO, gIB): the init
program must not switch the plugin off nor pick NCCL's IB transport for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rdma_host_builder import UNLIMITED_MEMLOCK, efa_like_host

from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

NET_KEYS = ("NCCL_NET", "NCCL_IB_")


def _nccl_net_keys(settings: dict[str, str]) -> list[str]:
    return [key for key in settings if key.startswith(NET_KEYS)]


@pytest.mark.parametrize(
    ("main_env", "overrides"),
    [
        ({"NCCL_NET": "AWS Libfabric"}, None),  # the image's env (aws-ofi-nccl)
        ({"NCCL_NET_PLUGIN": "/usr/local/nvidia/lib64/libnccl-tcpxo.so"}, None),  # GCP TCPXO
        ({}, {"NCCL_NET": "gIB"}),  # the job says so in spec.nccl (GCP gIB)
    ],
    ids=["efa-env", "tcpxo-env", "gib-spec-nccl"],
)
@pytest.mark.parametrize("policy", ["disabled", "preferred", "required"])
def test_a_net_plugin_gets_no_nccl_net_nor_ib_settings(
    host_root: Path,
    shared_dir: Path,
    main_env: dict[str, str],
    overrides: dict[str, str] | None,
    policy: str,
) -> None:
    # rdma.count 0 (policy disabled) or no verbs HCA in the pod (TCP fallback under preferred)
    # used to write NCCL_NET=Socket and NCCL_IB_DISABLE=1, which turn the plugin off.
    options = InitOptions(
        shared_dir=shared_dir,
        root=efa_like_host(host_root).root,
        policy=policy,
        nccl_library="image",
        main_container=json.dumps({"runAsUser": 0, "ncclEnv": main_env}),
        nccl_overrides=json.dumps(overrides) if overrides else None,
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert result.exit_code == 0
    assert result.outcome == "net-plugin"
    assert _nccl_net_keys(result.settings) == list(overrides or {})
    assert result.settings["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert {c["result"] for c in result.report["checks"]} == {"skipped"}
    assert any("net plugin" in w for w in result.warnings)


@pytest.mark.parametrize("policy", ["disabled", "required"])
def test_efa_devices_on_the_node_mean_aws_ofi_nccl(
    host_root: Path, shared_dir: Path, policy: str
) -> None:
    # AWS images load aws-ofi-nccl by default, without any NCCL_NET in the pod spec.
    options = InitOptions(
        shared_dir=shared_dir,
        root=efa_like_host(host_root, efa=True).root,
        policy=policy,
        nccl_library="image",
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert (result.exit_code, result.outcome) == (0, "net-plugin")
    assert _nccl_net_keys(result.settings) == []
    assert any("EFA" in w for w in result.warnings)


def test_without_a_net_plugin_the_tcp_fallback_still_disables_ib(
    host_root: Path, shared_dir: Path
) -> None:
    options = InitOptions(
        shared_dir=shared_dir, root=efa_like_host(host_root).root, nccl_library="image"
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert result.outcome == "tcp-fallback"
    assert result.settings["NCCL_NET"] == "Socket"
    assert result.settings["NCCL_IB_DISABLE"] == "1"


def test_nccl_net_ib_or_socket_is_no_net_plugin(host_root: Path, shared_dir: Path) -> None:
    options = InitOptions(
        shared_dir=shared_dir,
        root=efa_like_host(host_root).root,
        nccl_library="image",
        main_container=json.dumps({"ncclEnv": {"NCCL_NET": "IB"}}),
    )
    assert prepare_pod(options, UNLIMITED_MEMLOCK).outcome == "tcp-fallback"
