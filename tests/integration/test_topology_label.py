"""`tpfabric topology label` against the local control plane: labels kwok nodes, idempotently.

The fabric comes from the generator: its ibnetdiscover text is what `label` reads, its fabric
description what the fake nodes are made of (same node names). The description's labels differ
from the discovered ones (rail labels name the switches by their descriptions once discovered,
``SU001-LEAF-R0``), so the first `--apply` has work to do; the second must find none and write
nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import Result
from kubernetes import client
from typer.testing import CliRunner

from control_plane_fixtures import FabricFactory, run_kubectl
from tpfabric_cli.main import app
from tpfabric_core import labels
from tpfabric_core.fabric.generator import (
    GeneratedFabric,
    generate_superpod,
    write_fabric_description,
    write_ibnetdiscover,
)
from tpfabric_core.fabric.node_labels import fabric_node_labels
from tpfabric_core.rail_ports import RAIL_PORTS_ANNOTATION, parse_rail_ports
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.toolchain import find_toolchain

STALE = labels.rail_key(7)  # the generated nodes have rails 0-3 only
FOREIGN = "example.com/rack"


def label(
    cluster: LocalCluster, dump: Path, *flags: str, source: str = "--ibnetdiscover"
) -> Result:
    args = ["topology", "label", source, str(dump)]
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(cluster.kubeconfig), *flags])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def generated() -> GeneratedFabric:
    return generate_superpod(units=2, nodes_per_unit=3, rails=4, spines_per_rail=1, seed=7)


@pytest.fixture
def dump(generated: GeneratedFabric, tmp_path: Path) -> Path:
    path = tmp_path / "fabric.ibnetdiscover"
    path.write_text(write_ibnetdiscover(generated.fabric))
    return path


@pytest.fixture
def nodes(generated: GeneratedFabric, fake_nodes: FabricFactory) -> list[str]:
    return fake_nodes(write_fabric_description(generated.fabric, "label-test"))


def node_labels(core: client.CoreV1Api, names: list[str]) -> dict[str, dict[str, str]]:
    return {name: dict(core.read_node(name).metadata.labels) for name in names}


def tpfabric_labels(by_node: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Return only the ``topology.tpfabric.io/`` labels (controllers may add others)."""
    return {
        node: {k: v for k, v in values.items() if k.startswith(labels.PREFIX)}
        for node, values in by_node.items()
    }


def our_writes(core: client.CoreV1Api, names: list[str]) -> dict[str, list[str]]:
    """Return, per node, when the labeller's field manager last wrote it.

    (resourceVersion would not do: kube-controller-manager's TTL controller annotates every
    node when the cluster's size changes, which other tests' nodes do.)
    """
    return {
        name: [
            str(entry.time)
            for entry in core.read_node(name).metadata.managed_fields or []
            if entry.manager == "tpfabric-topology"
        ]
        for name in names
    }


def test_apply_labels_the_nodes_and_a_second_run_changes_nothing(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    generated: GeneratedFabric,
    dump: Path,
    nodes: list[str],
) -> None:
    core = client.CoreV1Api(api)
    expected = fabric_node_labels(generated.fabric)
    assert set(nodes) == set(expected)
    before = node_labels(core, nodes)
    assert any(before[n].get(labels.rail_key(0)) != expected[n][labels.rail_key(0)] for n in nodes)

    dry = label(local_cluster, dump)
    assert f"dry run: {len(nodes)} of {len(nodes)} node(s) would change" in dry.stdout
    assert node_labels(core, nodes) == before

    applied = label(local_cluster, dump, "--apply")
    assert f"patched {len(nodes)} of {len(nodes)} node(s)" in applied.stdout
    after = node_labels(core, nodes)
    for name in nodes:
        ours = {k: v for k, v in after[name].items() if k.startswith(labels.PREFIX)}
        assert ours == expected[name]
        assert after[name]["kubernetes.io/hostname"] == name

    writes = our_writes(core, nodes)
    assert all(writes.values()), "the first run wrote every node as tpfabric-topology"
    time.sleep(1.1)  # managedFields times have one-second resolution
    again = label(local_cluster, dump, "--apply")
    assert f"no changes: {len(nodes)} node(s) already carry their labels" in again.stdout
    assert our_writes(core, nodes) == writes
    assert tpfabric_labels(node_labels(core, nodes)) == tpfabric_labels(after)


def test_stale_tpfabric_labels_go_and_other_labels_stay(
    local_cluster: LocalCluster, api: client.ApiClient, dump: Path, nodes: list[str]
) -> None:
    core = client.CoreV1Api(api)
    target = nodes[0]
    core.patch_node(target, {"metadata": {"labels": {STALE: "old-leaf", FOREIGN: "r12"}}})

    dry = label(local_cluster, dump)
    assert f"- {STALE} (was old-leaf)" in dry.stdout
    label(local_cluster, dump, "--apply")

    after = core.read_node(target).metadata.labels
    assert STALE not in after
    assert after[FOREIGN] == "r12"
    managers = {entry.manager for entry in core.read_node(target).metadata.managed_fields}
    assert "tpfabric-topology" in managers


