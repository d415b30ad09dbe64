"""What the placer counts as it works: how long gangs waited for their plan, and the plans it
dropped or refused, by reason; and what a scrape reads off its store: the waiting gangs' ages
and limits, the nodes' fabric health."""

from __future__ import annotations

from typing import Any

from placer_world import NOW, a_worker, gang, placement, two_leaves
from prometheus_client import generate_latest

from tpfabric_core import labels
from tpfabric_core.fabric.agent_heartbeat import HeartbeatLease
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.store_metrics import StoreMetrics


def sample(metrics: Metrics, name: str, **wanted: str) -> float | None:
    """Return the value of the sample ``name`` with labels ``wanted`` (None: no such sample)."""
    for family in metrics.registry.collect():
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in wanted.items()):
                return float(found.value)
    return None


def test_a_gang_planned_at_once_is_observed_as_a_wait_of_zero_at_its_level(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, "job", 2)
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Planned"
    metrics = placer.metrics
    bucket = "tpfabric_placer_gang_wait_seconds_bucket"
    assert sample(metrics, bucket, outcome="planned", level="leaf", le="1.0") == 1.0
    assert sample(metrics, "tpfabric_placer_gang_wait_seconds_count", outcome="planned") == 1.0


def test_a_gang_that_waited_is_observed_with_its_whole_wait_once_planned(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    with store.lock:  # every node of both leaves busy: the gang waits
        for i, node in enumerate(sorted(store.nodes)):
            store.upsert_pod(a_worker("busy", i, node=node, gated=False))
    gang(writer, "job", 2)
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Waiting"
    metrics = placer.metrics
    assert sample(metrics, "tpfabric_placer_gang_wait_seconds_count", outcome="planned") in (
        None,
        0.0,
    )
    clock.now += 400
    with store.lock:  # the busy pods end
        for key in [k for k in store.pods if k.startswith("ns/busy-")]:
            store.delete_pod(key)
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Planned"
    assert sample(metrics, "tpfabric_placer_gang_wait_seconds_sum", outcome="planned") == 400.0
    bucket = "tpfabric_placer_gang_wait_seconds_bucket"
    assert sample(metrics, bucket, outcome="planned", level="leaf", le="300.0") == 0.0
    assert sample(metrics, bucket, outcome="planned", level="leaf", le="600.0") == 1.0


def test_a_plan_whose_pods_do_not_bind_is_counted_as_dropped_by_the_bind_bound(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "stuck", 2)
    placer.run_cycle()
    writer.bind("stuck-worker-0", placement(writer, "stuck")["nodes"][0])
    dropped = "tpfabric_placer_plans_dropped_total"
    assert sample(placer.metrics, dropped, reason="bind_timeout") == 0.0
    clock.now += 61
    placer.run_cycle()
    assert placement(writer, "stuck")["state"] == "Replanning"
    assert sample(placer.metrics, dropped, reason="bind_timeout") == 1.0
    assert sample(placer.metrics, dropped, reason="node_taken") == 0.0


def test_a_plan_dropped_because_its_node_was_taken_says_so(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    gang(writer, "job", 2)
    placer.run_cycle()
    nodes = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", nodes[0])
    with store.lock:
        store.upsert_pod(a_worker("plain", 0, node=nodes[1], gated=False))
    clock.now += 11
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Replanning"
    dropped = "tpfabric_placer_plans_dropped_total"
    assert sample(placer.metrics, dropped, reason="node_taken") == 1.0
    assert sample(placer.metrics, dropped, reason="bind_timeout") == 0.0


def test_a_gang_asking_for_a_level_the_cluster_lacks_is_refused_as_invalid(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, "odd", 2, topology={"level": "rack"})
    placer.run_cycle()
    assert placement(writer, "odd")["state"] == "Invalid"
    assert sample(placer.metrics, "tpfabric_placer_plans_refused_total", reason="invalid") == 1.0
    placer.run_cycle()
    assert sample(placer.metrics, "tpfabric_placer_plans_refused_total", reason="invalid") == 1.0


def _waiting_job(store: ClusterStore, name: str, since: float, **topology: Any) -> None:
    from builders import a_job  # noqa: PLC0415

    job = a_job(name, 2)
    job["spec"]["topology"] = {"mode": "required", "level": "leaf", **topology}
    job["status"] = {"placement": {"state": "Waiting", "waitingSince": rfc3339(since)}}
    with store.lock:
        store.upsert_job(job)


def _scrape(collector: StoreMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }


def test_a_scrape_reads_the_oldest_wait_and_each_gangs_wait_against_its_limit() -> None:
    store = ClusterStore()
    _waiting_job(store, "old", NOW - 900, maxWaitSeconds=600)
    _waiting_job(store, "young", NOW - 30)
    scraped = _scrape(StoreMetrics(store, wait_alert_seconds=1800, wall=lambda: NOW))
    assert scraped[("tpfabric_placer_oldest_waiting_gang_seconds", ())] == 900
    old = (("gang_kind", "TensorParallelJob"), ("gang_name", "old"), ("gang_namespace", "ns"))
    young = (("gang_kind", "TensorParallelJob"), ("gang_name", "young"), ("gang_namespace", "ns"))
    assert scraped[("tpfabric_placer_gang_waiting_seconds", old)] == 900
    assert scraped[("tpfabric_placer_gang_wait_limit_seconds", old)] == 600, "its maxWaitSeconds"
    assert scraped[("tpfabric_placer_gang_waiting_seconds", young)] == 30
    assert scraped[("tpfabric_placer_gang_wait_limit_seconds", young)] == 1800, "the default"


def test_a_scrape_with_no_waiting_gang_says_zero_and_names_none() -> None:
    scraped = _scrape(StoreMetrics(ClusterStore(), wall=lambda: NOW))
    assert scraped[("tpfabric_placer_oldest_waiting_gang_seconds", ())] == 0
    assert not [key for key in scraped if key[0] == "tpfabric_placer_gang_waiting_seconds"]


def test_a_scrape_counts_nodes_by_fabric_health_and_the_gang_workers_on_degraded_ones() -> None:
    store = ClusterStore()
    clock = [100.0]
    store.clock = lambda: clock[0]
    names = two_leaves(store)
    with store.lock:
        node = store.nodes[names[0]]
        store.put_node(
            type(node)(**{**_fields(node), "labels": {**node.labels, labels.HEALTH: "degraded"}})
        )
        store.upsert_pod(a_worker("job", 0, node=names[0], gated=False))
        store.put_heartbeat(HeartbeatLease(names[1], "t1", 40.0))
    clock[0] += 41
    with store.lock:
        store.mark_silent(frozenset(store.heartbeats.silent(clock[0])))
    scraped = _scrape(StoreMetrics(store, wall=lambda: NOW))
    assert scraped[("tpfabric_placer_nodes", (("fabric_health", "unknown"),))] == 1
    assert scraped[("tpfabric_placer_nodes", (("fabric_health", "degraded"),))] == 1
    assert scraped[("tpfabric_placer_nodes", (("fabric_health", "ok"),))] == len(names) - 2
    assert scraped[("tpfabric_placer_degraded_node_gang_workers", (("node", names[0]),))] == 1
    assert scraped[("tpfabric_placer_fabric_agent_silent_seconds", (("node", names[1]),))] == 41


def _fields(node: Any) -> dict[str, Any]:
    return {name: getattr(node, name) for name in node.__slots__}


def test_the_placer_registry_serves_the_store_metrics_beside_its_own() -> None:
    metrics = Metrics()
    metrics.registry.register(StoreMetrics(ClusterStore(), wall=lambda: NOW))
    text = generate_latest(metrics.registry).decode()
    assert "tpfabric_placer_oldest_waiting_gang_seconds 0.0" in text
    assert 'tpfabric_placer_plans_dropped_total{reason="bind_timeout"} 0.0' in text
