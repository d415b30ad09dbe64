"""The gang placer: one plan for a whole job on one consistent snapshot, persisted, then released.

Each cycle (run by the lease holder only):

1. under the store lock, build one capacity snapshot: every resource's allocatable amount minus
   bound pods minus the reservations of planned ranks that are not bound yet, and read the
   planned gangs' rings, whose load on every uplink is summed after the lock (``capacity.py``);
2. outside the lock, walk the jobs in order — priority, then arrival (``creationTimestamp``) —
   and for each:

   - a gated gang without a plan, as soon as its first worker exists: ask the engine for a plan
     of the whole gang (every rank, from the job's spec) on the snapshot (the plan's demands are
     then taken off the snapshot, so later gangs of the cycle see them), persist it in
     ``status.placement`` with the attempt of its pods, then release each pod: narrow its
     required node affinity to the planned domain (every level's label, top down) and drop our
     gate, in one patch per pod. Planning does not wait for the last worker: the plan reserves
     every rank's node, and the workers the operator creates later are released onto it as they
     come (or are created released by the operator, which waits for the plan of a gang larger
     than one batch of its creations), so a big gang's binds overlap its creation as plain
     pods' binds do.
     Once the API server refuses a worker (``WorkersCreated`` ``False``, ``CreateFailed``: a
     quota), a plan made early is dropped at once and the gang is planned only when whole, so
     no part of a gang that cannot be created holds a node. A gang whose pods lack the attempt
     label (made by another controller) is planned only when whole too: without it a worker
     created after the plan looks like a replacement;
   - a planned job with gated pods (the rest of its attempt, a restart mid-release, a resume, a
     replacement worker): check the plan again before releasing; a replacement worker (a pod of
     a later attempt) goes through ``replan_ranks`` (a new node in the planned domain, never the
     node it failed on); a plan that can no longer be honoured is dropped and planned afresh;
   - a planned job whose released pods have not bound, or whose other workers of the plan's
     attempt were never created (a quota), within ``bind_timeout`` seconds of its last release
     or worker: the plan is dropped (``state: Replanning``) and the job's pods are deleted, so
     the operator recreates them gated and the whole gang is planned again. No gang stays
     half-bound longer.

A gang that has waited longer than ``head_of_line_seconds`` holds the best domain it would take
for the rest of the cycle: younger or lower-priority gangs cannot fill it, so small gangs cannot
starve a big one forever. Waiting jobs are re-planned only when capacity changed
(``store.freed_generation``: a pod binding or a new plan never lets a waiting gang fit), their own
pods changed, or their next topology level opens; statuses are written only when
their meaning changes. The placer owns ``status.placement`` and nothing else of the job.

The policies live beside the cycle, one a module: ``writes.py`` persists a plan and then releases
its gang, ``bind_watch.py`` bounds a released gang's binding and drops or mends plans that can no
longer be honoured, ``plan_inputs.py`` reads the uplink load and the typical gang the engine
weighs; ``work.py`` holds what a cycle acts on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from kubernetes.client.rest import ApiException

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.errors import InputError
from tpfabric_core.gangs import not_opted_in
from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig
from tpfabric_core.placement.planner import describe_nodes, plan_gang
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.steering import plan_expressions, widen_affinity
from tpfabric_core.placement.topology import DEFAULT_LEVELS, ClusterTopology, LevelSpec
from tpfabric_scheduler import healthy_room
from tpfabric_scheduler.bind_watch import (
    BIND_TIMEOUT_SECONDS,
    BindWatch,
    create_refused,
    first_wait,
    fits_reserved,
    gone_ranks,
    in_flight,
    missing_ranks,
    released_at,
    running,
)
from tpfabric_scheduler.capacity import (
    Reservation,
    build_snapshot,
    planned_rings,
    reservations_by_job,
)
from tpfabric_scheduler.gang_request import eligible_nodes, gang_request, refused_nodes
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.near import PREFERRED_WAIT_SECONDS, NearTarget, near_target
from tpfabric_scheduler.placement_status import (
    changed,
    invalid_placement,
    parse_rfc3339,
    partner_waiting_placement,
    planned_placement,
    rfc3339,
    waiting_placement,
)
from tpfabric_scheduler.plan_inputs import RingFlows, typical_gang_gpus
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord
from tpfabric_scheduler.work import (
    Cycle,
    Hold,
    PlacementWork,
    gang_request_of,
    plan_nodes,
    previous_nodes,
)
from tpfabric_scheduler.writes import NotLeadingError, WritePipeline

#: BIND_TIMEOUT_SECONDS, NotLeadingError, PlacementWork and typical_gang_gpus are re-exported:
#: the process's flags, the tests and the benchmarks import them from here
__all__ = [
    "BIND_TIMEOUT_SECONDS",
    "GangPlacer",
    "NotLeadingError",
    "PlacementWork",
    "typical_gang_gpus",
]

log = logging.getLogger("tpfabric.scheduler.placer")

#: a gang made again waits this long at most for its own old pods to leave its previous nodes
RETURN_GRACE_SECONDS = 60.0
HEAD_OF_LINE_SECONDS = 300.0
MAX_CYCLE_SECONDS = 10.0
WAITING_REWRITE_SECONDS = 30.0


@dataclass
class _Attempt:
    """What a waiting job's last plan attempt saw, to skip attempts that cannot differ."""

    freed_generation: int
    relax_at: float | None  # clock time the next topology level opens
    hol: bool
    #: it held a domain for itself (a head-of-line gang that could fit once work ends), or
    #: another gang's hold was in its way: such a gang is planned again every cycle, to hold
    #: its domain in that cycle too, or to see the hold go
    holds: bool = False
    #: its pods as the attempt saw them (uid, gated, node): a new or changed worker of its own
    members: frozenset[tuple[str, bool, str | None]] = frozenset()


