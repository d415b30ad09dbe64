"""The bind bound of a released gang, and the policy that drops and re-plans a plan.

A released gang must bind whole: ranks that do not bind within ``bind_timeout`` seconds of the
last release (``TAKEN_SECONDS`` when their planned node was taken by another pod), ranks whose
worker the API server refused to create, and ranks whose planned node left the cluster either
move to another node of the planned domain (``replan_ranks``) or drop the plan: ``Replanning`` is
written, then the gang's pods are deleted so its owner makes them again, gated, for a new plan.
A placer stopped between the two, or released pods of an earlier record of the same gang, leave
pods that nobody deletes; :meth:`BindWatch.unfinished_replans` finds them.

It never plans a gang whole: that is the placer's cycle.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.placement.replacement import replan_ranks
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import CollectiveCost, GangPlan, ReplacementOptions
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import CLUSTER_LEVEL, ClusterTopology
from tpfabric_scheduler.gang_request import refusals
from tpfabric_scheduler.placement_status import parse_rfc3339, replanning_placement, rfc3339
from tpfabric_scheduler.store import GPU_RESOURCE, ClusterStore, JobRecord, PodRecord
from tpfabric_scheduler.work import Cycle, PlacementWork, gang_request_of, plan_nodes
from tpfabric_scheduler.writes import NotLeadingError, WritePipeline

__all__ = [
    "BIND_TIMEOUT_SECONDS",
    "BindWatch",
    "create_refused",
    "first_wait",
    "fits_reserved",
    "gone_ranks",
    "missing_ranks",
    "released_at",
    "running",
]

log = logging.getLogger("tpfabric.scheduler.placer")

BIND_TIMEOUT_SECONDS = 120.0
TAKEN_SECONDS = 10.0
#: the pods of a dropped plan are deleted again at most this often while they remain
REPLAN_DELETE_RETRY_SECONDS = 10.0


@dataclass(eq=False)
class BindWatch:
    """Watches released gangs bind; moves ranks or drops plans that can no longer be honoured."""

    store: ClusterStore
    writes: WritePipeline
    clock: Callable[[], float]
    #: seconds released pods may take to bind (``TAKEN_SECONDS`` once their node is taken)
    bind_timeout: float = BIND_TIMEOUT_SECONDS
    #: job uid -> clock time this placer last deleted the pods of its dropped plan
    _replan_deleted: dict[str, float] = field(default_factory=dict, init=False)

    def unfinished_replans(self, now: float, store: ClusterStore | None = None) -> list[JobRecord]:
        """Return jobs whose plan was dropped (``Replanning``) while pods of that plan remain, and
        Gang records without a plan whose released pods never bound (:meth:`_orphans`).

        Dropping a plan writes ``Replanning`` first (so the operator charges no restart for the
        pods that go) and then deletes the job's pods; a placer stopped between the two leaves
        released pods that nobody deletes, the gang half-bound for ever. Pods the operator makes
        again are gated until a new plan, so a live released pod under ``Replanning`` is left
        from the dropped plan. A deletion is asked again after REPLAN_DELETE_RETRY_SECONDS at
        the earliest (the store shows a deleted pod only once the watch does).
        """
        store = store or self.store
        left = []
        replanning = set()
        for key, job in store.jobs.items():
            pods = store.workers.get(key, {}).values()
            state = store.placement_of(job).get("state")
            if state != "Replanning" and not (
                job.kind == GANG_KIND and state != "Planned" and self._orphans(pods)
            ):
                continue
            replanning.add(job.uid)
            if now - self._replan_deleted.get(job.uid, -math.inf) < REPLAN_DELETE_RETRY_SECONDS:
                continue
            if any(not p.gated and not p.terminal and not p.deleting for p in pods):
                left.append(job)
        for uid in [u for u in self._replan_deleted if u not in replanning]:
            del self._replan_deleted[uid]  # planned again, or gone
        return left

    def _orphans(self, pods: Iterable[PodRecord]) -> bool:
        """Return whether a gang without a plan has pods released under an earlier record of
        the same name (a Gang deleted and made again while its owner made its pods again): pods
        this placer did not release that never bound, or that are bound while others of the
        gang still wait gated. The extender refuses the unbound (no plan), nothing releases a
        pod twice, and a gang part running, part gated under no plan would wait for ever; its
        pods are deleted, and its owner makes them again gated. (A gang whose pods all run is
        not one: its placement is read back instead.)"""
        live = [p for p in pods if not p.terminal and not p.deleting]
        waiting = any(p.gated for p in live)
        return any(
            not p.gated and (p.node is None or waiting) and p.uid not in self.writes.released
            for p in live
        )

    def finish_replan(self, job: JobRecord, now: float) -> None:
        """Delete the pods a dropped plan left (see :meth:`unfinished_replans`)."""
        self._replan_deleted[job.uid] = now
        try:
            self.writes.delete_pods(self._pods_of(job))
        except NotLeadingError:
            return
        except ApiException as err:
            log.warning("job %s: deleting the dropped plan's pods failed: %s", job.key, err.reason)
            return
        log.warning(
            "job %s: released pods remained without a plan that holds them (a dropped plan, or "
            "an earlier record of the gang); deleted them so the gang is made again and planned "
            "afresh",
            job.key,
        )

    def bind_check_due(self, released: float, now: float) -> bool:
        """Return whether :meth:`watch_binding` looks at a gang released at ``released``."""
        return now - released >= min(self.bind_timeout, TAKEN_SECONDS)

    def watch_binding(self, item: PlacementWork, cycle: Cycle) -> bool:
        """Drop a plan whose released pods did not bind within the bound; True while it may.

        The bound is ``bind_timeout`` from the release; it shrinks to ``TAKEN_SECONDS`` for a
        rank whose planned node another pod has taken meanwhile (its reservation is overcommitted
        in the snapshot): such a worker waits only for a free node elsewhere in its domain.
        """
        released = released_at(item)
        now = self.clock()  # not the cycle's start: a busy cycle can run for seconds
        nodes = plan_nodes(item)
        if gone_ranks(nodes, cycle.snapshot.topology):
            return self._replace_gone(item, cycle, nodes)
        refused = create_refused(item.job)
        if released is None or not (refused or self.bind_check_due(released, now)):
            return True
        with self.store.lock:  # what is bound now, not at the start of the cycle
            members = list(self.store.workers.get(item.job.key, {}).values())
        missing = missing_ranks(item.job, item.placement, members)
        why = ""
        if missing and refused:
            why = (
                f"{item.job.key}: the API server refused worker pod(s) of the gang ({refused}), "
                f"rank(s) {missing} do not exist: the plan is dropped so that no part of the gang "
                "holds a node, and the gang is planned again once every worker exists"
            )
        elif missing and now - released >= self.bind_timeout:
            why = (
                f"{item.job.key}: no worker pod for rank(s) {missing} {now - released:.0f} s after "
                f"the plan and its last worker (bound {self.bind_timeout:g} s): the gang cannot "
                "start whole, so the plan is dropped and the gang is recreated and planned again"
            )
        if why:
            self.writes.metrics.plans_dropped.labels(
                "workers_refused" if refused else "workers_missing"
            ).inc()
            self._replan_whole(replace(item, members=members), why, now, keep_wait=True)
            return False
        unbound = sorted(
            p.worker_index
            for p in members
            if p.node is None
            and not p.gated
            and not p.terminal
            and not p.deleting
            and p.worker_index is not None
        )
        taken = [
            r for r in unbound if r < len(nodes) and not fits_reserved(cycle.snapshot, nodes[r])
        ]
        bound = min(self.bind_timeout, TAKEN_SECONDS) if taken else self.bind_timeout
        if not unbound or now - released < bound:
            return True
        # a rank whose node had room by our count and that kube-scheduler tried and could not
        # bind there was refused by one of its own filters (pod affinity, ports, volumes...)
        said = {p.worker_index: p.unschedulable for p in members if p.unschedulable}
        turned_down = [
            {"node": nodes[r], "reason": said[r][:300], "since": rfc3339(now)}
            for r in unbound
            if r not in taken and r < len(nodes) and r in said
        ]
        why = (
            f"{item.job.key}: worker(s) {unbound} not bound {now - released:.0f} s after release "
            f"(bound {bound:g} s"
            + (f"; planned node of rank(s) {taken} taken by other pods" if taken else "")
            + (
                f"; kube-scheduler refused node(s) {', '.join(r['node'] for r in turned_down)}: "
                f"{turned_down[0]['reason']}"
                if turned_down
                else ""
            )
            + "): the plan cannot be honoured; the gang is recreated and planned again"
            + (" without the refused node(s)" if turned_down else "")
        )
        self.writes.metrics.plans_dropped.labels("node_taken" if taken else "bind_timeout").inc()
        self._replan_whole(
            replace(item, members=members), why, now, keep_wait=True, refused=turned_down
        )
        return False

    def _replace_gone(self, item: PlacementWork, cycle: Cycle, nodes: list[str]) -> bool:
        """Move the ranks whose planned node left the cluster at once; True while the plan
        stands.

        A released worker whose node is gone only needs a new node in the plan (its affinity
        already holds it to the domain, and the extender steers it to its rank's node); when
        the domain has no room for it, the gang is dropped and planned again whole.
        """
        topology = cycle.snapshot.topology
        gone = gone_ranks(nodes, topology)
        moves = [
            p
            for p in item.members
            if p.worker_index in gone and p.node is None and not p.terminal and not p.deleting
        ]
        replaced = dict(item.placement.get("replacedRanks") or {})
        if self.replace_ranks(item, cycle, moves, nodes, replaced) is not None:
            return True
        if not running(item.members, topology):  # replace_ranks drops a plan that runs
            gone_names = sorted(nodes[r] for r in gone)
            self.writes.metrics.plans_dropped.labels("node_gone").inc()
            self._replan_whole(
                item,
                f"{item.job.key}: planned node(s) {gone_names} left the cluster and the planned "
                "domain has no room for their ranks: the gang is planned again",
                cycle.now,
                keep_wait=True,
            )
        return False

    def _replan_whole(
        self,
        item: PlacementWork,
        why: str,
        now: float,
        *,
        keep_wait: bool = False,
        refused: list[dict[str, str]] | None = None,
    ) -> None:
        """Drop the plan and delete the job's pods; the operator recreates them gated.

        ``keep_wait``: the plan never ran whole (its workers did not bind, its nodes were
        taken or left): the gang keeps waiting since it first waited (:func:`first_wait`).
        ``refused``: nodes kube-scheduler's own filters refused, recorded with the others so
        that the next plan leaves them out.
        """
        job = item.job
        since = first_wait(item) if keep_wait else None
        placement = replanning_placement(why, now, since)
        if refused:
            placement["refusedNodes"] = [*refusals(item.placement, now), *refused]
        self.writes.write(job, item.placement, placement, "GangReplanning")
        # the gang's deletes go out together (a 32-worker gang must not take 32 round trips in
        # a row to drop), each by uid
        self._replan_deleted[job.uid] = now
        self.writes.delete_pods(self._pods_of(job))
        log.warning("%s", why)

    def _pods_of(self, job: JobRecord) -> list[PodRecord]:
        """Return the pods of ``job`` the store holds now."""
        with self.store.lock:
            return list(self.store.workers.get(job.key, {}).values())

    def _give_back(self, cycle: Cycle, item: PlacementWork, ranks: set[int] | None = None) -> None:
        """Add the job's reservations (of ``ranks``, default all) back to the cycle's snapshot."""
        for reservation in item.reservations:
            if ranks is None or reservation.rank in ranks:
                _adjust(cycle.snapshot, reservation.node, reservation.demand, +1)

    def replace_ranks(
        self,
        item: PlacementWork,
        cycle: Cycle,
        moves: list[PodRecord],
        nodes: list[str],
        replaced: dict[str, str],
    ) -> dict[str, Any] | None:
        """Return the plan with new nodes for ``moves`` (persisted), or None when none fit.

        ``replan_ranks`` keeps every other rank where it is and looks only inside the planned
        domain. A rank whose planned node left the cluster (a node deleted under the gang) moves
        too, with or without a pod to move. When no node there can take a rank and part of the
        gang runs, the plan is dropped (``Replanning``); when nothing runs, the caller plans the
        gang afresh.
        """
        job = item.job
        placement = item.placement
        request = gang_request_of(item)
        topology = cycle.snapshot.topology
        moving = {p.worker_index for p in moves if p.worker_index is not None}
        gone = gone_ranks(nodes, topology)
        self._give_back(cycle, item, moving)
        plan = _plan_of(placement, nodes, request, topology)
        try:
            answer = replan_ranks(plan, sorted(moving | gone), cycle.snapshot, request)
        except ValueError as err:  # the planned domain itself left the cluster
            why = f"{job.key}: {err}; the gang is planned again"
            answer = ReplacementOptions(job.key, min(gone, default=0), "", "", "", (), why)
        if isinstance(answer, ReplacementOptions):
            if running(item.members, topology) or in_flight(item.members):
                self.writes.metrics.plans_dropped.labels("no_room").inc()
                self._replan_whole(item, answer.summary, cycle.now)
            else:
                self._give_back(cycle, item, None if not moving else _others(item, moving))
            return None
        demand = dict(request.other_resources)
        demand[GPU_RESOURCE] = request.gpus_per_worker
        uids = {p.worker_index: p.uid for p in moves}
        notes = []
        for rank in sorted(moving | gone):
            _adjust(cycle.snapshot, answer.nodes_by_rank[rank], demand, -1)
            if rank in uids:
                replaced[str(rank)] = uids[rank]
            notes.append(f"rank {rank} -> {answer.nodes_by_rank[rank]}")
        updated = {
            **placement,
            "nodes": list(answer.nodes_by_rank),
            "hops": answer.hops,
            "modelledAllreduceUs": round(answer.cost.best_s * 1e6, 3),
            "replacedRanks": replaced,
            "releasedAt": rfc3339(self.clock()),
            "message": f"{placement.get('message', '')}".split(" [replaced:")[0]
            + f" [replaced: {', '.join(notes)}]",
        }
        self.writes.write(job, placement, updated, "WorkerReplanned")
        return updated


def fits_reserved(snapshot: CapacitySnapshot, node: str) -> bool:
    """Return whether ``node`` still holds a rank's reservation (nothing overcommitted)."""
    i = snapshot.topology.index_of.get(node)
    if i is None or not snapshot.ready[i] or not snapshot.schedulable[i]:
        return False
    if snapshot.free_gpus[i] < 0:
        return False
    return all(amounts[i] >= 0 for amounts in snapshot.free_other.values())


def _adjust(snapshot: CapacitySnapshot, node: str, demand: Mapping[str, int], sign: int) -> None:
    """Add (``sign`` +1) or take (-1) one worker's ``demand`` on ``node`` in ``snapshot``."""
    i = snapshot.topology.index_of.get(node)
    if i is None:
        return
    for resource, amount in demand.items():
        if resource == GPU_RESOURCE:
            snapshot.free_gpus[i] += sign * amount
        elif resource in snapshot.free_other:
            snapshot.free_other[resource][i] += sign * amount


def released_at(item: PlacementWork) -> float | None:
    """Return when ``item``'s gang was (last) released, as clock time.

    A gang is planned once its first worker exists and the rest are released as the operator
    creates them, so the newest worker's creation counts as a release too.
    """
    released = parse_rfc3339(item.placement.get("releasedAt") or item.placement.get("plannedAt"))
    if released is None:
        return None
    # creationTimestamps are RFC 3339 in UTC: the newest sorts last as text
    newest = parse_rfc3339(max((p.created for p in item.members), default=""))
    return released if newest is None else max(released, newest)


def create_refused(job: JobRecord) -> str:
    """Return why the API server refused to create a worker of ``job`` (its ``WorkersCreated``
    condition, ``False`` with reason ``CreateFailed``: a quota, an admission policy), or ""."""
    for condition in job.raw_status.get("conditions") or []:
        if (
            isinstance(condition, dict)
            and condition.get("type") == "WorkersCreated"
            and condition.get("status") == "False"
            and condition.get("reason") == "CreateFailed"
        ):
            return str(condition.get("message") or "CreateFailed")
    return ""


def missing_ranks(
    job: JobRecord, placement: Mapping[str, Any], members: Iterable[PodRecord]
) -> list[int]:
    """Return the ranks of a planned gang that have no worker pod of the plan's own attempt yet.

    Only while the job is still in the attempt the plan was made for (``status.attempt``): after
    an incident the operator replaces workers after a backoff and their ranks are missing on
    purpose. A finished job, or a plan persisted without its attempt, has none.
    """
    plan_attempt = placement.get("attempt")
    if job.job is None or not isinstance(plan_attempt, int):
        return []
    status = job.raw_status
    if status.get("phase") in ("Succeeded", "Failed") or int(status.get("attempt") or 0) != (
        plan_attempt
    ):
        return []
    present = {p.worker_index for p in members}
    return [rank for rank in range(job.job.spec.workers) if rank not in present]


def first_wait(item: PlacementWork) -> float | None:
    """Return when ``item``'s gang first waited for its plan, while the gang is still in the
    attempt the plan was made for (None after a restart: a new attempt waits afresh)."""
    plan_attempt = item.placement.get("attempt")
    attempt = item.job.raw_status.get("attempt")
    if isinstance(plan_attempt, int) and int(attempt or 0) != plan_attempt:
        return None
    if any(
        p.attempt is not None and isinstance(plan_attempt, int) and p.attempt > plan_attempt
        for p in item.members
    ):
        return None
    return parse_rfc3339(item.placement.get("waitingSince"))


def gone_ranks(nodes: Iterable[str], topology: ClusterTopology) -> set[int]:
    """Return the ranks a plan puts on nodes that are no longer in the cluster."""
    return {rank for rank, node in enumerate(nodes) if node not in topology.index_of}


def running(members: Iterable[PodRecord], topology: ClusterTopology) -> list[PodRecord]:
    """Return the members bound to a node of the cluster, not finished and not going (a pod
    bound to a deleted node runs nowhere: pod GC removes it; a pod being deleted is the gang's
    past, e.g. a group its owner makes again)."""
    return [
        p
        for p in members
        if p.node is not None and not p.terminal and not p.deleting and p.node in topology.index_of
    ]


def in_flight(members: Iterable[PodRecord]) -> list[PodRecord]:
    """Return the members released and not bound yet: kube-scheduler may bind them any moment
    onto the nodes the plan gave them, so a fresh plan for the rest of the gang would split it
    (seen in a 50-group LWS rollout: a leader released onto its old node, its worker then
    planned with a fresh domain under another spine)."""
    return [
        p for p in members if not p.gated and p.node is None and not p.terminal and not p.deleting
    ]


def _others(item: PlacementWork, ranks: set[int]) -> set[int]:
    """Return the ranks of ``item``'s reservations that are not in ``ranks``."""
    return {r.rank for r in item.reservations} - ranks


def _plan_of(
    placement: dict[str, Any], nodes: list[str], request: GangRequest, topology: ClusterTopology
) -> GangPlan:
    """Return the persisted plan as the engine's GangPlan (for ``replan_ranks``)."""
    level = str(placement.get("level") or CLUSTER_LEVEL)
    labels = placement.get("domainLabels") or {}
    # the API server returns maps with sorted keys: the path follows the levels, top down
    path: tuple[str, ...] = ()
    for spec in topology.levels:
        if spec.label_key not in labels:
            break
        path += (str(labels[spec.label_key]),)
    if not path and level != CLUSTER_LEVEL and nodes and nodes[0] in topology.index_of:
        path = topology.domain_of(nodes[0], level).path
    return GangPlan(
        job=request.name,
        policy="tpfabric",
        level=level,
        domain=str(placement.get("domain") or CLUSTER_LEVEL),
        domain_path=path,
        domain_labels=tuple((str(k), str(v)) for k, v in labels.items()),
        nodes_by_rank=tuple(nodes),
        gpus_per_worker=request.gpus_per_worker,
        rdma_per_worker=request.rdma_per_worker,
        hops=int(placement.get("hops") or 0),
        leaves_spanned=0,
        cost=CollectiveCost(0.0, 0.0, 0),
    )
