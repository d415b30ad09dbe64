"""What of a pod's or a job's change the placer follows: a change of what a pod takes moves the
store's capacity generation, and a change that may free capacity plans a waiting gang again.

A field added to PodRecord must be named here as capacity or not: forgetting it in
``capacity_facts`` would silently stop waiting gangs from being planned again."""

from __future__ import annotations

import dataclasses

import pytest
from builders import a_worker

from tpfabric_scheduler.records import PodRecord, capacity_facts, frees
from tpfabric_scheduler.store import ClusterStore

#: the fields of a pod that change what it takes on its node
CAPACITY = {"node", "terminal", "gated", "requests", "deleting", "priority", "host_ports"}
#: the fields that do not, and why
NOT_CAPACITY = {
    "namespace": "part of the pod's key: another value is another pod",
    "name": "part of the pod's key",
    "uid": "a pod made again under its name is a delete and an add",
    "job": "read from labels set at creation",
    "worker_index": "read from labels set at creation",
    "created": "set at creation",
    "scheduling": "a worker's constraints: they change only while it is gated (gated counts)",
    "gates": "follows gated",
    "attempt": "read from a label set at creation",
    "repels_peers": "follows the pod's spec, fixed at creation",
    "unschedulable": "kube-scheduler's words: the bind bound reads them, capacity does not",
}


def test_every_pod_field_is_said_to_be_capacity_or_not() -> None:
    fields = {f.name for f in dataclasses.fields(PodRecord)}
    assert fields == CAPACITY | set(NOT_CAPACITY)


@pytest.mark.parametrize("field", sorted(CAPACITY))
def test_a_change_of_a_capacity_field_is_a_capacity_change(field: str) -> None:
    pod = PodRecord.from_object(a_worker("job", 0, node="n1", gated=False))
    other = {
        "node": "n2",
        "terminal": True,
        "gated": True,
        "requests": {"nvidia.com/gpu": 4},
        "deleting": True,
        "priority": 7,
        "host_ports": frozenset({("TCP", 80)}),
    }[field]
    assert capacity_facts(dataclasses.replace(pod, **{field: other})) != capacity_facts(pod)


def test_a_pod_that_leaves_its_node_or_finishes_frees_capacity_and_a_bind_does_too() -> None:
    bound = PodRecord.from_object(a_worker("job", 0, node="n1", gated=False))
    released = dataclasses.replace(bound, node=None)
    assert frees(bound, dataclasses.replace(bound, terminal=True))
    assert frees(bound, released)
    assert frees(released, bound), "a worker bound: its rank's reservation elsewhere ends"
    assert not frees(bound, dataclasses.replace(bound, priority=3))


def test_only_changes_that_may_free_capacity_move_the_freed_generation() -> None:
    store = ClusterStore()
    with store.lock:
        store.upsert_pod(a_worker("job", 0, node="n1", gated=False))
        freed = store.freed_generation
        store.upsert_pod(a_worker("other", 0, node="n1", gated=False))  # a new pod takes
        assert store.freed_generation == freed
        store.delete_pod("ns/job-worker-0")  # a bound pod goes
        assert store.freed_generation == freed + 1
