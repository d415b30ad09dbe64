"""Explanations that cost once (explanations.py): why a gang waits is worked out once per shape
of gang and state of capacity, and every gang of that shape gets the same words under its own
name; a change of capacity (a plan of the cycle, a new capacity generation) works it out again."""

from __future__ import annotations

from typing import Any

from placer_world import gang, placement, two_leaves

from tpfabric_core.placement.results import Unschedulable
from tpfabric_scheduler.explanations import Explanations


def test_gangs_of_one_shape_share_one_explanation_in_their_own_words(
    world: Any, attempts: list[str]
) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    for name in ("first", "second", "third"):
        gang(writer, name, 6)  # no leaf of 4 holds 6
    placer.run_cycle()
    assert attempts == ["ns/first"], "worked out once for the three"
    words = {name: placement(writer, name) for name in ("first", "second", "third")}
    assert words["first"]["message"].startswith("ns/first: no leaf domain has room for 6")
    for name in ("second", "third"):
        assert words[name]["state"] == "Waiting"
        assert words[name]["message"] == words["first"]["message"].replace("ns/first", f"ns/{name}")
        assert words[name]["reasons"] == words["first"]["reasons"]


def test_another_shape_or_a_plan_in_between_works_it_out_again(
    world: Any, attempts: list[str]
) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, "six", 6, created="2027-01-15T08:00:00Z")
    gang(writer, "five", 5, created="2027-01-15T08:00:01Z")  # another shape
    gang(writer, "fits", 2, created="2027-01-15T08:00:02Z")  # planned: capacity changes
    gang(writer, "six-again", 6, created="2027-01-15T08:00:03Z")
    placer.run_cycle()
    assert attempts == ["ns/six", "ns/five", "ns/fits", "ns/six-again"]
    assert placement(writer, "fits")["state"] == "Planned"
    before = placement(writer, "six")["message"].replace("ns/six", "ns/six-again")
    assert "'leaf-a' fits 4" in before
    after = placement(writer, "six-again")["message"]
    assert "'leaf-b' fits 4" in after, "the words after the plan took half of leaf-a"


def test_a_new_capacity_generation_forgets_what_was_kept() -> None:
    explanations = Explanations().at(1)
    key = ("shape", 0, 0)
    assert explanations.known(key, "ns/a") is None
    explanations.keep(key, Unschedulable("ns/a", "required", "leaf", (), "ns/a: no leaf"))
    shared = explanations.known(key, "ns/b")
    assert shared is not None
    assert (shared.job, shared.summary) == ("ns/b", "ns/b: no leaf")
    assert explanations.at(2).known(key, "ns/b") is None
