"""What the placer writes in a job's ``status.placement``: plans, waits, re-plans, bad specs.

Every function returns a plain dict (the status as persisted). Writes happen only when the
meaning changes (:func:`changed`): a waiting job's message is stable while nothing changes and
its ``reasons`` are bounded to the best few domains plus a count, so a 5,000-node cluster costs
no more status than a small one. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.timestamps import parse_rfc3339, rfc3339

__all__ = [
    "MAX_REASONS",
    "changed",
    "invalid_placement",
    "parse_rfc3339",
    "planned_placement",
    "replanning_placement",
    "rfc3339",
    "waiting_placement",
]

MAX_REASONS = 5
"""Candidate domains listed while a job waits; the rest are counted in the message."""


def planned_placement(
    plan: GangPlan, now: float, attempt: int | None = None, waiting_since: float | None = None
) -> dict[str, Any]:
    """Return the placement of a fresh plan (released at once after it is persisted) for the
    worker pods of ``attempt`` (None: pods without the attempt label).

    ``waiting_since``: when the gang began waiting for this plan; kept, so that a plan dropped
    before the gang ever ran whole (its nodes taken, a worker that never bound) does not
    restart the gang's wait (head of line and ``maxWaitSeconds`` count from the first wait).
    """
    return {
        "state": "Planned",
        "message": plan.explain().splitlines()[0],
        "level": plan.level,
        "domain": plan.domain,
        "domainLabels": dict(plan.domain_labels),
        "nodes": list(plan.nodes_by_rank),
        "hops": plan.hops,
        "modelledAllreduceUs": round(plan.cost.best_s * 1e6, 3),
        "plannedAt": rfc3339(now),
        "releasedAt": rfc3339(now),
        "attempt": attempt,
        "waitingSince": rfc3339(waiting_since) if waiting_since is not None else None,
        "replacedRanks": None,
        "previousNodes": None,
        "healthyRoom": None,
        "reasons": [
            {"level": plan.level, "domain": plan.domain, "reason": r}
            for r in plan.reasons[: MAX_REASONS * 2]
        ],
    }


def _unplanned(state: str, message: str, **fields: Any) -> dict[str, Any]:
    """Return a placement without a plan: every plan field cleared (a merge patch removes them)."""
    return {
        "state": state,
        "message": message,
        "level": None,
        "domain": None,
        "domainLabels": None,
        "nodes": [],
        "hops": None,
        "modelledAllreduceUs": None,
        "plannedAt": None,
        "releasedAt": None,
        "attempt": None,
        "replacedRanks": None,
        "waitingSince": None,
        "near": None,
        "healthyRoom": None,
        "reasons": [],
        **fields,
    }


def partner_waiting_placement(message: str, waiting_since: float) -> dict[str, Any]:
    """Return the placement of a gang that waits for its ``near`` partner to be placed."""
    return _unplanned("Waiting", message, waitingSince=rfc3339(waiting_since), reasons=[])


def waiting_placement(result: Unschedulable, waiting_since: float) -> dict[str, Any]:
    """Return the placement of a gang that waits: the best few domains and why they fall short."""
    shown, more = result.top_candidates(MAX_REASONS)
    message = result.summary
    if more:
        message += f" ({len(shown)} of {len(shown) + more} {result.level} domains in reasons)"
    return _unplanned(
        "Waiting",
        message,
        waitingSince=rfc3339(waiting_since),
        reasons=[{"level": c.level, "domain": c.domain, "reason": str(c)} for c in shown],
    )


def replanning_placement(
    why: str, now: float, waiting_since: float | None = None
) -> dict[str, Any]:
    """Return the placement of a plan dropped because it can no longer be honoured; the gang
    waits since ``waiting_since`` (its first wait, when the plan never ran), else since now."""
    return _unplanned(
        "Replanning", why, waitingSince=rfc3339(now if waiting_since is None else waiting_since)
    )


def invalid_placement(message: str) -> dict[str, Any]:
    """Return the placement of a job the placer can never plan as written (e.g. unknown level)."""
    return _unplanned("Invalid", message)


_MEANING = (
    "state",
    "message",
    "reasons",
    "waitingSince",
    "nodes",
    "domainLabels",
    "refusedNodes",
    "healthyRoom",
)


def changed(previous: dict[str, Any], placement: dict[str, Any]) -> bool:
    """Return whether writing ``placement`` would change what the stored one means."""
    return any((previous.get(key) or None) != (placement.get(key) or None) for key in _MEANING)
