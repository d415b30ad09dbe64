"""The gang webhook's RDMA flags: ``--rdma-count auto`` (the default) reads the nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_operator.webhook.__main__ import main, parse_args

BASE = ["--cert-dir=/tmp/none", "--init-image=rdma-init:1"]


def test_the_rdma_count_is_auto_by_default_or_a_number_up_to_64() -> None:
    assert parse_args(BASE).rdma_count is None
    assert parse_args([*BASE, "--rdma-count=auto"]).rdma_count is None
    assert parse_args([*BASE, "--rdma-count=4"]).rdma_count == 4
    assert parse_args([*BASE, "--rdma-resource=rdma/rdma_shared_device_a"]).rdma_resource == (
        "rdma/rdma_shared_device_a"
    )
    for bad in ("lots", "65", "-1"):
        with pytest.raises(SystemExit):
            parse_args([*BASE, f"--rdma-count={bad}"])


def test_auto_without_an_api_server_stops_at_start_saying_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SystemExit) as stopped:
        main([f"--cert-dir={tmp_path}", "--init-image=rdma-init:1"])
    words = str(stopped.value)
    assert "--rdma-count auto and --born-released read the API server" in words
    assert "--kubeconfig" in words
