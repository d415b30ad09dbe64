"""The soak's overcommit classification (pure: no cluster): what counts as a race of two
schedulers' caches and what counts against tpfabric."""

from __future__ import annotations

from soak_support import BoundPod, Overcommit

OURS = "tpfabric-scheduler"
OTHER = "default-scheduler"
GPU = "nvidia.com/gpu"


def _node(*pods: tuple[str, float | None, int]) -> Overcommit:
    bound = tuple(
        BoundPod(f"ns/p{i}", scheduler, at, {GPU: gpus})
        for i, (scheduler, at, gpus) in enumerate(pods)
    )
    return Overcommit("dgx-0001", GPU, sum(p[2] for p in pods), 8, bound)


def test_two_schedulers_binding_within_the_window_race_in_either_order() -> None:
    assert _node((OURS, 100.0, 8), (OTHER, 103.0, 8)).scheduler_race(3.0, OURS)
    assert _node((OTHER, 100.0, 8), (OURS, 103.0, 8)).scheduler_race(3.0, OURS)


def test_the_other_scheduler_binding_late_onto_our_full_node_is_its_race() -> None:
    # the soak's CI failure: tpfabric bound at 28 s, the default scheduler on top at 33 s
    assert _node((OURS, 28.0, 8), (OTHER, 33.0, 8)).scheduler_race(3.0, OURS)


def test_ours_binding_late_onto_a_node_the_other_filled_is_a_violation() -> None:
    assert not _node((OTHER, 28.0, 8), (OURS, 33.0, 8)).scheduler_race(3.0, OURS)
    # a third pod of ours, late after the other's, is charged even when an early one was fine
    assert not _node((OURS, 20.0, 4), (OTHER, 21.0, 4), (OURS, 40.0, 4)).scheduler_race(3.0, OURS)


def test_our_own_pods_overcommitting_are_never_a_race() -> None:
    assert not _node((OURS, 10.0, 8), (OURS, 11.0, 8)).scheduler_race(3.0, OURS)
    assert not _node((OURS, 10.0, 8), (OURS, 11.0, 4), (OTHER, 20.0, 4)).scheduler_race(3.0, OURS)


def test_an_unknown_binding_time_is_not_excused() -> None:
    assert not _node((OURS, None, 8), (OTHER, 100.0, 8)).scheduler_race(3.0, OURS)
