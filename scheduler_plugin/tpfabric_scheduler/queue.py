"""Which gangs a placer cycle acts on, and in what order.

A gang is due when it has gated or unbound workers, or a planned rank whose worker does not
exist yet. It waits out of the queue while the pods of a dropped plan are still going; until
every worker exists when the API server refused one of them (a quota) or its pods carry no
attempt label (a bare pod group's or one ranked by creation, which nobody numbers, or a JobSet's
admitted before the gang webhook saw its JobSet: a worker created after an early plan would look
like a replacement; the operator numbers a TensorParallelJob's pods, the gang webhook a
LeaderWorkerSet group's, a JobSet's and a pod group's whose pods have a controller and their own
rank, :func:`tpfabric_operator.webhook.ranks.rank_at_admission`); until the operator has written
a Gang's ranks; and while a
Gang record says what is wrong with it (``problems``). A Gang record of a namespace that has not
opted in is not placed. Gangs go by pod priority, then arrival (``creationTimestamp``); in a
cycle, released gangs first, so that their bind bound is checked every cycle, never behind
planning.

Read from one view of the store; nothing here writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container

from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.api.placement import create_refused, gang_problems
from tpfabric_core.gangs import not_opted_in
from tpfabric_core.placement.queue_order import queue_order
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_scheduler.capacity import Reservation
from tpfabric_scheduler.facts import attempt_unknown, gone_ranks, missing_ranks, released_at
from tpfabric_scheduler.gang_request import EligibleNodes
from tpfabric_scheduler.policy.bind_bound import check_due
from tpfabric_scheduler.policy.near import near_target
from tpfabric_scheduler.policy.refusals import refused_nodes
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.policy.waiting import still_waiting
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord
from tpfabric_scheduler.work import PlacementWork, PlacerMemory, Rules, plan_nodes

__all__ = ["Queue", "QueueKey", "cycle_order", "needs_snapshot", "queue_key"]

log = logging.getLogger("tpfabric.scheduler.placer")

#: Gang records told that their namespace has not opted in are remembered up to this many
_NOT_OPTED_IN_MEMORY = 10_000


class Queue:
    """The gangs due, from one view of the store; it keeps what it caches between cycles (the
    nodes each job may use, the records already said to be in a namespace not opted in).
    ``refused``: called once per record first found in a namespace not opted in (a metric)."""

    def __init__(self, refused: Callable[[], None] | None = None) -> None:
        self.eligible = EligibleNodes()
        self._not_opted_in: set[str] = set()
        self._refused = refused
        #: job key -> (its record, its pods' map, its fresh plan) when it was last settled: the
        #: store replaces each of them on any change, so the same three mean settled still
        self._settled: dict[str, tuple[object, object, object]] = {}
        #: job key -> the work item of a gang not planned yet, kept while what it is read from
        #: stands (:class:`_Kept`): a deep queue's waiting gangs are not built again each cycle
        self._waiting: dict[str, _Kept] = {}

    def pending(
        self,
        store: ClusterStore,
        reservations: dict[str, list[Reservation]],
        topology: ClusterTopology,
        released: Container[str],
        now: float,
    ) -> list[PlacementWork]:
        """Return the jobs with gated or unbound workers, by priority then arrival
        (``released``: the uids of the pods this placer released, which the store may still
        show gated)."""
        work = []
        for key, job in store.jobs.items():
            if job.job is None or job.job.spec.suspend:
                continue
            if job.kind == GANG_KIND and not store.gangs_allowed_in(job.namespace):
                self._note_not_opted_in(job)
                continue  # pods labelled by hand where no one opted in: not placed
            pods = store.workers.get(key)
            inputs = (job, pods, store.fresh_plans.get(job.uid))
            if _same(self._settled.get(key), inputs):
                continue  # settled, and nothing it is read from changed since
            kept = self._waiting.get(key)
            if kept is not None and kept.stands(inputs, store, reservations, released):
                work.append(kept.work)
                continue  # not planned, and nothing its work item is read from changed since
            self._waiting.pop(key, None)
            members = sorted((pods or {}).values(), key=lambda p: p.name)
            live = [p for p in members if not p.terminal and not p.deleting]
            gated = [p for p in live if p.gated and p.uid not in released]
            unbound = [p for p in live if p.node is None and not p.gated]
            placement = store.placement_of(job)
            planned = placement.planned
            if not members:
                continue
            if (
                not gated
                and not unbound
                and not (planned and missing_ranks(job, placement, members))
            ):
                # settled (the missing-rank check only for gangs with nothing else due); with
                # no gated pod at all, what this placer released does not matter either
                if not any(p.gated for p in live):
                    self._settled[key] = inputs
                continue
            self._settled.pop(key, None)
            if not planned and len(gated) < len([p for p in live if p.uid not in released]):
                continue  # pods of a dropped plan are still going
            if (
                not planned
                and len(gated) < job.job.spec.workers
                and (create_refused(job.raw_status) or attempt_unknown(gated))
            ):
                # plan once all workers exist: the API server refuses some (a quota), or the
                # pods lack the attempt label (a bare or creation-ranked pod group's, a JobSet's
                # the webhook could not rank, or made by a version older than the label), so a
                # worker created after an early plan would look like a replacement
                continue
            if job.kind == GANG_KIND and any(p.worker_index is None for p in live):
                continue  # the operator writes a Gang's ranks once every pod of it exists
            if job.kind == GANG_KIND and not planned and gang_problems(job.raw_status):
                continue  # its record says what is wrong (two owners, one rank twice...)
            worker = (gated or live or members)[0]
            item = PlacementWork(
                job=job,
                members=members,
                gated=gated,
                placement=placement,
                reservations=reservations.get(key, []),
                eligible=self.eligible.of(store, job, worker),
                priority=max((p.priority for p in members), default=0),
                refused=refused_nodes(store, placement, worker, now),
                near=near_target(store, job, topology),
            )
            work.append(item)
            self._keep(
                item,
                inputs,
                store=store,
                worker=worker,
                reservations=reservations,
                released=released,
            )
        work.sort(key=queue_key)
        self._trim(store)
        return work

    def _keep(
        self,
        item: PlacementWork,
        inputs: tuple[object, object, object],
        *,
        store: ClusterStore,
        worker: PodRecord,
        reservations: Container[str],
        released: Container[str],
    ) -> None:
        """Keep ``item`` for the next cycles if it reads nothing but ``inputs`` and the nodes
        it may use (:func:`_keepable`)."""
        if _keepable(item, worker, reservations, released):
            self._waiting[item.job.key] = _Kept(inputs, store.topology_generation, item)

    def _trim(self, store: ClusterStore) -> None:
        """Forget what is kept of jobs gone, once it outgrows the store's jobs."""
        if len(self._settled) > 2 * len(store.jobs) + 1024:
            self._settled = {k: v for k, v in self._settled.items() if k in store.jobs}
        if len(self._waiting) > 2 * len(store.jobs) + 1024:
            self._waiting = {k: v for k, v in self._waiting.items() if k in store.jobs}

    def _note_not_opted_in(self, job: JobRecord) -> None:
        """Log once per record that its namespace has not opted in (the operator tells its
        pods)."""
        if job.uid in self._not_opted_in:
            return
        if len(self._not_opted_in) > _NOT_OPTED_IN_MEMORY:
            self._not_opted_in.clear()
        self._not_opted_in.add(job.uid)
        if self._refused is not None:
            self._refused()
        log.warning("gang %s: not planned: %s", job.key, not_opted_in(job.namespace))


