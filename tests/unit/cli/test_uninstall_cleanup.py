"""What ``tpfabric uninstall-cleanup`` removes is decided by pure functions: the fabric agent's
health on a node (the topology only when asked), pods that would wait for ever for a scheduler
that is gone, and a finalizer taken out of a list without touching the others."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_cli.uninstall import KOPF_FINALIZER, node_cleanup, stranded, without
from tpfabric_core import labels
from tpfabric_core.api import SCHEDULER_NAME
from tpfabric_core.fabric.link_publish import CONDITION_TYPE, DETAIL_ANNOTATION
from tpfabric_core.fabric.roce_contract import CONTRACT_CONDITION

pytestmark = pytest.mark.unit

NODE_LABELS = {
    labels.LEAF: "leaf-1",
    labels.HEALTH: "ok",
    labels.rail_key(0): "rail-sw-0",
    "kubernetes.io/hostname": "gpu-1",
}
NODE_ANNOTATIONS = {DETAIL_ANNOTATION: "{}", "node.alpha.kubernetes.io/ttl": "0"}


def test_the_agents_health_goes_and_the_topology_stays_by_default() -> None:
    plan = node_cleanup("gpu-1", NODE_LABELS, NODE_ANNOTATIONS, ["Ready", CONDITION_TYPE])
    assert plan is not None
    assert (plan.labels, plan.annotations, plan.conditions) == (
        (labels.HEALTH,),
        (DETAIL_ANNOTATION,),
        (CONDITION_TYPE,),
    )
    assert plan.words() == (
        f"node gpu-1: {labels.HEALTH}, {DETAIL_ANNOTATION}, condition {CONDITION_TYPE}"
    )


def test_remove_topology_takes_every_tpfabric_key_and_nothing_else() -> None:
    plan = node_cleanup("gpu-1", NODE_LABELS, NODE_ANNOTATIONS, [], remove_topology=True)
    assert plan is not None
    assert plan.labels == tuple(sorted(k for k in NODE_LABELS if k.startswith(labels.PREFIX)))
    assert "kubernetes.io/hostname" not in plan.labels
    assert plan.annotations == (DETAIL_ANNOTATION,)
    assert plan.conditions == ()


def test_the_agents_contract_condition_goes_with_its_health() -> None:
    plan = node_cleanup("gpu-1", {}, {}, ["Ready", CONDITION_TYPE, CONTRACT_CONDITION])
    assert plan is not None
    assert plan.conditions == (CONDITION_TYPE, CONTRACT_CONDITION)
    assert plan.words() == (
        f"node gpu-1: condition {CONDITION_TYPE}, condition {CONTRACT_CONDITION}"
    )
    only_contract = node_cleanup("gpu-2", {}, {}, [CONTRACT_CONDITION])
    assert only_contract is not None
    assert only_contract.conditions == (CONTRACT_CONDITION,)


def test_a_node_tpfabric_never_wrote_to_is_left_alone() -> None:
    assert node_cleanup("cpu-1", {"kubernetes.io/hostname": "cpu-1"}, {}, ["Ready"]) is None


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w-0"}, "spec": {"schedulerName": SCHEDULER_NAME, **spec}}


def test_an_unbound_pod_naming_tpfabrics_scheduler_is_stranded_gated_or_not() -> None:
    assert stranded(pod(), SCHEDULER_NAME) == f"unbound, names {SCHEDULER_NAME}"
    gated = pod(schedulingGates=[{"name": "tpfabric.io/gang"}])
    assert stranded(gated, SCHEDULER_NAME) == (
        f"unbound, names {SCHEDULER_NAME}, gated by tpfabric.io/gang"
    )


def test_bound_finished_deleting_or_other_schedulers_pods_are_not_stranded() -> None:
    assert stranded(pod(nodeName="gpu-1"), SCHEDULER_NAME) is None
    assert stranded(pod(schedulerName="default-scheduler"), SCHEDULER_NAME) is None
    assert stranded({**pod(), "status": {"phase": "Succeeded"}}, SCHEDULER_NAME) is None
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    assert stranded(deleting, SCHEDULER_NAME) is None


def test_only_kopfs_finalizer_is_taken_out_of_the_list() -> None:
    held = ["example.com/keep", KOPF_FINALIZER, "other/keep"]
    assert without(held, KOPF_FINALIZER) == ["example.com/keep", "other/keep"]
    assert without(["example.com/keep"], KOPF_FINALIZER) is None
    assert without(None, KOPF_FINALIZER) is None
