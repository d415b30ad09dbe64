"""A JobSet gang's ranks: each child Job's first rank, and a pod's rank from its Job. Pure.

A JobSet's pod says which child Job it belongs to (``<replicatedJob>/<job-index>``) and its
completion index in that Job, but not how many pods the Jobs before it hold: that is the
JobSet's (:func:`jobset_layout`, each replicated Job's ``replicas`` x ``parallelism``, in the
order they are listed, as JobSet numbers ``job-global-index``). A pod's rank is its Job's first
rank plus its completion index (:func:`jobset_rank`). One rule for everyone who ranks a JobSet's
pods: the gang webhook at admission (from its watch of the JobSets) and the operator for pods
admitted before the webhook saw their JobSet (from the JobSet it reads).

JobSet also counts its own restarts on every pod (:func:`jobset_restarts`): a restart deletes
and makes again all its Jobs, so a pod with a higher count belongs to a later gang attempt
(:mod:`tpfabric_core.gang_attempts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpfabric_core.api.gang import MAX_GANG_WORKERS
from tpfabric_core.gangs import (
    JOBSET_EXCLUSIVE,
    JOBSET_JOB_INDEX,
    JOBSET_REPLICATED_JOB,
    JOBSET_RESTARTS,
    GangMember,
)
from tpfabric_core.input_limits import whole_number

__all__ = ["jobset_job", "jobset_layout", "jobset_rank", "jobset_restarts", "member_layout"]


def _count(value: object) -> int:
    """Return a replicated Job's ``replicas`` or ``parallelism`` (1 when unset, 0 or unreadable)."""
    return whole_number(value) or 1


def jobset_layout(jobset: Mapping[str, Any], replicated_job: str | None) -> dict[str, int] | None:
    """Return, for a JobSet's gang, each child Job's first rank by ``<replicatedJob>/<index>``
    and the gang's size under ``""`` (None when the JobSet does not say).

    The whole JobSet (``replicated_job`` None): its replicated Jobs in order, each Job's pods
    after the previous Job's. One child Job (per-Job placement): the Job's own pods.

    A gang of more than :data:`MAX_GANG_WORKERS` pods is given by its size alone (``{"": size}``,
    counted, not laid out): no Gang record holds it, and a ``replicas`` of 2^31 is never walked
    Job by Job.
    """
    jobs = [
        (
            str(replicated.get("name") or ""),
            _count(replicated.get("replicas")),
            _count((((replicated.get("template") or {}).get("spec")) or {}).get("parallelism")),
        )
        for replicated in (jobset.get("spec") or {}).get("replicatedJobs") or []
        if isinstance(replicated, Mapping)
    ]
    if replicated_job is not None:
        name, _, index_text = replicated_job.rpartition("/")
        index = whole_number(index_text)
        if index is None or str(index) != index_text:
            return None
        for job_name, replicas, parallelism in jobs:
            if job_name == name and index < replicas:
                return {"": parallelism, replicated_job: 0}
        return None
    if not jobs:
        return None
    size = sum(replicas * parallelism for _, replicas, parallelism in jobs)
    if size > MAX_GANG_WORKERS:
        return {"": size}
    layout: dict[str, int] = {}
    offset = 0
    for job_name, replicas, parallelism in jobs:
        for index in range(replicas):
            layout[f"{job_name}/{index}"] = offset
            offset += parallelism
    layout[""] = offset
    return layout


def jobset_job(labels: Mapping[str, str]) -> str:
    """Return the child Job a JobSet's pod belongs to: ``<replicatedJob>/<job-index>``."""
    return f"{labels.get(JOBSET_REPLICATED_JOB, '')}/{labels.get(JOBSET_JOB_INDEX, '')}"


def member_layout(
    member: GangMember, labels: Mapping[str, str], jobset: Mapping[str, Any]
) -> dict[str, int] | None:
    """Return the layout of the gang of a JobSet's pod (``member``, its ``labels``): the whole
    JobSet's, or its child Job's alone when the JobSet is placed Job by Job."""
    per_job = labels.get(JOBSET_EXCLUSIVE) or member.gang != member.owner
    return jobset_layout(jobset, jobset_job(labels) if per_job else None)


def jobset_rank(layout: Mapping[str, int], job: str, completion: int) -> int | None:
    """Return the rank of the pod of completion index ``completion`` in child Job ``job``
    (None: ``layout`` has no such Job)."""
    first = layout.get(job)
    return None if first is None else first + completion


def jobset_restarts(labels: Mapping[str, str]) -> int | None:
    """Return the JobSet restart a pod was made for (``jobset.sigs.k8s.io/restart-attempt``;
    None: not a JobSet's pod, or unreadable)."""
    return whole_number(labels.get(JOBSET_RESTARTS))
