"""The kind e2e files agree with each other and with the repository (no Docker needed)."""

from __future__ import annotations

import re

from chart_files import KIND, REPO, load_yaml

from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_localcluster.toolchain import pinned_versions

RUN_SH = (KIND / "run.sh").read_text()


def _fabric_labels() -> dict[str, dict[str, str]]:
    fabric = parse_fabric_description((KIND / "fabric.yaml").read_text())
    return {node.name: fabric.node_labels(node) for node in fabric.nodes}


def _cluster_name() -> str:
    match = re.search(r"^CLUSTER=\$\{KIND_CLUSTER:-([\w-]+)\}", RUN_SH, re.MULTILINE)
    assert match, "run.sh must default KIND_CLUSTER"
    return match.group(1)


def _kind_workers() -> list[str]:
    roles = [node["role"] for node in load_yaml(KIND / "kind-config.yaml")["nodes"]]
    workers = roles.count("worker")
    # kind's naming: <cluster>-worker, <cluster>-worker2, ...
    return [f"{_cluster_name()}-worker{i if i > 1 else ''}" for i in range(1, workers + 1)]


def test_the_kind_cluster_has_one_control_plane_and_four_workers() -> None:
    roles = [node["role"] for node in load_yaml(KIND / "kind-config.yaml")["nodes"]]
    assert sorted(roles) == ["control-plane", "worker", "worker", "worker", "worker"]


def test_the_fake_fabric_names_exactly_the_kind_workers_under_two_leaves() -> None:
    labels = _fabric_labels()
    leaves = {node_labels["topology.tpfabric.io/leaf"] for node_labels in labels.values()}
    assert sorted(labels) == sorted(_kind_workers())
    assert len(leaves) == 2


def test_the_job_fits_one_leaf_of_the_fake_fabric() -> None:
    fabric = parse_fabric_description((KIND / "fabric.yaml").read_text())
    job = load_yaml(KIND / "tpj.yaml")
    per_leaf = len(_fabric_labels()) // 2
    assert job["spec"]["topology"] == {"mode": "required", "level": "leaf", "railAligned": True}
    assert job["spec"]["workers"] == per_leaf
    assert job["spec"]["rdma"]["resourceName"] == fabric.rdma_resource


def test_run_sh_loads_the_images_make_builds_and_the_manifests_use() -> None:
    build = (REPO / "images" / "build.sh").read_text()
    for image in ("tpfabric", "rdma-init", "fake-rdma-device-plugin"):
        assert f'"$PREFIX/{image}:$TAG"' in build
        assert f'"tpfabric/{image}:$IMAGE_TAG"' in RUN_SH  # run.sh loads it into kind
    plugin = load_yaml(REPO / "e2e" / "manifests" / "fake-rdma-device-plugin.yaml")
    used = plugin["spec"]["template"]["spec"]["containers"][0]["image"]
    assert used == "tpfabric/fake-rdma-device-plugin:dev"
    values = load_yaml(KIND / "values.yaml")
    assert values["image"]["tag"] == values["operator"]["rdmaInit"]["image"]["tag"] == "dev"
    worker = load_yaml(KIND / "tpj.yaml")["spec"]["template"]["spec"]["containers"][0]
    assert worker["image"] == "tpfabric/tpfabric:dev"


def test_the_toolchain_pins_kind() -> None:
    assert pinned_versions()["kind"].startswith("v")
