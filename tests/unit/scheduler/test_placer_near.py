"""A gang placed near another (``spec.near``): decode near prefill, at a level, as
required or preferred, with the reason in its plan."""

from __future__ import annotations

from typing import Any

from placer_world import RecordingWriter, two_leaves
from test_placer_gangs import _occupy, a_gang_record, gang_placement, gang_pod

from tpfabric_scheduler.policy.near import PREFERRED_WAIT_SECONDS


def add(
    writer: RecordingWriter, name: str, workers: int, near: dict[str, str] | None = None
) -> None:
    record = a_gang_record(name, workers)
    if near is not None:
        record["spec"]["near"] = near
    writer.add_job(record)
    for rank in range(workers):
        writer.add_pod(gang_pod(name, rank))


def leaf(node: str) -> str:
    return node.split("-n", maxsplit=1)[0]


def test_a_gang_that_must_be_near_another_waits_for_it_then_joins_its_leaf(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    add(writer, "decode-0", 1, {"target": "prefill", "level": "leaf", "mode": "required"})
    placer.run_cycle()
    waiting = gang_placement(writer, "decode-0")
    assert waiting["state"] == "Waiting"
    assert waiting["message"].startswith("waits for 'prefill' to be placed")
    assert writer.released == []
    for node in ("leaf-a-n0", "leaf-a-n1", "leaf-a-n2"):
        _occupy(writer, node)  # leaf-a keeps one free node: best fit alone puts decode there
    add(writer, "prefill-0", 2)
    placer.run_cycle()
    placer.run_cycle()
    prefill = gang_placement(writer, "prefill-0")
    decode = gang_placement(writer, "decode-0")
    assert {leaf(n) for n in prefill["nodes"]} == {"leaf-b"}
    assert {leaf(n) for n in decode["nodes"]} == {"leaf-b"}, decode
    assert decode["near"] == "near 'prefill' in leaf 'leaf-b' (required)"


def test_a_gang_that_prefers_to_be_near_goes_elsewhere_when_there_is_no_room_there(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    add(writer, "prefill-0", 2)
    placer.run_cycle()
    (prefill_leaf,) = {leaf(n) for n in gang_placement(writer, "prefill-0")["nodes"]}
    add(writer, "decode-0", 2, {"target": "prefill", "level": "leaf", "mode": "preferred"})
    placer.run_cycle()
    decode = gang_placement(writer, "decode-0")
    assert decode["state"] == "Planned"
    assert {leaf(n) for n in decode["nodes"]} != {prefill_leaf}
    assert decode["near"].startswith(
        f"not near 'prefill': no room in its leaf domain(s) '{prefill_leaf}'"
    )


def test_a_gang_that_must_be_near_waits_for_room_in_its_partners_leaf(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=2)
    add(writer, "prefill-0", 2)
    placer.run_cycle()
    (prefill_leaf,) = {leaf(n) for n in gang_placement(writer, "prefill-0")["nodes"]}
    add(writer, "decode-0", 1, {"target": "prefill", "level": "leaf", "mode": "required"})
    placer.run_cycle()
    decode = gang_placement(writer, "decode-0")
    assert decode["state"] == "Waiting", "the other leaf is free, but not near"
    assert decode["message"].startswith(
        f"near 'prefill' (required): only in its leaf domain(s) '{prefill_leaf}'"
    )


def test_two_gangs_that_must_be_near_each_other_do_not_wait_for_each_other(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    add(writer, "a-0", 2, {"target": "b", "level": "leaf", "mode": "required"})
    add(writer, "b-0", 2, {"target": "a", "level": "leaf", "mode": "required"})
    placer.run_cycle()
    placer.run_cycle()
    first, second = gang_placement(writer, "a-0"), gang_placement(writer, "b-0")
    assert first["state"] == second["state"] == "Planned", (first, second)
    assert {leaf(n) for n in first["nodes"] + second["nodes"]} == {leaf(first["nodes"][0])}


def test_a_gang_that_prefers_to_be_near_waits_a_while_for_its_partner_to_be_placed(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=4)
    writer.add_job(a_gang_record("prefill-0", 2))
    writer.add_pod(gang_pod("prefill-0", 0))  # its second pod not made yet: not planned
    add(writer, "decode-0", 2, {"target": "prefill", "level": "leaf", "mode": "preferred"})
    placer.run_cycle()
    waiting = gang_placement(writer, "decode-0")
    assert waiting["state"] == "Waiting"
    assert waiting["message"].startswith("waits for 'prefill' to be placed: up to 30 s")
    clock.now += PREFERRED_WAIT_SECONDS + 1
    placer.run_cycle()
    decode = gang_placement(writer, "decode-0")
    assert decode["state"] == "Planned", "a preference never waits for ever"
    assert decode["near"] == "not near 'prefill': it is not placed yet (preferred)"


def test_a_disaggregated_sets_role_is_a_partner_by_its_role_name(world: Any) -> None:
    """DisaggregatedSet names a role's LWS after the set, the role and the revision: the role
    is what ``near`` names, within the gang's own set."""
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=4)
    for node in ("leaf-a-n0", "leaf-a-n1", "leaf-a-n2"):
        _occupy(writer, node)
    for name, role, near in (
        ("ds-prefill-abc12", "prefill", None),
        ("ds-decode-abc12", "decode", "prefill"),
    ):
        record = a_gang_record(f"{name}-0", 2 if near is None else 1)
        record["spec"]["owner"] |= {"name": name, "role": role, "disaggregatedSet": "ds"}
        if near:
            record["spec"]["near"] = {"target": near, "level": "leaf", "mode": "required"}
        writer.add_job(record)
        for rank in range(record["spec"]["workers"]):
            writer.add_pod(gang_pod(f"{name}-0", rank))
    placer.run_cycle()
    placer.run_cycle()
    decode = gang_placement(writer, "ds-decode-abc12-0")
    assert decode["near"] == "near 'prefill' in leaf 'leaf-b' (required)", decode
