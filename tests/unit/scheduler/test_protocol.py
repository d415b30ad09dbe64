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
    body = orjson.dumps(
        {"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {"name": "n1"}}]}}
    )
    assert parse_extender_args(body).node_names == ["n1"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"NodeNames": []}', "Pod is missing"),
        (b'{"Pod": {"metadata": {}}, "NodeNames": []}', "Pod.metadata.name"),
        (b'{"Pod": {"metadata": {"name": "p"}}}', "nodeCacheCapable"),
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
