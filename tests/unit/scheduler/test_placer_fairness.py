"""Fairness within the cycle's time bound: a cycle that stops at its bound leaves the rest to the
next, which resumes where it stopped (round-robin), so a young gang that fits is planned however
many older gangs wait; the gangs at the head of the line still act first."""

from __future__ import annotations

from typing import Any

from placer_world import Clock, RecordingWriter, gang, placement, two_leaves

from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.queue import cycle_order
from tpfabric_scheduler.store import ClusterStore


def one_gang_per_cycle(store: ClusterStore, writer: RecordingWriter) -> GangPlacer:
    """A placer whose cycles reach their time bound after the first gang they act on."""
    return GangPlacer(store, writer, Metrics(), clock=Clock(), max_cycle_seconds=0.0)  # type: ignore[arg-type]


def test_a_young_gang_that_fits_is_reached_behind_older_gangs_that_wait() -> None:
    store = ClusterStore()
    writer = RecordingWriter(store)
    two_leaves(store)
    for k in range(3):  # older gangs of 6 that no leaf of 4 can hold
        gang(writer, f"old-{k}", 6, created=f"2027-01-15T08:00:0{k}Z")
    gang(writer, "young", 2, created="2027-01-15T09:00:00Z")
    placer = one_gang_per_cycle(store, writer)
    for _ in range(4):
        assert placer.run_cycle(), "each cycle stops at its bound with work left"
    assert [placement(writer, f"old-{k}")["state"] for k in range(3)] == ["Waiting"] * 3
    assert placement(writer, "young")["state"] == "Planned", "the fourth cycle reached it"


def test_without_a_resume_point_a_cycle_goes_in_queue_order(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    for k in range(3):
        gang(writer, f"g-{k}", 6, created=f"2027-01-15T08:00:0{k}Z")
    work = placer.pending_work()
    assert [w.job.name for w in cycle_order(work)] == ["g-0", "g-1", "g-2"]
    resumed = cycle_order(work, resume=(0, work[1].job.created, work[1].job.key))
    assert [w.job.name for w in resumed] == ["g-1", "g-2", "g-0"]
    holding = cycle_order(
        work, resume=(0, work[2].job.created, work[2].job.key), holding={"uid-g-0"}
    )
    assert [w.job.name for w in holding] == ["g-0", "g-2", "g-1"], "the head of the line first"
