"""The Lease elector against a fake CoordinationV1Api, and the placer loop's leader gating."""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import orjson
import pytest
from kubernetes.client.rest import ApiException

from tpfabric_localcluster.tpfabric import LOCAL_PLACER_ARGS
from tpfabric_scheduler.__main__ import parse_args
from tpfabric_scheduler.leader import LeaseElector
from tpfabric_scheduler.loop import PlacerLoop
from tpfabric_scheduler.store import ClusterStore

NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Response:
    """What a call with ``_preload_content=False`` returns: the body unread until ``read``."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = orjson.dumps(obj)

    def read(self) -> bytes:
        return self.data


class FakeCoordination:
    """Leases by (namespace, name) with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.before_write: list[Any] = []  # callbacks run before the next write (interleaving)

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        stored["spec"] = {k: v for k, v in stored["spec"].items() if v is not None}
        return stored

    def _interleave(self) -> None:
        while self.before_write:
            self.before_write.pop(0)()

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Response:
        self._check()
        lease = self.leases.get((namespace, name))
        if lease is None:
            raise ApiException(status=404, reason="Not Found")
        return Response(lease)

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        self._check()
        self._interleave()
        key = (namespace, body["metadata"]["name"])
        if key in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        self.leases[key] = self._stored(body)
        return Response(self.leases[key])

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> Response:
        self._check()
        self._interleave()
        current = self.leases[(namespace, name)]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.leases[(namespace, name)] = self._stored(body)
        return Response(self.leases[(namespace, name)])

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.leases[("ns", "placer")]["spec"]
        return spec


def an_elector(api: FakeCoordination, identity: str, clock: Clock, **kwargs: Any) -> LeaseElector:
    return LeaseElector(
        None,
        "ns",
        "placer",
        identity,
        lease_seconds=15,
        renew_seconds=10,
        retry_seconds=2,
        clock=clock,
        coordination=api,
        **kwargs,
    )


def test_an_absent_lease_is_created_and_held() -> None:
    api, clock = FakeCoordination(), Clock()
    a = an_elector(api, "a", clock)
    assert a.try_acquire_or_renew()
    assert a.is_leader()
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2023-11-14T22:13:20.000000Z"


def test_a_valid_lease_of_another_holder_is_left_alone() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now += 14.9
    assert not b.try_acquire_or_renew()
    assert not b.is_leader()
    assert api.spec()["holderIdentity"] == "a"


def test_an_expired_lease_is_taken_over_as_a_new_term() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now += 15.1  # renewTime + leaseDurationSeconds < now
    assert b.try_acquire_or_renew()
    assert b.is_leader()
    assert not a.is_leader()  # past its renew deadline long ago
    spec = api.spec()
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"]


def test_the_holder_renews_keeping_its_acquire_time() -> None:
    api, clock = FakeCoordination(), Clock()
    a = an_elector(api, "a", clock)
    a.try_acquire_or_renew()
    acquired = api.spec()["acquireTime"]
    clock.now += 2
    assert a.try_acquire_or_renew()
    spec = api.spec()
    assert spec["acquireTime"] == acquired
    assert spec["renewTime"] == "2023-11-14T22:13:22.000000Z"
    assert spec["leaseTransitions"] == 0


def test_of_two_candidates_racing_for_an_expired_lease_exactly_one_wins() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b, c = (an_elector(api, name, clock) for name in "abc")
    a.try_acquire_or_renew()
    clock.now += 16
    # b has read the expired lease; c writes first
    api.before_write.append(c.try_acquire_or_renew)
    assert not b.try_acquire_or_renew()  # 409: c's write changed the resourceVersion
    assert c.is_leader()
    assert not b.is_leader()
    assert api.spec()["holderIdentity"] == "c"


def test_two_candidates_creating_the_lease_at_once_get_one_leader() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    api.before_write.append(b.try_acquire_or_renew)
    assert not a.try_acquire_or_renew()  # AlreadyExists
    assert b.is_leader()
    assert not a.is_leader()


def test_a_leader_that_cannot_renew_stops_leading_at_the_renew_deadline() -> None:
    api, clock = FakeCoordination(), Clock()
    transitions: list[bool] = []
    a = an_elector(api, "a", clock, on_transition=transitions.append)
    assert a.step()
    api.down = True
    clock.now += 9.9
    assert a.step()  # renew failed, still inside the deadline
    clock.now += 0.2
    assert not a.step()
    assert transitions == [True, False]  # 10.1 s: before the lease (15 s) is free for others


def test_is_leader_turns_false_on_the_clock_alone() -> None:
    api, clock = FakeCoordination(), Clock()
    a = an_elector(api, "a", clock)
    a.try_acquire_or_renew()
    clock.now += 10  # the renewing thread hung: no attempt at all
    assert not a.is_leader()


def test_a_leader_that_finds_another_holder_stops_at_once() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    a.try_acquire_or_renew()
    clock.now += 16
    b.try_acquire_or_renew()  # a's lease expired (a was partitioned away)
    clock.now -= 7  # a's clock: still inside its own renew deadline
    assert not a.try_acquire_or_renew()
    assert not a.is_leader()


def test_a_released_lease_is_taken_at_the_next_try() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    a.try_acquire_or_renew()
    assert a.release()
    assert not a.is_leader()
    assert "holderIdentity" not in api.spec()
    clock.now += 1
    assert b.try_acquire_or_renew()
    assert api.spec()["leaseTransitions"] == 1


def test_a_follower_does_not_release_the_leaders_lease() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert not b.release()
    assert api.spec()["holderIdentity"] == "a"


