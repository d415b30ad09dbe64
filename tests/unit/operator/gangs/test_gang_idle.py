"""When a Gang record whose pods are gone is deleted. Pure."""

from __future__ import annotations

import pytest

from tpfabric_operator.gangs.idle import IdleStep, idle_step

pytestmark = pytest.mark.unit

RECORD = {"metadata": {"uid": "uid-grp"}}


def test_a_gang_without_a_record_is_forgotten() -> None:
    assert idle_step(None, 10.0, 20.0, 5.0) == IdleStep(None)


def test_the_idle_time_counts_from_the_first_sync_without_pods() -> None:
    assert idle_step(RECORD, None, 100.0, 5.0) == IdleStep(100.0)
    assert idle_step(RECORD, 100.0, 104.9, 5.0) == IdleStep(100.0)
    assert idle_step(RECORD, 100.0, 105.0, 5.0) == IdleStep(100.0, delete=True)


def test_no_idle_time_deletes_at_once() -> None:
    assert idle_step(RECORD, None, 100.0, 0.0).delete
