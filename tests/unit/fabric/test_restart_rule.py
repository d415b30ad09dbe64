"""Restart only when it pays: the weighing the operator's restart-when-it-pays and the
simulator's tpfabric-weighed share."""

from __future__ import annotations

import math

import pytest

from tpfabric_core.fabric.restart_rule import slowdown_of, weigh_restart

pytestmark = pytest.mark.unit

# 0.2 s lost per healthy second; the restart costs 50 s restore + 100 s redone = 150 s
COST = {"slowdown": 1.2, "redo_s": 100.0, "restore_s": 50.0, "expected_fault_s": math.inf}


def test_restarting_pays_only_when_the_slowdown_outweighs_the_restart() -> None:
    assert weigh_restart(remaining_s=1000.0, **COST).pays  # 200 s lost running slow
    assert not weigh_restart(remaining_s=500.0, **COST).pays  # 100 s lost
    assert not weigh_restart(remaining_s=750.0, **COST).pays  # exactly even: stay


def test_a_short_fault_is_ridden_out() -> None:
    # the fault ends after 600 s: 500 healthy seconds of work done slow, 100 s lost
    short = {**COST, "expected_fault_s": 600.0}
    assert weigh_restart(**short).slow_loss_s == pytest.approx(100.0)
    assert not weigh_restart(**short).pays
    assert weigh_restart(**COST).pays  # a fault that never ends


def test_a_link_that_does_not_slow_the_job_never_restarts_it() -> None:
    weighing = weigh_restart(slowdown=1.0, redo_s=0.0, restore_s=0.0, expected_fault_s=math.inf)
    assert (weighing.slow_loss_s, weighing.pays) == (0.0, False)


def test_the_slowdown_stretches_the_inter_node_share_by_the_bandwidth_lost() -> None:
    assert slowdown_of(0.3, 0.5) == pytest.approx(1.3)
    assert slowdown_of(0.3, 0.25) == pytest.approx(1.9)
    assert slowdown_of(0.0, 0.0) == 1.0  # a job that never talks across nodes
    assert slowdown_of(0.1, 0.0) == math.inf  # a link that is down
    assert slowdown_of(0.3, 1.0) == 1.0


@pytest.mark.parametrize(("share", "kept"), [(-0.1, 0.5), (1.1, 0.5), (0.3, -1.0), (0.3, 1.5)])
def test_shares_and_fractions_outside_zero_to_one_are_refused(share: float, kept: float) -> None:
    with pytest.raises(ValueError, match="must be within"):
        slowdown_of(share, kept)


def test_the_words_give_both_sides() -> None:
    weighing = weigh_restart(
        slowdown=slowdown_of(0.1, 0.1), redo_s=900.0, restore_s=600.0, expected_fault_s=14400.0
    )
    assert weighing.pays
    assert weighing.words == (
        "restart pays: running slow (steps 90.0% slower) is expected to lose 113.7 min, a "
        "restart costs 25.0 min (10.0 min restore + 15.0 min redone since the last checkpoint)"
    )
    stalled = weigh_restart(
        slowdown=math.inf, redo_s=0.0, restore_s=600.0, expected_fault_s=14400.0
    )
    assert stalled.pays
    assert stalled.words.startswith("restart pays: running slow (a link keeps none of its rate)")
