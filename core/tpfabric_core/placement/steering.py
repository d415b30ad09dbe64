"""Turn a gang plan into what a worker pod carries: narrowed node affinity, fewer gates.

The placer writes it into a gated worker when it releases it; the operator writes it into a worker
it creates once the gang's plan exists (the pod is then born released).

KEP-3838 (GA in 1.30): while a pod is gated its required node affinity may only be narrowed, and
gates may only be removed. Narrowing is done by AND-ing our expressions into every existing
node-selector term (or adding the only term when there is none), which can never widen the set of
feasible nodes. Pure: dicts in, dicts out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tpfabric_core.api import GANG_GATE
from tpfabric_core.api.placement import StoredPlacement, read_placement
from tpfabric_core.placement.topology import LevelSpec

__all__ = [
    "domain_expressions",
    "narrow_affinity",
    "plan_expressions",
    "remaining_gates",
    "widen_affinity",
]


def domain_expressions(level_key: str, domain: str) -> list[dict[str, Any]]:
    """Return the node-selector expressions that keep a pod inside one domain."""
    return [{"key": level_key, "operator": "In", "values": [domain]}]


def plan_expressions(
    placement: StoredPlacement | Mapping[str, Any], levels: tuple[LevelSpec, ...] = ()
) -> list[dict[str, Any]] | None:
    """Return node-selector expressions naming a plan's domain by every level's label.

    Empty for a cluster-wide plan (it narrows nothing). ``levels`` name the label of a plan an
    older placer persisted without ``domainLabels`` (its level's label only); None when that
    label is not known.
    """
    keys = {spec.name: spec.label_key for spec in levels}
    labels = read_placement(placement).domain_labels_or_level(keys.get)
    if labels is None:
        return None
    return [{"key": k, "operator": "In", "values": [str(v)]} for k, v in labels.items()]


def narrow_affinity(
    affinity: dict[str, Any] | None, expressions: list[dict[str, Any]]
) -> dict[str, Any]:
    """Return ``affinity`` with ``expressions`` AND-ed into its required node affinity."""
    result = copy.deepcopy(affinity) if affinity else {}
    node_affinity = result.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    narrowed = []
    for term in terms:
        existing = list(term.get("matchExpressions") or [])
        merged = existing + [e for e in expressions if e not in existing]
        narrowed.append({**term, "matchExpressions": merged})
    required["nodeSelectorTerms"] = narrowed
    return result


def _required_terms(affinity: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Return the node-selector terms of ``affinity``'s required node affinity."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def widen_affinity(
    affinity: dict[str, Any] | None,
    expressions: list[dict[str, Any]],
    template: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Return ``affinity`` without ``expressions`` in its required node affinity: what a pod
    made again from the same template asks, before its plan narrowed it (the inverse of
    :func:`narrow_affinity`). ``template``: the affinity the pod was made from, when known
    (a TensorParallelJob's): an expression its own term asked stays, the plan's equal to it
    having added nothing; unknown, it goes too, as the two cannot be told apart. None when
    nothing is left."""
    if not affinity:
        return None
    result = copy.deepcopy(affinity)
    node_affinity = result.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    own_terms = _required_terms(template)
    terms = []
    for index, term in enumerate(required.get("nodeSelectorTerms") or []):
        own = own_terms[index].get("matchExpressions") or [] if index < len(own_terms) else []
        kept = [e for e in term.get("matchExpressions") or [] if e not in expressions or e in own]
        rest = {k: v for k, v in term.items() if k != "matchExpressions"}
        if kept or any(rest.values()):
            terms.append({**rest, **({"matchExpressions": kept} if kept else {})})
    if terms:
        required["nodeSelectorTerms"] = terms
    elif "requiredDuringSchedulingIgnoredDuringExecution" in node_affinity:
        del node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    if "nodeAffinity" in result and not node_affinity:
        del result["nodeAffinity"]
    return result or None


def remaining_gates(gates: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Return the pod's scheduling gates without ours (order kept)."""
    return [g for g in gates or [] if g.get("name") != GANG_GATE]
