"""The gang placer's decisions on a store, with a recording writer (no API server).

The real-cluster behaviour of the same rules is in tests/integration/test_field_conditions.py;
these pin the logic: order, reservations, checks before release, replacements, bounds.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from placer_world import (
    NOW,
    Clock,
    RecordingWriter,
    a_job,
    a_node,
    a_worker,
    add_worker,
    first_worker_only,
    gang,
    placement,
    two_leaves,
)

from tpfabric_core import labels
from tpfabric_core.api import GANG_GATE
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler import capacity as capacity_module
from tpfabric_scheduler import placer as placer_module
from tpfabric_scheduler import plan_inputs as plan_inputs_module
from tpfabric_scheduler import writes as writes_module
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer, typical_gang_gpus
from tpfabric_scheduler.store import ClusterStore, JobRecord


def test_jobs_are_taken_by_priority_then_arrival_not_by_name(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, "a-young", 1, created=rfc3339(NOW - 10))
    gang(writer, "b-old", 1, created=rfc3339(NOW - 500))
    gang(writer, "z-urgent", 1, created=rfc3339(NOW - 1), priority=1000)
    with store.lock:
        order = [w.job.name for w in placer.pending_work()]
    assert order == ["z-urgent", "b-old", "a-young"]


def test_a_plan_names_every_level_of_its_domain_in_the_pods_affinity(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, "job", 2)
    placer.run_cycle()
    assert placement(writer, "job")["domainLabels"] == {
        labels.BLOCK: "b1",
        labels.SPINE: "su1",
        labels.LEAF: "leaf-a",
    }
    pod = writer.pods["ns/job-worker-0"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    keys = {e["key"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}
    assert keys == {labels.BLOCK, labels.SPINE, labels.LEAF}


def test_two_gangs_of_one_cycle_never_share_a_nodes_rdma_devices(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store, per_leaf=1)  # two nodes, 8 GPUs and 8 RDMA devices each
    for name in ("one", "two"):
        gang(writer, name, 1, gpusPerWorker=4, tensorParallelSize=4)
        for pod in writer.pods.values():
            pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
            with store.lock:
                store.upsert_pod(copy.deepcopy(pod))
    placer.run_cycle()
    nodes = [placement(writer, n)["nodes"][0] for n in ("one", "two")]
    assert len(set(nodes)) == 2, "each worker takes all 8 RDMA devices of its node"


def test_a_gang_is_planned_only_where_its_node_selector_allows(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    with store.lock:
        for i in range(4):
            node = a_node(f"leaf-b-n{i}", "leaf-b")
            node["metadata"]["labels"]["pool"] = "reserved"
            store.upsert_node(node)
    gang(writer, "picky", 2)
    for index in range(2):
        pod = writer.pods[f"ns/picky-worker-{index}"]
        pod["spec"]["nodeSelector"] = {"pool": "reserved"}
        with store.lock:
            store.upsert_pod(copy.deepcopy(pod))
    placer.run_cycle()
    assert all(n.startswith("leaf-b") for n in placement(writer, "picky")["nodes"])


def test_a_waiting_gang_lists_at_most_five_domains_and_is_written_once(world: Any) -> None:
    store, writer, placer, clock = world
    with store.lock:
        for leaf in range(8):
            store.upsert_node(a_node(f"n{leaf}", f"leaf-{leaf}"))
    gang(writer, "big", 2)
    placer.run_cycle()
    waiting = placement(writer, "big")
    assert waiting["state"] == "Waiting"
    assert len(waiting["reasons"]) == 5
    assert "5 of 8" in waiting["message"]
    writes = len(writer.status_writes)
    for _ in range(5):
        clock.now += 1
        placer.run_cycle()
    assert len(writer.status_writes) == writes, "nothing changed: no status write"


def test_nodes_without_topology_labels_never_become_domains(world: Any) -> None:
    store, writer, placer, _ = world
    with store.lock:
        store.upsert_node(a_node("labelled-0", "leaf-a"))
        store.upsert_node(a_node("labelled-1", "leaf-a"))
        bare = a_node("bare", "x")
        bare["metadata"]["labels"] = {}
        store.upsert_node(bare)
        # a busy labelled node: best fit would have preferred the bare one's zero leftover
        store.upsert_pod(a_worker("other", 0, node="labelled-1", gated=False, gpus=8))
    gang(writer, "one", 1)
    placer.run_cycle()
    plan = placement(writer, "one")
    assert plan["state"] == "Planned"
    assert plan["nodes"] == ["labelled-0"]


def test_an_unknown_level_is_a_clear_status_not_a_wait(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, "typo", 1, topology={"level": "rack"})
    placer.run_cycle()
    plan = placement(writer, "typo")
    assert plan["state"] == "Invalid"
    assert "rack" in plan["message"]
    assert "leaf" in plan["message"]


def test_a_persisted_plan_whose_node_was_taken_is_planned_again_not_released(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    job = a_job("late", 2, plan=("leaf", "leaf-a", ["leaf-a-n0", "leaf-a-n1"]))
    job["spec"]["topology"] = {"mode": "required", "level": "leaf"}
    writer.add_job(job)
    for index in range(2):
        writer.add_pod(a_worker("late", index))
    with store.lock:  # the default scheduler put a plain pod there meanwhile
        store.upsert_pod(a_worker("plain", 0, node="leaf-a-n0", gated=False))
    placer.run_cycle()
    plan = placement(writer, "late")
    assert plan["state"] == "Planned"
    assert "leaf-a-n0" not in plan["nodes"]
    assert sorted(writer.released) == ["late-worker-0", "late-worker-1"]


def test_a_replacement_worker_moves_off_the_node_it_failed_on_inside_the_domain(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "job", 2)
    placer.run_cycle()
    first = placement(writer, "job")["nodes"]
    for index, node in enumerate(first):
        writer.bind(f"job-worker-{index}", node)
    # worker 1 fails; the operator charges the incident (attempt 1), deletes it and creates a
    # gated replacement of attempt 1 after its backoff
    writer.delete_pod("ns", "job-worker-1")
    writer.patch_job_status("ns", "job", {"attempt": 1})
    clock.now += 30
    replacement = a_worker("job", 1, attempt=1)
    replacement["metadata"]["uid"] = "uid-replacement"
    replacement["metadata"]["creationTimestamp"] = rfc3339(clock.now)
    writer.add_pod(replacement)
    placer.run_cycle()
    plan = placement(writer, "job")
    assert plan["nodes"][0] == first[0], "the healthy rank stays"
    assert plan["nodes"][1] != first[1], "never the node it failed on"
    assert plan["nodes"][1].startswith("leaf-a"), "inside the planned leaf"
    assert plan["replacedRanks"] == {"1": "uid-replacement"}
    assert "job-worker-1" in writer.released[-1:]


def test_a_missing_rank_keeps_its_node_reserved_during_the_backoff(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    gang(writer, "job", 2)
    placer.run_cycle()
    nodes = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", nodes[0])
    writer.delete_pod("ns", "job-worker-1")  # lost; the operator waits its backoff
    writer.patch_job_status("ns", "job", {"attempt": 1})  # the incident, charged
    gang(writer, "other", 2)
    placer.run_cycle()
    assert nodes[1] not in placement(writer, "other").get("nodes", [])
    clock.now += 61  # a backoff longer than the bind bound: the rank is missing on purpose
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Planned"
    assert "job-worker-0" not in writer.deleted


def test_a_gang_is_planned_from_its_first_worker_and_the_rest_released_as_they_come(
    world: Any,
) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    first_worker_only(writer, "job", 4)  # the operator has made worker 0 so far
    placer.run_cycle()
    plan = placement(writer, "job")
    assert plan["state"] == "Planned"
    assert plan["attempt"] == 0
    assert len(plan["nodes"]) == 4
    assert len({n.split("-n")[0] for n in plan["nodes"]}) == 1, "one leaf"
    assert writer.released == ["job-worker-0"]
    clock.now += 2
    for index in (1, 2, 3):  # created after the plan, of the plan's attempt
        add_worker(writer, "job", index, clock.now)
    placer.run_cycle()
    assert placement(writer, "job")["nodes"] == plan["nodes"], "released onto the plan, not moved"
    assert sorted(writer.released) == [f"job-worker-{i}" for i in range(4)]
    assert len(writer.status_writes) == 1, "one status write: the plan"
    for index, node in enumerate(plan["nodes"]):
        required = writer.pods[f"ns/job-worker-{index}"]["spec"]["affinity"]["nodeAffinity"]
        terms = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": labels.LEAF, "operator": "In", "values": [node.split("-n")[0]]} in terms[0][
            "matchExpressions"
        ]


def test_a_gang_whose_pods_lack_the_attempt_label_is_planned_only_when_whole(world: Any) -> None:
    # pods made by another controller (or an operator older than the attempt label): a worker
    # created after an early plan could not be told from a replacement, and treating the rest of
    # the gang as replacements once moved ranks until the last found no node and the gang was
    # deleted (a CI failure of tests/integration/test_gang_placement.py)
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=8)
    job = a_job("plain", 8)
    job["spec"]["topology"] = {"mode": "required", "level": "leaf"}
    writer.add_job(job)
    for index in (0, 1):
        add_worker(writer, "plain", index, clock.now, attempt=None)
    placer.run_cycle()
    assert placement(writer, "plain").get("state") != "Planned", "2 of 8 exist: not planned yet"
    assert writer.released == []
    clock.now += 2
    for index in range(2, 8):
        add_worker(writer, "plain", index, clock.now, attempt=None)
    placer.run_cycle()
    plan = placement(writer, "plain")
    assert plan["state"] == "Planned"
    assert not plan.get("replacedRanks"), plan["message"]
    assert len({n.split("-n")[0] for n in plan["nodes"]}) == 1, "one leaf"
    assert sorted(writer.released) == sorted(f"plain-worker-{i}" for i in range(8))
    assert writer.deleted == []
    clock.now += 2
    placer.run_cycle()  # nothing left to act on: the plan stays
    assert placement(writer, "plain")["nodes"] == plan["nodes"]
    assert writer.deleted == []


def test_a_gang_whose_other_workers_are_never_created_drops_its_plan(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    first_worker_only(writer, "short", 3)  # a quota refuses workers 1 and 2
    placer.run_cycle()
    writer.bind("short-worker-0", placement(writer, "short")["nodes"][0])
    clock.now += 50
    placer.run_cycle()
    assert placement(writer, "short")["state"] == "Planned", "within the bound it waits"
    clock.now += 11
    placer.run_cycle()
    plan = placement(writer, "short")
    assert plan["state"] == "Replanning"
    assert "no worker pod for rank(s) [1, 2]" in plan["message"]
    assert writer.deleted == ["short-worker-0"], "no gang stays half-bound"


def test_a_refused_worker_drops_an_early_plan_and_the_gang_waits_until_whole(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    first_worker_only(writer, "quota", 3)
    placer.run_cycle()
    writer.bind("quota-worker-0", placement(writer, "quota")["nodes"][0])
    refused = {
        "type": "WorkersCreated",
        "status": "False",
        "reason": "CreateFailed",
        "message": 'pods "quota-worker-1" is forbidden: exceeded quota: one-pod',
    }
    writer.patch_job_status("ns", "quota", {"conditions": [refused]})  # the operator's words
    placer.run_cycle()  # at once, not after the bind bound
    plan = placement(writer, "quota")
    assert plan["state"] == "Replanning"
    assert "exceeded quota" in plan["message"]
    assert writer.deleted == ["quota-worker-0"], "no part of the gang holds a node"
    again = a_worker("quota", 0)  # the operator makes what the quota allows, gated
    again["metadata"]["uid"] = "uid-quota-0-again"
    writer.add_pod(again)
    placer.run_cycle()
    assert placement(writer, "quota")["state"] == "Replanning", "no early plan again"
    assert writer.released == ["quota-worker-0"], "the new worker 0 stays gated"
    for index in (1, 2):  # the quota is raised: the gang is whole
        writer.add_pod(a_worker("quota", index))
    placer.run_cycle()
    assert placement(writer, "quota")["state"] == "Planned"
    assert writer.released.count("quota-worker-0") == 2


def test_a_plan_without_its_attempt_treats_newer_pods_as_replacements(world: Any) -> None:
    """A plan an older placer persisted (no ``attempt``) keeps the rule of that version: a gated
    pod created after the plan is a replacement."""
    store, writer, placer, _ = world
    two_leaves(store)
    writer.add_job(a_job("old", 2, plan=("leaf", "leaf-a", ["leaf-a-n0", "leaf-a-n1"])))
    writer.jobs["ns/old"]["status"]["placement"]["plannedAt"] = rfc3339(NOW - 50)
    writer.add_job(writer.jobs["ns/old"])
    writer.add_pod(a_worker("old", 0, node="leaf-a-n0", gated=False))
    late = a_worker("old", 1)
    late["metadata"]["creationTimestamp"] = rfc3339(NOW - 10)
    writer.add_pod(late)
    placer.run_cycle()
    plan = placement(writer, "old")
    assert plan["nodes"][1] != "leaf-a-n1"
    assert plan["replacedRanks"] == {"1": "uid-old-1"}


def test_released_pods_that_do_not_bind_in_time_drop_the_plan(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    gang(writer, "stuck", 2)
    placer.run_cycle()
    writer.bind("stuck-worker-0", placement(writer, "stuck")["nodes"][0])
    clock.now += 61
    placer.run_cycle()
    plan = placement(writer, "stuck")
    assert plan["state"] == "Replanning"
    assert "not bound" in plan["message"]
    assert sorted(writer.deleted) == ["stuck-worker-0", "stuck-worker-1"]
    assert ("stuck", "GangReplanning", plan["message"]) in writer.events


def test_a_head_of_line_gang_keeps_younger_gangs_out_of_its_domain(world: Any) -> None:
    store, writer, placer, clock = world
    placer.head_of_line_seconds = 60
    two_leaves(store)
    with store.lock:  # 3 free nodes per leaf: a 4-worker gang fits nowhere
        store.upsert_pod(a_worker("busy", 0, node="leaf-a-n3", gated=False))
        store.upsert_pod(a_worker("busy", 1, node="leaf-b-n3", gated=False))
    gang(writer, "big", 4, created=rfc3339(NOW - 1000))
    placer.run_cycle()
    assert placement(writer, "big")["state"] == "Waiting"
    clock.now += 61
    gang(writer, "small", 2, created=rfc3339(clock.now))
    placer.run_cycle()
    assert "head of line" in placement(writer, "big")["message"]
    # without the hold, the tie between the leaves goes to leaf-a, the one "big" waits for
    assert all(n.startswith("leaf-b") for n in placement(writer, "small")["nodes"])
    assert GANG_GATE not in str(writer.pods["ns/small-worker-0"]["spec"]["schedulingGates"])


def test_a_released_worker_whose_node_was_taken_drops_the_plan_sooner(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    gang(writer, "job", 2)
    placer.run_cycle()
    nodes = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", nodes[0])
    with store.lock:  # the default scheduler puts a plain pod on rank 1's planned node
        store.upsert_pod(a_worker("plain", 0, node=nodes[1], gated=False))
    clock.now += 5
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Planned", (
        "within the short bound it may still bind"
    )
    clock.now += 6
    placer.run_cycle()
    plan = placement(writer, "job")
    assert plan["state"] == "Replanning"
    assert "taken by other pods" in plan["message"]


def test_a_cycle_that_only_watches_a_gang_bind_builds_no_snapshot(
    world: Any, snapshots: list[int]
) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    built = snapshots
    gang(writer, "job", 2)
    placer.run_cycle()
    assert len(built) == 1, "planning reads a snapshot"
    nodes = placement(writer, "job")["nodes"]
    writer.bind("job-worker-0", nodes[0])
    for _ in range(3):  # binds wake cycles while the gang binds: nothing to read yet
        clock.now += 1
        placer.run_cycle()
    assert len(built) == 1
    with store.lock:  # rank 1's planned node is taken meanwhile
        store.upsert_pod(a_worker("plain", 0, node=nodes[1], gated=False))
    clock.now += 8  # 11 s after release: the bind check is due and reads the snapshot
    placer.run_cycle()
    assert len(built) == 2
    assert "taken by other pods" in placement(writer, "job")["message"]


def test_a_waiting_gang_whose_inputs_did_not_change_needs_no_snapshot(
    world: Any, snapshots: list[int]
) -> None:
    store, writer, placer, clock = world
    two_leaves(store, per_leaf=2)
    with store.lock:  # one free node per leaf: a 2-worker gang waits
        store.upsert_pod(a_worker("busy", 0, node="leaf-a-n1", gated=False))
        store.upsert_pod(a_worker("busy", 1, node="leaf-b-n1", gated=False))
    gang(writer, "job", 2)
    placer.run_cycle()
    assert placement(writer, "job")["state"] == "Waiting"
    placer.run_cycle()  # its own Waiting write came back: the job's facts changed once
    seen = len(snapshots)
    clock.now += 1
    placer.run_cycle()  # woken by an event that changed no capacity
    assert len(snapshots) == seen
    waiting = placer.metrics.registry.get_sample_value("tpfabric_placer_jobs_waiting")
    assert waiting == 1, "it still counts as waiting"
    with store.lock:
        store.delete_pod("ns/busy-worker-1")
    placer.run_cycle()
    assert len(snapshots) == seen + 1
    assert placement(writer, "job")["state"] == "Planned"


def test_a_cycle_stops_at_its_time_bound_and_asks_for_another(world: Any) -> None:
    store, writer, placer, _ = world
    placer.max_cycle_seconds = 0.0
    two_leaves(store)
    gang(writer, "first", 1, created=rfc3339(NOW - 20))
    gang(writer, "second", 1, created=rfc3339(NOW - 10))
    assert placer.run_cycle() is True
    assert placement(writer, "first")["state"] == "Planned"
    assert not placement(writer, "second")
    assert placer.run_cycle() is False
    assert placement(writer, "second")["state"] == "Planned"


class LaggingWriter(RecordingWriter):
    """Releases reach the API server but not (yet) the store: the pod watch lags behind."""

    def __init__(self, store: ClusterStore) -> None:
        super().__init__(store)
        self.lagging = True
        self.calls = 0  # every API call a release makes (write attempts and reads)

    def release_known_pod(
        self,
        pod: Any,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        **annotations: Any,
    ) -> None:
        self.calls += 1
        super().release_known_pod(pod, affinity, remaining_gates, **annotations)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls += 1
        return super().read_pod(namespace, name)


def test_a_released_pod_the_store_still_shows_gated_is_not_released_again() -> None:
    store = ClusterStore()
    writer = LaggingWriter(store)
    placer = GangPlacer(store, writer, Metrics(), clock=Clock(), bind_timeout=60)  # type: ignore[arg-type]
    two_leaves(store)
    gang(writer, "job", 3)
    placer.run_cycle()
    assert sorted(writer.released) == ["job-worker-0", "job-worker-1", "job-worker-2"]
    assert writer.calls == 3
    placer.run_cycle()  # the store still shows all three gated: no call is made for them again
    placer.run_cycle()
    assert writer.calls == 3
    assert len(writer.released) == 3
    assert len(placer._released) == 3
    for name in ("job-worker-0", "job-worker-1", "job-worker-2"):  # the watch catches up
        with store.lock:
            store.upsert_pod(copy.deepcopy(writer.pods[f"ns/{name}"]))
    placer.run_cycle()
    assert placer._released == {}  # nothing left to remember


def test_a_cycle_plans_every_gang_before_its_writes_return_and_waits_for_them(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    for name in ("a", "b"):
        gang(writer, name, 4, created=rfc3339(NOW - (10 if name == "a" else 5)))
    placer.run_cycle()
    # both planned in one cycle, on different leaves, and persisted before run_cycle returned
    assert placement(writer, "a")["state"] == "Planned"
    assert placement(writer, "b")["state"] == "Planned"
    assert placement(writer, "a")["domain"] != placement(writer, "b")["domain"]
    assert len(writer.released) == 8


class _OrderedWriter(RecordingWriter):
    """Records the order of plan writes, releases and Events; refuses the plans of ``refuse``."""

    def __init__(self, store: ClusterStore, refuse: set[str]) -> None:
        super().__init__(store)
        self.order: list[tuple[str, str]] = []
        self.refuse = refuse

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], **guards: Any
    ) -> None:
        self.order.append(("plan", name))
        if name in self.refuse:
            raise ApiException(status=500, reason="etcd timeout")
        super().patch_job_status(namespace, name, status, **guards)

    def release_pod(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> None:
        self.order.append(("release", name.split("-worker-", maxsplit=1)[0]))
        super().release_pod(namespace, name, *args, **kwargs)

    def job_event(self, job: Any, kind: str, reason: str, message: str) -> None:
        self.order.append(("event", job.name))
        super().job_event(job, kind, reason, message)


def test_a_cycle_writes_all_its_plans_before_any_release_and_a_failed_plan_releases_nothing(
    monkeypatch: Any,
) -> None:
    """The operator creates a gang's other workers released once it sees the plan: a plan
    must not queue behind the release writes of the gangs planned before it."""
    monkeypatch.setattr(writes_module, "PERSIST_CONCURRENCY", 1)  # the pool's order, exactly
    store = ClusterStore()
    writer = _OrderedWriter(store, refuse={"c"})
    placer = GangPlacer(store, writer, Metrics(), clock=Clock())  # type: ignore[arg-type]
    two_leaves(store, per_leaf=6)
    for age, name in enumerate("abcd"):
        gang(writer, name, 2, created=rfc3339(NOW - 10 + age))
    placer.run_cycle()
    kinds = [kind for kind, _ in writer.order]
    assert kinds == ["plan"] * 4 + ["release", "release", "event"] * 3, writer.order
    assert [job for kind, job in writer.order if kind == "plan"] == ["a", "b", "c", "d"]
    assert [job for kind, job in writer.order if kind == "event"] == ["a", "b", "d"]
    assert sorted(writer.released) == sorted(
        f"{job}-worker-{i}" for job in "abd" for i in range(2)
    ), "the gang whose plan was refused stays gated"
    assert placement(writer, "c") == {}
    writer.refuse.clear()
    placer.run_cycle()  # the next cycle plans it again
    assert placement(writer, "c")["state"] == "Planned"
    assert {"c-worker-0", "c-worker-1"} <= set(writer.released)


def three_railed_leaves(store: ClusterStore) -> None:
    """One spine of three leaves (4 nodes, 8 rails each): a leaf's uplink carries 28.8 flows."""
    for leaf in ("leaf-a", "leaf-b", "leaf-c"):
        for i in range(4):
            node = a_node(f"{leaf}-n{i}", leaf)
            for rail in range(8):
                node["metadata"]["labels"][f"{labels.PREFIX}rail-{rail}"] = f"{leaf}-rail{rail}"
            with store.lock:
                store.upsert_node(node)