class GangPlacer:
    """Plans, persists, checks and releases gangs; ``run_cycle`` runs whenever the store changes."""

    def __init__(
        self,
        store: ClusterStore,
        writer: KubeWriter,
        metrics: Metrics,
        *,
        levels: tuple[LevelSpec, ...] = DEFAULT_LEVELS,
        clock: Callable[[], float] = time.time,
        bind_timeout: float = BIND_TIMEOUT_SECONDS,
        head_of_line_seconds: float = HEAD_OF_LINE_SECONDS,
        leading: Callable[[], bool] = lambda: True,
        max_cycle_seconds: float = MAX_CYCLE_SECONDS,
        term: int = 0,
        cost: CostModelConfig = DEFAULT_COST,
    ) -> None:
        self.store = store
        #: the cost model every plan, uplink load and move is priced with (the fabric's own
        #: oversubscription and background load, :mod:`tpfabric_core.placement.cost_flags`)
        self.cost = cost
        self.writer = writer
        self.metrics = metrics
        self.levels = levels
        self.clock = clock
        self.head_of_line_seconds = head_of_line_seconds
        #: whether this placer still leads, in the term it was made for (checked before every
        #: write: a placer paused past its lease, or one that lost it and took it again, writes
        #: nothing it computed before)
        self.leading = leading
        #: the lease term this placer plans in, written into every placement it persists
        self.term = term
        self.max_cycle_seconds = max_cycle_seconds
        #: a cycle stopped at its time bound: run the next one at once
        self._wake_again = False
        self._topology: ClusterTopology | None = None
        self._topology_generation = -1
        self._attempts: dict[str, _Attempt] = {}  # job uid -> last attempt
        self._waiting_written: dict[str, float] = {}  # job uid -> when its wait was last written
        #: job uid -> uids of its gated pods told why they wait (a GangWaiting Event each)
        self._told: dict[str, set[str]] = {}
        self._eligible: dict[tuple[str, str], tuple[int, frozenset[str] | None]] = {}
        #: job uid -> when the placer first saw its old pods still on its previous nodes
        self._leaving_since: dict[str, float] = {}
        #: the persist-then-release pipeline of this placer's writes (its term, its pools)
        self._writes = WritePipeline(
            store, writer, metrics, levels=levels, clock=clock, leading=leading, term=term
        )
        #: pod uid -> monotonic time this placer ungated it (the pipeline's record, shared)
        self._released = self._writes.released
        #: Gang records told that their namespace has not opted in (uids)
        self._not_opted_in: set[str] = set()
        #: the bind bound of released gangs, and the dropping and mending of their plans
        self._binds = BindWatch(store, self._writes, clock, bind_timeout)
        #: the planned rings' flows across uplinks, kept from cycle to cycle
        self._rings = RingFlows(cost)
        #: job uid -> when its healthy room was last looked for, for which degraded nodes
        self._room_checked: dict[str, tuple[float, frozenset[str]]] = {}
        #: the nodes labelled degraded, per topology generation (a label change bumps it)
        self._degraded: tuple[int, frozenset[str]] = (-1, frozenset())

    @property
    def bind_timeout(self) -> float:
        """Return how long released pods may take to bind, in seconds (see :class:`BindWatch`)."""
        return self._binds.bind_timeout

    @bind_timeout.setter
    def bind_timeout(self, seconds: float) -> None:
        self._binds.bind_timeout = seconds

    # -- reading the store (a view of it, or the store with its lock held) ------------------

    def _topology_now(self, store: ClusterStore) -> ClusterTopology:
        if self._topology is None or self._topology_generation != store.topology_generation:
            self._topology = ClusterTopology.from_node_labels(
                {name: node.labels for name, node in store.nodes.items()}, self.levels
            )
            self._topology_generation = store.topology_generation
        return self._topology

    def _eligible_of(
        self, store: ClusterStore, job: JobRecord, worker: PodRecord
    ) -> frozenset[str] | None:
        """Return the nodes the job's workers may run on, cached per topology generation."""
        key = (job.uid, repr(sorted(worker.scheduling.items())))
        cached = self._eligible.get(key)
        if cached is not None and cached[0] == store.topology_generation:
            return cached[1]
        eligible = eligible_nodes(store, worker.scheduling)
        if len(self._eligible) > 4096:
            self._eligible.clear()
        self._eligible[key] = (store.topology_generation, eligible)
        return eligible

    def pending_work(
        self,
        reservations: dict[str, list[Reservation]] | None = None,
        store: ClusterStore | None = None,
    ) -> list[PlacementWork]:
        """Return the jobs with gated or unbound workers, by priority then arrival, read from
        ``store`` (a view; default: the store, with its lock held)."""
        store = store or self.store
        if reservations is None:
            reservations = reservations_by_job(store)
        now = self.clock()
        work = []
        for key, job in store.jobs.items():
            if job.job is None or job.job.spec.suspend:
                continue
            if job.kind == GANG_KIND and not store.gangs_allowed_in(job.namespace):
                self._note_not_opted_in(job)
                continue  # pods labelled by hand where no one opted in: not placed
            members = sorted(store.workers.get(key, {}).values(), key=lambda p: p.name)
            live = [p for p in members if not p.terminal and not p.deleting]
            gated = [p for p in live if p.gated and p.uid not in self._released]
            unbound = [p for p in live if p.node is None and not p.gated]
            placement = store.placement_of(job)
            planned = placement.get("state") == "Planned"
            if not members:
                continue
            if (
                not gated
                and not unbound
                and not (planned and missing_ranks(job, placement, members))
            ):
                continue  # settled (the missing-rank check only for gangs with nothing else due)
            if not planned and len(gated) < len([p for p in live if p.uid not in self._released]):
                continue  # pods of a dropped plan are still going
            if (
                not planned
                and len(gated) < job.job.spec.workers
                and (create_refused(job) or _attempt_unknown(gated))
            ):
                # plan once all workers exist: the API server refuses some (a quota), or the
                # pods lack the attempt label (not made by this operator, or by one older than
                # the label), so a worker created after an early plan would look like a
                # replacement
                continue
            if job.kind == GANG_KIND and any(p.worker_index is None for p in live):
                continue  # the operator writes a Gang's ranks once every pod of it exists
            if job.kind == GANG_KIND and not planned and job.raw_status.get("problems"):
                continue  # its record says what is wrong (two owners, one rank twice...)
            worker = (gated or live or members)[0]
            work.append(
                PlacementWork(
                    job=job,
                    members=members,
                    gated=gated,
                    placement=placement,
                    reservations=reservations.get(key, []),
                    eligible=self._eligible_of(store, job, worker),
                    priority=max((p.priority for p in members), default=0),
                    refused=refused_nodes(store, placement, worker, now),
                    near=near_target(store, job, self._topology_now(store)),
                )
            )
        work.sort(key=lambda w: (-w.priority, w.job.created, w.job.key))
        return work

    def _note_not_opted_in(self, job: JobRecord) -> None:
        """Log once per record that its namespace has not opted in (the operator tells its
        pods)."""
        if job.uid in self._not_opted_in:
            return
        if len(self._not_opted_in) > 10_000:
            self._not_opted_in.clear()
        self._not_opted_in.add(job.uid)
        self.metrics.plans_refused.labels("not_opted_in").inc()
        log.warning("gang %s: not planned: %s", job.key, not_opted_in(job.namespace))

    def unfinished_replans(self, now: float, store: ClusterStore | None = None) -> list[JobRecord]:
        """Return the jobs whose dropped plan left pods to delete (see
        :meth:`BindWatch.unfinished_replans`)."""
        return self._binds.unfinished_replans(now, store)

    def running_without_plan(
        self, store: ClusterStore | None = None
    ) -> list[tuple[JobRecord, list[PodRecord]]]:
        """Return Gang records without a placement whose whole gang runs, each with its pods by
        rank: a record deleted (by hand) and made again while its pods ran. Nothing is planned
        for them; :meth:`_record_running` writes where they run."""
        store = store or self.store
        found = []
        for key, job in store.jobs.items():
            if job.kind != GANG_KIND or job.job is None or store.placement_of(job):
                continue
            if not store.gangs_allowed_in(job.namespace):
                continue
            live = [
                p for p in store.workers.get(key, {}).values() if not p.terminal and not p.deleting
            ]
            ranks = sorted(p.worker_index for p in live if p.worker_index is not None)
            if ranks != list(range(job.job.spec.workers)):
                continue
            if all(p.node is not None and not p.gated for p in live):
                found.append((job, sorted(live, key=lambda p: p.worker_index or 0)))
        return found

    def _record_running(
        self, job: JobRecord, members: list[PodRecord], snapshot: CapacitySnapshot
    ) -> None:
        """Write where a gang without a plan runs, as its placement (see
        :meth:`running_without_plan`): the record shows its domain and hops again."""
        assert job.job is not None
        nodes = [str(p.node) for p in members]
        try:
            request = gang_request(job.key, job.job, members[0], None)
            plan = describe_nodes(
                snapshot,
                request,
                nodes,
                f"read back from the {len(nodes)} running pods: the record was made again while "
                "its gang ran (nothing was planned or moved)",
                cost_config=self.cost,
            )
        except (InputError, ValueError) as err:
            log.warning("job %s: its running pods cannot be described: %s", job.key, err)
            return
        placement = planned_placement(plan, self.clock())
        try:
            self._writes.write(job, {}, placement, "PlacementRecovered")
        except NotLeadingError:
            return
        except ApiException as err:
            log.warning("job %s: writing the recovered placement failed: %s", job.key, err.reason)
            return
        log.info("job %s: placement read back from its running pods: %s", job.key, plan.domain)

    def _movers_due(self, store: ClusterStore, now: float) -> list[healthy_room.Mover]:
        """Return the running jobs asking to move off degraded nodes whose healthy room is due
        to be looked for (:mod:`.healthy_room`): new degraded nodes, or not looked at for
        RECHECK_SECONDS; and those whose answer is stale (no degraded node any more)."""

        def request_of(job: JobRecord, worker: PodRecord, placement: dict[str, Any]) -> Any:
            assert job.job is not None
            # the pods a restart makes ask what the running ones asked before their plan
            # narrowed them to its domain: the template, and what an admission added (Kueue's
            # flavor labels, its TAS hosts), which a restart keeps
            planned = plan_expressions(placement, self.levels) or []
            template = (
                job.job.spec.template.spec.get("affinity")
                if isinstance(job.job, TensorParallelJob)
                else None
            )
            widened = widen_affinity(worker.scheduling.get("affinity"), planned, template)
            fresh = replace(
                worker,
                scheduling={k: v for k, v in worker.scheduling.items() if k != "affinity"}
                | ({"affinity": widened} if widened else {}),
            )
            return gang_request(
                job.key,
                job.job,
                fresh,
                self._eligible_of(store, job, fresh),
                refused_nodes(store, placement, fresh, now),
                previous=previous_nodes(placement),
            )

        if self._degraded[0] != store.topology_generation:
            self._degraded = (store.topology_generation, healthy_room.degraded_nodes_of(store))
        due = []
        live = set()
        for mover in healthy_room.movers(store, self._degraded[1], request_of):
            live.add(mover.job.uid)
            checked = self._room_checked.get(mover.job.uid)
            if (
                mover.degraded
                and checked is not None
                and checked[1] == mover.degraded
                and now - checked[0] < healthy_room.RECHECK_SECONDS
            ):
                continue
            due.append(mover)
        for uid in [u for u in self._room_checked if u not in live]:
            del self._room_checked[uid]
        return due

    def _answer_room(self, mover: healthy_room.Mover, cycle: Cycle | None, waiting: int) -> None:
        """Write whether ``mover`` has healthy room elsewhere now (None once it has no degraded
        node), when the answer changed.

        The first look for a set of degraded nodes offers any healthy room. A later look (the
        first found none) offers room only while no gang of the cycle waits for capacity: what
        frees is the queue's first (the benchmark: moving into room as it frees, ahead of the
        queue, made all jobs' mean JCT 19% worse on a lossy huge-jobs run).
        """
        previous = mover.placement.get("healthyRoom") or None
        again = isinstance(previous, dict) and previous.get("degradedNodes") == sorted(
            mover.degraded
        )
        if again and previous.get("found") is True:  # type: ignore[union-attr]
            return  # found: the operator restarts the job into it
        room: dict[str, Any] | None = None
        if mover.degraded:
            if mover.request is None or cycle is None:
                return
            room = self._room_now(mover, mover.request, cycle, queue_first=again and waiting > 0)
            if room is None or (again and room["found"] is False):
                return  # nothing to say, or the same answer: its words and time stay
        elif previous is None:
            return
        self._write_room(mover, room)

    def _room_now(
        self,
        mover: healthy_room.Mover,
        request: GangRequest,
        cycle: Cycle,
        *,
        queue_first: bool,
    ) -> dict[str, Any] | None:
        """Return the answer for ``mover`` now (None: none to give: its request is invalid, or
        there is room but ``queue_first`` keeps it for the waiting gangs)."""
        now = self.clock()
        self._room_checked[mover.job.uid] = (now, mover.degraded)
        snapshot = healthy_room.without_pods(cycle.snapshot, mover.pods)
        try:
            result = plan_gang(
                snapshot,
                healthy_room.off_degraded(request),
                uplink_load=cycle.uplinks,
                typical_gang_gpus=cycle.typical_gpus,
                cost_config=self.cost,
            )
        except InputError as err:
            log.warning("job %s: healthy room not looked for: %s", mover.job.key, err)
            return None
        if queue_first and isinstance(result, GangPlan):
            return None
        gain = None
        if isinstance(result, GangPlan):
            gain = healthy_room.gain_of(cycle.snapshot.topology, mover, result, self.cost)
        return healthy_room.answer(result, mover.degraded, now, gain)

    def _write_room(self, mover: healthy_room.Mover, room: dict[str, Any] | None) -> None:
        job = mover.job
        try:
            self._writes.write(job, mover.placement, {**mover.placement, "healthyRoom": room}, "")
        except NotLeadingError:
            return
        except ApiException as err:
            log.warning("job %s: writing its healthy room failed: %s", job.key, err.reason)
            return
        if room is not None:
            log.info("job %s: %s", job.key, room["message"])

    def suspended_with_plan(self, store: ClusterStore | None = None) -> list[JobRecord]:
        """Return suspended jobs that still carry a placement (to be dropped)."""
        store = store or self.store
        return [
            job
            for job in store.jobs.values()
            if job.job is not None and job.job.spec.suspend and store.placement_of(job)
        ]

    # -- one cycle ---------------------------------------------------------------------------

    def run_cycle(self) -> bool:
        """Plan, check, persist and release the jobs that need it; never raises.

        Returns True when the cycle stopped at its time bound with work left: run another.
        """
        self._wake_again = False
        now = self.clock()
        with self.store.lock:
            # O(nodes + jobs) references under the lock; everything else of the cycle reads the
            # view without it: the extender's answers (which take the lock) never wait for the
            # cycle's walk over every job and node (120 ms at 5,000 nodes and 2,500 jobs)
            view = self.store.view()
        topology = self._topology_now(view)
        reservations = reservations_by_job(view)
        work = self.pending_work(reservations, view)
        suspended = self.suspended_with_plan(view)
        unfinished = self.unfinished_replans(now, view)
        unrecorded = self.running_without_plan(view)
        movers = self._movers_due(view, now)
        freed = view.freed_generation
        # a cycle that only watches released gangs bind (none due for the bind check) and
        # meets waiting gangs whose inputs did not change needs no snapshot: every bind and
        # pod update wakes a cycle, and a snapshot of every node is not built for nothing
        needed = (
            bool(unrecorded)
            or any(m.degraded for m in movers)
            or any(self._needs_snapshot(item, now, freed) for item in work)
        )
        snapshot = build_snapshot(view, topology, reservations) if needed else None
        rings = planned_rings(view) if needed else []
        typical = typical_gang_gpus(view.jobs.values()) if needed else None
        returning = returning_nodes(view, topology, now) if needed else {}
        del view
        uplinks = self._rings.uplink_load(topology, rings) if needed else None
        for job in suspended:
            self._drop_suspended(job)
        for job in unfinished:
            self._binds.finish_replan(job, now)
        for job, members in unrecorded:
            assert snapshot is not None
            self._record_running(job, members, snapshot)
        cycle = (
            Cycle(snapshot, now, uplinks, typical, returning=returning)
            if snapshot is not None
            else None
        )
        # released gangs first: their bind bound is checked every cycle, never behind planning
        work.sort(key=lambda w: not (w.planned and not w.gated))
        started = time.monotonic()
        # plans are persisted, and their gangs released, by the pipeline's pool while the loop
        # plans the next gangs; the cycle ends when every write has returned (see
        # WritePipeline.cycle)
        with self._writes.cycle():
            waiting = self._plan_all(work, cycle, freed, started)
        for mover in movers:
            self._answer_room(mover, cycle, waiting)
        self.metrics.jobs_waiting.set(waiting)
        live = {item.job.uid for item in work}
        for uid in [u for u in self._attempts if u not in live]:
            del self._attempts[uid]
        for uid in [u for u in self._waiting_written if u not in live]:
            del self._waiting_written[uid]
        for uid in [u for u in self._told if u not in live]:
            del self._told[uid]
        self._writes.forget_released()
        self.store.placer_heartbeat = time.monotonic()
        return self._wake_again

    def _plan_all(
        self,
        work: list[PlacementWork],
        cycle: Cycle | None,
        freed: int,
        started: float,
    ) -> int:
        """Act on ``work`` in order until the cycle's time bound; return how many jobs wait."""
        waiting = 0
        acted = 0
        if cycle is None:  # bind checks not yet due and unchanged waits (see run_cycle)
            return sum(1 for item in work if not item.planned)
        for done, item in enumerate(work):
            if not self.leading():
                log.warning(
                    "lost the placer lease mid-cycle: %d job(s) left to the new leader",
                    len(work) - done,
                )
                break
            watching = item.planned and not item.gated
            if acted and not watching and time.monotonic() - started > self.max_cycle_seconds:
                # a burst: the rest waits for the next cycle (a fresh snapshot, in order), so
                # no cycle delays the bind checks of released gangs for long
                log.info("cycle time bound: %d job(s) left to the next cycle", len(work) - done)
                self._wake_again = True
                break
            acted += 0 if watching else 1
            try:
                if not self._act(item, cycle, freed):
                    waiting += 1
            except NotLeadingError:
                log.warning("lost the placer lease mid-cycle: %d job(s) left", len(work) - done)
                break
            except ApiException as err:
                # a conflict means the job or a pod changed under us: the next cycle sees it
                self.metrics.plans.labels("error").inc()
                log.warning("job %s: API error %s %s", item.job.key, err.status, err.reason)
            except Exception:
                self.metrics.plans.labels("error").inc()
                log.exception("job %s: placement failed", item.job.key)
        return waiting

    def _act(self, item: PlacementWork, cycle: Cycle, freed: int) -> bool:
        """Return False when the job waits; plan, check or release it otherwise."""
        if not item.planned:
            return self._plan_gang(item, cycle, freed)
        if item.gated:
            return self._release_checked(item, cycle)
        return self._binds.watch_binding(item, cycle)

    def _drop_suspended(self, job: JobRecord) -> None:
        try:
            # a suspended job has no pods; resuming plans the gang afresh
            self._writes.fence()
            self.writer.patch_job_status(
                job.namespace, job.name, {"placement": None}, plural=job.plural
            )
            with self.store.lock:
                self.store.record_plan(job, None)
        except NotLeadingError:
            return
        except ApiException as err:
            log.warning("job %s: dropping the plan failed: %s", job.key, err.reason)

    # -- planning a whole gang -----------------------------------------------------------------

    def _plan_gang(self, item: PlacementWork, cycle: Cycle, freed: int) -> bool:
        """Return True when the whole gang got a plan (persisted and released)."""
        job = item.job
        previous = item.placement
        waiting_since = parse_rfc3339(previous.get("waitingSince")) or cycle.now
        waited = max(0.0, cycle.now - waiting_since)
        if item.near is None and self._still_waiting(item, cycle.now, freed):
            # nothing it depends on changed since it last waited (a gang near another depends on
            # where that one runs too: planned again, cheaply, each cycle it is due)
            return False
        if self._old_pods_leaving(item, cycle.now):
            return False
        near = item.near
        if near is not None and near.must_wait(waited):
            return self._wait_for_partner(item, near, waiting_since)
        try:
            request = gang_request_of(item)
            started = time.perf_counter()
            result = self._plan_near(cycle, item, request, waited)
            self.metrics.plan_seconds.observe(time.perf_counter() - started)
        except InputError as err:
            self._writes.write(
                job, previous, invalid_placement(f"{job.key}: {err}"), "InvalidTopology"
            )
            return False
        if isinstance(result, Unschedulable):
            return self._wait(
                item,
                cycle,
                result,
                request,
                waited=waited,
                waiting_since=waiting_since,
                freed=freed,
            )
        self._attempts.pop(job.uid, None)
        cycle.snapshot.allocate(result)
        attempts = [p.attempt for p in item.gated if p.attempt is not None]
        placement = planned_placement(
            result, self.clock(), max(attempts, default=None), waiting_since
        )
        if near is not None:
            placement["near"] = near.placed_words(self._domain_at(result, near.level))
        self.metrics.plans.labels("planned").inc()
        summary = result.explain().splitlines()[0]

        def persist() -> None:
            self._writes.write(job, previous, placement, "")
            log.info("job %s planned: %s", job.key, summary)

        def release() -> None:
            try:
                self._writes.release(item, placement, item.gated)
            finally:
                # the Event last: it is for people, and no worker of the gang waits for it
                self._writes.event(job, "GangPlaced", placement)

        self._writes.then_release(job, self._writes.persist(job, persist), release)
        return True

    def _wait(
        self,
        item: PlacementWork,
        cycle: Cycle,
        result: Unschedulable,
        request: GangRequest,
        *,
        waited: float,
        waiting_since: float,
        freed: int,
    ) -> bool:
        """Write why the gang waits (at most every WAITING_REWRITE_SECONDS); return False."""
        job = item.job
        previous = item.placement
        near = item.near
        # a surge group of a rolling update is extra, passing capacity: it never holds a domain
        # against the gangs behind it
        hol = waited >= self.head_of_line_seconds and not _surge(job)
        self.metrics.plans.labels("waiting").inc()
        placement = waiting_placement(result, waiting_since)
        if near is not None:
            placement["message"] = near.waiting_words(placement["message"])
        blocked = self._blocked_by_holds(cycle, request, waited)
        if blocked:
            placement["message"] += f"; blocked: {blocked}"
        held = len(cycle.held_for_hol)
        if hol:
            placement["message"] += self._hold_for_head_of_line(cycle, result, job, waiting_since)
        relax = result.relax_after_seconds
        self._attempts[job.uid] = _Attempt(
            freed,
            waiting_since + relax if relax is not None else None,
            hol,
            holds=len(cycle.held_for_hol) > held or held > 0,
            members=_members_of(item),
        )
        # A job that already waits is rewritten at most every WAITING_REWRITE_SECONDS: in a
        # busy cluster its best domain's count changes with every pod, and rewriting every
        # waiting job every cycle would starve the plans of new gangs of API time.
        first = previous.get("state") != "Waiting"
        last = self._waiting_written.get(job.uid, 0.0)
        due = first or self.clock() - last >= WAITING_REWRITE_SECONDS
        if due and changed(previous, placement):
            self._writes.write(job, previous, placement, "WaitingForCapacity" if first else "")
            self._waiting_written[job.uid] = self.clock()
            log.info("job %s waits: %s", job.key, result.summary)
            self._tell_pods(item, placement)
        return False

    def _plan_near(
        self, cycle: Cycle, item: PlacementWork, request: GangRequest, waited: float
    ) -> GangPlan | Unschedulable:
        """Plan the gang, inside its ``near`` partner's domains when it asks for that (then,
        when ``preferred`` and nothing fits there, as its topology request alone puts it)."""
        snapshot = self._without_held(cycle, item)

        def plan(asked: GangRequest) -> GangPlan | Unschedulable:
            return plan_gang(
                snapshot,
                asked,
                waited_seconds=waited,
                uplink_load=cycle.uplinks,
                typical_gang_gpus=cycle.typical_gpus,
                cost_config=self.cost,
            )

        near = item.near
        if near is None or near.nodes is None:
            return plan(request)
        eligible = (
            near.nodes if request.eligible_nodes is None else request.eligible_nodes & near.nodes
        )
        result = plan(replace(request, eligible_nodes=eligible))
        if isinstance(result, Unschedulable) and near.mode == "preferred":
            return plan(request)
        return result

    def _domain_at(self, plan: GangPlan, level: str) -> str | None:
        """Return the name of the domain of ``level`` that holds the plan's first node."""
        topology = self._topology
        if topology is None or not plan.nodes_by_rank:
            return None
        try:
            return topology.domain_of(plan.nodes_by_rank[0], level).name
        except (ValueError, KeyError):
            return None

    def _wait_for_partner(self, item: PlacementWork, near: NearTarget, since: float) -> bool:
        """Write why a gang that must be near another waits: that one is not placed yet."""
        job = item.job
        found = ", ".join(near.partners) or "no gang of that name in the namespace yet"
        how = (
            f"it must be in the same {near.level} (near, required"
            if near.mode == "required"
            else f"up to {PREFERRED_WAIT_SECONDS:g} s, to be in the same {near.level} "
            "(near, preferred"
        )
        placement = partner_waiting_placement(
            f"waits for {near.target!r} to be placed: {how}; found: {found})", since
        )
        if changed(item.placement, placement):
            first = item.placement.get("state") != "Waiting"
            self._writes.write(job, item.placement, placement, "WaitingForPartner" if first else "")
            self._tell_pods(item, placement)
        return False

    def _tell_pods(self, item: PlacementWork, placement: dict[str, Any]) -> None:
        """Post one ``GangWaiting`` Event on each gated worker not told yet, in the words of the
        job's ``status.placement``: ``kubectl describe pod`` then says why the pod waits, not
        only ``SchedulingGated``. Once per pod (a waiting gang's message changes with every
        count; the job's status keeps the current words), on the cycle's pool."""
        told = self._told.setdefault(item.job.uid, set())
        fresh = [p for p in item.gated if p.uid not in told]
        if not fresh:
            return
        told.update(p.uid for p in fresh)
        kind, short = (
            ("Gang", "gang") if item.job.kind == GANG_KIND else ("TensorParallelJob", "tpj")
        )
        words = (
            f"waits with its gang, {kind} {item.job.name} (kubectl describe {short} "
            f"{item.job.name}): {placement.get('message', '')}"
        )

        def tell() -> None:
            for pod in fresh:
                self._writes.fence()
                self.writer.pod_event(pod, "GangWaiting", words)

        self._writes.persist(item.job, tell)

    def _without_held(self, cycle: Cycle, item: PlacementWork) -> CapacitySnapshot:
        """Return the cycle's snapshot, or a copy without the nodes held for older gangs: by
        head-of-line holds, and for older gangs returning to the nodes they ran on."""
        own = (item.job.created, item.job.key)
        returning = [i for i, gang in cycle.returning.items() if gang < own]
        if not cycle.held_for_hol and not returning:
            return cycle.snapshot
        trimmed = cycle.snapshot.copy()
        for i in (*cycle.held_for_hol, *returning):
            trimmed.free_gpus[i] = 0
        return trimmed

    def _blocked_by_holds(self, cycle: Cycle, request: GangRequest, waited: float) -> str:
        """Return which head-of-line holds keep a gang that waits from the plan it would get
        without them ("" when no hold is in its way). Costs one more plan, only while a hold
        exists."""
        if not cycle.held_for_hol:
            return ""
        unheld = plan_gang(
            cycle.snapshot,
            request,
            waited_seconds=waited,
            uplink_load=cycle.uplinks,
            typical_gang_gpus=cycle.typical_gpus,
            cost_config=self.cost,
        )
        if isinstance(unheld, Unschedulable):
            return ""
        index_of = cycle.snapshot.topology.index_of
        holds = dict.fromkeys(
            hold
            for node in unheld.nodes
            if (hold := cycle.held_for_hol.get(index_of.get(node, -1))) is not None
        )
        return "; ".join(str(h) for h in holds)

    def _hold_for_head_of_line(
        self, cycle: Cycle, result: Unschedulable, job: JobRecord, since: float
    ) -> str:
        """Hold, for the rest of the cycle, the best candidate domain a head-of-line gang could
        hold once running work ends; return what the gang's message says of it.

        A gang that can never fit as asked (more workers than the cluster, a required level
        none of whose domains is big enough, a selector that allows too few nodes) holds
        nothing, and neither does one whose candidates could never hold it at this level (its
        policy opens the next one after its wait): a hold only helps a gang that waiting can
        start.
        """
        waited = f"; head of line (waited over {self.head_of_line_seconds:g} s)"
        best = next((c for c in result.candidates if c.could_ever_fit), None)
        if result.never or best is None:
            return f"{waited}: it holds no domain, none it may use could ever hold it"
        topology = cycle.snapshot.topology
        try:
            depth = topology.depth_of(best.level)
        except ValueError:
            return ""
        for domain in topology.domains[depth]:
            if domain.path == best.path and domain.name == best.domain:
                hold = Hold(job.key, best.level, best.domain, since)
                for i in range(domain.start, domain.end):
                    cycle.held_for_hol.setdefault(i, hold)
                break
        return (
            f"{waited}: holds {best.level} {best.domain!r}, younger or lower-priority gangs "
            "may not take it"
        )

    # -- checking a plan again -----------------------------------------------------------------

    def _release_checked(self, item: PlacementWork, cycle: Cycle) -> bool:
        """Release the gated pods of a planned job after checking the plan still holds."""
        job = item.job
        placement = item.placement
        nodes = plan_nodes(item)
        planned_at = parse_rfc3339(placement.get("plannedAt"))
        replaced = dict(placement.get("replacedRanks") or {})
        plan_attempt = placement.get("attempt")
        bound = running(item.members, cycle.snapshot.topology)
        moves: list[PodRecord] = []
        held: list[PodRecord] = []  # a Gang's pods whose planned node an old pod still leaves
        made_again = job.kind == GANG_KIND and not isinstance(plan_attempt, int)
        for pod in item.gated:
            rank = pod.worker_index
            if rank is None or rank >= len(nodes):
                continue
            if made_again:
                way = self._made_again(item, cycle, nodes[rank])
                if way != "release":
                    (held if way == "wait" else moves).append(pod)
                continue
            if isinstance(plan_attempt, int) and pod.attempt is not None:
                # planned from the gang's first worker: the rest of its attempt is released onto
                # the plan as the operator creates it; a later attempt's pod is a replacement
                later = pod.attempt > plan_attempt
            else:  # a plan persisted without its attempt: made once the whole gang existed
                created = parse_rfc3339(pod.created)
                later = planned_at is not None and created is not None and created > planned_at
            replacement = later and replaced.get(str(rank)) != pod.uid
            if replacement or not fits_reserved(cycle.snapshot, nodes[rank]):
                moves.append(pod)
        if moves:
            updated = self._binds.replace_ranks(item, cycle, moves, nodes, replaced)
            if updated is None and (bound or in_flight(item.members)):
                # dropped: the owner makes the gang again gated (a pod released and not bound
                # yet binds where the dropped plan sent it: a fresh plan would split the gang)
                return False
            if updated is None:
                # nothing of the gang runs yet and its domain has no room: plan it whole again
                # (the same work, its refused nodes and its near target kept, with no plan)
                again = {**placement, "waitingSince": rfc3339(first_wait(item) or cycle.now)}
                return self._plan_gang(replace(item, placement=again, reservations=[]), cycle, -1)
            placement = updated
        if made_again and not held:
            self._leaving_since.pop(job.uid, None)
        free = [p for p in item.gated if p not in held]
        if free:
            self._writes.then_release(
                job, None, lambda: self._writes.release(item, placement, free)
            )
        return True

    def _made_again(
        self, item: PlacementWork, cycle: Cycle, node: str
    ) -> Literal["release", "wait", "move"]:
        """Return what becomes of a gated pod of a planned Gang record (pods another
        controller makes, no attempt label) planned on ``node``.

        Such a pod is made again for a rollout (LWS replaces a group in place), an eviction or
        a move off a degraded node, seldom because its node failed. It returns to its planned
        node while that node holds its reservation and is not degraded (unless the gang
        ignores degraded nodes); while an old pod of the gang still leaves that node it waits,
        RETURN_GRACE_SECONDS at most (the clock :meth:`_old_pods_leaving` keeps); otherwise it
        moves (``replan_ranks``, else the whole gang is planned again). Its creationTimestamp
        decides nothing: whole seconds cannot tell a pod made again in the second of its plan
        from a pod of the plan.
        """
        snapshot = cycle.snapshot
        i = snapshot.topology.index_of.get(node)
        if i is None:
            return "move"
        if snapshot.degraded[i] and gang_request_of(item).policy.avoid_degraded != "ignore":
            return "move"
        if any(p.deleting and not p.terminal and p.node == node for p in item.members):
            since = self._leaving_since.setdefault(item.job.uid, cycle.now)
            return "wait" if cycle.now - since < RETURN_GRACE_SECONDS else "move"
        return "release" if fits_reserved(snapshot, node) else "move"

    def _still_waiting(self, item: PlacementWork, now: float, freed: int) -> bool:
        """Return whether ``item`` waited at its last attempt and nothing it depends on changed.

        Capacity that may have grown (``freed``: a bound pod finished or went, a node changed,
        a plan's reservations went; a pod binding or a new plan never lets it fit), its own
        pods, the level its wait opens next (``relax_at``) and its head-of-line standing are
        what a plan attempt depends on.
        """
        attempt = self._attempts.get(item.job.uid)
        previous = item.placement
        if attempt is None or previous.get("state") != "Waiting":
            return False
        waiting_since = parse_rfc3339(previous.get("waitingSince")) or now
        hol = max(0.0, now - waiting_since) >= self.head_of_line_seconds
        return (
            attempt.freed_generation == freed
            and attempt.members == _members_of(item)
            and (attempt.relax_at is None or now < attempt.relax_at)
            and attempt.hol == hol
            and not attempt.holds
        )

    def _old_pods_leaving(self, item: PlacementWork, now: float) -> bool:
        """Return whether the gang waits for its own old pods to leave the nodes it ran on.

        A gang made again (a group its owner recreates, a job restarted) while its old pods
        still terminate on its previous nodes would find its domain full of itself and go
        elsewhere; it waits for them, up to RETURN_GRACE_SECONDS, so that it returns where it
        ran. Past that (a pod stuck terminating) it is planned with what is free.
        """
        uid = item.job.uid
        previous = set(previous_nodes(item.placement))
        leaving = [
            p.name
            for p in item.members
            if p.deleting and not p.terminal and p.node is not None and p.node in previous
        ]
        if not leaving:
            self._leaving_since.pop(uid, None)
            return False
        since = self._leaving_since.setdefault(uid, now)
        if now - since >= RETURN_GRACE_SECONDS:
            if since != -math.inf:
                log.info(
                    "job %s: %d old pod(s) still on its previous nodes after %.0f s: planned "
                    "with what is free",
                    item.job.key,
                    len(leaving),
                    now - since,
                )
                self._leaving_since[uid] = -math.inf  # said once
            return False
        if since == now:
            log.info(
                "job %s: waits for %d old pod(s) to leave its previous nodes (%s) before it is "
                "planned again there",
                item.job.key,
                len(leaving),
                ", ".join(sorted(leaving)[:4]),
            )
        return True

    def _needs_snapshot(self, item: PlacementWork, now: float, freed: int) -> bool:
        """Return whether acting on ``item`` may read the cycle's snapshot at ``now``."""
        if not item.planned:
            return not self._still_waiting(item, now, freed)
        if item.gated:
            return True  # checking a plan before releasing
        if self._topology is not None and gone_ranks(plan_nodes(item), self._topology):
            return True  # a planned node left the cluster: re-planned at once
        released = released_at(item)  # without a time, watch_binding never looks
        if (
            released is not None
            and create_refused(item.job)
            and missing_ranks(item.job, item.placement, item.members)
        ):
            return True  # a refused worker drops a plan made before the gang was whole
        return released is not None and self._binds.bind_check_due(released, now)


