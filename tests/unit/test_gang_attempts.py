"""The gang webhook's numbering of another controller's pods: which attempt a pod belongs to,
and which pods are born released onto their gang's plan."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_core.api.placement import StoredPlacement, read_placement
from tpfabric_core.gang_attempts import GangHistory, numbered_rank, stamp
from tpfabric_core.gangs import GangMember

pytestmark = pytest.mark.unit


def plan(attempt: int | None, state: str = "Planned") -> StoredPlacement:
    return read_placement({"state": state, "attempt": attempt, "nodes": ["n0", "n1", "n2", "n3"]})


def test_a_gangs_first_pods_are_attempt_0_and_gated_until_it_is_planned() -> None:
    history = GangHistory()
    for rank in range(2):
        given = stamp(rank, history, None)
        history.saw(given.attempt, rank)
        assert (given.attempt, given.born_released) == (0, False)


def test_a_pod_admitted_after_the_plan_of_its_attempt_is_born_released() -> None:
    history = GangHistory.of([(0, 0)])  # the leader, from which the gang was planned
    for rank in (1, 2, 3):
        given = stamp(rank, history, plan(0))
        history.saw(given.attempt, rank)
        assert (given.attempt, given.born_released) == (0, True)


def test_a_replacement_of_a_rank_seen_is_the_next_attempt_and_stays_gated() -> None:
    history = GangHistory.of([(0, 0), (0, 1), (0, 2), (0, 3)])
    given = stamp(2, history, plan(0))
    assert (given.attempt, given.born_released) == (1, False)


def test_a_group_made_again_is_one_later_attempt_every_pod_of_it_gated() -> None:
    history = GangHistory.of([(0, 0), (0, 1), (0, 2), (0, 3)])
    stamps = []
    for rank in range(4):  # its leader first, as LeaderWorkerSet makes a group again
        given = stamp(rank, history, plan(0))
        history.saw(given.attempt, rank)
        stamps.append((given.attempt, given.born_released))
    assert stamps == [(1, False)] * 4
    again = stamp(0, history, plan(0))
    assert again.attempt == 2, "made again twice: two attempts later"


def test_a_later_attempts_plan_releases_that_attempts_later_pods() -> None:
    history = GangHistory.of([(0, 0), (0, 1), (1, 0)])
    given = stamp(1, history, plan(1))
    assert (given.attempt, given.born_released) == (1, True)


def test_no_plan_or_one_without_an_attempt_releases_nothing() -> None:
    history = GangHistory.of([(0, 0)])
    assert not stamp(1, history, plan(0, "Waiting")).born_released
    assert not stamp(1, history, plan(None)).born_released


def test_a_webhook_that_saw_nothing_follows_the_plans_attempt() -> None:
    given = stamp(3, GangHistory(), plan(2))
    assert (given.attempt, given.born_released) == (2, True)


def test_a_history_keeps_the_two_newest_attempts() -> None:
    history = GangHistory.of([(0, 0), (1, 0), (2, 0)])
    assert sorted(history.ranks) == [1, 2]
    assert history.current == 2


def member(kind: str, *, rank: int | None, size: int | None = 4, controlled: bool = True) -> Any:
    return GangMember(
        kind=kind,  # type: ignore[arg-type]
        namespace="train",
        owner="o",
        gang="g",
        size=size,
        rank=rank,
        controlled=controlled,
    )


@pytest.mark.parametrize(
    ("pod", "numbered", "why"),
    [
        (member("LeaderWorkerSet", rank=1), 1, "a group's worker: size and index on the pod"),
        (member("LeaderWorkerSet", rank=1, size=None), None, "a worker that says no size"),
        (member("PodGroup", rank=2), 2, "a controller's pod with its own rank"),
        (member("WorkloadPodGroup", rank=2, size=None), 2, "size from the PodGroup object"),
        (member("PodGroup", rank=2, controlled=False), None, "a bare pod: deleted, gone"),
        (member("WorkloadPodGroup", rank=2, controlled=False), None, "a bare pod: deleted, gone"),
        (
            member("PodGroup", rank=None),
            None,
            "ranked by creation: no rank until the gang is whole",
        ),
        (member("JobSet", rank=None, size=None), None, "ranks follow from the JobSet's Jobs"),
    ],
)
def test_only_pods_of_a_known_rank_that_their_owner_makes_again_are_numbered(
    pod: GangMember, numbered: int | None, why: str
) -> None:
    assert numbered_rank(pod) == numbered, why


def test_an_owners_restart_begins_the_next_attempt_even_at_a_rank_not_seen_yet() -> None:
    """JobSet restarted before all of attempt 0's pods were created: the first new pod may be
    of a rank attempt 0 never had; its restart count tells it from a pod of the plan."""
    history = GangHistory()
    for rank in (0, 1):  # restart-attempt 0; ranks 2 and 3 not created yet
        history.saw(stamp(rank, history, None, restart=0).attempt, rank, restart=0)
    given = stamp(3, history, plan(0), restart=1)
    assert (given.attempt, given.born_released) == (1, False)
    history.saw(given.attempt, 3, restart=1)
    assert stamp(0, history, plan(0), restart=1).attempt == 1, "the restart's other pods join"


def test_without_a_restart_count_only_the_ranks_seen_decide() -> None:
    history = GangHistory.of([(0, 0)])
    assert stamp(1, history, plan(0), restart=5).attempt == 0, "attempt 0 carried no count"
