"""A node whose fabric agent is silent has unknown link health: new plans treat it as degraded
(by the gang's avoidDegraded), the extender scores it low, a gang running there is left alone,
and the leading placer says it once in the node's FabricHealthy condition."""

from __future__ import annotations

from typing import Any

from builders import a_node
from placer_world import gang, placement, two_leaves

from tpfabric_core.fabric.agent_heartbeat import AGENT_SILENT_REASON, HeartbeatLease
from tpfabric_scheduler.agent_silence import SilenceWatch
from tpfabric_scheduler.store import ClusterStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NodeWriter:
    """The two calls of SilenceWatch, recorded; leases as the API server holds them."""

    def __init__(self) -> None:
        self.renewals: dict[str, str | None] = {}
        self.conditions: list[tuple[str, dict[str, Any]]] = []

    def read_lease_renewal(self, namespace: str, name: str) -> str | None:
        return self.renewals.get(name)

    def patch_fabric_condition(self, node: str, condition: dict[str, Any]) -> None:
        self.conditions.append((node, condition))


def agents_on(store: ClusterStore, writer: NodeWriter, nodes: list[str]) -> None:
    with store.lock:
        for node in nodes:
            store.put_heartbeat(HeartbeatLease(node, "t0", 40.0))
            writer.renewals[f"fabric-agent-{node}"] = "t0"


def watch(
    store: ClusterStore, writer: NodeWriter, *, leading: bool = True
) -> tuple[SilenceWatch, list[int]]:
    woken: list[int] = []
    return (
        SilenceWatch(
            store,
            writer,  # type: ignore[arg-type]
            "agents",
            leading=lambda: leading,
            wake=lambda: woken.append(1),
            wall=lambda: 1_800_000_000.0,
        ),
        woken,
    )


def test_a_silent_agent_makes_its_node_unknown_once_and_says_so_on_the_node() -> None:
    store, writer, clock = ClusterStore(), NodeWriter(), Clock()
    store.clock = clock
    names = two_leaves(store)
    agents_on(store, writer, names[:2])
    silence, woken = watch(store, writer)
    assert silence.check() == {}
    assert store.silent_nodes == frozenset()
    clock.now += 30
    with store.lock:  # the first agent renews, the second does not
        store.put_heartbeat(HeartbeatLease(names[0], "t1", 40.0))
    clock.now += 15
    assert silence.check() == {names[1]: 45.0}
    assert store.silent_nodes == {names[1]}
    assert woken == [1], "the placer is woken: what may fit changed"
    ((node, condition),) = writer.conditions
    assert node == names[1]
    assert (condition["type"], condition["status"]) == ("FabricHealthy", "Unknown")
    assert condition["reason"] == AGENT_SILENT_REASON
    assert "agents/fabric-agent-" + names[1] in condition["message"]
    clock.now += 5
    silence.check()
    assert len(writer.conditions) == 1, "said once per silence"
    assert woken == [1]


def test_a_replica_that_does_not_lead_marks_its_store_but_writes_nothing() -> None:
    store, writer, clock = ClusterStore(), NodeWriter(), Clock()
    store.clock = clock
    names = two_leaves(store)
    agents_on(store, writer, names[:1])
    silence, _ = watch(store, writer, leading=False)
    clock.now += 41
    assert set(silence.check()) == {names[0]}
    assert store.silent_nodes == {names[0]}
    assert writer.conditions == []


def test_a_renewal_the_watch_has_not_delivered_yet_writes_nothing() -> None:
    store, writer, clock = ClusterStore(), NodeWriter(), Clock()
    store.clock = clock
    names = two_leaves(store)
    agents_on(store, writer, names[:1])
    writer.renewals[f"fabric-agent-{names[0]}"] = "t9"  # renewed at the API server
    silence, _ = watch(store, writer)
    clock.now += 41
    silence.check()
    assert writer.conditions == []


def test_a_node_already_said_silent_is_not_written_again_after_a_restart() -> None:
    store, writer, clock = ClusterStore(), NodeWriter(), Clock()
    store.clock = clock
    names = two_leaves(store)
    with store.lock:
        node = a_node(names[0], "leaf-a")
        node["status"]["conditions"].append(
            {"type": "FabricHealthy", "status": "Unknown", "reason": AGENT_SILENT_REASON}
        )
        store.upsert_node(node)
    agents_on(store, writer, names[:1])
    silence, _ = watch(store, writer)
    clock.now += 41
    silence.check()
    assert writer.conditions == []


def test_an_agent_that_renews_again_makes_its_node_known_again() -> None:
    store, writer, clock = ClusterStore(), NodeWriter(), Clock()
    store.clock = clock
    names = two_leaves(store)
    agents_on(store, writer, names[:1])
    silence, woken = watch(store, writer)
    clock.now += 41
    silence.check()
    with store.lock:
        store.put_heartbeat(HeartbeatLease(names[0], "t2", 40.0))
    assert silence.check() == {}
    assert store.silent_nodes == frozenset()
    assert len(woken) == 2


def test_a_new_gang_is_kept_off_a_node_whose_agent_is_silent_as_off_a_degraded_one(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    names = two_leaves(store, per_leaf=2)
    with store.lock:
        store.mark_silent(frozenset({names[0]}))  # leaf-a's first node: unknown
    gang(writer, "job", 2)  # required leaf, avoidDegraded avoid (the default)
    placer.run_cycle()
    assert sorted(placement(writer, "job")["nodes"]) == names[2:]


def test_a_gang_that_ignores_link_health_may_use_a_node_whose_agent_is_silent(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    names = two_leaves(store, per_leaf=2)
    with store.lock:
        store.mark_silent(frozenset(names[2:]) | {names[0]})
    gang(writer, "job", 2, topology={"avoidDegraded": "ignore"})
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Planned"


def test_marking_a_node_silent_lets_waiting_gangs_be_looked_at_again() -> None:
    store = ClusterStore()
    before = store.freed_generation
    assert store.mark_silent(frozenset({"n1"})) is True
    assert store.freed_generation == before + 1
    assert store.mark_silent(frozenset({"n1"})) is False
    assert store.freed_generation == before + 1


def test_the_extender_scores_a_node_whose_agent_is_silent_as_a_degraded_one() -> None:
    import orjson  # noqa: PLC0415
    from builders import a_job, a_worker, extender_args  # noqa: PLC0415

    from tpfabric_scheduler.extender import prioritize_nodes  # noqa: PLC0415
    from tpfabric_scheduler.protocol import parse_extender_args  # noqa: PLC0415

    store = ClusterStore()
    for name in ("a1", "a2", "a3"):
        store.upsert_node(a_node(name, "leaf-a"))
    store.upsert_job(a_job("job", 2, plan=("leaf", "leaf-a", ["a1", "a2"])))
    args = parse_extender_args(
        orjson.dumps(extender_args(a_worker("job", 1, gated=False), ["a1", "a2", "a3"]))
    )
    healthy = dict(prioritize_nodes(store, args))
    store.mark_silent(frozenset({"a3"}))
    unknown = dict(prioritize_nodes(store, args))
    assert healthy["a3"] > 1
    assert unknown["a3"] == 1
