"""The operator's index of degraded nodes: what it keeps of a node, and the ranks found on them."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tpfabric_core.fabric.link_publish import DETAIL_ANNOTATION, RailDetail
from tpfabric_operator.fabric_health import DegradedNode, on_degraded_nodes, straggler_message
from tpfabric_operator.node_health import degraded_nodes

REASON = "symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)"


def sick(name: str) -> DegradedNode:
    return DegradedNode(name, "uid", (REASON,), (RailDetail(3, "mlx5_3", "degraded"),), ())


def test_the_index_keeps_the_reasons_of_the_bad_rails_and_the_rail_labels() -> None:
    detail = {
        "state": "degraded",
        "rails": {
            "0": {"hca": "mlx5_0", "state": "ok"},
            "3": {"hca": "mlx5_3", "state": "degraded", "reasons": [REASON]},
        },
    }
    indexed = degraded_nodes(
        name="n1",
        uid="u1",
        labels={"topology.tpfabric.io/rail-3": "leaf1-rail3", "other": "x"},
        annotations={DETAIL_ANNOTATION: json.dumps(detail)},
        status={},
    )
    node = indexed["n1"]
    assert node.reasons == (REASON,)
    assert node.rails == (RailDetail(3, "mlx5_3", "degraded", (REASON,)),)
    assert node.node_labels == (("topology.tpfabric.io/rail-3", "leaf1-rail3"),)


def test_without_the_annotation_the_condition_message_is_the_reason() -> None:
    status: dict[str, Any] = {
        "conditions": [{"type": "FabricHealthy", "status": "False", "message": "rate 200 Gb/s"}]
    }
    indexed = degraded_nodes(name="n1", uid="u1", labels={}, annotations={}, status=status)
    assert indexed["n1"].reasons == ("rate 200 Gb/s",)


def test_a_degraded_node_whose_detail_cannot_be_read_is_indexed_and_reported_once_per_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Counted and logged by the operator; the Event on the node is the extender's alone."""
    nested = '{"rails": ' + "[" * 50_000 + "]" * 50_000 + "}"
    status: dict[str, Any] = {
        "conditions": [{"type": "FabricHealthy", "status": "False", "message": "rate 200 Gb/s"}]
    }
    labels = {"component": "tpfabric-operator", "kind": "Node", "reason": "FieldIgnored"}

    def count() -> float:
        return REGISTRY.get_sample_value("tpfabric_malformed_objects_total", labels) or 0.0

    before = count()
    with caplog.at_level(logging.WARNING, logger="tpfabric.malformed"):
        for version in ("7", "7", "8"):
            indexed = degraded_nodes(
                name="poisoned",
                uid="u9",
                labels={},
                annotations={DETAIL_ANNOTATION: nested},
                status=status,
                meta={"resourceVersion": version},
            )
            assert indexed["poisoned"].reasons == ("rate 200 Gb/s",)
    assert count() - before == 2, "once per version of the node"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "Node poisoned (version 7): tpfabric-operator ignored the field" in lines[0]
    assert DETAIL_ANNOTATION in lines[0]
    assert "65536" in lines[0]


def test_a_gang_pod_without_a_rank_is_named_with_a_question_mark_after_the_ranked() -> None:
    index = {"n7": [sick("n7")], "n8": [sick("n8")]}
    found = on_degraded_nodes([(None, "n8"), (1, "n7"), (0, None), (2, "n9")], index)
    assert [(r.rank, r.node) for r in found] == [(1, "n7"), (None, "n8")]
    assert straggler_message(found) == (
        f"straggler risk: rank 1 on node n7: {REASON} | rank ? on node n8: {REASON}"
    )


def test_an_index_that_changes_under_the_read_finds_nothing_this_time() -> None:
    class Changing(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            raise RuntimeError("dictionary changed size during iteration")

    assert on_degraded_nodes([(0, "n1")], Changing()) == []
