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
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_core.api import JOB_LABEL
from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.errors import InputError
from tpfabric_core.gangs import GANG_LABEL
from tpfabric_core.placement.cost import UplinkLoad
from tpfabric_core.placement.planner import describe_nodes, plan_gang
from tpfabric_core.placement.replacement import replan_ranks
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import (
    CollectiveCost,
    GangPlan,
    ReplacementOptions,
    Unschedulable,
)
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.steering import narrow_affinity, plan_expressions, remaining_gates
from tpfabric_core.placement.topology import (
    CLUSTER_LEVEL,
    DEFAULT_LEVELS,
    ClusterTopology,
    LevelSpec,
)
from tpfabric_scheduler.capacity import (
    PlannedRing,
    Reservation,
    build_snapshot,
    load_of,
    planned_rings,
    reservations_by_job,
    ring_flows,
)
from tpfabric_scheduler.gang_request import (
    eligible_nodes,
    gang_request,
    refusals,
    refused_nodes,
)
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placement_status import (
    changed,
    invalid_placement,
    parse_rfc3339,
    planned_placement,
    replanning_placement,
    rfc3339,
    waiting_placement,
)
from tpfabric_scheduler.store import GANG_GATE, GPU_RESOURCE, ClusterStore, JobRecord, PodRecord

__all__ = ["GangPlacer", "NotLeadingError", "PlacementWork"]

log = logging.getLogger("tpfabric.scheduler.placer")

BIND_TIMEOUT_SECONDS = 120.0
#: a gang made again waits this long at most for its own old pods to leave its previous nodes
RETURN_GRACE_SECONDS = 60.0
HEAD_OF_LINE_SECONDS = 300.0
MAX_CYCLE_SECONDS = 10.0
TAKEN_SECONDS = 10.0
#: the pods of a dropped plan are deleted again at most this often while they remain
REPLAN_DELETE_RETRY_SECONDS = 10.0
WAITING_REWRITE_SECONDS = 30.0
#: a gang's release writes in flight at once (the API client's pool holds as many connections)
RELEASE_CONCURRENCY = 16
#: gangs whose plan is persisted and released at once while the cycle plans the next ones
PERSIST_CONCURRENCY = 4
#: a released pod the store still shows gated (its watch event not in yet) is not released
#: again for this long
RELEASED_MEMORY_SECONDS = 30.0


class NotLeadingError(RuntimeError):
    """A write was about to go out from a placer that no longer leads in its term."""


@dataclass(frozen=True)
class PlacementWork:
    """One job the placer must act on, with what the cycle's view of the store showed."""

    job: JobRecord
    members: list[PodRecord]
    gated: list[PodRecord]
    placement: dict[str, Any]
    reservations: list[Reservation]
    eligible: frozenset[str] | None
    priority: int
    #: nodes kube-scheduler's own filters refuse for the gang now (see ``refused_nodes``)
    refused: frozenset[str] = frozenset()

    @property
    def planned(self) -> bool:
        """Return whether the job has a plan (persisted or just written)."""
        return self.placement.get("state") == "Planned"


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


@dataclass(frozen=True)
class _Hold:
    """A domain a head-of-line gang holds for the rest of a cycle."""

    job: str  # namespace/name of the holding job
    level: str
    domain: str
    since: float  # when the holding job began to wait

    def __str__(self) -> str:
        return (
            f"{self.level} {self.domain!r} is held for head-of-line job {self.job} "
            f"(waiting since {rfc3339(self.since)})"
        )


