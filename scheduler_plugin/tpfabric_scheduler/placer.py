"""The gang placer's cycle: one plan for a whole job on one consistent snapshot, persisted, then
released.

A cycle (run by the lease holder only; :mod:`.loop` decides when) is a short script:

1. **view**: under the store's lock, a copy of the store (references, O(nodes + jobs)); the
   rest of the cycle reads it without the lock, so the extender's answers never wait for it.
2. **queue**: the gangs due, in order (:mod:`.queue`); suspended jobs that keep a plan and
   dropped plans whose pods remain (:mod:`.policy.drop`); Gang records made again while their
   gang runs (:mod:`.policy.recovered`); running gangs on degraded nodes that ask to move
   (:mod:`.policy.healthy_room`).
3. **snapshot**, only when something due may read it: every node's free capacity minus the
   reservations of planned ranks not bound yet (:mod:`.capacity`), the planned rings' load on
   the uplinks and the typical gang (:mod:`.plan_inputs`), the nodes of gangs returning where
   they ran (:mod:`.policy.returning`).
4. **housekeeping**: drop the suspended jobs' plans, finish the dropped plans, write where the
   recovered gangs run.
5. **act** on each gang due, in order, within the cycle's time bound (a cycle that reaches it
   leaves the rest to the next, which resumes there: round-robin): its policy decides what
   to do (a gang without a plan: :mod:`.policy.plan`; a planned gang with gated pods:
   :mod:`.policy.release`; a released gang: :mod:`.policy.bind_bound`) and the cycle applies
   the intent it returns (:mod:`.apply`). Fresh plans are written by the pipeline's pool while
   the next gangs are planned, and their gangs released behind every plan write of the cycle
   (:mod:`.writes`); the cycle ends when every write has returned.
6. **healthy room**: answer the running gangs on degraded nodes.
7. **forget** what the placer remembers of gangs no longer due, and the released pods the store
   now shows.

The placer owns ``status.placement`` and nothing else of the job
(:mod:`tpfabric_core.api.placement` reads and writes it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kubernetes.client.rest import ApiException

from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig
from tpfabric_core.placement.topology import DEFAULT_LEVELS, ClusterTopology, LevelSpec
from tpfabric_scheduler.apply import apply_intent
from tpfabric_scheduler.capacity import (
    Reservation,
    Snapshots,
    planned_rings,
    reservations_by_job,
)
from tpfabric_scheduler.explanations import Explanations
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.plan_inputs import RingFlows, typical_gang_gpus
from tpfabric_scheduler.policy import bind_bound, drop, healthy_room, plan, recovered, release
from tpfabric_scheduler.policy.bind_bound import BIND_TIMEOUT_SECONDS
from tpfabric_scheduler.policy.holds import HEAD_OF_LINE_SECONDS
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.policy.returning import returning_nodes
from tpfabric_scheduler.queue import Queue, QueueKey, cycle_order, needs_snapshot, queue_key
from tpfabric_scheduler.store import ClusterStore, PodRecord
from tpfabric_scheduler.work import Cycle, PlacementWork, PlacerMemory, Rules
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

MAX_CYCLE_SECONDS = 10.0


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
        #: how long released pods may take to bind, in seconds (:mod:`.policy.bind_bound`)
        self.bind_timeout = bind_timeout
        #: whether this placer still leads, in the term it was made for (checked before every
        #: write: a placer paused past its lease, or one that lost it and took it again, writes
        #: nothing it computed before)
        self.leading = leading
        #: the lease term this placer plans in, written into every placement it persists
        self.term = term
        self.max_cycle_seconds = max_cycle_seconds
        #: a cycle stopped at its time bound: run the next one at once
        self._wake_again = False
        #: the queue position of the first gang a cycle stopped at its bound did not reach: the
        #: next cycle resumes there
        self._resume: QueueKey | None = None
        self._topology: ClusterTopology | None = None
        self._topology_generation = -1
        #: what the policies remember from cycle to cycle
        self._memory = PlacerMemory()
        self._queue = Queue(refused=metrics.plans_refused.labels("not_opted_in").inc)
        #: each cycle's snapshot, built from the last one (only the nodes that changed)
        self._snapshots = Snapshots()
        #: why gangs of one shape wait, kept while the store's capacity stands
        self._explanations = Explanations()
        #: the persist-then-release pipeline of this placer's writes (its term, its pools)
        self._writes = WritePipeline(
            store, writer, metrics, levels=levels, clock=clock, leading=leading, term=term
        )
        #: pod uid -> monotonic time this placer ungated it (the pipeline's record, shared)
        self._released = self._writes.released
        #: the planned rings' flows across uplinks, kept from cycle to cycle
        self._rings = RingFlows(cost)

    def _rules(self) -> Rules:
        return Rules(
            self.levels, self.cost, self.clock, self.head_of_line_seconds, self.bind_timeout
        )

    def _topology_now(self, store: ClusterStore) -> ClusterTopology:
        if self._topology is None or self._topology_generation != store.topology_generation:
            self._topology = ClusterTopology.from_node_labels(
                {name: node.labels for name, node in store.nodes.items()}, self.levels
            )
            self._topology_generation = store.topology_generation
        return self._topology

    def _pods_now(self, key: str) -> list[PodRecord]:
        """Return the pods of the job ``key`` the store holds now."""
        with self.store.lock:
            return list(self.store.workers.get(key, {}).values())

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
        topology = self._topology_now(store)
        return self._queue.pending(store, reservations, topology, self._released, self.clock())

    # -- one cycle ---------------------------------------------------------------------------

    def run_cycle(self) -> bool:
        """Plan, check, persist and release the jobs that need it; never raises.

        Returns True when the cycle stopped at its time bound with work left: run another.
        """
        self._wake_again = False
        now, rules, memory = self.clock(), self._rules(), self._memory
        # 1. view
        with self.store.lock:
            view = self.store.view()
        topology = self._topology_now(view)
        # 2. queue
        reservations = reservations_by_job(view)
        work = self.pending_work(reservations, view)
        suspended = drop.suspended(view)
        unfinished = drop.unfinished(view, now, memory, self._released)
        unrecorded = recovered.running_without_plan(view)
        movers = healthy_room.due(view, now, rules, memory, self._queue.eligible)
        freed = Freed.of_view(view, topology)
        # 3. snapshot: every bind and pod update wakes a cycle; one that only watches released
        # gangs bind and meets waiting gangs whose inputs did not change builds none
        needed = (
            bool(unrecorded)
            or any(m.degraded for m in movers)
            # a gang never tried is told at a glance (in a deep queue, it comes last)
            or any(not item.planned and item.job.uid not in memory.attempts for item in work)
            or any(
                needs_snapshot(item, now, freed, topology, rules=rules, memory=memory)
                for item in work
            )
        )
        cycle = (
            Cycle(
                self._snapshots.build(view, topology, reservations),
                now,
                pods_now=self._pods_now,
                typical_gpus=typical_gang_gpus(view.jobs.values()),
                returning=returning_nodes(view, topology, now),
                explanations=self._explanations.at(view.capacity_generation),
            )
            if needed
            else None
        )
        rings = planned_rings(view) if needed else []
        del view
        if cycle is not None:
            cycle.uplinks = self._rings.uplink_load(topology, rings)
            freed = freed.on(cycle.snapshot)  # what each plan of the cycle takes is gone
        # 4. housekeeping
        for job, placement in suspended:
            self._apply_aside(drop.drop_suspended(job, placement), "dropping the plan")
        for job in unfinished:
            self._apply_aside(drop.finish(job, now, memory), "deleting the dropped plan's pods")
        for job, members in unrecorded:
            assert cycle is not None
            intent = recovered.recover(job, members, cycle.snapshot, rules)
            self._apply_aside(intent, "writing the recovered placement")
        # 5. act, the released gangs first, resuming where a cycle stopped at its bound
        started = time.monotonic()
        order = cycle_order(work, resume=self._resume, holding=memory.holding())
        with self._writes.cycle():
            waiting = self._act_on_all(order, cycle, freed, started, rules)
        # 6. healthy room
        for mover in movers:
            answer = healthy_room.decide(mover, cycle, waiting, rules, memory)
            if answer is not None:
                self._apply_aside(answer, "writing its healthy room")
        self.metrics.jobs_waiting.set(waiting)
        # 7. forget
        memory.forget_all_but({item.job.uid for item in work})
        self._writes.forget_released()
        self.store.placer_heartbeat = time.monotonic()
        return self._wake_again

    def _act_on_all(
        self,
        work: list[PlacementWork],
        cycle: Cycle | None,
        freed: Freed,
        started: float,
        rules: Rules,
    ) -> int:
        """Act on ``work`` in order until the cycle's time bound; return how many jobs wait.

        A cycle stopped at its bound remembers where: the next resumes there (round-robin over
        the gangs due), so the youngest gang is reached however many older ones wait.
        """
        waiting = 0
        acted = 0
        self._resume = None
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
                self._resume = queue_key(item)
                break
            acted += 0 if watching else 1
            try:
                intent = self._decide(item, cycle, freed, rules)
                self._count(intent)
                self._apply(intent)
                waiting += 0 if intent.placed else 1
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

    def _decide(
        self, item: PlacementWork, cycle: Cycle, freed: Freed, rules: Rules
    ) -> PlacementIntent:
        """Return what ``item``'s policy decides: plan it, check and release it, or watch it
        bind."""
        if not item.planned:
            return plan.decide(item, cycle, rules, self._memory, freed)
        if item.gated:
            return release.decide(item, cycle, rules, self._memory)
        return bind_bound.decide(item, cycle, rules, self._memory)

    def _count(self, intent: PlacementIntent) -> None:
        """Record a plan attempt's outcome and time in the metrics."""
        if intent.plan_seconds is not None:
            self.metrics.plan_seconds.observe(intent.plan_seconds)
        if intent.outcome:
            self.metrics.plans.labels(intent.outcome).inc()

    def _apply(self, intent: PlacementIntent) -> None:
        apply_intent(intent, self._writes, self._pods_now)

    def _apply_aside(self, intent: PlacementIntent, what: str) -> None:
        """Apply an intent outside the gangs' loop: an API error is logged, never raised."""
        try:
            self._apply(intent)
        except NotLeadingError:
            return
        except ApiException as err:
            log.warning("job %s: %s failed: %s", intent.job.key, what, err.reason)