def uplink_load(store: ClusterStore, topology: Any) -> Any:
    """What the placer computes per cycle: every planned ring's flows, summed."""
    rings = capacity_module.planned_rings(store)
    flows = [capacity_module.ring_flows(topology, nodes, gpus) for _, nodes, gpus in rings]
    return capacity_module.load_of(topology, flows)


def a_spanning_gang_runs_across_leaves_a_and_b(writer: RecordingWriter) -> None:
    """A 4-worker ring a0 b0 a1 b1: four edges cross, 32 flows each way on both leaves' uplinks
    (more than the 28.8 they carry), bound where it was planned."""
    nodes = ["leaf-a-n0", "leaf-b-n0", "leaf-a-n1", "leaf-b-n1"]
    job = a_job("busy", 4, plan=("spine", "su1", nodes))
    job["status"]["placement"]["domainLabels"] = {labels.BLOCK: "b1", labels.SPINE: "su1"}
    writer.add_job(job)
    for index, node in enumerate(nodes):
        writer.add_pod(a_worker("busy", index, node=node, gated=False))


def test_the_uplink_load_counts_the_rings_of_planned_gangs_that_span_domains() -> None:
    store = ClusterStore()
    writer = RecordingWriter(store)
    three_railed_leaves(store)
    with store.lock:
        topology = placer_module.ClusterTopology.from_node_labels(
            {name: node.labels for name, node in store.nodes.items()}
        )
        assert uplink_load(store, topology) is None, "nothing planned spans"
    a_spanning_gang_runs_across_leaves_a_and_b(writer)
    with store.lock:
        load = uplink_load(store, topology)
    assert load is not None
    leaves = {d.name: d.index for d in topology.domains[0]}
    assert load.per_depth[0][leaves["leaf-a"]] == pytest.approx(32 / 28.8)
    assert load.per_depth[0][leaves["leaf-b"]] == pytest.approx(32 / 28.8)
    assert load.per_depth[0][leaves["leaf-c"]] == 0.0
    # a finished job's plan loads nothing
    writer.jobs["ns/busy"]["status"]["phase"] = "Succeeded"
    writer.add_job(writer.jobs["ns/busy"])
    with store.lock:
        assert uplink_load(store, topology) is None