#: a gang's place in the queue: (-priority, creationTimestamp, key)
QueueKey = tuple[int, str, str]


def queue_key(item: PlacementWork) -> QueueKey:
    """Return ``item``'s place in the queue: by priority, then arrival (core's
    :func:`~tpfabric_core.placement.queue_order.queue_order`, which ``tpfabric queue`` shows)."""
    return queue_order(item.priority, item.job.created, item.job.key)


def _same(
    kept: tuple[object, object, object] | None, inputs: tuple[object, object, object]
) -> bool:
    return (
        kept is not None and kept[0] is inputs[0] and kept[1] is inputs[1] and kept[2] is inputs[2]
    )


class _Kept:
    """A gang's work item not planned yet, with what it was read from: its record, its pods'
    map and its fresh plan (replaced by the store on any change, so compared by identity) and the
    store's topology generation (the nodes it may use). Only items that read nothing else are
    kept (:func:`_keepable`)."""

    __slots__ = ("generation", "inputs", "uids", "work")

    def __init__(
        self, inputs: tuple[object, object, object], generation: int, work: PlacementWork
    ) -> None:
        self.inputs = inputs
        self.generation = generation
        self.work = work
        self.uids = frozenset(p.uid for p in work.members)

    def stands(
        self,
        inputs: tuple[object, object, object],
        store: ClusterStore,
        reservations: Container[str],
        released: Container[str],
    ) -> bool:
        """Return whether building the work item from ``store`` would give the same one."""
        return (
            _same(self.inputs, inputs)
            and self.generation == store.topology_generation
            and self.work.job.key not in reservations
            and not any(uid in released for uid in self.uids)
        )


