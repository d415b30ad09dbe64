"""A deposed placer writes nothing: every write checks that the placer still
leads in its term, and a plan write is refused by the API server unless the placement it was
computed from (its term) is still there."""

from __future__ import annotations

from typing import Any

from placer_world import RecordingWriter, gang, placement, two_leaves

from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer


class _LosingWriter(RecordingWriter):
    """Its placer loses the lease right after its first plan write."""

    def __init__(self, store: Any, leads: list[bool]) -> None:
        super().__init__(store)
        self.leads = leads

    def patch_job_status(self, *args: Any, **kwargs: Any) -> None:
        super().patch_job_status(*args, **kwargs)
        self.leads[0] = False


def test_a_placer_that_stops_leading_mid_cycle_writes_nothing_more(world: Any) -> None:
    store, _, _, clock = world
    leads = [True]
    writer = _LosingWriter(store, leads)
    placer = GangPlacer(
        store,
        writer,  # type: ignore[arg-type]
        Metrics(),
        clock=clock,
        leading=lambda: leads[0],
    )
    two_leaves(store)
    gang(writer, "first", 2)
    gang(writer, "second", 2)
    placer.run_cycle()
    assert len(writer.status_writes) == 1, "one plan went out while it led"
    assert writer.released == [], "no release after the lease was lost"
    assert writer.events == []
    assert placement(writer, "second") == {}


def planned_in_term_4(world: Any) -> GangPlacer:
    """Return the placer of term 4 that planned gang ``job`` of two workers."""
    store, writer, _, clock = world
    two_leaves(store)
    gang(writer, "job", 2)
    old = GangPlacer(store, writer, Metrics(), clock=clock, term=4)  # type: ignore[arg-type]
    old.run_cycle()
    assert placement(writer, "job")["term"] == 4
    return old


def test_a_plan_write_is_refused_once_a_newer_term_wrote_the_placement(world: Any) -> None:
    _, writer, _, clock = world
    old = planned_in_term_4(world)
    # the old leader's worker was not bound in time; meanwhile a new leader (term 5) re-planned
    # the job, and the old leader's watch has not delivered that write yet
    newer = {**placement(writer, "job"), "term": 5, "nodes": ["leaf-b-n0", "leaf-b-n1"]}
    writer.jobs["ns/job"]["status"]["placement"] = newer
    clock.now += 61
    old.run_cycle()  # would drop its own (old) plan: the API server refuses the write
    assert placement(writer, "job") == newer
    assert writer.deleted == [], "a refused plan write deletes no pods"


def test_a_suspended_job_s_plan_is_dropped_only_while_it_is_the_plan_the_cycle_read(
    world: Any,
) -> None:
    _, writer, _, _ = world
    old = planned_in_term_4(world)
    # the job was suspended (the old leader's watch shows it), then resumed and planned afresh
    # by a new leader (term 5), which the old leader's watch has not delivered yet
    writer.jobs["ns/job"]["spec"]["suspend"] = True
    writer.add_job(writer.jobs["ns/job"])
    resumed = {**placement(writer, "job"), "term": 5, "nodes": ["leaf-b-n0", "leaf-b-n1"]}
    writer.jobs["ns/job"]["spec"]["suspend"] = False
    writer.jobs["ns/job"]["status"]["placement"] = resumed
    old.run_cycle()  # would drop the suspended job's plan: the API server refuses the write
    assert placement(writer, "job") == resumed