@pytest.mark.parametrize("aware", [True, False])
def test_a_gang_that_must_span_leaves_keeps_off_uplinks_running_gangs_saturate(
    aware: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ClusterStore()
    writer = RecordingWriter(store)
    placer = GangPlacer(store, writer, Metrics(), clock=Clock(), bind_timeout=60)  # type: ignore[arg-type]
    three_railed_leaves(store)
    a_spanning_gang_runs_across_leaves_a_and_b(writer)
    for node in ("leaf-c-n0", "leaf-c-n1"):  # another scheduler's pods: 2 free nodes per leaf
        with store.lock:
            store.upsert_pod(a_worker(f"plain-{node}", 0, node=node, gated=False))
    if not aware:
        monkeypatch.setattr(plan_inputs_module, "ring_flows", lambda topology, nodes, gpus: {})
    job = a_job("next", 4)
    job["spec"]["topology"] = {"mode": "required", "level": "spine"}
    writer.add_job(job)
    for index in range(4):
        writer.add_pod(a_worker("next", index))
    placer.run_cycle()
    leaves = {node.rsplit("-", 1)[0] for node in placement(writer, "next")["nodes"]}
    if aware:
        # two leaves are unavoidable; leaf-c's uplink is idle, so it is one of them
        assert "leaf-c" in leaves
        reasons = [r["reason"] for r in placement(writer, "next")["reasons"]]
        assert any(r.startswith("crosses 1 of the 2 leaf uplink(s)") for r in reasons), reasons
    else:
        assert leaves == {"leaf-a", "leaf-b"}, "unaware, the first leaves in node order win"


def test_the_median_gang_of_the_jobs_known_keeps_leaves_from_becoming_fragments(
    world: Any,
) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    node = a_node("leaf-a-n3", "leaf-a")
    node["spec"]["unschedulable"] = True  # leaf-a: 3 usable nodes, leaf-b: 4
    with store.lock:
        store.upsert_node(node)
    for k in range(3):  # finished or not: every job the store knows shows the mix of gangs
        writer.add_job(a_job(f"earlier-{k}", 2))
    gang(writer, "job", 2)
    placer.run_cycle()
    plan = placement(writer, "job")
    # best fit alone would take leaf-a and leave 1 node, too few for the typical 2-node gang
    assert plan["domain"] == "leaf-b"
    reasons = [r["reason"] for r in plan["reasons"]]
    assert any("kept leaf 'leaf-a' from becoming a fragment" in r for r in reasons)


def test_gangs_of_one_node_make_no_leaf_a_fragment(world: Any) -> None:
    store, writer, placer, _ = world
    two_leaves(store)
    node = a_node("leaf-a-n3", "leaf-a")
    node["spec"]["unschedulable"] = True
    with store.lock:
        store.upsert_node(node)
    for k in range(3):
        writer.add_job(a_job(f"earlier-{k}", 1))
    gang(writer, "job", 2)
    placer.run_cycle()
    assert placement(writer, "job")["domain"] == "leaf-a"  # plain best fit


def test_the_typical_gang_is_the_median_of_valid_jobs() -> None:
    def record(workers: int, gpus: int | None = None) -> JobRecord:
        job = a_job(f"j{workers}-{gpus}", workers)
        if gpus is not None:
            job["spec"]["gpusPerWorker"] = gpus
            job["spec"]["tensorParallelSize"] = gpus
        return JobRecord.from_object(job)

    invalid = a_job("bad", 2)
    invalid["spec"]["workers"] = -1
    bad = JobRecord.from_object(invalid)
    assert bad.job is None
    assert typical_gang_gpus([]) is None
    assert typical_gang_gpus([bad]) is None
    assert typical_gang_gpus([record(2), bad]) == 16
    assert typical_gang_gpus([record(2), record(4, gpus=4), record(32)]) == 16
    assert typical_gang_gpus([record(1), record(4)]) == 20


def released_with_one_bound(world: Any, name: str) -> None:
    """Plan and release a 2-worker gang on two leaves; bind its worker 0 only."""
    store, writer, placer, _ = world
    two_leaves(store)
    gang(writer, name, 2)
    placer.run_cycle()
    writer.bind(f"{name}-worker-0", placement(writer, name)["nodes"][0])


def test_pods_a_dropped_plan_left_behind_are_deleted_by_the_next_leader(world: Any) -> None:
    store, writer, _, clock = world
    released_with_one_bound(world, "dropped")
    # the leader wrote Replanning and stopped before it deleted the pods
    writer.patch_job_status(
        "ns", "dropped", {"placement": {"state": "Replanning", "nodes": [], "message": "taken"}}
    )
    store.fresh_plans.clear()  # the next leader's store knows what its watches show
    successor = GangPlacer(store, writer, Metrics(), clock=clock, bind_timeout=60)  # type: ignore[arg-type]
    successor.run_cycle()
    assert sorted(writer.deleted) == ["dropped-worker-0", "dropped-worker-1"]
    # the operator makes them again, gated: they wait for a new plan, never deleted again
    for index in range(2):
        pod = a_worker("dropped", index)
        pod["metadata"]["uid"] += "-again"
        pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "8"
        writer.add_pod(pod)
    clock.now += 60
    successor.run_cycle()
    assert len(writer.deleted) == 2
    assert placement(writer, "dropped")["state"] == "Planned"


def test_a_failed_deletion_of_a_dropped_plans_pods_is_tried_again_after_a_while(
    world: Any,
) -> None:
    _, writer, placer, clock = world
    released_with_one_bound(world, "stuck")
    delete = writer.delete_pod
    calls: list[str] = []

    def failing_at_first(namespace: str, name: str, uid: str | None = None) -> None:
        calls.append(name)
        if len(calls) <= 2:
            raise ApiException(status=500, reason="etcd timed out")
        delete(namespace, name, uid)

    writer.delete_pod = failing_at_first  # type: ignore[method-assign]
    clock.now += 61  # worker-1 never bound: the plan is dropped, its deletion fails
    placer.run_cycle()
    assert placement(writer, "stuck")["state"] == "Replanning"
    assert sorted(calls) == ["stuck-worker-0", "stuck-worker-1"]
    assert writer.deleted == []
    placer.run_cycle()  # not at once again
    assert len(calls) == 2
    clock.now += 11
    placer.run_cycle()
    assert len(calls) == 4
    assert sorted(writer.deleted) == ["stuck-worker-0", "stuck-worker-1"]


def test_a_dropped_plans_pods_are_deleted_one_by_one_by_uid(world: Any) -> None:
    _, writer, placer, clock = world
    released_with_one_bound(world, "by-uid")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in writer.pods.values()}
    clock.now += 61  # worker-1 never bound: the plan is dropped and its pods deleted
    placer.run_cycle()
    assert sorted(writer.deleted_by_uid) == sorted(
        (name, uids[name]) for name in ("by-uid-worker-0", "by-uid-worker-1")
    )