def test_run_campaigns_until_stopped_then_releases() -> None:
    api, clock = FakeCoordination(), Clock()
    stop = threading.Event()
    transitions: list[bool] = []

    def on_transition(leading: bool) -> None:
        transitions.append(leading)
        stop.set()

    a = an_elector(api, "a", clock, on_transition=on_transition)
    a.run(stop)
    assert transitions == [True, False]
    assert "holderIdentity" not in api.spec()


def test_inconsistent_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="retry_seconds < renew_seconds < lease_seconds"):
        LeaseElector(None, "ns", "l", "a", lease_seconds=10, renew_seconds=10, retry_seconds=2)


# -- the placer loop ---------------------------------------------------------------------------


class CountingPlacer:
    def __init__(self, made: list[CountingPlacer]) -> None:
        self.cycles = 0
        made.append(self)

    def leading(self) -> bool:
        return True

    def run_cycle(self) -> None:
        self.cycles += 1


def a_loop(leading: list[bool], ready: bool = True) -> tuple[PlacerLoop, list[CountingPlacer]]:
    made: list[CountingPlacer] = []
    loop = PlacerLoop(
        ClusterStore(),
        lambda: CountingPlacer(made),  # type: ignore[arg-type,return-value]
        lambda: ready,
        lambda: leading[0],
        resync_seconds=0.01,
        settle_seconds=0,
    )
    return loop, made


def test_only_the_leader_runs_placer_cycles_and_a_follower_stays_live() -> None:
    leading = [False]
    loop, made = a_loop(leading)

    async def turns() -> None:
        assert not await loop.turn()
        beat = loop.store.placer_heartbeat
        assert beat is not None
        assert not await loop.turn()
        assert loop.store.placer_heartbeat is not None
        assert loop.store.placer_heartbeat >= beat
        leading[0] = True
        assert await loop.turn()
        assert await loop.turn()

    asyncio.run(turns())
    assert [p.cycles for p in made] == [2]


def test_a_new_term_starts_from_a_new_placer() -> None:
    leading = [True]
    loop, made = a_loop(leading)

    async def turns() -> None:
        await loop.turn()
        leading[0] = False
        await loop.turn()
        leading[0] = True
        await loop.turn()

    asyncio.run(turns())
    assert [p.cycles for p in made] == [1, 1]


def test_no_cycle_before_the_informers_synced() -> None:
    loop, made = a_loop([True], ready=False)
    assert not asyncio.run(loop.turn())
    assert made == []
    assert loop.store.placer_heartbeat is not None


# -- flags -------------------------------------------------------------------------------------


def test_leader_election_flags_have_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "tpf")
    monkeypatch.setenv("POD_NAME", "tpf-scheduler-abc")
    args = parse_args([])
    assert args.leader_elect is True
    assert (args.lease_namespace, args.lease_name, args.identity) == (
        "tpf", "tpfabric-placer", "tpf-scheduler-abc"
    )  # fmt: skip
    assert (args.lease_seconds, args.renew_seconds, args.retry_seconds) == (15, 10, 2)
    assert args.liveness_stall_seconds == 60
    assert (args.bind_timeout_seconds, args.head_of_line_seconds) == (120, 300)
    assert [level.name for level in args.levels] == ["block", "spine", "leaf"]
    assert parse_args(["--leader-elect=false"]).leader_elect is False


def test_levels_are_parsed_from_the_flag() -> None:
    args = parse_args(["--levels=zone=example.com/zone,leaf=example.com/leaf"])
    assert [(s.name, s.label_key) for s in args.levels] == [
        ("zone", "example.com/zone"),
        ("leaf", "example.com/leaf"),
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--renew-seconds=20"],
        ["--retry-seconds=0"],
        ["--levels=leaf"],
        ["--leader-elect=maybe"],
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_the_local_clusters_placer_flags_are_understood() -> None:
    args = parse_args(list(LOCAL_PLACER_ARGS))
    assert args.lease_namespace == "kube-system"
    assert args.retry_seconds < args.renew_seconds < args.lease_seconds


def test_terms_only_grow_and_exist_only_while_leading() -> None:
    api, clock = FakeCoordination(), Clock()
    a, b = an_elector(api, "a", clock), an_elector(api, "b", clock)
    assert a.term() is None
    a.try_acquire_or_renew()
    assert a.term() == 0
    clock.now += 2
    a.try_acquire_or_renew()
    assert a.term() == 0, "a renewal is the same term"
    clock.now += 15.1
    assert a.term() is None, "past the renew deadline: no term"
    b.try_acquire_or_renew()
    assert b.term() == 1
    assert b.release()
    clock.now += 1
    a.try_acquire_or_renew()
    assert a.term() == 2, "taking the lease again is a new term"


def test_a_placer_that_lost_its_term_is_replaced_at_the_next_turn() -> None:
    made: list[CountingPlacer] = []
    terms = [1]

    class TermPlacer(CountingPlacer):
        def __init__(self) -> None:
            super().__init__(made)
            self.term = terms[0]

        def leading(self) -> bool:
            return self.term == terms[0]

    loop = PlacerLoop(
        ClusterStore(),
        TermPlacer,  # type: ignore[arg-type]
        lambda: True,
        lambda: True,  # leads all along, by the clock: lost and taken again between two turns
        resync_seconds=0.01,
        settle_seconds=0,
    )

    async def turns() -> None:
        await loop.turn()
        terms[0] = 2
        await loop.turn()

    asyncio.run(turns())
    assert [p.cycles for p in made] == [1, 1]
    assert [p.term for p in made] == [1, 2]