def returning_nodes(
    store: ClusterStore, topology: ClusterTopology, now: float
) -> dict[int, tuple[str, str]]:
    """Return the previous nodes of the gangs returning to them: a plan dropped less than
    RETURN_GRACE_SECONDS ago (``waitingSince``) whose gang has no plan yet, as a group its owner
    replaces in place (an LWS rollout) is while its old pods go and its new ones come. Younger
    gangs (a rollout's surge group) may not take them meanwhile, so the group returns where it
    ran instead of finding its domain taken."""
    held: dict[int, tuple[str, str]] = {}
    for job in store.jobs.values():
        placement = store.placement_of(job)
        if placement.get("state") not in ("Replanning", "Waiting"):
            continue
        since = parse_rfc3339(placement.get("waitingSince"))
        nodes = placement.get("previousNodes") or []
        if since is None or not nodes or now - since >= RETURN_GRACE_SECONDS:
            continue
        for node in nodes:
            index = topology.index_of.get(str(node))
            if index is not None:
                held.setdefault(index, (job.created, job.key))
    return held


def _surge(job: JobRecord) -> bool:
    """Return whether the operator marks the record a surge group (condition ``Surge``)."""
    return any(
        isinstance(c, dict) and c.get("type") == "Surge" and c.get("status") == "True"
        for c in job.raw_status.get("conditions") or []
    )


def _attempt_unknown(pods: Iterable[PodRecord]) -> bool:
    """Return whether any of ``pods`` lacks the attempt label (``tpfabric.io/attempt``)."""
    return any(p.attempt is None for p in pods)


def _members_of(item: PlacementWork) -> frozenset[tuple[str, bool, str | None]]:
    """Return what of a gang's own pods a plan attempt depends on."""
    return frozenset((p.uid, p.gated, p.node) for p in item.members)
