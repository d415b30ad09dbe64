"""A pod the gang webhook admitted unwired is told why, once: a Warning Event on the pod."""

from __future__ import annotations

import pytest

from tpfabric_core.gangs import GANG_PROBLEMS_ANNOTATION
from tpfabric_operator.gangs.problem_pods import NOT_WIRED_REASON, problem_event

pytestmark = pytest.mark.unit


def test_a_pod_admitted_unwired_gets_one_warning_event_with_its_problems() -> None:
    pod = {
        "metadata": {
            "name": "bert-0",
            "namespace": "ns",
            "uid": "u-1",
            "annotations": {
                GANG_PROBLEMS_ANNOTATION: "tpfabric.io/gang-size: 'abc' is not a whole number"
            },
        }
    }
    event = problem_event(pod)
    assert event is not None
    assert (event["type"], event["reason"]) == ("Warning", NOT_WIRED_REASON)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "bert-0",
        "namespace": "ns",
        "uid": "u-1",
    }
    assert "tpfabric.io/gang-size: 'abc' is not a whole number" in event["message"]
    assert problem_event(pod)["metadata"]["name"] == event["metadata"]["name"]  # written once
    pod["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    assert problem_event(pod) is None
