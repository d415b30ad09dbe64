"""A gang short of pods, in the words the record, the Events, explain and queue all print."""

from __future__ import annotations

from tpfabric_core.gang_shortfall import ranges, shortfall


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
