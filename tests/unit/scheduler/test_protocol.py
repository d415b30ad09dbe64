from __future__ import annotations

import orjson
import pytest

from tpfabric_scheduler.protocol import (
    BadRequestError,
    FilterResult,
    encode_filter_result,
    encode_priorities,
    parse_extender_args,
)


def test_parses_a_node_cache_capable_request() -> None:
    body = orjson.dumps(
        {
            "Pod": {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}}},
            "Nodes": None,
            "NodeNames": ["n1", "n2"],
        }
    )
    args = parse_extender_args(body)
    assert (args.pod.namespace, args.pod.name, args.pod.labels) == ("ns", "p", {"a": "b"})
    assert args.node_names == ["n1", "n2"]


def test_accepts_whole_node_objects_from_a_scheduler_without_node_cache() -> None:
    node = {"metadata": {"name": "n1", "labels": {"a": "b"}}, "status": {"capacity": {}}}
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [node]}})
    args = parse_extender_args(body)
    assert args.node_names == ["n1"]
    assert args.nodes == [node]


def test_a_node_cache_capable_request_keeps_no_node_objects() -> None:
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": ["n"]})
    assert parse_extender_args(body).nodes is None


def test_the_filter_answer_to_node_objects_carries_the_kept_objects_unchanged() -> None:
    nodes = [
        {"metadata": {"name": "n1"}, "spec": {"taints": []}},
        {"metadata": {"name": "n2"}},
        {"metadata": {"name": "n3"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
    ]
    result = FilterResult(["n3", "n1"], failed_unresolvable={"n2": "why"})
    encoded = orjson.loads(encode_filter_result(result, nodes))
    assert encoded["Nodes"] == {"items": [nodes[0], nodes[2]]}  # request order
    assert encoded["NodeNames"] is None
    assert encoded["FailedAndUnresolvableNodes"] == {"n2": "why"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"NodeNames": []}', "Pod is missing"),
        (b'{"Pod": {"metadata": {}}, "NodeNames": []}', "Pod.metadata.name"),
        (b'{"Pod": {"metadata": {"name": "p"}}}', "nodeCacheCapable"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [1]}}', "Node objects"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}', "metadata.name"),
        (
            b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}}',
            "list of node names",
        ),
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}', "list of node names"),
        (b'{"Pod": {"metadata": {"name": "p", "labels": {"a": 1}}}, "NodeNames": []}', "labels"),
    ],
)
def test_malformed_requests_say_what_is_wrong(body: bytes, reason: str) -> None:
    with pytest.raises(BadRequestError, match=reason):
        parse_extender_args(body)


def test_filter_results_use_the_go_field_names() -> None:
    encoded = orjson.loads(
        encode_filter_result(FilterResult(["a"], failed={"b": "why"}, failed_unresolvable={}))
    )
    assert encoded == {
        "Nodes": None,
        "NodeNames": ["a"],
        "FailedNodes": {"b": "why"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_priorities_are_host_score_pairs() -> None:
    assert orjson.loads(encode_priorities([("a", 10), ("b", 0)])) == [
        {"Host": "a", "Score": 10},
        {"Host": "b", "Score": 0},
    ]
