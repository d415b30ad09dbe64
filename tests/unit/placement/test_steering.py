from __future__ import annotations

from tpfabric_core.placement.steering import (
    domain_expressions,
    narrow_affinity,
    remaining_gates,
    widen_affinity,
)

LEAF = domain_expressions("topology.tpfabric.io/leaf", "leaf-a")


def test_a_pod_without_affinity_gets_one_term() -> None:
    got = narrow_affinity(None, LEAF)
    terms = got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchExpressions": LEAF}]}


def test_every_existing_term_is_narrowed_and_other_affinity_is_kept() -> None:
    mine = {"key": "gpu.product", "operator": "In", "values": ["H100"]}
    other = {"key": "zone", "operator": "In", "values": ["z1"]}
    affinity = {
        "podAntiAffinity": {"x": 1},
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [mine]}, {"matchExpressions": [other]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
        },
    }
    got = narrow_affinity(affinity, LEAF)
    terms = got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [mine, *LEAF]},
        {"matchExpressions": [other, *LEAF]},
    ]
    assert got["podAntiAffinity"] == {"x": 1}
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"] == [mine]  # the input is not modified


def test_narrowing_twice_changes_nothing_more() -> None:
    once = narrow_affinity(None, LEAF)
    assert narrow_affinity(once, LEAF) == once


def test_only_our_gate_is_removed() -> None:
    gates = [{"name": "other.io/quota"}, {"name": "tpfabric.io/gang"}]
    assert remaining_gates(gates) == [{"name": "other.io/quota"}]


def test_widening_undoes_the_narrowing_and_keeps_the_pods_own_terms() -> None:
    assert widen_affinity(narrow_affinity(None, LEAF), LEAF) is None
    mine = {"key": "gpu.product", "operator": "In", "values": ["H100"]}
    fields = {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
    affinity = {
        "podAntiAffinity": {"x": 1},
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [mine]},
                    {"matchFields": [fields]},
                ]
            },
        },
    }
    assert widen_affinity(narrow_affinity(affinity, LEAF), LEAF) == affinity
    assert widen_affinity({"podAntiAffinity": {"x": 1}}, LEAF) == {"podAntiAffinity": {"x": 1}}


def test_widening_keeps_what_the_template_itself_asked() -> None:
    """A template pinned to the plan's own leaf: narrowing added nothing, so widening with the
    template known takes nothing away (without it, the two cannot be told apart)."""
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(LEAF)}]
            }
        }
    }
    narrowed = narrow_affinity(pinned, LEAF)
    assert narrowed == pinned
    assert widen_affinity(narrowed, LEAF, pinned) == pinned
    assert widen_affinity(narrowed, LEAF) is None
    spine = domain_expressions("topology.tpfabric.io/spine", "spine-1")
    both = narrow_affinity(pinned, [*spine, *LEAF])
    assert widen_affinity(both, [*spine, *LEAF], pinned) == pinned
