"""A gang short of pods, in the words the record, the Events, explain and queue all print."""

from __future__ import annotations

from tpfabric_core.gang_shortfall import numbered, ranges, shortfall


def test_a_whole_gang_is_not_short() -> None:
    assert shortfall([0, 1, 2, 3], 4) is None
    assert shortfall([None, None], 2) is None


def test_ranked_pods_name_the_missing_ranks() -> None:
    short = shortfall([0, 1, 3], 4)
    assert short is not None
    assert (short.present, short.missing, short.missing_ranks) == (3, 1, (2,))
    assert short.words("LeaderWorkerSet vllm").startswith(
        "3 of 4 pods exist; missing rank 2: the gang waits until LeaderWorkerSet vllm creates "
        "the rest"
    )


def test_pods_ranked_by_creation_say_their_ranks_come_once_whole() -> None:
    short = shortfall([None, None, None], 4)
    assert short is not None
    assert short.missing_ranks is None
    assert "1 missing (ranks follow the order of creation" in short.words()
    assert "the gang waits for the rest" in short.words()


def test_many_missing_ranks_fold_into_runs() -> None:
    short = shortfall([0, 5], 9)
    assert short is not None
    assert "missing ranks 1-4,6-8" in short.words()
    assert ranges([3, 1, 2, 7]) == "1-3,7"


def test_a_gang_numbered_at_admission_is_said_to_be_planned_from_its_first_pods() -> None:
    """A LeaderWorkerSet group (its pods carry ``tpfabric.io/attempt``) is planned from its first
    pods: its words must not say it is placed only once whole."""
    labels = [{"tpfabric.io/attempt": "0", "tpfabric.io/rank": "0"}, None]
    assert numbered(labels)
    assert not numbered([{"tpfabric.io/rank": "0"}, None])
    short = shortfall([0], 8)
    assert short is not None
    early = short.words("LeaderWorkerSet serve", numbered=True)
    assert early.endswith(
        "the gang waits until LeaderWorkerSet serve creates the rest; tpfabric plans it from its "
        "first pods and places the rest as they come"
    )
    assert "only once all its pods exist" not in early
    assert short.words("LeaderWorkerSet serve").endswith("only once all its pods exist")
