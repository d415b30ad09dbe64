"""The waker: a job's reconcile soon after its workers changed, folded, spaced and retried."""

from __future__ import annotations

import threading

from driven_clock import Clock

from tpfabric_operator.jobs.wakeups import Waker


def _waker(answers: dict[str, list[bool]], clock: Clock) -> tuple[Waker[str], list[str]]:
    ran: list[str] = []

    def run(key: str) -> bool:
        ran.append(key)
        return answers.get(key, [True]).pop(0) if answers.get(key) else True

    return Waker(run, spacing=0.5, retry=0.2, give_up=3.0, clock=clock), ran


def _step(waker: Waker[str]) -> None:
    for key in waker.take_due():
        waker.serve(key)


def test_wakes_of_one_job_fold_into_one_run_and_runs_are_spaced() -> None:
    clock = Clock(100.0)
    waker, ran = _waker({}, clock)
    for _ in range(256):  # a gang's pods deleted at once
        waker.wake("a")
    waker.wake("b")
    _step(waker)
    assert sorted(ran) == ["a", "b"]  # one run each, at once
    waker.wake("a")
    _step(waker)
    assert sorted(ran) == ["a", "b"]  # ran 0 s ago: not before 0.5 s
    clock.now += 0.3
    waker.wake("a")  # folded into the run already due
    _step(waker)
    assert sorted(ran) == ["a", "b"]
    clock.now += 0.2
    _step(waker)
    assert sorted(ran) == ["a", "a", "b"]
    _step(waker)
    assert sorted(ran) == ["a", "a", "b"]  # nothing left due


def test_a_refused_run_is_tried_again_until_the_wake_is_stale() -> None:
    clock = Clock(100.0)
    waker, ran = _waker({"a": [False] * 100}, clock)
    waker.wake("a")
    _step(waker)
    assert ran == ["a"]
    _step(waker)
    assert ran == ["a"]  # not before the retry delay
    for _ in range(14):
        clock.now += 0.2
        _step(waker)
    # 0.0, 0.2, ... 2.8 s: tried 15 times, and once more for the retry the run at 2.8 s asked
    # for; then never again: past 3 s the job's tick has run on newer data anyway
    assert len(ran) == 15
    clock.now += 5
    _step(waker)
    assert len(ran) == 16
    clock.now += 5
    _step(waker)
    assert len(ran) == 16  # given up
    waker.wake("a")  # a new change: tried again
    _step(waker)
    assert len(ran) == 17


def test_a_run_that_raises_is_not_retried_in_a_loop() -> None:
    clock = Clock(100.0)

    def run(key: str) -> bool:
        raise RuntimeError("API down")

    waker: Waker[str] = Waker(run, clock=clock)
    waker.wake("a")
    assert waker.take_due() == ["a"]
    waker.serve("a")  # logged, not raised
    clock.now += 10
    assert waker.take_due() == []


def test_the_thread_runs_a_wake_within_moments() -> None:
    done = threading.Event()
    waker: Waker[str] = Waker(lambda key: done.set() or True)
    waker.start()
    try:
        waker.wake("a")
        assert done.wait(5)
    finally:
        waker.stop()
