"""Two operators on the local control plane: only the holder of the Lease
``kube-system/tpfabric-operator`` acts, and another takes over when it dies.

Two operators that both acted charged an incident twice (each from its own lagging view of the
pods) and posted every Event twice; the chart could run only one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from test_operator import Tpj, operator, small_job, tpj

from control_plane_fixtures import wait_for
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator

__all__ = ["operator", "tpj"]

SECOND = "tpfabric-operator-b"


@pytest.fixture
def two_operators(tpj: Tpj) -> Iterator[LocalCluster]:
    """Run a second operator beside the module's; stop it after the test."""
    start_operator(tpj.cluster, name=SECOND)
    try:
        yield tpj.cluster
    finally:
        tpj.cluster.stop_component(SECOND)


def events(tpj: Tpj, name: str, reason: str) -> int:
    """Return how many times an Event of ``reason`` was posted for job ``name``."""
    found = tpj.core.list_namespaced_event(
        tpj.namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return sum(e.count or 1 for e in found if e.reason == reason)


def holder(tpj: Tpj) -> str:
    """Return who holds the operators' Lease ("" when nobody does)."""
    try:
        lease = client.CoordinationV1Api(tpj.core.api_client).read_namespaced_lease(
            "tpfabric-operator", "kube-system"
        )
    except client.ApiException:
        return ""
    return str(lease.spec.holder_identity or "")


@pytest.mark.usefixtures("two_operators")
def test_two_operators_charge_an_incident_once_and_say_each_thing_once(tpj: Tpj) -> None:
    name = tpj.apply(small_job("twice", failurePolicy={"backoffSeconds": 1}))
    tpj.wait_phase(name, "Running")
    wait_for(lambda: events(tpj, name, "WorkersCreated"), 30, what="the WorkersCreated Event")
    tpj.core.delete_namespaced_pod(f"{name}-worker-1", tpj.namespace)
    wait_for(lambda: tpj.status(name).get("restarts"), 30, what="the loss charged")
    tpj.wait_phase(name, "Running", timeout=90)
    time.sleep(4)  # several reconciles of both operators
    assert tpj.status(name)["restarts"] == 1
    assert (events(tpj, name, "WorkersCreated"), events(tpj, name, "WorkerFailed")) == (1, 1)


def test_when_the_acting_operator_dies_the_other_takes_over(tpj: Tpj) -> None:
    """The leader is killed (no release): the other takes the Lease once it expires (6 s here)
    and charges the next incident, once."""
    cluster = tpj.cluster
    cluster.stop_component(OPERATOR)  # releases the Lease on its way out
    operators = {"operator-a": OPERATOR, "operator-b": SECOND}
    for identity, component in operators.items():
        start_operator(cluster, name=component, extra_args=[f"--identity={identity}"])
    try:
        leader = wait_for(lambda: holder(tpj) in operators and holder(tpj), 30, what="a leader")
        name = tpj.apply(small_job("handover", failurePolicy={"backoffSeconds": 1}))
        tpj.wait_phase(name, "Running")
        cluster.kill_component(operators[leader])
        killed = time.monotonic()
        (survivor,) = set(operators) - {leader}
        wait_for(lambda: holder(tpj) == survivor, 30, what=f"{survivor} holding the Lease")
        assert time.monotonic() - killed < 6 + 2 + 2, "taken over once the lease expired"
        tpj.core.delete_namespaced_pod(f"{name}-worker-0", tpj.namespace)
        wait_for(lambda: tpj.status(name).get("restarts"), 30, what="the loss charged")
        status = tpj.wait_phase(name, "Running", timeout=90)
        assert status["restarts"] == 1
        assert events(tpj, name, "WorkerFailed") == 1
    finally:
        cluster.stop_component(SECOND)
        cluster.stop_component(OPERATOR)
        start_operator(cluster)  # the module's operator again
