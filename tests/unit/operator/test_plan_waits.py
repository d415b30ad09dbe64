"""The waits of small gangs' first workers for their plan (pure mechanism, a driven clock)."""

from __future__ import annotations

from driven_clock import Clock

from tpfabric_operator.plan_waits import PlanWaits


def test_a_wait_begins_runs_for_its_time_and_ends() -> None:
    clock = Clock()
    waits = PlanWaits(2.0, clock)
    assert waits.phase(("u", "0")) == "new"
    waits.begin(("u", "0"))
    clock.now = 1.9
    assert waits.phase(("u", "0")) == "waiting"
    clock.now = 2.0
    assert waits.phase(("u", "0")) == "over"
    waits.end(("u", "0"))
    assert waits.phase(("u", "0")) == "new"


def test_a_wait_is_of_one_attempt() -> None:
    waits = PlanWaits(2.0, Clock())
    waits.begin(("u", "0"))
    assert waits.phase(("u", "1")) == "new", "a later attempt's gang waits on its own"
    waits.end(("u", "1"))
    assert waits.phase(("u", "0")) == "waiting", "ending another attempt ends nothing"
    waits.begin(("u", "1"))
    assert waits.phase(("u", "0")) == "new", "one wait a job: the newest attempt's"


def test_an_answer_is_heard_only_by_a_job_that_waits_until_its_wait_ends() -> None:
    waits = PlanWaits(2.0, Clock())
    assert not waits.answered("u")
    assert not waits.heard("u")
    waits.begin(("u", "0"))
    assert not waits.heard("u")
    assert waits.answered("u")
    assert waits.heard("u")
    waits.end(("u", "0"))
    assert not waits.heard("u")
    assert not waits.answered("u")


def test_waits_of_jobs_deleted_meanwhile_are_forgotten() -> None:
    clock = Clock()
    waits = PlanWaits(2.0, clock)
    for k in range(1_001):
        waits.begin((f"gone-{k}", "0"))
    clock.now = 1_000.0
    waits.begin(("u", "0"))
    assert waits.phase(("gone-0", "0")) == "new"
    assert len(waits._since) == 1
