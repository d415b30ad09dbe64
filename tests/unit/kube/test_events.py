"""The one shape of the core/v1 Events tpfabric's components write."""

from __future__ import annotations

from tpfabric_kube.events import MESSAGE_LIMIT, event_body, pod_object


def test_an_event_is_whole_timed_and_cut_to_what_the_api_server_keeps() -> None:
    body = event_body(
        pod_object("w-0", "ml", "u-1"), reason="GangReplanning", message="x" * 5000, component="c"
    )
    assert body["metadata"] == {"generateName": "w-0.", "namespace": "ml"}
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "w-0",
        "namespace": "ml",
        "uid": "u-1",
    }
    assert (body["type"], body["reason"], len(body["message"])) == (
        "Warning",
        "GangReplanning",
        MESSAGE_LIMIT,
    )
    assert body["source"] == {"component": "c"}
    assert body["reportingComponent"] == "c"
    assert body["firstTimestamp"] == body["lastTimestamp"], "kubectl shows its age"
    assert body["firstTimestamp"].endswith("Z")
    assert body["count"] == 1


def test_a_fixed_name_makes_it_idempotent_and_a_cluster_scoped_object_tells_in_default() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "name": "n" * 300, "uid": "u"}
    named = event_body(node, reason="R", message="m", component="c", name="n.abc", warning=False)
    assert named["metadata"] == {"name": "n.abc", "namespace": "default"}
    assert named["type"] == "Normal"
    generated = event_body(node, reason="R", message="m", component="c", namespace="ops")
    assert generated["metadata"] == {"generateName": "n" * 200 + ".", "namespace": "ops"}