def test_nodes_missing_on_either_side_are_reported_not_touched(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    dump: Path,
    nodes: list[str],
    fake_nodes: FabricFactory,
) -> None:
    core = client.CoreV1Api(api)
    extra = "name: extra\nrails: 1\nblocks:\n- name: b\n  spines:\n  - name: s\n    leaves:\n"
    extra += "    - {name: l, nodes: [cpu-extra-1]}\n"
    fake_nodes(extra)
    core.delete_node(nodes[-1])

    def ours() -> dict[str, str]:
        # only our prefix: kwok adds the beta os/arch labels on its own, at its own pace
        found = core.read_node("cpu-extra-1").metadata.labels or {}
        return {k: v for k, v in found.items() if k.startswith("topology.tpfabric.io/")}

    before = ours()
    result = label(local_cluster, dump, "--apply")
    assert f"not in the cluster (1): {nodes[-1]}" in result.stdout
    assert "cpu-extra-1" in result.stdout.split("not in the fabric")[1]
    assert ours() == before


def test_show_and_export_read_the_labels_back_from_the_cluster(
    local_cluster: LocalCluster, generated: GeneratedFabric, dump: Path, nodes: list[str]
) -> None:
    label(local_cluster, dump, "--apply")
    kubeconfig = ["--kubeconfig", str(local_cluster.kubeconfig)]
    runner = CliRunner()

    shown = runner.invoke(app, ["topology", "show", "--cluster", *kubeconfig])
    assert shown.exit_code == 0, shown.output
    assert "su001-dgx-[01-03]" in shown.stdout
    first_leaf = generated.fabric.switch_label(generated.fabric.leaf_of("su001-dgx-01", 0) or "")
    assert f"rail 0 → {first_leaf}" in shown.stdout

    from_cluster = runner.invoke(app, ["topology", "export", "--slurm", "--cluster", *kubeconfig])
    from_dump = runner.invoke(app, ["topology", "export", "--slurm", "--ibnetdiscover", str(dump)])
    assert from_cluster.exit_code == from_dump.exit_code == 0, from_cluster.output
    assert from_cluster.stdout == from_dump.stdout


def test_a_dump_gives_each_node_its_rail_map_by_port_guid(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    generated: GeneratedFabric,
    dump: Path,
    nodes: list[str],
) -> None:
    """The rail -> port GUID map the fabric agent, the placer and rdma-init read: written with
    the labels, one entry per rail of the node, and removed by a source that knows no GUIDs."""
    core = client.CoreV1Api(api)
    label(local_cluster, dump, "--apply")
    for name in nodes:
        annotations = core.read_node(name).metadata.annotations or {}
        ports, problem = parse_rail_ports(annotations.get(RAIL_PORTS_ANNOTATION))
        assert problem is None, problem
        guids = {h.rail: h.guid for h in generated.fabric.hcas_of(name)}  # single-port CAs
        assert ports == guids, name
    description = dump.with_suffix(".yaml")
    description.write_text(write_fabric_description(generated.fabric, "label-test"))
    result = label(local_cluster, description, "--apply", source="--fabric")
    assert f"- annotation {RAIL_PORTS_ANNOTATION}" in result.stdout
    for name in nodes:
        assert RAIL_PORTS_ANNOTATION not in (core.read_node(name).metadata.annotations or {})


def test_topology_levels_reads_a_kueue_topology_from_the_cluster(
    local_cluster: LocalCluster,
) -> None:
    """Kueue's own Topology CRD (the toolchain's copy of Kueue's manifests): a Topology the API
    server accepted is read back and printed as tpfabric's levels."""
    crd = (
        find_toolchain(("kueue",)).path("kueue").parent
        / "config" / "bases" / "kueue.x-k8s.io_topologies.yaml"
    )  # fmt: skip
    applied = run_kubectl(local_cluster, "apply", "--server-side", "-f", str(crd))
    assert applied.returncode == 0, applied.stderr
    waited = run_kubectl(
        local_cluster, "wait", "--for=condition=Established", "--timeout=60s",
        "crd/topologies.kueue.x-k8s.io",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    topology = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: tpfabric-levels}\n"
        "spec:\n  levels:\n  - nodeLabel: topology.tpfabric.io/spine\n"
        "  - nodeLabel: topology.tpfabric.io/leaf\n  - nodeLabel: kubernetes.io/hostname\n"
    )
    made = run_kubectl(local_cluster, "apply", "-f", "-", stdin=topology)
    assert made.returncode == 0, made.stderr
    try:
        result = CliRunner().invoke(
            app,
            ["topology", "levels", "--kueue-topology-name", "tpfabric-levels", "-o", "levels",
             "--kubeconfig", str(local_cluster.kubeconfig)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == (
            "spine=topology.tpfabric.io/spine,leaf=topology.tpfabric.io/leaf"
        )
        missing = CliRunner().invoke(
            app,
            ["topology", "levels", "--kueue-topology-name", "nope",
             "--kubeconfig", str(local_cluster.kubeconfig)],
        )  # fmt: skip
        assert missing.exit_code == 2
        assert "Topology nope: not found" in missing.stderr
    finally:
        run_kubectl(local_cluster, "delete", "topologies.kueue.x-k8s.io", "tpfabric-levels")
