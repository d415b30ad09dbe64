"""The bind bound: a released gang binds whole within a bound, or its plan is dropped.

Ranks that do not bind within ``bind_timeout`` seconds of the last release (``--bind-timeout-
seconds``, default :data:`BIND_TIMEOUT_SECONDS`; :data:`TAKEN_SECONDS` when their planned node
was taken by another pod meanwhile), ranks whose worker the API server refused to create
(``WorkersCreated`` ``False``, ``CreateFailed``: a quota) and ranks whose worker never appeared
drop the plan (:mod:`.drop`); ranks whose planned node left the cluster move first
(:mod:`.mend`). No gang stays half-bound longer. Pure: decides on the cycle's snapshot and the
gang's pods as the store holds them now, writes nothing.
"""

from __future__ import annotations

from dataclasses import replace

from tpfabric_core.api.placement import create_refused
from tpfabric_scheduler.facts import fits_reserved, gone_ranks, missing_ranks, released_at
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.policy.drop import drop_whole
from tpfabric_scheduler.policy.mend import replace_gone
from tpfabric_scheduler.policy.refusals import turned_down
from tpfabric_scheduler.work import Cycle, PlacementWork, PlacerMemory, Rules, plan_nodes

__all__ = ["BIND_TIMEOUT_SECONDS", "TAKEN_SECONDS", "check_due", "decide"]

BIND_TIMEOUT_SECONDS = 120.0
TAKEN_SECONDS = 10.0


def check_due(released: float, now: float, bind_timeout: float) -> bool:
    """Return whether :func:`decide` looks at a gang released at ``released``."""
    return now - released >= min(bind_timeout, TAKEN_SECONDS)


def decide(
    item: PlacementWork, cycle: Cycle, rules: Rules, memory: PlacerMemory
) -> PlacementIntent:
    """Return the drop of a plan whose released pods did not bind within the bound, or nothing
    while it may still bind (``placed``).

    The bound is ``bind_timeout`` from the release; it shrinks to ``TAKEN_SECONDS`` for a
    rank whose planned node another pod has taken meanwhile (its reservation is overcommitted
    in the snapshot): such a worker waits only for a free node elsewhere in its domain.
    """
    released = released_at(item)
    now = rules.clock()  # not the cycle's start: a busy cycle can run for seconds
    nodes = plan_nodes(item)
    if gone_ranks(nodes, cycle.snapshot.topology):
        return replace_gone(item, cycle, nodes, rules, memory)
    refused = create_refused(item.job.raw_status)
    if released is None or not (refused or check_due(released, now, rules.bind_timeout)):
        return PlacementIntent(item.job)
    members = cycle.pods_now(item.job.key)  # what is bound now, not at the start of the cycle
    missing = missing_ranks(item.job, item.placement, members)
    why = ""
    if missing and refused:
        why = (
            f"{item.job.key}: the API server refused worker pod(s) of the gang ({refused}), "
            f"rank(s) {missing} do not exist: the plan is dropped so that no part of the gang "
            "holds a node, and the gang is planned again once every worker exists"
        )
    elif missing and now - released >= rules.bind_timeout:
        why = (
            f"{item.job.key}: no worker pod for rank(s) {missing} {now - released:.0f} s after "
            f"the plan and its last worker (bound {rules.bind_timeout:g} s): the gang cannot "
            "start whole, so the plan is dropped and the gang is recreated and planned again"
        )
    if why:
        reason = "workers_refused" if refused else "workers_missing"
        return drop_whole(
            replace(item, members=members), why, now, memory, reason=reason, keep_wait=True
        )
    unbound = sorted(
        p.worker_index
        for p in members
        if p.node is None
        and not p.gated
        and not p.terminal
        and not p.deleting
        and p.worker_index is not None
    )
    taken = [r for r in unbound if r < len(nodes) and not fits_reserved(cycle.snapshot, nodes[r])]
    bound = min(rules.bind_timeout, TAKEN_SECONDS) if taken else rules.bind_timeout
    if not unbound or now - released < bound:
        return PlacementIntent(item.job)
    # a rank whose node had room by our count and that kube-scheduler tried and could not bind
    # there was refused by one of its own filters (pod affinity, ports, volumes...)
    refusals = turned_down(members, unbound, taken, nodes, now)
    why = (
        f"{item.job.key}: worker(s) {unbound} not bound {now - released:.0f} s after release "
        f"(bound {bound:g} s"
        + (f"; planned node of rank(s) {taken} taken by other pods" if taken else "")
        + (
            f"; kube-scheduler refused node(s) {', '.join(r.node for r in refusals)}: "
            f"{refusals[0].reason}"
            if refusals
            else ""
        )
        + "): the plan cannot be honoured; the gang is recreated and planned again"
        + (" without the refused node(s)" if refusals else "")
    )
    return drop_whole(
        replace(item, members=members),
        why,
        now,
        memory,
        reason="node_taken" if taken else "bind_timeout",
        keep_wait=True,
        refused=refusals,
    )
