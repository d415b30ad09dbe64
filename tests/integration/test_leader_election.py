"""The placer's Lease elector against the real API server: one leader, a bounded failover, and
the fence of a deposed placer's plan writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import wait_for
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.leader import LeaseElector

LEASE_SECONDS = 4.0
RENEW_SECONDS = 3.0
RETRY_SECONDS = 0.5


class Candidate:
    """An elector campaigning in its own thread, as ``python -m tpfabric_scheduler`` runs it."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str) -> None:
        self.transitions: list[tuple[float, bool]] = []
        self.elector = LeaseElector(
            api,
            namespace,
            "tpfabric-placer",
            identity,
            lease_seconds=LEASE_SECONDS,
            renew_seconds=RENEW_SECONDS,
            retry_seconds=RETRY_SECONDS,
            on_transition=lambda leading: self.transitions.append((time.monotonic(), leading)),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self.elector.run, args=(self.stop,), kwargs={"release": False}, daemon=True
        )
        self.thread.start()

    def halt(self, *, release: bool) -> None:
        """Stop campaigning; without release, as if the process froze or crashed."""
        self.stop.set()
        self.thread.join(10)
        if release:
            self.elector.release()  # what run() does on a clean stop


@pytest.fixture
def candidates(api: client.ApiClient, namespace: str) -> Iterator[list[Candidate]]:
    made = [Candidate(api, namespace, "placer-a"), Candidate(api, namespace, "placer-b")]
    yield made
    for candidate in made:
        candidate.halt(release=True)


def leaders(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.elector.is_leader()]


def lease(api: client.ApiClient, namespace: str) -> Any:
    return client.CoordinationV1Api(api).read_namespaced_lease("tpfabric-placer", namespace)


def test_exactly_one_of_two_electors_leads(
    api: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    (leader,) = wait_for(lambda: leaders(candidates), what="a leader")
    deadline = time.monotonic() + 2 * LEASE_SECONDS
    while time.monotonic() < deadline:  # several renewals: still exactly one, the same one
        assert leaders(candidates) == [leader]
        time.sleep(RETRY_SECONDS / 2)
    spec = lease(api, namespace).spec
    assert spec.holder_identity == leader.elector.identity
    assert spec.lease_duration_seconds == round(LEASE_SECONDS)
    assert spec.lease_transitions == 0


def test_the_follower_takes_over_when_the_leader_stops_renewing(
    api: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    (leader,) = wait_for(lambda: leaders(candidates), what="a leader")
    (follower,) = [c for c in candidates if c is not leader]
    stopped = time.monotonic()
    leader.halt(release=False)  # a frozen leader: the lease must expire
    wait_for(
        lambda: follower.transitions and follower.transitions[-1][1],
        timeout=LEASE_SECONDS + 2 * RETRY_SECONDS + 5,
        interval=0.05,
        what="the follower to take over",
    )
    failover = follower.transitions[-1][0] - stopped
    print(f"\nfailover after the leader stopped renewing: {failover:.2f} s "
          f"(lease {LEASE_SECONDS} s, retry {RETRY_SECONDS} s)")  # fmt: skip
    assert failover <= LEASE_SECONDS + RETRY_SECONDS + 1.0  # +1 s: API round trips, rounding
    assert not leader.elector.is_leader()
    spec = lease(api, namespace).spec
    assert spec.holder_identity == follower.elector.identity
    assert spec.lease_transitions == 1


def test_a_leader_that_stops_cleanly_hands_over_within_a_retry_period(
    api: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    (leader,) = wait_for(lambda: leaders(candidates), what="a leader")
    (follower,) = [c for c in candidates if c is not leader]
    stopped = time.monotonic()
    leader.halt(release=True)  # SIGTERM: the lease is released
    wait_for(
        lambda: follower.transitions and follower.transitions[-1][1],
        timeout=LEASE_SECONDS,
        interval=0.05,
        what="the follower to take over",
    )
    handover = follower.transitions[-1][0] - stopped
    print(f"\nhandover after a clean stop: {handover:.2f} s (retry {RETRY_SECONDS} s)")
    assert handover <= RETRY_SECONDS + 1.0


def test_the_api_server_refuses_a_plan_write_computed_from_a_replaced_placement(
    api: client.ApiClient, tpfabric_scheduling: LocalCluster, namespace: str
) -> None:
    """No operator runs in this module, so nothing else writes the job's status, and no pod of it
    exists for the placer to plan."""
    custom = client.CustomObjectsApi(api)
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": "fenced"},
        "spec": {
            "workers": 1,
            "tensorParallelSize": 8,
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
    }
    uid = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)[
        "metadata"
    ]["uid"]
    writer = KubeWriter(api)

    def write(term: int, computed_from: dict[str, Any]) -> None:
        placement = {"state": "Waiting", "message": f"term {term}", "term": term}
        writer.patch_job_status(
            namespace, "fenced", {"placement": placement}, uid=uid, tests=[computed_from]
        )

    def stored() -> dict[str, Any]:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "fenced")
        return dict((job.get("status") or {}).get("placement") or {})

    nothing = {"op": "test", "path": "/status/placement", "value": None}
    write(3, nothing)  # computed from no placement, and there is none: written
    assert stored()["term"] == 3
    with pytest.raises(ApiException) as refused:
        write(4, nothing)  # a second placer that also saw none: refused
    assert refused.value.status == 422
    with pytest.raises(ApiException):
        write(2, {"op": "test", "path": "/status/placement/term", "value": 2})
    assert stored()["message"] == "term 3", "the deposed placer's writes changed nothing"
    write(4, {"op": "test", "path": "/status/placement/term", "value": 3})
    assert stored()["term"] == 4
