"""Workers born released onto their gang's plan, and the waits of small gangs' first workers for
it (pure mechanism, a driven clock)."""

from __future__ import annotations

from driven_clock import Clock
from test_children import a_job

from tpfabric_core.rail_ports import PLAN_LEVEL_ANNOTATION, RAILS_ANNOTATION
from tpfabric_core.rdma_default import NodeOffer
from tpfabric_operator.jobs.born_released import PlanWaits, born_released
from tpfabric_operator.jobs.children import GANG_GATE, worker_pod


def test_a_wait_begins_runs_for_its_time_and_ends() -> None:
    clock = Clock()
    waits = PlanWaits(2.0, clock)
    assert waits.phase(("u", "0")) == "new"
    waits.begin(("u", "0"))
    clock.now = 1.9
    assert waits.phase(("u", "0")) == "waiting"
    clock.now = 2.0
    assert waits.phase(("u", "0")) == "over"
    waits.end(("u", "0"))
    assert waits.phase(("u", "0")) == "new"


def test_a_wait_is_of_one_attempt() -> None:
    waits = PlanWaits(2.0, Clock())
    waits.begin(("u", "0"))
    assert waits.phase(("u", "1")) == "new", "a later attempt's gang waits on its own"
    waits.end(("u", "1"))
    assert waits.phase(("u", "0")) == "waiting", "ending another attempt ends nothing"
    waits.begin(("u", "1"))
    assert waits.phase(("u", "0")) == "new", "one wait a job: the newest attempt's"


def test_an_answer_is_heard_only_by_a_job_that_waits_until_its_wait_ends() -> None:
    waits = PlanWaits(2.0, Clock())
    assert not waits.answered("u")
    assert not waits.heard("u")
    waits.begin(("u", "0"))
    assert not waits.heard("u")
    assert waits.answered("u")
    assert waits.heard("u")
    waits.end(("u", "0"))
    assert not waits.heard("u")
    assert not waits.answered("u")


def test_waits_of_jobs_deleted_meanwhile_are_forgotten() -> None:
    clock = Clock()
    waits = PlanWaits(2.0, clock)
    for k in range(1_001):
        waits.begin((f"gone-{k}", "0"))
    clock.now = 1_000.0
    waits.begin(("u", "0"))
    assert waits.phase(("gone-0", "0")) == "new"
    assert len(waits._since) == 1


PLAN = {
    "state": "Planned",
    "attempt": 0,
    "level": "leaf",
    "domain": "leaf-1",
    "domainLabels": {"topology.tpfabric.io/spine": "sp-1", "topology.tpfabric.io/leaf": "leaf-1"},
    "nodes": ["n0", "n1", "n2", "n3"],
}


def test_a_worker_created_after_its_gangs_plan_is_born_released_into_the_domain() -> None:
    job = a_job(
        template={
            "spec": {
                "containers": [{"name": "t", "image": "img"}],
                "schedulingGates": [{"name": "example.com/quota"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            }
        }
    )
    gated = worker_pod(job, "j", "ns", 3, "init:1")
    pod = born_released(gated, PLAN)
    assert pod is not None
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/quota"}], "only our gate goes"
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "zone", "operator": "In", "values": ["a"]},
        {"key": "topology.tpfabric.io/spine", "operator": "In", "values": ["sp-1"]},
        {"key": "topology.tpfabric.io/leaf", "operator": "In", "values": ["leaf-1"]},
    ]
    assert gated["spec"]["schedulingGates"][-1] == {"name": GANG_GATE}, "the input is untouched"
    plain = born_released(worker_pod(a_job(), "j", "ns", 0, "init:1"), PLAN)
    assert plain is not None
    assert "schedulingGates" not in plain["spec"]


def test_a_worker_no_plan_covers_stays_gated() -> None:
    pod = worker_pod(a_job(), "j", "ns", 1, "init:1")
    assert born_released(pod, None) is None
    assert born_released(pod, {**PLAN, "state": "Waiting"}) is None
    assert born_released(pod, {**PLAN, "attempt": 1}) is None, "a plan of another attempt"
    assert born_released(pod, {**PLAN, "attempt": None}) is None, "a plan without its attempt"
    assert born_released(pod, {**PLAN, "nodes": ["n0"]}) is None, "no node for its rank"
    assert born_released(pod, {**PLAN, "domainLabels": {}}) is None, "an older placer's plan"
    spread = born_released(pod, {**PLAN, "level": "cluster", "domainLabels": {}})
    assert spread is not None, "a cluster-wide plan narrows nothing"
    assert "affinity" not in spread["spec"]


def test_a_worker_born_released_is_told_its_rails_on_its_planned_node_and_the_plans_level() -> None:
    rails = ((0, "00000000000000a0"), (1, "00000000000000a1"))
    nodes = {
        f"n{i}": NodeOffer(f"n{i}", {}, {"nvidia.com/gpu": 8, "rdma/ib": 8}, rails)
        for i in range(4)
    }
    pod = born_released(worker_pod(a_job(), "j", "ns", 2, "init:1"), PLAN, nodes)
    assert pod is not None
    annotations = pod["metadata"]["annotations"]
    assert annotations[RAILS_ANNOTATION] == "0=0x00000000000000a0,1=0x00000000000000a1"
    assert annotations[PLAN_LEVEL_ANNOTATION] == "leaf"
    unknown = born_released(worker_pod(a_job(), "j", "ns", 2, "init:1"), PLAN, {})
    assert unknown is not None
    assert RAILS_ANNOTATION not in unknown["metadata"]["annotations"], "a node it does not know"
