"""Quantities, pod requests and node affinity with kube-scheduler's rules."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tpfabric_core.placement import (
    format_amount,
    node_matcher,
    parse_quantity,
    pod_requests,
    resource_amount,
)
from tpfabric_core.placement.pod_fit import (
    LabelSelectorError,
    container_gpus,
    label_selector,
    pod_gpus,
)

GI = 2**30


@pytest.mark.parametrize(
    ("text", "value", "millis"),
    [
        ("500m", 1, 500),
        ("2", 2, 2000),
        ("1.5", 2, 1500),
        ("2Gi", 2 * GI, 2 * GI * 1000),
        ("1G", 10**9, 10**12),
        ("1e3", 1000, 10**6),
        ("1E3", 1000, 10**6),
        ("100Ki", 102400, 102400000),
        (".5", 1, 500),
        ("0.1m", 1, 1),
        (4, 4, 4000),
        (0.25, 1, 250),
    ],
)
def test_quantities_parse_in_scheduler_units_rounding_up(
    text: str | int | float, value: int, millis: int
) -> None:
    assert parse_quantity(text) == value
    assert parse_quantity(text, cpu_millis=True) == millis


@pytest.mark.parametrize("junk", ["", "abc", "1.2.3", "5 Gi", "1e", "Gi", "1e999", True, None])
def test_junk_is_not_a_quantity(junk: object) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(junk)


def test_cpu_counts_in_millicores_everything_else_in_whole_units() -> None:
    assert resource_amount("cpu", "250m") == 250
    assert resource_amount("memory", "1Mi") == 2**20
    assert resource_amount("example.com/foo", "2") == 2


def test_amounts_read_like_kubectl() -> None:
    assert format_amount("cpu", 16000) == "16 cpu"
    assert format_amount("cpu", 500) == "500m cpu"
    assert format_amount("memory", 64 * GI) == "64Gi memory"
    assert format_amount("pods", 1) == "a pod slot"
    assert format_amount("example.com/foo", 2) == "2 example.com/foo"


def container(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> Any:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources}


def test_app_containers_add_up_and_count_one_pod() -> None:
    spec = {
        "containers": [
            container({"cpu": "1", "memory": "1Gi"}),
            container({"cpu": "500m", "nvidia.com/gpu": "8"}),
        ]
    }
    assert pod_requests(spec) == {"cpu": 1500, "memory": GI, "nvidia.com/gpu": 8, "pods": 1}


def test_a_request_defaults_to_its_limit_per_resource() -> None:
    spec = {"containers": [container({"cpu": "1"}, {"cpu": "2", "memory": "4Gi"})]}
    assert pod_requests(spec) == {"cpu": 1000, "memory": 4 * GI, "pods": 1}


def test_the_largest_init_container_wins_when_it_needs_more_than_the_app() -> None:
    spec = {
        "initContainers": [container({"cpu": "4"}), container({"cpu": "2", "memory": "8Gi"})],
        "containers": [container({"cpu": "1", "memory": "1Gi"})],
    }
    assert pod_requests(spec) == {"cpu": 4000, "memory": 8 * GI, "pods": 1}


def test_sidecars_add_to_the_app_and_to_every_init_container_after_them() -> None:
    sidecar = {**container({"cpu": "1"}), "restartPolicy": "Always"}
    spec = {
        "initContainers": [
            container({"cpu": "2"}),  # before the sidecar: 2
            sidecar,  # from here on: +1
            container({"cpu": "3"}),  # 3 + 1 = 4
        ],
        "containers": [container({"cpu": "2"})],  # 2 + 1 = 3
    }
    assert pod_requests(spec)["cpu"] == 4000


def test_sidecars_count_with_the_app_when_init_containers_are_small() -> None:
    sidecar = {**container({"cpu": "1"}), "restartPolicy": "Always"}
    spec = {
        "initContainers": [sidecar, container({"cpu": "1"})],
        "containers": [container({"cpu": "3"})],
    }
    assert pod_requests(spec)["cpu"] == 4000


def test_overhead_and_pod_level_requests_apply() -> None:
    spec = {
        "containers": [container({"cpu": "1", "memory": "1Gi"})],
        "resources": {"requests": {"cpu": "3"}},
        "overhead": {"cpu": "250m", "memory": "100Mi"},
    }
    assert pod_requests(spec) == {"cpu": 3250, "memory": GI + 100 * 2**20, "pods": 1}


def test_fractions_add_up_before_rounding() -> None:
    spec = {"containers": [container({"cpu": "0.5m"}), container({"cpu": "0.5m"})]}
    assert pod_requests(spec)["cpu"] == 1


def test_a_bad_quantity_in_a_pod_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="lots"):
        pod_requests({"containers": [container({"cpu": "lots"})]})


def test_a_pods_gpus_are_what_kube_scheduler_counts_and_junk_counts_none() -> None:
    """One reading of a pod's GPUs for the webhook, the operator, a release at birth and the
    rank map, the same as the placer's (``pod_requests``): two containers of 4 take a node's 8."""
    gpu = "nvidia.com/gpu"
    two = {"containers": [container({gpu: "4"}), container({gpu: "4"}), {"name": "side"}]}
    assert pod_gpus(two) == pod_requests(two)[gpu] == 8
    assert pod_gpus({"containers": [{"resources": {"requests": {gpu: "2"}}}]}) == 2
    assert pod_gpus({"containers": [container({gpu: "lots"})]}) == 0
    assert pod_gpus({}) == 0
    assert [container_gpus(c) for c in two["containers"]] == [4, 4, 0]
    assert container_gpus(container({gpu: "junk"})) == 0


NODE = {"kubernetes.io/hostname": "n1", "gpu": "h100", "generation": "9"}


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def test_without_constraints_every_node_matches() -> None:
    matcher = node_matcher({})
    assert not matcher.constrains
    assert matcher("n1", NODE)
    assert matcher.eligible({"n1": NODE}) is None


def test_every_node_selector_pair_must_match() -> None:
    assert node_matcher({"nodeSelector": {"gpu": "h100"}})("n1", NODE)
    assert not node_matcher({"nodeSelector": {"gpu": "h100", "zone": "a"}})("n1", NODE)


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        (expr("gpu", "In", "a100", "h100"), True),
        (expr("gpu", "In", "a100"), False),
        (expr("gpu", "NotIn", "a100"), True),
        (expr("absent", "NotIn", "x"), True),  # NotIn matches a node without the label
        (expr("gpu", "Exists"), True),
        (expr("absent", "Exists"), False),
        (expr("absent", "DoesNotExist"), True),
        (expr("generation", "Gt", "8"), True),
        (expr("generation", "Lt", "9"), False),
        (expr("gpu", "Gt", "1"), False),  # not an integer label: no match
        (expr("generation", "Gt", "x"), False),  # invalid term matches nothing
        (expr("gpu", "In"), False),  # In without values is invalid
        (expr("gpu", "Exists", "h100"), False),  # Exists with values is invalid
        (expr("gpu", "Near", "h100"), False),
        ({}, False),  # an empty term matches nothing
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}, False),
        (
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]},
            False,
        ),
    ],
)
def test_required_node_affinity_has_kubernetes_semantics(
    term: dict[str, Any], matches: bool
) -> None:
    assert node_matcher(affinity(term))("n1", NODE) is matches


def test_terms_are_ored_and_expressions_anded() -> None:
    both = {
        "matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["h100"]},
            {"key": "zone", "operator": "Exists"},
        ]
    }
    assert not node_matcher(affinity(both))("n1", NODE)
    assert node_matcher(affinity(both, expr("gpu", "Exists")))("n1", NODE)


def test_an_empty_term_list_matches_no_node() -> None:
    matcher = node_matcher(affinity())
    assert matcher.constrains
    assert not matcher("n1", NODE)


def test_the_selector_and_the_affinity_must_both_match() -> None:
    spec = {**affinity(expr("gpu", "Exists")), "nodeSelector": {"gpu": "a100"}}
    assert not node_matcher(spec)("n1", NODE)


def test_eligible_lists_the_matching_node_names() -> None:
    matcher = node_matcher({"nodeSelector": {"gpu": "h100"}})
    assert matcher.eligible({"n1": NODE, "n2": {"gpu": "a100"}}) == frozenset({"n1"})


def test_a_label_selector_matches_as_the_api_server_matches_it() -> None:
    selects = label_selector(
        {
            "matchLabels": {"team": "ml"},
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system"],
                },
                {"key": "frozen", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selects({"team": "ml", "kubernetes.io/metadata.name": "a"})
    assert not selects({"team": "ml", "kubernetes.io/metadata.name": "kube-system"})
    assert not selects({"team": "ml", "frozen": "yes"})
    assert not selects({"kubernetes.io/metadata.name": "a"})
    assert label_selector({})({"anything": "x"}), "an empty selector selects everything"
    assert label_selector(None)({})


@pytest.mark.parametrize(
    ("selector", "words"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "operator: 'Gt'"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "matchExpressions[0]: In needs"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "takes no"),
        ({"matchLabels": {"bad key!": "x"}}, "matchLabels: 'bad key!' is not a label key"),
        ({"matchLabels": []}, "matchLabels: not a mapping"),
        ({"labels": {}}, "labels: not a field of a label selector"),
        ("team=ml", "not a mapping"),
    ],
)
def test_a_label_selector_the_api_server_would_refuse_names_the_field_at_fault(
    selector: Any, words: str
) -> None:
    with pytest.raises(LabelSelectorError, match=re.escape(words)):
        label_selector(selector)