def _keepable(
    item: PlacementWork,
    worker: PodRecord,
    reservations: Container[str],
    released: Container[str],
) -> bool:
    """Return whether ``item`` reads nothing but its job's record, pods and fresh plan and the
    nodes it may use: not planned, no reservation, no pod this placer released, no host port
    (the nodes refused read every node's ports), no refusal (they expire with time) and no
    partner (where another gang runs)."""
    return (
        not item.planned
        and item.job.key not in reservations
        and not worker.host_ports
        and not item.placement.refused_nodes
        and item.near is None
        and not any(p.uid in released for p in item.members)
    )


def cycle_order(
    work: list[PlacementWork],
    *,
    resume: QueueKey | None = None,
    holding: Container[str] = frozenset(),
) -> list[PlacementWork]:
    """Return ``work`` (in queue order) in the order a cycle acts on it: released gangs first
    (their bind bound is checked every cycle, never behind planning), then priority and arrival.

    ``resume``: where the last cycle stopped at its time bound; the rest starts there and wraps
    around (round-robin), after the gangs at the head of the line (``holding``: job uids whose
    last attempt held a domain or stood at the head of the line), which keep holding their
    domains before any younger gang plans.
    """
    watching = [w for w in work if w.planned and not w.gated]
    rest = [w for w in work if not (w.planned and not w.gated)]
    if resume is None:
        return watching + rest
    first = [w for w in rest if w.job.uid in holding]
    others = [w for w in rest if w.job.uid not in holding]
    cut = next((k for k, w in enumerate(others) if queue_key(w) >= resume), len(others))
    return watching + first + others[cut:] + others[:cut]


def needs_snapshot(
    item: PlacementWork,
    now: float,
    freed: Freed,
    topology: ClusterTopology,
    *,
    rules: Rules,
    memory: PlacerMemory,
) -> bool:
    """Return whether acting on ``item`` at ``now`` may read the cycle's snapshot (a cycle that
    only watches released gangs bind and meets waiting gangs whose inputs did not change
    builds none)."""
    if not item.planned:
        return not still_waiting(item, now, freed, memory, rules)
    if item.gated:
        return True  # checking a plan before releasing
    if gone_ranks(plan_nodes(item), topology):
        return True  # a planned node left the cluster: re-planned at once
    released = released_at(item)  # without a time, the bind bound never looks
    if (
        released is not None
        and create_refused(item.job.raw_status)
        and missing_ranks(item.job, item.placement, item.members)
    ):
        return True  # a refused worker drops a plan made before the gang was whole
    return released is not None and check_due(released, now, rules.bind_timeout)
