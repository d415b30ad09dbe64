"""The placer's answer to onDegradedLink restart-elsewhere and restart-when-it-pays: whether a
running gang has healthy room elsewhere (``status.placement.healthyRoom``), which the operator
needs before it restarts the gang away from a degraded node."""

from __future__ import annotations

import json
from typing import Any

import pytest
from placer_world import a_job, a_node, gang, make_workers, placement, two_leaves
from test_placer_gangs import add_gang, gang_placement

from tpfabric_core.fabric.link_publish import DETAIL_ANNOTATION
from tpfabric_core.labels import LEAF
from tpfabric_core.placement.cost_flags import cost_model
from tpfabric_core.placement.topology import DEFAULT_LEVELS
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.policy.healthy_room import RECHECK_SECONDS


def _running(writer: Any, placer: Any, name: str, workers: int, **job_args: Any) -> list[str]:
    gang(writer, name, workers, **job_args)
    placer.run_cycle()
    nodes = placement(writer, name)["nodes"]
    for index, node in enumerate(nodes):
        writer.bind(f"{name}-worker-{index}", node)
    return list(nodes)


def _health(store: Any, name: str, health: str) -> None:
    leaf = name.rsplit("-", 1)[0]
    node = a_node(name, leaf, health=health)
    node["metadata"]["labels"][HOSTNAME] = name  # as the kubelet labels every node
    with store.lock:
        store.upsert_node(node)


def _room_writes(writer: Any, name: str) -> list[Any]:
    return [
        w["placement"]["healthyRoom"]
        for job, w in writer.status_writes
        if job == name and w.get("placement", {}).get("healthyRoom")
    ]


def _required(key: str, values: list[str]) -> dict[str, Any]:
    """Return a required node affinity of one expression: ``key`` In ``values``."""
    expression = {"key": key, "operator": "In", "values": values}
    term = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}


def _room_after_degrading_the_first(world: Any, name: str) -> tuple[list[str], bool]:
    """Plan and bind gang ``name``, degrade its first node; return (its sorted nodes, whether
    the placer found healthy room for it)."""
    store, writer, placer, clock = world
    placer.run_cycle()
    nodes = placement(writer, name)["nodes"]
    for index, node in enumerate(nodes):
        writer.bind(f"{name}-worker-{index}", node)
    _health(store, nodes[0], "degraded")
    clock.now += 1
    placer.run_cycle()
    return sorted(nodes), placement(writer, name)["healthyRoom"]["found"]


MOVER = {"topology": {"onDegradedLink": "restart-elsewhere"}}
HOSTNAME = "kubernetes.io/hostname"


