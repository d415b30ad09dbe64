"""One object never stops another's work: a list skips and reports what it cannot read."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from tpfabric_kube.list_watch import list_pages
from tpfabric_kube.malformed import SKIPPED, MalformedObjects, Notice, event_for


def obj(name: str, version: str = "1", **labels: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": version}
    return {"metadata": {**meta, "labels": labels}}


def one_page(*items: dict[str, Any]) -> Any:
    body = orjson.dumps({"metadata": {"resourceVersion": "7"}, "items": list(items)})
    return lambda **_: SimpleNamespace(data=body)


def size_of(item: dict[str, Any]) -> int:
    """A parser with a bug: it raises on a label it cannot read."""
    return int(item["metadata"]["labels"]["size"])


def count(component: str, kind: str, reason: str) -> float:
    labels = {"component": component, "kind": kind, "reason": reason}
    return REGISTRY.get_sample_value("tpfabric_malformed_objects_total", labels) or 0.0


def test_a_list_skips_the_object_its_parser_raises_on_and_keeps_every_other() -> None:
    told: list[Notice] = []
    reports = MalformedObjects("test-list", notify=told.append)
    sizes, version = list_pages(
        one_page(obj("a", size="2"), obj("poison", size="²"), obj("b", size="4")),
        size_of,
        malformed=reports,
        kind="Pod",
    )
    assert (sizes, version) == ([2, 4], "7")
    assert reports.drain()
    assert [(n.where, n.skipped) for n in told] == [("team/poison", True)]
    assert "ValueError" in told[0].message
    assert count("test-list", "Pod", "Unreadable") == 1


def test_a_list_without_a_reporter_of_its_own_still_goes_on() -> None:
    sizes, _ = list_pages(one_page(obj("poison", size="²"), obj("b", size="4")), size_of)
    assert sizes == [4]


def test_each_version_of_a_malformed_object_is_logged_counted_and_told_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    told: list[Notice] = []
    reports = MalformedObjects("test-once", notify=told.append)
    with caplog.at_level(logging.WARNING, logger="tpfabric.malformed"):
        for _ in range(3):  # three relists of the same version
            assert reports.parse("Pod", size_of, obj("poison", size="²")) is SKIPPED
        assert reports.parse("Pod", size_of, obj("poison", "2", size="x")) is SKIPPED
    assert reports.drain()
    assert len(told) == 2
    assert count("test-once", "Pod", "Unreadable") == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "team/poison" in lines[0]
    assert "(object)" in lines[0]


def test_a_field_ignored_is_reported_with_the_field_and_the_object_is_used() -> None:
    told: list[Notice] = []
    reports = MalformedObjects("test-field", notify=told.append)
    node = {"metadata": {"name": "gpu-1", "uid": "u", "resourceVersion": "3"}}
    reports.field("Node", node, "topology.tpfabric.io/fabric-health", "nested too deep")
    assert reports.drain()
    assert told[0].words() == (
        "test-field ignored the field: topology.tpfabric.io/fabric-health: nested too deep"
    )
    assert count("test-field", "Node", "FieldIgnored") == 1


def test_a_reporter_whose_event_cannot_be_written_goes_on() -> None:
    def refuse(_: Notice) -> None:
        raise ConnectionError("API server away")

    reports = MalformedObjects("test-refused", notify=refuse)
    assert reports.parse("Pod", size_of, obj("poison", size="²")) is SKIPPED
    assert reports.drain()
    assert reports.parse("Pod", size_of, obj("fine", size="3")) == 3


def test_the_event_names_the_object_version_and_field_and_is_the_same_for_the_same_report() -> None:
    notice = Notice("tpfabric-scheduler", "Node", "", "gpu-1", "u1", "9", "f", "bad", False)
    event = event_for(notice)
    assert event["metadata"]["namespace"] == "default"  # a node's Events, as the kubelet's
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "gpu-1",
        "uid": "u1",
        "resourceVersion": "9",
    }
    assert (event["type"], event["reason"]) == ("Warning", "MalformedObject")
    assert event["message"] == "tpfabric-scheduler ignored the field: f: bad"
    assert event_for(notice)["metadata"]["name"] == event["metadata"]["name"]
