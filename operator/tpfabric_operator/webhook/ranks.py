"""A gang pod's rank as its gang webhook knows it at admission. Pure.

The placer plans a gang from its first pods only when each pod's rank is known at its admission
(the webhook then numbers its attempt, :mod:`tpfabric_core.gang_attempts`) and its owner makes
again whatever the placer deletes (a plan dropped at its bind bound). :func:`rank_at_admission`
says, per owner kind, which pods those are and their rank; every other gang pod waits gated for
its whole gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from tpfabric_core.api.gang import MAX_GANG_WORKERS
from tpfabric_core.gang_attempts import numbered_rank
from tpfabric_core.gangs import GangMember, completion_index
from tpfabric_core.jobset_ranks import jobset_job, jobset_rank, member_layout

__all__ = ["JobSetView", "rank_at_admission"]


class JobSetView(Protocol):
    """What the webhook reads of the JobSets (:class:`.gang_plans.GangPlans`, or a test's)."""

    def jobset(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return the JobSet's replicated Jobs (None: not seen)."""
        ...


def rank_at_admission(
    pod: Mapping[str, Any], member: GangMember, plans: JobSetView, max_size: int
) -> int | None:
    """Return the pod's rank in its gang as known at its admission, for a gang whose owner
    makes again whatever the placer deletes (a plan dropped at its bind bound), so that the
    placer may plan it from its first pods; None: the pod waits gated for its whole gang.

    - a LeaderWorkerSet group's pod: its worker index (its group's size is on it);
    - a JobSet's pod: its Job's first rank in the JobSet (:mod:`tpfabric_core.jobset_ranks`,
      from the webhook's watch of the JobSets) plus its completion index; None while the watch
      has not shown the JobSet, or for a gang of more than ``max_size`` pods (the operator
      ranks those pods as before, or says what is wrong);
    - any other gang's pod (a plain pod group's, a Workload API PodGroup's): its own rank
      (``tpfabric.io/rank``, an Indexed Job's completion index) when it has a controller, which
      makes it again (:func:`~tpfabric_core.gang_attempts.numbered_rank`); a bare pod deleted
      with a dropped plan would not come back.
    """
    if member.kind != "JobSet":
        return numbered_rank(member)
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    completion = completion_index(labels, meta.get("annotations") or {})
    jobset = plans.jobset(member.namespace, member.owner)
    if completion is None or jobset is None:
        return None
    layout = member_layout(member, labels, jobset)
    if layout is None or layout[""] > min(max_size, MAX_GANG_WORKERS):
        return None
    rank = jobset_rank(layout, jobset_job(labels), completion)
    return rank if rank is not None and rank < layout[""] else None
