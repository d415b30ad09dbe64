"""Turn a gang plan into what a gated worker pod carries: narrowed node affinity, fewer gates.

KEP-3838 (GA in 1.30): while a pod is gated its required node affinity may only be narrowed, and
gates may only be removed. Narrowing is done by AND-ing our expressions into every existing
node-selector term (or adding the only term when there is none), which can never widen the set of
feasible nodes. Pure: dicts in, dicts out.
"""

from __future__ import annotations

import copy
from typing import Any

from tpfabric_scheduler.store import GANG_GATE

__all__ = ["domain_expressions", "narrow_affinity", "remaining_gates"]


def domain_expressions(level_key: str, domain: str) -> list[dict[str, Any]]:
    """Return the node-selector expressions that keep a pod inside one domain."""
    return [{"key": level_key, "operator": "In", "values": [domain]}]


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


def remaining_gates(gates: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Return the pod's scheduling gates without ours (order kept)."""
    return [g for g in gates or [] if g.get("name") != GANG_GATE]
