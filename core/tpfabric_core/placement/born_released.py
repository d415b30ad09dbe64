"""A pod created onto its gang's plan: released at birth, one write instead of two.

The placer releases a gated pod of a planned gang with one patch: its required node affinity
narrowed to the planned domain, our gate removed, its plan level and its rails on its planned
node told in annotations. A pod created after the plan, for the attempt the plan was made for,
can be created that way at once (a TensorParallelJob's later workers by the operator, a gang of
another controller's later pods by the gang webhook): :func:`release_onto_plan`. Which pods
qualify is the caller's rule; this module only writes the release into a manifest. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tpfabric_core.api.placement import StoredPlacement
from tpfabric_core.placement.pod_fit import pod_gpus
from tpfabric_core.placement.steering import narrow_affinity, plan_expressions, remaining_gates
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_core.rail_ports import PLAN_LEVEL_ANNOTATION, RAILS_ANNOTATION, pod_rails
from tpfabric_core.rdma_default import NodeOffer

__all__ = ["release_onto_plan"]


def release_onto_plan(
    manifest: Mapping[str, Any],
    plan: StoredPlacement,
    rank: int,
    nodes: Mapping[str, NodeOffer] | None = None,
) -> dict[str, Any] | None:
    """Return a copy of ``manifest`` released onto ``plan`` as rank ``rank``, or None when the
    plan does not cover that rank (not planned, too few nodes, a plan without its domain's
    labels).

    The pod's required node affinity is narrowed to the planned domain (a cluster-wide plan
    narrows nothing), our gate removed (other gates stay), and it is told its plan level and
    its rails on its planned node (from ``nodes``, what every node offers). The extender still
    steers it to its rank's planned node.
    """
    if not plan.planned or rank < 0 or rank >= len(plan.nodes):
        return None
    expressions = plan_expressions(plan)
    if expressions is None:  # a plan without its domain's labels (an older placer)
        return None
    released = copy.deepcopy(dict(manifest))
    spec = released["spec"]
    if expressions:
        spec["affinity"] = narrow_affinity(spec.get("affinity"), expressions)
    notes = released["metadata"].setdefault("annotations", {})
    if level := plan.plan_level:
        notes[PLAN_LEVEL_ANNOTATION] = level
    offer = (nodes or {}).get(plan.nodes[rank])
    if offer is not None:
        rails = pod_rails(offer.rails, pod_gpus(spec), offer.resources.get(GPU_RESOURCE, 0))
        if rails is not None:
            notes[RAILS_ANNOTATION] = rails
    gates = remaining_gates(spec.get("schedulingGates"))
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    return released
