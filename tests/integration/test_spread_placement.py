"""The last resort: a gang no block can hold is spread over the whole cluster, and still runs.

A plan at the implicit ``cluster`` level has no node label to narrow affinity to; the placer must
only lift the gate and the extender must treat every node as in the domain (a regression test:
such pods once stayed gated forever).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from control_plane_fixtures import Jobs, clear_jobs_and_pods
from tpfabric_core import labels
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.nodes import apply_fake_nodes, delete_nodes, wait_ready

# 4 blocks of one spine group of one leaf of 3 nodes: 12 nodes, no block holds more than 3
FABRIC = uniform_fabric(12, nodes_per_leaf=3, leaves_per_spine=1, spines_per_block=1, name="tiny")


@pytest.fixture(scope="module")
def tiny_nodes(api: client.ApiClient) -> Iterator[dict[str, dict[str, str]]]:
    names = apply_fake_nodes(api, FABRIC)
    wait_ready(api, names)
    yield {n.name: FABRIC.node_labels(n) for n in FABRIC.nodes}
    delete_nodes(api, names)


def test_a_gang_bigger_than_any_block_is_spread_and_runs(
    api: client.ApiClient,
    namespace: str,
    tpfabric_scheduling: LocalCluster,
    tiny_nodes: dict[str, dict[str, str]],
) -> None:
    jobs = Jobs(api, namespace)
    jobs.create("wide", 5, mode="preferred", level="leaf")
    pods = jobs.wait_running("wide", timeout=90)
    nodes = [p.spec.node_name for p in pods]
    placement = jobs.placement("wide")
    assert placement["level"] == "cluster"
    assert nodes == placement["nodes"]
    assert len({tiny_nodes[n][labels.BLOCK] for n in nodes}) >= 2
    affinity = pods[0].spec.affinity
    assert affinity is None or affinity.node_affinity is None  # nothing to narrow to
    clear_jobs_and_pods(api, namespace)