def test_a_gang_on_a_degraded_node_is_told_where_healthy_room_is(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    nodes = _running(writer, placer, "job", 4, **MOVER)
    assert placement(writer, "job").get("healthyRoom") is None
    _health(store, nodes[1], "degraded")
    clock.now += 1
    placer.run_cycle()
    room = placement(writer, "job")["healthyRoom"]
    other = "leaf-b" if nodes[0].startswith("leaf-a") else "leaf-a"
    assert room["found"] is True
    assert room["degradedNodes"] == [nodes[1]]
    assert room["message"] == (
        f"leaf '{other}' has room for the whole gang off {nodes[1]}: modelled all-reduce "
        "0.153 ms there against 0.216 ms where it runs, its degraded links keeping 0.5 of their "
        "rate"
    )
    assert placement(writer, "job")["nodes"] == nodes  # only an answer: the plan is the same


def test_with_the_other_leaf_full_there_is_none_until_it_frees(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    nodes = _running(
        writer,
        placer,
        "job",
        4,
        topology={
            "onDegradedLink": "restart-when-it-pays",
            "restartCost": {"interNodeCommShare": 0.5},
            "avoidDegraded": "penalize",
        },
    )
    _running(writer, placer, "filler", 4)
    _health(store, nodes[2], "degraded")
    clock.now += 1
    placer.run_cycle()
    room = placement(writer, "job")["healthyRoom"]
    assert room["found"] is False
    assert room["message"].startswith("no healthy room for the whole gang: ")
    # the same answer is not written again, however often it is looked for
    for _ in range(3):
        clock.now += RECHECK_SECONDS
        placer.run_cycle()
    assert len(_room_writes(writer, "job")) == 1
    writer.delete_job_pods("ns", "filler")  # the filler finished: its pods and plan are gone
    with store.lock:
        store.delete_job("ns/filler")
    clock.now += 1  # looked at again only after RECHECK_SECONDS
    placer.run_cycle()
    assert placement(writer, "job")["healthyRoom"]["found"] is False
    clock.now += RECHECK_SECONDS
    placer.run_cycle()
    assert placement(writer, "job")["healthyRoom"]["found"] is True


def test_another_degraded_node_is_looked_at_at_once_and_a_healed_gang_loses_its_answer(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    nodes = _running(writer, placer, "job", 4, **MOVER)
    _health(store, nodes[0], "degraded")
    placer.run_cycle()
    assert placement(writer, "job")["healthyRoom"]["degradedNodes"] == [nodes[0]]
    _health(store, nodes[3], "degraded")
    placer.run_cycle()  # the same second: new degraded nodes are not rate-limited
    assert placement(writer, "job")["healthyRoom"]["degradedNodes"] == sorted([nodes[0], nodes[3]])
    _health(store, nodes[0], "ok")
    _health(store, nodes[3], "ok")
    placer.run_cycle()
    assert placement(writer, "job").get("healthyRoom") is None


def test_jobs_that_do_not_move_and_gangs_not_running_whole_get_no_answer(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    reporter = _running(writer, placer, "reporter", 4)  # onDegradedLink: report (the default)
    gang(writer, "starting", 4, **MOVER)
    placer.run_cycle()
    starting = placement(writer, "starting")["nodes"]
    writer.bind("starting-worker-0", starting[0])  # three workers not bound yet
    _health(store, reporter[0], "degraded")
    _health(store, starting[0], "degraded")
    clock.now += 1
    placer.run_cycle()
    assert placement(writer, "reporter").get("healthyRoom") is None
    assert placement(writer, "starting").get("healthyRoom") is None


def test_a_leaderworkerset_group_is_told_too_with_its_pods_narrowing_taken_out(
    world: Any,
) -> None:
    """A group's pods were narrowed to their leaf when released; LWS makes them again from
    its template, so the room is looked for with that narrowing taken out again."""
    store, writer, placer, clock = world
    two_leaves(store)
    add_gang(writer, "vllm-0", 2)
    placer.run_cycle()
    nodes = gang_placement(writer, "vllm-0")["nodes"]
    for rank, node in enumerate(nodes):
        writer.bind(f"vllm-0-{rank}", node)
    leaf = nodes[0].rsplit("-", 1)[0]
    narrowed = writer.pods["ns/vllm-0-0"]["spec"]["affinity"]
    assert leaf in str(narrowed)  # released into its leaf
    for other in (n for n in store.nodes if n.startswith(leaf) and n not in nodes):
        _health(store, other, "degraded")  # its own leaf has no healthy room left
    _health(store, nodes[0], "degraded")
    clock.now += 1
    placer.run_cycle()
    room = gang_placement(writer, "vllm-0")["healthyRoom"]
    assert room["found"] is True
    other = "leaf-b" if leaf == "leaf-a" else "leaf-a"
    assert room["message"].startswith(
        f"leaf '{other}' has room for the whole gang off {nodes[0]}: modelled all-reduce "
    )


def test_a_job_kept_to_its_admitted_hosts_has_no_room_outside_them(world: Any) -> None:
    """Kueue's TAS admission keeps every worker on the hosts it assigned (a required node
    affinity the operator adds to each pod, and keeps on a restart): with one of them degraded
    there is no room, however free the rest of the cluster is."""
    store, writer, _, _ = world
    for name in two_leaves(store):
        _health(store, name, "ok")
    hosts = ["leaf-a-n0", "leaf-a-n1"]
    job = a_job("tas", 2)
    job["spec"]["topology"] = {"mode": "required", "level": "leaf", **MOVER["topology"]}
    writer.add_job(job)
    kueue = _required(HOSTNAME, hosts)
    make_workers(writer, "tas", 2, affinity=kueue)
    assert _room_after_degrading_the_first(world, "tas") == (hosts, False)


def test_a_template_pinned_to_its_plans_leaf_has_no_room_outside_it(world: Any) -> None:
    """The job's own template asks for leaf-a, the leaf its plan is in: narrowing added nothing
    there, so looking for room it must not be taken away with the plan's narrowing. A restart
    makes the pods from that template again, and leaf-b, free as it is, would not take them."""
    store, writer, _, _ = world
    for name in two_leaves(store, per_leaf=2):
        _health(store, name, "ok")
    pinned = _required(LEAF, ["leaf-a"])
    job = a_job("pinned", 2)
    job["spec"]["topology"] = {"mode": "required", "level": "leaf", **MOVER["topology"]}
    job["spec"]["template"]["spec"]["affinity"] = pinned
    writer.add_job(job)
    make_workers(writer, "pinned", 2, affinity=pinned)
    assert _room_after_degrading_the_first(world, "pinned") == (["leaf-a-n0", "leaf-a-n1"], False)


def test_room_that_frees_later_goes_to_the_waiting_gangs_first(world: Any) -> None:
    """The first look found no room; a later one offers the room that freed only while no
    gang waits for capacity (the benchmark: moves ahead of the queue cost the cluster)."""
    store, writer, placer, clock = world
    two_leaves(store)
    nodes = _running(writer, placer, "job", 4, **MOVER)
    _running(writer, placer, "filler", 4)
    _health(store, nodes[0], "degraded")
    clock.now += 1
    placer.run_cycle()
    assert placement(writer, "job")["healthyRoom"]["found"] is False
    gang(writer, "big", 6, topology={"mode": "required", "level": "spine"})  # waits: 6 of 8
    writer.delete_job_pods("ns", "filler")
    with store.lock:
        store.delete_job("ns/filler")
    for _ in range(2):
        clock.now += RECHECK_SECONDS
        placer.run_cycle()
        assert placement(writer, "big").get("state") == "Waiting"
        assert placement(writer, "job")["healthyRoom"]["found"] is False  # the leaf is free
    writer.delete_job_pods("ns", "big")
    with store.lock:
        store.delete_job("ns/big")
    clock.now += RECHECK_SECONDS
    placer.run_cycle()
    assert placement(writer, "job")["healthyRoom"]["found"] is True


def _slow_rail(store: Any, name: str, bandwidth: float) -> None:
    """Label ``name`` degraded, its fabric agent measuring a rail that keeps ``bandwidth``."""
    leaf = name.rsplit("-", 1)[0]
    node = a_node(name, leaf, health="degraded")
    rail = {"hca": "mlx5_0", "state": "degraded", "bandwidth": bandwidth, "reasons": ["rate"]}
    detail = {"state": "degraded", "rails": {"0": rail}}
    node["metadata"]["annotations"] = {DETAIL_ANNOTATION: json.dumps(detail)}
    with store.lock:
        store.upsert_node(node)


@pytest.mark.parametrize(
    ("bandwidth", "spine", "found"),
    [(0.95, None, False), (0.5, None, True), (0.0, None, True), (0.5, "spine=4", False)],
)
def test_room_is_offered_only_where_the_gang_would_run_faster(
    world: Any, bandwidth: float, spine: str | None, found: bool
) -> None:
    """The only healthy room for a 3-worker gang spans two leaves, across the spine (its
    background load modelled): faster than a link keeping half its rate, or none (a rail
    down), but not than one keeping 95% of it, as the fabric agent measured it; nor than half
    a rate where the fabric says its spine uplinks are 4:1 (``--oversubscription``)."""
    store, writer, placer, clock = world
    if spine is not None:
        cost = cost_model(DEFAULT_LEVELS, oversubscription=spine)
        placer = GangPlacer(store, writer, Metrics(), clock=clock, bind_timeout=60, cost=cost)
    for leaf, count in (("leaf-a", 3), ("leaf-b", 2), ("leaf-c", 2)):
        for i in range(count):
            with store.lock:
                store.upsert_node(a_node(f"{leaf}-n{i}", leaf))
    preferred = {"mode": "preferred", "level": "leaf", **MOVER["topology"]}
    nodes = _running(writer, placer, "job", 3, topology=preferred)
    assert sorted(nodes) == ["leaf-a-n0", "leaf-a-n1", "leaf-a-n2"]
    _slow_rail(store, nodes[1], bandwidth)
    clock.now += 1
    placer.run_cycle()
    room = placement(writer, "job")["healthyRoom"]
    assert room["found"] is found, room
    kept = f"its degraded links keeping {bandwidth:g} of their rate"
    assert kept in room["message"]
    if not found:
        assert room["message"].startswith("no faster room for the whole gang: spine ")