@dataclass
class _Cycle:
    """Per-cycle state: the snapshot and the nodes held for head-of-line gangs."""

    snapshot: CapacitySnapshot
    now: float
    #: how busy the uplinks are with the planned gangs' rings (None: no gang spans domains)
    uplinks: UplinkLoad | None = None
    #: GPUs of a typical gang: the median of the jobs the store knows (None: none yet)
    typical_gpus: int | None = None
    #: node index -> the head-of-line hold on it (its domain is kept for an older gang)
    held_for_hol: dict[int, _Hold] = field(default_factory=dict)


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
    ) -> None:
        self.store = store
        self.writer = writer
        self.metrics = metrics
        self.levels = levels
        self.clock = clock
        self.bind_timeout = bind_timeout
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
        #: per planned ring (job uid, nodes): the flows it sends across uplinks
        self._ring_flows: dict[tuple[str, tuple[str, ...]], dict[tuple[int, int], float]] = {}
        self._ring_topology: ClusterTopology | None = None
        #: job uid -> clock time this placer last deleted the pods of its dropped plan
        self._replan_deleted: dict[str, float] = {}
        #: job uid -> when the placer first saw its old pods still on its previous nodes
        self._leaving_since: dict[str, float] = {}
        #: pod uid -> monotonic time this placer ungated it (until the store sees it ungated)
        self._released: dict[str, float] = {}
        #: the cycle's persisting pool (None outside a cycle: persist inline)
        self._persisting: ThreadPoolExecutor | None = None
        self._persisted: list[Future[bool]] = []
        #: the cycle's releases, sent once its plans are written: (job, its plan's write, action)
        self._to_release: list[tuple[JobRecord, Future[bool] | None, Callable[[], None]]] = []
        #: the pod writes of every gang being released share this bound
        self._releasing = ThreadPoolExecutor(RELEASE_CONCURRENCY, thread_name_prefix="release")

    # -- reading the store (a view of it, or the store with its lock held) ------------------

    def _topology_now(self, store: ClusterStore) -> ClusterTopology:
        if self._topology is None or self._topology_generation != store.topology_generation:
            self._topology = ClusterTopology.from_node_labels(
                {name: node.labels for name, node in store.nodes.items()}, self.levels
            )
            self._topology_generation = store.topology_generation
        return self._topology

    def _uplink_load(
        self, topology: ClusterTopology, rings: list[PlannedRing]
    ) -> UplinkLoad | None:
        """Return the planned gangs' uplink load; each ring's flows are kept while its plan and
        the topology stand (a burst re-plans a few gangs per cycle, not all of them)."""
        if self._ring_topology is not topology:
            self._ring_flows, self._ring_topology = {}, topology
        kept: dict[tuple[str, tuple[str, ...]], dict[tuple[int, int], float]] = {}
        for uid, nodes, gpus in rings:
            flows = self._ring_flows.get((uid, nodes))
            kept[uid, nodes] = flows if flows is not None else ring_flows(topology, nodes, gpus)
        self._ring_flows = kept
        return load_of(topology, list(kept.values()))

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
                and not (planned and _missing_ranks(job, placement, members))
            ):
                continue  # settled (the missing-rank check only for gangs with nothing else due)
            if not planned and len(gated) < len([p for p in live if p.uid not in self._released]):
                continue  # pods of a dropped plan are still going
            if (
                not planned
                and len(gated) < job.job.spec.workers
                and (_create_refused(job) or _attempt_unknown(gated))
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
                )
            )
        work.sort(key=lambda w: (-w.priority, w.job.created, w.job.key))
        return work

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
        """Return whether a gang without a plan has pods released that this placer did not
        release and that never bound: released under an earlier record of the same name (a Gang
        deleted and made again while its owner made its pods again). The extender refuses them
        (no plan) and nothing releases a pod twice, so the gang would wait for ever; its pods
        are deleted, and its owner makes them again gated."""
        return any(
            not p.gated
            and p.node is None
            and not p.terminal
            and not p.deleting
            and p.uid not in self._released
            for p in pods
        )

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
            )
        except (InputError, ValueError) as err:
            log.warning("job %s: its running pods cannot be described: %s", job.key, err)
            return
        placement = planned_placement(plan, self.clock())
        try:
            self._write(job, {}, placement, "PlacementRecovered")
        except NotLeadingError:
            return
        except ApiException as err:
            log.warning("job %s: writing the recovered placement failed: %s", job.key, err.reason)
            return
        log.info("job %s: placement read back from its running pods: %s", job.key, plan.domain)

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
        freed = view.freed_generation
        # a cycle that only watches released gangs bind (none due for the bind check) and
        # meets waiting gangs whose inputs did not change needs no snapshot: every bind and
        # pod update wakes a cycle, and a snapshot of every node is not built for nothing
        needed = bool(unrecorded) or any(self._needs_snapshot(item, now, freed) for item in work)
        snapshot = build_snapshot(view, topology, reservations) if needed else None
        rings = planned_rings(view) if needed else []
        typical = typical_gang_gpus(view.jobs.values()) if needed else None
        del view
        uplinks = self._uplink_load(topology, rings) if needed else None
        for job in suspended:
            self._drop_suspended(job)
        for job in unfinished:
            self._finish_replan(job, now)
        for job, members in unrecorded:
            assert snapshot is not None
            self._record_running(job, members, snapshot)
        cycle = _Cycle(snapshot, now, uplinks, typical) if snapshot is not None else None
        # released gangs first: their bind bound is checked every cycle, never behind planning
        work.sort(key=lambda w: not (w.planned and not w.gated))
        started = time.monotonic()
        # planned gangs are persisted by a small pool while the loop plans the next ones (each
        # plan is already taken from the cycle's snapshot); their releases go to the same pool
        # once the loop is done, behind every plan of the cycle: a plan is what the operator
        # waits for to create a gang's other workers released, and it must not queue behind
        # the release writes of the gangs planned before it. The cycle ends when every write
        # has returned, so the next one starts from what the API server holds
        self._persisting = ThreadPoolExecutor(PERSIST_CONCURRENCY, thread_name_prefix="persist")
        try:
            waiting = self._plan_all(work, cycle, freed, started)
        finally:
            self._send_releases()
            self._persisting.shutdown(wait=True)
            self._persisting = None
            for future in self._persisted:
                future.result()  # each logs its own errors; this only re-raises the unexpected
            self._persisted = []
        self.metrics.jobs_waiting.set(waiting)
        live = {item.job.uid for item in work}
        for uid in [u for u in self._attempts if u not in live]:
            del self._attempts[uid]
        for uid in [u for u in self._waiting_written if u not in live]:
            del self._waiting_written[uid]
        for uid in [u for u in self._told if u not in live]:
            del self._told[uid]
        self._forget_released()
        self.store.placer_heartbeat = time.monotonic()
        return self._wake_again

    def _plan_all(
        self,
        work: list[PlacementWork],
        cycle: _Cycle | None,
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

    def _persist(self, job: JobRecord, action: Callable[[], None]) -> Future[bool]:
        """Run ``action`` (a plan's write) on the cycle's pool, or inline outside a cycle;
        return its future: True once it succeeded (its errors are logged, never raised)."""
        guarded = self._guarded(job, action)
        if self._persisting is None:
            done: Future[bool] = Future()
            done.set_result(guarded())
            return done
        future = self._persisting.submit(guarded)
        self._persisted.append(future)
        return future

    def _guarded(self, job: JobRecord, action: Callable[[], None]) -> Callable[[], bool]:
        """Return ``action`` logging (not raising) API and other errors; True once it ran."""

        def guarded() -> bool:
            try:
                action()
            except NotLeadingError:
                log.info("job %s: not written, this placer no longer leads", job.key)
            except ApiException as err:
                self.metrics.plans.labels("error").inc()
                log.warning("job %s: API error %s %s", job.key, err.status, err.reason)
            except Exception:
                self.metrics.plans.labels("error").inc()
                log.exception("job %s: persisting the plan failed", job.key)
            else:
                return True
            return False

        return guarded

    def _then_release(
        self, job: JobRecord, written: Future[bool] | None, action: Callable[[], None]
    ) -> None:
        """Run ``action`` (a gang's releases) once ``written`` (its plan's write, if any)
        succeeded: inline outside a cycle, after the cycle's plans within one."""
        if self._persisting is None:
            if written is None or written.result():
                self._guarded(job, action)()
            return
        self._to_release.append((job, written, action))

    def _send_releases(self) -> None:
        """Queue the cycle's releases on its pool, behind every plan write of the cycle.

        The pool takes tasks in order, so each plan write has started before its release is
        picked up: waiting for it there cannot take a thread that the write still needs.
        """
        pool = self._persisting
        assert pool is not None
        for job, written, action in self._to_release:
            guarded = self._guarded(job, action)

            def release(
                written: Future[bool] | None = written, run: Callable[[], bool] = guarded
            ) -> bool:
                if written is not None and not written.result():
                    return False  # the plan was not written: its pods stay gated
                return run()

            self._persisted.append(pool.submit(release))
        self._to_release = []

    def _forget_released(self) -> None:
        """Forget released pods the store sees ungated (or gone), and any after the memory."""
        if not self._released:
            return
        now = time.monotonic()
        with self.store.lock:
            gated = {
                pod.uid
                for members in self.store.workers.values()
                for pod in members.values()
                if pod.gated
            }
        for uid, when in list(self._released.items()):
            if uid not in gated or now - when > RELEASED_MEMORY_SECONDS:
                del self._released[uid]

    def _act(self, item: PlacementWork, cycle: _Cycle, freed: int) -> bool:
        """Return False when the job waits; plan, check or release it otherwise."""
        if not item.planned:
            return self._plan_gang(item, cycle, freed)
        if item.gated:
            return self._release_checked(item, cycle)
        return self._watch_binding(item, cycle)

    def _finish_replan(self, job: JobRecord, now: float) -> None:
        """Delete the pods a dropped plan left (see :meth:`unfinished_replans`)."""
        self._replan_deleted[job.uid] = now
        try:
            self._fence()
            self.writer.delete_job_pods(job.namespace, job.name, _gang_label(job))
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

    def _drop_suspended(self, job: JobRecord) -> None:
        try:
            # a suspended job has no pods; resuming plans the gang afresh
            self._fence()
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

    def _request(self, item: PlacementWork) -> GangRequest:
        assert item.job.job is not None
        worker = (item.gated or item.members)[0]
        return gang_request(
            item.job.key,
            item.job.job,
            worker,
            item.eligible,
            item.refused,
            previous=previous_nodes(item.placement),
        )

    def _plan_gang(self, item: PlacementWork, cycle: _Cycle, freed: int) -> bool:
        """Return True when the whole gang got a plan (persisted and released)."""
        job = item.job
        previous = item.placement
        waiting_since = parse_rfc3339(previous.get("waitingSince")) or cycle.now
        waited = max(0.0, cycle.now - waiting_since)
        hol = waited >= self.head_of_line_seconds
        if self._still_waiting(item, cycle.now, freed):
            return False  # nothing it depends on changed since it last waited
        if self._old_pods_leaving(item, cycle.now):
            return False
        try:
            request = self._request(item)
            started = time.perf_counter()
            result = plan_gang(
                self._without_held(cycle, item),
                request,
                waited_seconds=waited,
                uplink_load=cycle.uplinks,
                typical_gang_gpus=cycle.typical_gpus,
            )
            self.metrics.plan_seconds.observe(time.perf_counter() - started)
        except InputError as err:
            self._write(job, previous, invalid_placement(f"{job.key}: {err}"), "InvalidTopology")
            return False
        if isinstance(result, Unschedulable):
            self.metrics.plans.labels("waiting").inc()
            placement = waiting_placement(result, waiting_since)
            blocked = self._blocked_by_holds(cycle, request, waited)
            if blocked:
                placement["message"] += f"; blocked: {blocked}"
            held = len(cycle.held_for_hol)
            if hol:
                placement["message"] += self._hold_for_head_of_line(
                    cycle, result, job, waiting_since
                )
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
                self._write(job, previous, placement, "WaitingForCapacity" if first else "")
                self._waiting_written[job.uid] = self.clock()
                log.info("job %s waits: %s", job.key, result.summary)
                self._tell_pods(item, placement)
            return False
        self._attempts.pop(job.uid, None)
        cycle.snapshot.allocate(result)
        attempts = [p.attempt for p in item.gated if p.attempt is not None]
        placement = planned_placement(
            result, self.clock(), max(attempts, default=None), waiting_since
        )
        self.metrics.plans.labels("planned").inc()
        summary = result.explain().splitlines()[0]

        def persist() -> None:
            self._write(job, previous, placement, "")
            log.info("job %s planned: %s", job.key, summary)

        def release() -> None:
            try:
                self._release(item, placement, item.gated)
            finally:
                # the Event last: it is for people, and no worker of the gang waits for it
                self._event(job, "GangPlaced", placement)

        self._then_release(job, self._persist(job, persist), release)
        return True

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
                self._fence()
                self.writer.pod_event(pod, "GangWaiting", words)

        self._persist(item.job, tell)

    def _without_held(self, cycle: _Cycle, item: PlacementWork) -> CapacitySnapshot:
        """Return the cycle's snapshot, or a copy without the nodes held for older gangs."""
        if not cycle.held_for_hol:
            return cycle.snapshot
        trimmed = cycle.snapshot.copy()
        for i in cycle.held_for_hol:
            trimmed.free_gpus[i] = 0
        return trimmed

    def _blocked_by_holds(self, cycle: _Cycle, request: GangRequest, waited: float) -> str:
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
        self, cycle: _Cycle, result: Unschedulable, job: JobRecord, since: float
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
                hold = _Hold(job.key, best.level, best.domain, since)
                for i in range(domain.start, domain.end):
                    cycle.held_for_hol.setdefault(i, hold)
                break
        return (
            f"{waited}: holds {best.level} {best.domain!r}, younger or lower-priority gangs "
            "may not take it"
        )

    # -- checking a plan again -----------------------------------------------------------------

    def _fits_reserved(self, snapshot: CapacitySnapshot, node: str) -> bool:
        """Return whether ``node`` still holds a rank's reservation (nothing overcommitted)."""
        i = snapshot.topology.index_of.get(node)
        if i is None or not snapshot.ready[i] or not snapshot.schedulable[i]:
            return False
        if snapshot.free_gpus[i] < 0:
            return False
        return all(amounts[i] >= 0 for amounts in snapshot.free_other.values())

    def _release_checked(self, item: PlacementWork, cycle: _Cycle) -> bool:
        """Release the gated pods of a planned job after checking the plan still holds."""
        job = item.job
        placement = item.placement
        nodes = _plan_nodes(item)
        planned_at = parse_rfc3339(placement.get("plannedAt"))
        replaced = dict(placement.get("replacedRanks") or {})
        plan_attempt = placement.get("attempt")
        bound = _running(item.members, cycle.snapshot.topology)
        moves: list[PodRecord] = []
        for pod in item.gated:
            rank = pod.worker_index
            if rank is None or rank >= len(nodes):
                continue
            if isinstance(plan_attempt, int) and pod.attempt is not None:
                # planned from the gang's first worker: the rest of its attempt is released onto
                # the plan as the operator creates it; a later attempt's pod is a replacement
                later = pod.attempt > plan_attempt
            else:  # a plan persisted without its attempt: made once the whole gang existed
                created = parse_rfc3339(pod.created)
                later = planned_at is not None and created is not None and created > planned_at
            replacement = later and replaced.get(str(rank)) != pod.uid
            if replacement or not self._fits_reserved(cycle.snapshot, nodes[rank]):
                moves.append(pod)
        if moves:
            updated = self._replace_ranks(item, cycle, moves, nodes, replaced)
            if updated is None and bound:
                return False  # dropped: the operator recreates the gang gated
            if updated is None:
                # nothing of the gang runs yet and its domain has no room: plan it whole again
                return self._plan_gang(
                    PlacementWork(
                        job=job,
                        members=item.members,
                        gated=item.gated,
                        placement={
                            **placement,
                            "waitingSince": rfc3339(_first_wait(item) or cycle.now),
                        },
                        reservations=[],
                        eligible=item.eligible,
                        priority=item.priority,
                    ),
                    cycle,
                    -1,
                )
            placement = updated
        self._then_release(job, None, lambda: self._release(item, placement, item.gated))
        return True

    def _give_back(self, cycle: _Cycle, item: PlacementWork, ranks: set[int] | None = None) -> None:
        """Add the job's reservations (of ``ranks``, default all) back to the cycle's snapshot."""
        for reservation in item.reservations:
            if ranks is None or reservation.rank in ranks:
                _adjust(cycle.snapshot, reservation.node, reservation.demand, +1)

    def _replace_ranks(
        self,
        item: PlacementWork,
        cycle: _Cycle,
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
        request = self._request(item)
        topology = cycle.snapshot.topology
        moving = {p.worker_index for p in moves if p.worker_index is not None}
        gone = _gone_ranks(nodes, topology)
        self._give_back(cycle, item, moving)
        plan = _plan_of(placement, nodes, request, topology)
        try:
            answer = replan_ranks(plan, sorted(moving | gone), cycle.snapshot, request)
        except ValueError as err:  # the planned domain itself left the cluster
            why = f"{job.key}: {err}; the gang is planned again"
            answer = ReplacementOptions(job.key, min(gone, default=0), "", "", "", (), why)
        if isinstance(answer, ReplacementOptions):
            if _running(item.members, topology):
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
        self._write(job, placement, updated, "WorkerReplanned")
        return updated

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
        if self._topology is not None and _gone_ranks(_plan_nodes(item), self._topology):
            return True  # a planned node left the cluster: re-planned at once
        released = _released_at(item)  # without a time, _watch_binding never looks
        if (
            released is not None
            and _create_refused(item.job)
            and _missing_ranks(item.job, item.placement, item.members)
        ):
            return True  # a refused worker drops a plan made before the gang was whole
        return released is not None and self._bind_check_due(released, now)

    def _bind_check_due(self, released: float, now: float) -> bool:
        """Return whether :meth:`_watch_binding` looks at a gang released at ``released``."""
        return now - released >= min(self.bind_timeout, TAKEN_SECONDS)

    def _watch_binding(self, item: PlacementWork, cycle: _Cycle) -> bool:
        """Drop a plan whose released pods did not bind within the bound; True while it may.

        The bound is ``bind_timeout`` from the release; it shrinks to ``TAKEN_SECONDS`` for a
        rank whose planned node another pod has taken meanwhile (its reservation is overcommitted
        in the snapshot): such a worker waits only for a free node elsewhere in its domain.
        """
        released = _released_at(item)
        now = self.clock()  # not the cycle's start: a busy cycle can run for seconds
        nodes = _plan_nodes(item)
        if _gone_ranks(nodes, cycle.snapshot.topology):
            return self._replace_gone(item, cycle, nodes)
        refused = _create_refused(item.job)
        if released is None or not (refused or self._bind_check_due(released, now)):
            return True
        with self.store.lock:  # what is bound now, not at the start of the cycle
            members = list(self.store.workers.get(item.job.key, {}).values())
        missing = _missing_ranks(item.job, item.placement, members)
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
            r
            for r in unbound
            if r < len(nodes) and not self._fits_reserved(cycle.snapshot, nodes[r])
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
        self._replan_whole(
            replace(item, members=members), why, now, keep_wait=True, refused=turned_down
        )
        return False

    def _replace_gone(self, item: PlacementWork, cycle: _Cycle, nodes: list[str]) -> bool:
        """Move the ranks whose planned node left the cluster at once; True while the plan
        stands.

        A released worker whose node is gone only needs a new node in the plan (its affinity
        already holds it to the domain, and the extender steers it to its rank's node); when
        the domain has no room for it, the gang is dropped and planned again whole.
        """
        topology = cycle.snapshot.topology
        gone = _gone_ranks(nodes, topology)
        moves = [
            p
            for p in item.members
            if p.worker_index in gone and p.node is None and not p.terminal and not p.deleting
        ]
        replaced = dict(item.placement.get("replacedRanks") or {})
        if self._replace_ranks(item, cycle, moves, nodes, replaced) is not None:
            return True
        if not _running(item.members, topology):  # _replace_ranks drops a plan that runs
            gone_names = sorted(nodes[r] for r in gone)
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
        taken or left): the gang keeps waiting since it first waited (:func:`_first_wait`).
        ``refused``: nodes kube-scheduler's own filters refused, recorded with the others so
        that the next plan leaves them out.
        """
        job = item.job
        since = _first_wait(item) if keep_wait else None
        placement = replanning_placement(why, now, since)
        if refused:
            placement["refusedNodes"] = [*refusals(item.placement, now), *refused]
        self._write(job, item.placement, placement, "GangReplanning")
        # one call for the whole gang: a 32-worker gang must not take 32 round trips to drop
        self._replan_deleted[job.uid] = now
        self._fence()
        self.writer.delete_job_pods(job.namespace, job.name, _gang_label(job))
        log.warning("%s", why)

    # -- writing -------------------------------------------------------------------------------

    def _write(
        self, job: JobRecord, previous: dict[str, Any], placement: dict[str, Any], event: str
    ) -> None:
        """Persist ``placement`` for ``job`` (if it changed) and record ``event`` (if any)."""
        if "refusedNodes" not in placement:
            # a refusal by kube-scheduler lasts its time, across plans, waits and re-plans
            placement = {**placement, "refusedNodes": refusals(previous, self.clock()) or None}
        if "previousNodes" not in placement and placement.get("state") != "Planned":
            # where the gang ran last lasts until it is planned again (the next plan prefers it)
            placement = {**placement, "previousNodes": list(previous_nodes(previous)) or None}
        placement = {**placement, "term": self.term}
        if changed(previous, placement) or placement.get("state") == "Planned":
            patch = dict(placement)
            labels = placement.get("domainLabels")
            if isinstance(labels, dict):  # a merge patch merges maps: drop the old keys
                stale = previous.get("domainLabels") or {}
                patch["domainLabels"] = {
                    **dict.fromkeys(k for k in stale if k not in labels),
                    **labels,
                }
            self._fence()
            self.writer.patch_job_status(
                job.namespace,
                job.name,
                {"placement": patch},
                uid=job.uid,
                tests=[_computed_from(previous)],
                plural=job.plural,
            )
            with self.store.lock:
                self.store.record_plan(job, placement)
        if event:
            self._event(job, event, placement)

    def _fence(self) -> None:
        """Raise NotLeadingError unless this placer still leads in its term (every write)."""
        if not self.leading():
            raise NotLeadingError(f"this placer no longer leads in term {self.term}")

    def _event(self, job: JobRecord, event: str, placement: dict[str, Any]) -> None:
        """Record ``event`` on the job, worded by ``placement``'s message."""
        kind = "Warning" if event in ("GangReplanning", "InvalidTopology") else "Normal"
        self._fence()
        self.writer.job_event(job, kind, event, str(placement.get("message") or ""))

    def _release(
        self, item: PlacementWork, placement: dict[str, Any], pods: list[PodRecord]
    ) -> None:
        """Constrain every gated pod to the planned domain (every level's label) and ungate it."""
        expressions = plan_expressions(placement, self.levels) or []

        def release(pod: PodRecord) -> None:
            self._fence()
            if pod.gates and any(g.get("name") == GANG_GATE for g in pod.gates):
                # one write, from what the store knows; refused if the pod changed meanwhile
                before = pod.scheduling.get("affinity")
                affinity = narrow_affinity(before, expressions) if expressions else None
                started = time.perf_counter()
                try:
                    self.writer.release_known_pod(pod, affinity, remaining_gates(list(pod.gates)))
                except ApiException as err:
                    if err.status not in (409, 422):
                        raise
                else:
                    self.metrics.release_write_seconds.observe(time.perf_counter() - started)
                    self._released[pod.uid] = time.monotonic()
                    return
            current = self.writer.read_pod(pod.namespace, pod.name)
            if current["metadata"].get("uid") != pod.uid:
                return  # another pod of that name now: the next cycle sees it
            spec = current.get("spec") or {}
            gates = spec.get("schedulingGates") or []
            if not any(g.get("name") == GANG_GATE for g in gates):
                return  # released already (a restart mid-release)
            # a cluster-wide plan (spread, the last resort) narrows nothing
            affinity = narrow_affinity(spec.get("affinity"), expressions) if expressions else None
            self._fence()
            self.writer.release_pod(
                pod.namespace,
                pod.name,
                current["metadata"]["resourceVersion"],
                affinity,
                remaining_gates(gates),
            )
            self._released[pod.uid] = time.monotonic()

        # a gang's writes go out together (RELEASE_CONCURRENCY at a time over every gang being
        # persisted): one by one, a 256-worker gang waits 256 round trips before kube-scheduler
        # sees its last worker
        if len(pods) <= 1:
            for pod in pods:
                release(pod)
        else:
            for _ in self._releasing.map(release, pods):
                pass  # re-raises the first error
        log.info("job %s: released %d worker pod(s)", item.job.key, len(pods))


def _gang_label(job: JobRecord) -> str:
    """Return the label that names the record's pods (a Gang's, or a job's workers')."""
    return GANG_LABEL if job.kind == GANG_KIND else JOB_LABEL


def typical_gang_gpus(jobs: Iterable[JobRecord]) -> int | None:
    """Return the median GPUs (workers x GPUs per worker) of the valid ``jobs`` (``None``: none).

    The planner keeps leaves from being cut below what such a gang needs (see
    :func:`~tpfabric_core.placement.planner.plan_gang`); every job the store knows counts, running
    or finished, as the mix of gangs this cluster sees.
    """
    sizes = [j.job.spec.workers * j.job.spec.gpus_per_worker for j in jobs if j.job is not None]
    return int(statistics.median(sizes)) if sizes else None


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


def _released_at(item: PlacementWork) -> float | None:
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


def _attempt_unknown(pods: Iterable[PodRecord]) -> bool:
    """Return whether any of ``pods`` lacks the attempt label (``tpfabric.io/attempt``)."""
    return any(p.attempt is None for p in pods)


def _create_refused(job: JobRecord) -> str:
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


def _missing_ranks(
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


def _members_of(item: PlacementWork) -> frozenset[tuple[str, bool, str | None]]:
    """Return what of a gang's own pods a plan attempt depends on."""
    return frozenset((p.uid, p.gated, p.node) for p in item.members)


def _computed_from(previous: Mapping[str, Any]) -> dict[str, Any]:
    """Return the JSON patch ``test`` that the job's placement is still the one a write was
    computed from: its term (the lease term of the placer that wrote it), or no placement at
    all. A placer deposed meanwhile finds the new leader's term there and writes nothing."""
    if not previous:
        return {"op": "test", "path": "/status/placement", "value": None}
    return {"op": "test", "path": "/status/placement/term", "value": previous.get("term")}


def _first_wait(item: PlacementWork) -> float | None:
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


def _plan_nodes(item: PlacementWork) -> list[str]:
    """Return the planned node of each rank of ``item`` (empty without a plan)."""
    return [str(n) for n in item.placement.get("nodes") or []]


def _gone_ranks(nodes: Iterable[str], topology: ClusterTopology) -> set[int]:
    """Return the ranks a plan puts on nodes that are no longer in the cluster."""
    return {rank for rank, node in enumerate(nodes) if node not in topology.index_of}


def _running(members: Iterable[PodRecord], topology: ClusterTopology) -> list[PodRecord]:
    """Return the members bound to a node of the cluster, not finished and not going (a pod
    bound to a deleted node runs nowhere: pod GC removes it; a pod being deleted is the gang's
    past, e.g. a group its owner makes again)."""
    return [
        p
        for p in members
        if p.node is not None and not p.terminal and not p.deleting and p.node in topology.index_of
    ]


def previous_nodes(placement: Mapping[str, Any]) -> tuple[str, ...]:
    """Return the nodes of the gang's plan, or of its last plan while it has none."""
    nodes = placement.get("nodes") or placement.get("previousNodes") or ()
    return tuple(str(n) for n in nodes if n)


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
