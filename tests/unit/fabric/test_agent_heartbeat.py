"""When a node's fabric agent counts as silent: a Lease not seen renewed, by the observer's own
clock, for longer than the Lease's duration. A node without a Lease is never silent."""

from __future__ import annotations

import pytest

from tpfabric_core.fabric.agent_heartbeat import (
    AGENT_SILENT_REASON,
    HeartbeatLease,
    Heartbeats,
    default_grace_seconds,
    heartbeat_lease,
    lease_name,
    node_of_lease,
    silent_condition,
    silent_words,
)


def beat(node: str = "n1", renewed: str = "2026-01-01T00:00:00.000000Z", grace: float = 40.0):
    return HeartbeatLease(node, renewed, grace)


def test_an_agent_renewing_within_its_grace_is_never_silent() -> None:
    heartbeats = Heartbeats()
    for second in range(0, 400, 10):
        heartbeats.observe(beat(renewed=f"t{second}"), now=float(second))
        assert heartbeats.silent(now=second + 9.0) == {}


def test_an_agent_not_renewing_past_its_grace_is_silent_for_as_long_as_it_has_been() -> None:
    heartbeats = Heartbeats()
    heartbeats.observe(beat(renewed="t0"), now=100.0)
    assert heartbeats.silent(now=140.0) == {}, "the grace itself is not silence"
    assert heartbeats.silent(now=141.0) == {"n1": 41.0}


def test_a_renewal_is_timed_by_the_observer_never_by_the_time_the_agent_wrote() -> None:
    heartbeats = Heartbeats()
    # an agent whose clock is an hour behind still renews: each new renewTime counts from now
    heartbeats.observe(beat(renewed="1999-01-01T00:00:00Z"), now=0.0)
    heartbeats.observe(beat(renewed="1999-01-01T00:00:10Z"), now=30.0)
    assert heartbeats.silent(now=60.0) == {}
    # the same renewTime read again (a relist) is no renewal
    heartbeats.observe(beat(renewed="1999-01-01T00:00:10Z"), now=60.0)
    assert heartbeats.silent(now=71.0) == {"n1": 41.0}


def test_a_lease_first_seen_gets_a_whole_grace_whatever_its_age() -> None:
    heartbeats = Heartbeats()
    heartbeats.replace([beat(renewed="long ago")], now=1000.0)  # a placer that just started
    assert heartbeats.silent(now=1039.0) == {}
    assert heartbeats.silent(now=1041.0) == {"n1": 41.0}


def test_a_node_without_a_lease_is_not_silent_and_a_deleted_lease_is_forgotten() -> None:
    heartbeats = Heartbeats()
    heartbeats.observe(beat("n1"), now=0.0)
    assert heartbeats.silent(now=100.0, nodes=["n2"]) == {}
    heartbeats.forget("n1")
    assert heartbeats.silent(now=100.0) == {}
    heartbeats.observe(beat("n1"), now=0.0)
    heartbeats.replace([beat("n2")], now=50.0)
    assert heartbeats.silent(now=100.0) == {"n2": 50.0}


def test_the_default_grace_is_four_intervals_and_never_under_forty_seconds() -> None:
    assert default_grace_seconds(10) == 40
    assert default_grace_seconds(1) == 40
    assert default_grace_seconds(30) == 120


def test_a_lease_is_named_after_its_node_and_read_back() -> None:
    assert lease_name("gpu-7") == "fabric-agent-gpu-7"
    assert node_of_lease("fabric-agent-gpu-7") == "gpu-7"
    assert node_of_lease("tpfabric-placer") is None
    assert node_of_lease("fabric-agent-") is None
    lease = heartbeat_lease(
        {
            "metadata": {"name": "fabric-agent-gpu-7"},
            "spec": {"leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000001Z"},
        }
    )
    assert lease == HeartbeatLease("gpu-7", "2026-01-01T00:00:00.000001Z", 40.0)
    created = {"metadata": {"name": "fabric-agent-gpu-7"}, "spec": {"leaseDurationSeconds": 40}}
    assert heartbeat_lease(created) == HeartbeatLease("gpu-7", "", 40.0), "not renewed yet"


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"metadata": {"name": "someone-else"}, "spec": {}}, "metadata.name"),
        (
            {"metadata": {"name": "fabric-agent-n"}, "spec": {"renewTime": "t"}},
            "spec.leaseDurationSeconds",
        ),
        (
            {"metadata": {"name": "fabric-agent-n"}, "spec": {"leaseDurationSeconds": True}},
            "spec.leaseDurationSeconds",
        ),
    ],
)
def test_a_lease_the_agent_did_not_write_is_refused_naming_the_field(
    obj: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        heartbeat_lease(obj)


def test_the_silent_condition_is_unknown_names_the_lease_and_keeps_its_transition_time() -> None:
    words = silent_words("n1", "tpfabric-system", 95.0, 40.0)
    assert "tpfabric-system/fabric-agent-n1" in words
    assert "for 95 s, more than its 40 s" in words
    fresh = silent_condition(words, "2026-01-01T00:01:00Z", {"status": "True"})
    assert (fresh["status"], fresh["reason"]) == ("Unknown", AGENT_SILENT_REASON)
    assert fresh["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    kept = silent_condition(
        words,
        "2026-01-01T00:05:00Z",
        {"status": "Unknown", "lastTransitionTime": "2026-01-01T00:01:00Z"},
    )
    assert kept["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    assert kept["lastHeartbeatTime"] == "2026-01-01T00:05:00Z"
