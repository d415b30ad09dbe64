"""A gang that waits for its own pods says so: the record's condition at once, its pods an Event
once it has waited past the notice."""

from __future__ import annotations

import pytest

from tpfabric_core import labels
from tpfabric_core.gangs import GangSettings, gang_of
from tpfabric_core.timestamps import parse_rfc3339
from tpfabric_operator.gangs.records import GangPod
from tpfabric_operator.gangs.serving import merge_conditions
from tpfabric_operator.gangs.waits import PODS_CREATED, pods_created, short_notice

pytestmark = pytest.mark.unit

SETTINGS = GangSettings(levels={"leaf": labels.LEAF})
SINCE = "2026-12-04T10:00:00Z"


def lws_pod(rank: int, *, attempt: str | None = None) -> GangPod:
    pod_labels = {
        "leaderworkerset.sigs.k8s.io/name": "vllm",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(rank),
        "tpfabric.io/rank": str(rank),
    }
    if attempt is not None:  # numbered by the gang webhook at admission
        pod_labels["tpfabric.io/attempt"] = attempt
    meta = {"name": f"vllm-0-{rank}", "namespace": "ns", "labels": pod_labels,
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "4"}}  # fmt: skip
    member = gang_of(meta, SETTINGS)
    assert member is not None
    return GangPod(name=meta["name"], member=member, created=SINCE, labels=pod_labels)


def test_a_gang_short_of_pods_says_how_many_exist_which_ranks_miss_and_who_makes_them() -> None:
    condition = pods_created([lws_pod(r) for r in (0, 1, 3)], 4)
    assert (condition["type"], condition["status"], condition["reason"]) == (
        PODS_CREATED, "False", "PodsMissing"
    )  # fmt: skip
    assert condition["message"].startswith(
        "3 of 4 pods exist; missing rank 2: the gang waits until LeaderWorkerSet vllm creates"
    )


def test_a_gang_numbered_at_admission_is_not_said_to_wait_until_whole_to_be_placed() -> None:
    message = pods_created([lws_pod(r, attempt="0") for r in (0, 1)], 4)["message"]
    assert message.endswith(
        "tpfabric plans it from its first pods and places the rest as they come"
    )
    unnumbered = pods_created([lws_pod(r) for r in (0, 1)], 4)["message"]
    assert unnumbered.endswith("tpfabric places a gang only once all its pods exist")


def test_a_whole_gang_has_its_pods() -> None:
    condition = pods_created([lws_pod(r) for r in range(4)], 4)
    assert (condition["status"], condition["reason"]) == ("True", "AllPodsExist")


def test_the_pods_are_told_only_once_the_gang_has_been_short_past_the_notice() -> None:
    stored = merge_conditions([pods_created([lws_pod(0)], 4)], [], SINCE)
    start = parse_rfc3339(SINCE) or 0.0
    assert short_notice(stored, "vllm-0", start + 59, 60) is None
    told = short_notice(stored, "vllm-0", start + 61, 60)
    assert told is not None
    assert told.startswith(f"gang vllm-0 has waited since {SINCE} for its pods: 1 of 4 pods exist")
    # the wait began when it first went short: a pod more keeps its start
    later = merge_conditions(
        [pods_created([lws_pod(0), lws_pod(1)], 4)], stored, "2026-12-04T11:00:00Z"
    )
    assert later[0]["lastTransitionTime"] == SINCE
    whole = merge_conditions(
        [pods_created([lws_pod(r) for r in range(4)], 4)], later, "2026-12-04T11:00:00Z"
    )
    assert short_notice(whole, "vllm-0", start + 3600, 60) is None
