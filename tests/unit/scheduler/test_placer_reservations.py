"""Reservations count every planned rank's whole demand: when several ranks
of a gang share a node (workers that take part of a node), each holds its own share until it
binds, in the placer's snapshot and in the extender's filter."""

from __future__ import annotations

from typing import Any

import orjson
from builders import extender_args
from placer_world import a_job, half_node_gang, placement, two_leaves

from tpfabric_scheduler.extender import filter_nodes
from tpfabric_scheduler.protocol import parse_extender_args


def test_two_ranks_planned_onto_one_node_both_hold_it_until_they_bind(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    half_node_gang(writer, "pair", 2)
    placer.run_cycle()
    pair = placement(writer, "pair")["nodes"]
    assert pair[0] == pair[1], "best fit puts both halves on one node"
    half_node_gang(writer, "single", 1)
    placer.run_cycle()
    single = placement(writer, "single")["nodes"]
    assert single[0] != pair[0], "the node is full with the pair's two reserved ranks"
    with store.lock:
        assert store.reservations()[pair[0]] == (("ns/pair", 0), ("ns/pair", 1))


def _planned(writer: Any, name: str, nodes: list[str]) -> None:
    """Persist a plan of ``name`` on ``nodes`` in leaf-a, its workers not bound."""
    job = writer.jobs[f"ns/{name}"]
    job["status"] = a_job(name, len(nodes), plan=("leaf", "leaf-a", nodes))["status"]
    writer.add_job(job)


def _filter(store: Any, worker: dict[str, Any], offered: list[str]) -> tuple[Any, Any]:
    args = parse_extender_args(orjson.dumps(extender_args(worker, offered)))
    with store.lock:
        return filter_nodes(store, args)


def test_the_extender_keeps_a_half_reserved_node_while_the_pod_fits_beside_it(world: Any) -> None:
    store, writer, _, _ = world
    two_leaves(store, per_leaf=2)
    for name, workers in (("half", 1), ("pair", 2), ("other", 1)):
        half_node_gang(writer, name, workers)
    _planned(writer, "half", ["leaf-a-n0"])  # 4 of leaf-a-n0's 8 GPUs held
    _planned(writer, "pair", ["leaf-a-n1", "leaf-a-n1"])
    # rank 1 of "pair": its planned node did not pass kube-scheduler's own filters
    worker = writer.pods["ns/pair-worker-1"]
    result, counts = _filter(store, worker, ["leaf-a-n0"])
    assert result.node_names == ["leaf-a-n0"], counts
    _planned(writer, "other", ["leaf-a-n0"])  # the other 4 GPUs held too
    result, counts = _filter(store, worker, ["leaf-a-n0"])
    assert result.node_names == []
    assert counts == {"reserved-by-another-gang": 1}
    assert "rank 0 of job ns/half, rank 0 of job ns/other" in str(result.failed_unresolvable)
