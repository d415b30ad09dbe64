"""`tpfabric topology show --cluster` paints degraded nodes and rails from the live node state.

kwok nodes carry what the fabric health agent publishes (the health label, the ``FabricHealthy``
condition, the per-rail detail annotation), written here through the API as the agent would.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client
from typer.testing import CliRunner

from control_plane_fixtures import FabricFactory, two_leaves_of_four
from tpfabric_cli.main import app
from tpfabric_core import labels
from tpfabric_core.fabric.link_publish import CONDITION_TYPE, DETAIL_ANNOTATION
from tpfabric_localcluster.cluster import LocalCluster

FABRIC = two_leaves_of_four("health-show", "hs", rails=4)
SYMBOLS = "symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)"


def publish(core: client.CoreV1Api, node: str, *, healthy: bool, rail: int = 3) -> None:
    """Write what the agent writes for ``node``: label, annotation, then the condition."""
    state = "ok" if healthy else "degraded"
    detail = {"state": state, "rails": {str(rail): {"hca": f"mlx5_{rail}", "state": state}}}
    if not healthy:
        detail["rails"][str(rail)]["reasons"] = [SYMBOLS]
    core.patch_node(
        node,
        {
            "metadata": {
                "labels": {labels.HEALTH: state},
                "annotations": {DETAIL_ANNOTATION: json.dumps(detail)},
            }
        },
    )
    condition = {
        "type": CONDITION_TYPE,
        "status": "True" if healthy else "False",
        "reason": "LinksHealthy" if healthy else "LinkDegraded",
        "message": "every fabric port is up" if healthy else SYMBOLS,
    }
    core.patch_node_status(
        node,
        {"status": {"conditions": [condition]}},
        _content_type="application/strategic-merge-patch+json",
    )


def test_show_cluster_paints_what_the_agent_published(
    local_cluster: LocalCluster, api: client.ApiClient, fake_nodes: FabricFactory, tmp_path: Path
) -> None:
    names = fake_nodes(FABRIC)
    core = client.CoreV1Api(api)
    for name in names:
        publish(core, name, healthy=True)
    for name in ("hs-l2-01", "hs-l2-02", "hs-l2-03"):  # three nodes blame rail 3 of one leaf
        publish(core, name, healthy=False)
    png = tmp_path / "fabric.png"

    shown = CliRunner().invoke(
        app,
        ["topology", "show", "--cluster", "--kubeconfig", str(local_cluster.kubeconfig),
         "--png", str(png)],
    )  # fmt: skip

    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "leaf domain hs-leaf1 · 4 nodes\n" in out
    assert "leaf domain hs-leaf2 · 4 nodes · 3 degraded" in out
    assert "degraded: hs-l2-[01-03]" in out
    assert f"hs-l2-[01-03]: degraded (LinkDegraded: {SYMBOLS}; rail 3 (mlx5_3) degraded)" in out
    rail3 = core.read_node("hs-l2-01").metadata.labels[labels.rail_key(3)]
    assert f"rail 3 → {rail3} ✗ degraded" in out
    assert f"rail switch {rail3} suspect: 3 nodes degraded on rail 3" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
