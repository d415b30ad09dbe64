"""Replay a trace with one placer on the simulated cluster, jobs running at placement's speed.

Events are arrivals and completions. The queue is first come, first served with backfill: on
every event each waiting gang is tried in arrival order, and one that has waited
``reserve_after_s`` stops the gangs behind it from starting until it fits (so a huge gang is
not starved for ever). A running job progresses at one step per step time; whenever a job
starts or ends, the fair shares of the uplinks its traffic crosses change, and every job whose
traffic crosses a changed uplink gets its step time recomputed from where it is (processor
sharing). The uplink-aware placer is handed the current :class:`UplinkLoad`.

Links that degrade during a run (:mod:`.faults`): at a fault's start its node turns degraded in
the snapshot the placers see and every job running on it is re-timed with the slower edges (and
again at its end). A job that met a degraded link is counted as affected. With a
:class:`~tpfabric_bench.sim.faults.RestartCost` (tpfabric's ``onDegradedLink:
restart-elsewhere``) such a job is instead planned again at once, by the same placer, and moved
if the new plan avoids every node degraded by a fault and runs its collectives faster than
where it runs, as the placer judges it (:func:`~tpfabric_core.placement.move_gain.move_gain`):
it redoes the steps since its last checkpoint and makes no progress for the restore time (its
flows keep their load meanwhile). If no such plan exists it keeps running slow, and is planned
again after every later event while no gang waits in the queue (what frees is the queue's
first, as the placer offers room on a later look only while no gang waits) until it moves or
no longer runs on a faulty node. With
a :class:`~tpfabric_bench.sim.faults.RestartRule` of kind ``weighed`` the job is first re-timed
where it is and restarted only if :func:`~tpfabric_core.fabric.restart_rule.weigh_restart`
(the operator's ``restart-when-it-pays``, with what the operator knows: half a checkpoint
interval redone, the job's remaining time unknown) says running slow is expected to take longer
than the restart. Other placers keep running slow.

With ``record_pp_links`` every job with pipeline stages records, from every re-timing on, the
latency and the bandwidth its stage hop gets (its narrowest edge and uplink fair share): what a
serving group's per-token stage hop meets (:mod:`.serving`).

Cost per event: the placer's, plus O(flows of the job) to update the uplinks and O(affected
jobs x their uplinks) to re-time them. This module must never read a clock other than for
timing the placer, and never depends on the order of a set.
"""

from __future__ import annotations

import bisect
import heapq
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tpfabric_bench.sim.cluster import Cluster, stranded_fraction
from tpfabric_bench.sim.constants import DEFAULT_CONSTANTS, SimConstants
from tpfabric_bench.sim.faults import LinkFault, RestartCost, RestartRule
from tpfabric_bench.sim.model import (
    Collective,
    JobTraffic,
    Uplink,
    UplinkIndex,
    ideal_traffic,
    placed_traffic,
)
from tpfabric_bench.sim.trace import SimJob
from tpfabric_core.fabric.restart_rule import weigh_restart
from tpfabric_core.placement import CapacitySnapshot, GangPlan, GangRequest, Unschedulable
from tpfabric_core.placement.cost import UplinkLoad
from tpfabric_core.placement.move_gain import move_gain

__all__ = ["JobOutcome", "PlaceFn", "SimRun", "simulate"]

PlaceFn = Callable[
    [CapacitySnapshot, GangRequest, float, UplinkLoad | None, int | None],
    GangPlan | Unschedulable,
]
"""A placer as the simulation calls it: (snapshot, request, waited seconds, uplink load, GPUs of
a typical gang: the median of the jobs arrived so far, what a live placer knows too)."""


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one job lived through: when it arrived, started and ended, how much it talked."""

    name: str
    arrival_s: float
    start_s: float
    end_s: float
    gpus: int
    comm_share: float
    stretch: float
    leaves: int
    affected: bool = False
    restarts: int = 0
    #: (seconds, latency s, bandwidth b/s) of the stage hop, per stretch of the run (if recorded)
    pp_links: tuple[tuple[float, float, float], ...] = ()


@dataclass
class SimRun:
    """What happened to a trace under one placer."""

    outcomes: list[JobOutcome] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    plan_ms: list[float] = field(default_factory=list)
    busy_gpu_s: float = 0.0
    first_arrival_s: float = 0.0
    last_end_s: float = 0.0


@dataclass(slots=True)
class _Running:
    """A running job: its plan, traffic and progress since the last re-timing."""

    job: SimJob
    plan: GangPlan
    start_s: float
    traffic: JobTraffic
    ideal_step_s: float
    remaining: float
    updated_s: float
    step_s: float = 0.0
    comm_s: float = 0.0
    comm_total: float = 0.0
    version: int = 0
    nodes: frozenset[int] = frozenset()
    affected: bool = False
    restarts: int = 0
    #: (from s, latency s, bandwidth b/s) of the stage hop at each re-timing (if recorded)
    pp_links: list[tuple[float, float, float]] = field(default_factory=list)


class _Simulation:
    """One replay: the event loop and its bookkeeping."""

    def __init__(
        self,
        cluster: Cluster,
        trace: Sequence[SimJob],
        place: PlaceFn,
        constants: SimConstants,
        *,
        uplink_aware: bool,
        faults: Sequence[LinkFault] = (),
        restart: RestartCost | None = None,
        restart_rule: RestartRule | None = None,
        record_pp_links: bool = False,
    ) -> None:
        self.cluster = cluster
        self.restart = restart
        self.rule = restart_rule or RestartRule()
        self.record_pp_links = record_pp_links
        #: faults now active per node index (a node is degraded while any is, or if seeded so)
        self.faults_on = [0] * len(cluster.topology)
        self.seeded_degraded = list(cluster.snapshot.degraded)
        self.topology = cluster.topology
        self.place = place
        self.constants = constants
        self.uplink_aware = uplink_aware
        self.snapshot = cluster.snapshot.copy()
        self.capacity = UplinkIndex(self.topology, constants).capacity
        self.link_bps = constants.cost.link_gbps * 1e9
        self.flows: dict[Uplink, float] = {}
        self.jobs_on: dict[Uplink, set[str]] = {}
        self.burst: dict[str, dict[Uplink, float]] = {}
        self.load: UplinkLoad | None = None
        self.jobs = {job.name: job for job in trace}
        self.median = int(statistics.median(job.workers for job in trace)) if trace else 1
        self.running: dict[str, _Running] = {}
        self.queue: list[str] = []
        #: GPUs of every job arrived so far, sorted (the typical gang is their median)
        self.arrived_gpus: list[int] = []
        self.events: list[tuple[float, int, str, str, int]] = []
        self.seq = 0
        self.allocated_gpus = 0
        self.free_slots = {g: self._slots(g) for g in {job.gpus_per_worker for job in trace}}
        self.run = SimRun(first_arrival_s=min((j.arrival_s for j in trace), default=0.0))
        #: jobs the restart rule would move off a fault that found no room when it started:
        #: looked at again after every event while they still run on a faulty node and no gang
        #: waits (the placer looks again every 10 s and then offers only room no waiting gang
        #: needs: the operator moves them once room frees)
        self.wants_move: set[str] = set()
        for job in trace:
            self._push(job.arrival_s, "arrive", job.name, 0)
        for fault in faults:
            self._push(fault.start_s, "degrade", str(fault.node), 0)
            self._push(fault.end_s, "recover", str(fault.node), 0)

    def _slots(self, gpus_per_worker: int) -> int:
        """Return the free worker slots of that size on schedulable nodes (a quick pre-check)."""
        s = self.snapshot
        return sum(
            f // gpus_per_worker for f, ok in zip(s.free_gpus, s.schedulable, strict=True) if ok
        )

    def _push(self, when: float, kind: str, name: str, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, name, version))

    def _share_bps(self, traffic: JobTraffic, collective: Collective) -> float:
        """Return the rate one flow of ``collective`` gets on its narrowest uplink (fair share).

        While it runs, its own flows cross at full rate and every other job's at their load.
        """
        share = 1.0
        mine = traffic.flows
        for uplink, own in collective.uplinks:
            demand = self.flows.get(uplink, 0.0) - mine.get(uplink, 0.0) + own
            if demand > 0:
                share = min(share, self.capacity[uplink] / demand)
        return self.link_bps * share

    def _change_flows(self, name: str, traffic: JobTraffic, sign: int) -> set[str]:
        """Return the running jobs whose uplink share may change once ``traffic`` comes or goes.

        An uplink where no job's collective could exceed capacity before or after changes none.
        """
        affected: set[str] = set()
        for uplink, amount in traffic.flows.items():
            before = self.flows.get(uplink, 0.0)
            after = max(0.0, before + sign * amount)
            self.flows[uplink] = after
            members = self.jobs_on.setdefault(uplink, set())
            if sign > 0:
                members.add(name)
                self.burst[name] = _bursts(traffic)
            else:
                members.discard(name)
            peak = max((self.burst[m].get(uplink, 0.0) for m in members), default=0.0)
            peak = max(peak, self.burst[name].get(uplink, 0.0))
            if max(before, after) + peak > self.capacity[uplink]:
                affected.update(members)
        if sign < 0:
            self.burst.pop(name, None)
        self.load = None
        return affected

    def _retime(self, names: set[str], now: float) -> None:
        """Return nothing; bring ``names`` up to ``now`` and give them their new step time."""
        for name in sorted(names):
            state = self.running.get(name)
            if state is None:
                continue
            self._advance(state, now)
            state.step_s, state.comm_s = state.traffic.step(self._share_bps)
            if self.record_pp_links:
                self._record_pp_link(state)
            state.version += 1
            self._push(state.updated_s + state.remaining * state.step_s, "end", name, state.version)

    def _record_pp_link(self, state: _Running) -> None:
        """Return nothing; note the latency and bandwidth of ``state``'s stage hop from now."""
        for collective in state.traffic.collectives:
            if collective.kind == "pp":
                bandwidth = collective.local_bps
                if collective.uplinks:
                    bandwidth = min(bandwidth, self._share_bps(state.traffic, collective))
                state.pp_links.append((state.updated_s, collective.alpha_s, bandwidth))

    @staticmethod
    def _advance(state: _Running, now: float) -> None:
        """Return nothing; count ``state``'s steps up to ``now`` (none while it restores)."""
        if state.step_s and now > state.updated_s:
            done = (now - state.updated_s) / state.step_s
            state.remaining = max(0.0, state.remaining - done)
            state.comm_total += done * state.comm_s
        state.updated_s = max(now, state.updated_s)

    def _uplink_load(self) -> UplinkLoad | None:
        if not self.uplink_aware:
            return None
        if self.load is None:
            self.load = UplinkLoad.from_flows(self.topology, self.flows, self.constants.cost)
        return self.load

    def _typical_gpus(self) -> int | None:
        """Return the median GPUs of the jobs arrived so far (``None`` before the first)."""
        seen = self.arrived_gpus
        if not seen:
            return None
        return (seen[(len(seen) - 1) // 2] + seen[len(seen) // 2]) // 2

    def _attempt(self, name: str, now: float) -> bool:
        """Return whether job ``name`` started at ``now``."""
        job = self.jobs[name]
        if self.free_slots[job.gpus_per_worker] < job.workers:
            return False
        started = time.perf_counter()
        result = self.place(
            self.snapshot,
            job.request(),
            now - job.arrival_s,
            self._uplink_load(),
            self._typical_gpus(),
        )
        self.run.plan_ms.append((time.perf_counter() - started) * 1e3)
        if not isinstance(result, GangPlan):
            return False
        self._take(result, sign=1)
        traffic = self._traffic(job, result)
        ideal = ideal_traffic(job.shape, job.workers, job.gpus_per_worker, self.constants).alone()
        state = _Running(job, result, now, traffic, ideal, float(job.steps), now)
        state.nodes = self._nodes(result)
        state.affected = any(self.faults_on[i] for i in state.nodes)
        self.running[name] = state
        self.allocated_gpus += job.gpus
        affected = self._change_flows(name, traffic, 1)
        self._retime(affected | {name}, now)
        return True

    def _nodes(self, plan: GangPlan) -> frozenset[int]:
        index_of = self.topology.index_of
        return frozenset(index_of[node] for node in plan.nodes_by_rank)

    def _traffic(self, job: SimJob, plan: GangPlan) -> JobTraffic:
        """Return ``job``'s traffic on ``plan`` with the links as degraded as they are now."""
        index_of = self.topology.index_of
        return placed_traffic(
            self.topology,
            job.shape,
            [index_of[node] for node in plan.nodes_by_rank],
            job.gpus_per_worker,
            self.snapshot.degraded,
            constants=self.constants,
        )

    def _link_fault(self, node: int, now: float, *, start: bool) -> None:
        """Return nothing; degrade (``start``) or recover ``node`` and re-time its jobs."""
        was = self.snapshot.degraded[node]
        self.faults_on[node] += 1 if start else -1
        self.snapshot.degraded[node] = self.seeded_degraded[node] or self.faults_on[node] > 0
        if self.snapshot.degraded[node] == was:
            return  # seeded degraded, or another fault still holds it
        for name in sorted(n for n, s in self.running.items() if node in s.nodes):
            state = self.running[name]
            if start:
                state.affected = True
                if self.restart is not None and self.rule.kind == "weighed":
                    healthy_step_s = state.step_s
                    self._replace_traffic(name, state, state.plan, now)
                    if self._restart_pays(state, healthy_step_s) and not self._restarted(name, now):
                        self.wants_move.add(name)
                    continue
                if self.restart is not None:
                    if self._restarted(name, now):
                        continue
                    self.wants_move.add(name)
            self._replace_traffic(name, state, state.plan, now)

    def _move_when_room(self, now: float) -> None:
        """Return nothing; restart the jobs that wait for room off their faults once it exists
        (those no longer on a faulty node, or gone, are forgotten)."""
        for name in sorted(self.wants_move):
            state = self.running.get(name)
            faulty = state is not None and any(self.faults_on[i] for i in state.nodes)
            if not faulty or self._restarted(name, now):
                self.wants_move.discard(name)

    def _redo_steps(self, state: _Running) -> float:
        """Return the steps ``state`` has done since its last checkpoint (a restart redoes them)."""
        assert self.restart is not None
        done = state.job.steps - state.remaining
        return done % max(1.0, self.restart.checkpoint_interval_s / state.ideal_step_s)

    def _restart_pays(self, state: _Running, healthy_step_s: float) -> bool:
        """Return whether the weighed rule restarts ``state`` (now timed on its degraded links).

        Weighed as the operator weighs (``restart-when-it-pays``), with what it knows: the
        slowdown (here the model's own, as if the job declared its inter-node share exactly),
        the fault's expected length, half a checkpoint interval redone, the job's remaining
        time unknown.
        """
        assert self.restart is not None
        return weigh_restart(
            slowdown=state.step_s / healthy_step_s,
            redo_s=self.restart.checkpoint_interval_s / 2,
            restore_s=self.restart.restore_s,
            expected_fault_s=self.rule.expected_fault_s,
        ).pays

    def _replace_traffic(self, name: str, state: _Running, plan: GangPlan, now: float) -> None:
        """Return nothing; move ``name`` onto ``plan`` (or re-time it where it is) from ``now``."""
        self._advance(state, now)
        affected = self._change_flows(name, state.traffic, -1)
        state.plan = plan
        state.nodes = self._nodes(plan)
        state.traffic = self._traffic(state.job, plan)
        affected |= self._change_flows(name, state.traffic, 1)
        self._retime(affected | {name}, now)

    def _restarted(self, name: str, now: float) -> bool:
        """Return whether ``name`` restarted away from every fault-degraded node.

        Plans it again at once with its own nodes free; keeps it where it is if no plan avoids
        the faults.
        """
        assert self.restart is not None
        state = self.running[name]
        self._advance(state, now)
        self._take(state.plan, sign=-1)
        started = time.perf_counter()
        result = self.place(
            self.snapshot, state.job.request(), 0.0, self._uplink_load(), self._typical_gpus()
        )
        self.run.plan_ms.append((time.perf_counter() - started) * 1e3)
        if (
            not isinstance(result, GangPlan)
            or any(self.faults_on[i] for i in self._nodes(result))
            or not self._faster(state, result)
        ):
            self._take(state.plan, sign=1)
            return False
        self._take(result, sign=1)
        state.remaining += self._redo_steps(state)
        state.updated_s = now + self.restart.restore_s
        state.restarts += 1
        self._replace_traffic(name, state, result, now)
        return True

    def _faster(self, state: _Running, plan: GangPlan) -> bool:
        """Return whether ``plan`` runs ``state``'s collectives faster than where it runs, as
        the placer judges it before it offers room (:func:`move_gain`: its own cost model, the
        degraded links at the bandwidth they keep, which the fabric agent measures)."""
        index_of = self.topology.index_of
        here = [index_of[n] for n in state.plan.nodes_by_rank]
        return move_gain(
            self.topology,
            here,
            [index_of[n] for n in plan.nodes_by_rank],
            plan.gpus_per_worker,
            degraded=frozenset(i for i in here if self.snapshot.degraded[i]),
            kept=self.constants.cost.degraded_bandwidth_factor,
        ).faster

    def _take(self, plan: GangPlan, *, sign: int) -> None:
        """Return nothing; allocate (``sign`` 1) or release (-1) ``plan`` and the slot counts."""
        index_of = self.topology.index_of
        nodes = {index_of[n] for n in plan.nodes_by_rank}
        free = self.snapshot.free_gpus
        ok = self.snapshot.schedulable
        before = {g: sum(free[i] // g for i in nodes if ok[i]) for g in self.free_slots}
        if sign > 0:
            self.snapshot.allocate(plan)
        else:
            self.snapshot.release(plan)
        for g in self.free_slots:
            self.free_slots[g] += sum(free[i] // g for i in nodes if ok[i]) - before[g]

    def _finish(self, name: str, now: float) -> None:
        state = self.running.pop(name)
        elapsed = now - state.updated_s
        comm_total = state.comm_total + (
            elapsed / state.step_s * state.comm_s if state.step_s else 0
        )
        run_s = now - state.start_s
        job = state.job
        self.run.outcomes.append(
            JobOutcome(
                name=name,
                arrival_s=job.arrival_s,
                start_s=state.start_s,
                end_s=now,
                gpus=job.gpus,
                comm_share=comm_total / run_s if run_s > 0 else 0.0,
                stretch=run_s / (job.steps * state.ideal_step_s) if job.steps else 1.0,
                leaves=state.plan.leaves_spanned,
                affected=state.affected,
                restarts=state.restarts,
                pp_links=_segments(state.pp_links, now),
            )
        )
        self.run.last_end_s = max(self.run.last_end_s, now)
        self._take(state.plan, sign=-1)
        self.allocated_gpus -= job.gpus
        self._retime(self._change_flows(name, state.traffic, -1), now)

    def _drain_queue(self, now: float) -> None:
        """Return nothing; start waiting gangs in arrival order (backfill until a reservation)."""
        still: list[str] = []
        blocked = False
        for name in self.queue:
            if blocked or not self._attempt(name, now):
                still.append(name)
                if now - self.jobs[name].arrival_s >= self.constants.reserve_after_s:
                    blocked = True
        self.queue = still

    def replay(self) -> SimRun:
        """Return the run after every event."""
        run = self.run
        last = run.first_arrival_s
        while self.events:
            now, _, kind, name, version = heapq.heappop(self.events)
            if kind == "end" and (
                name not in self.running or self.running[name].version != version
            ):
                continue
            run.busy_gpu_s += self.allocated_gpus * (now - last)
            last = now
            if kind in ("degrade", "recover"):
                self._link_fault(int(name), now, start=kind == "degrade")
            elif kind == "arrive":
                run.fragmentation.append(
                    stranded_fraction(self.cluster, self.snapshot, self.median)
                )
                bisect.insort(self.arrived_gpus, self.jobs[name].gpus)
                self.queue.append(name)
            else:
                self._finish(name, now)
            self._drain_queue(now)
            if self.wants_move and not self.queue:
                self._move_when_room(now)
        run.unfinished = list(self.queue)
        return run


def _segments(
    marks: Sequence[tuple[float, float, float]], end_s: float
) -> tuple[tuple[float, float, float], ...]:
    """Return (seconds, latency, bandwidth) per stretch between ``marks`` (each from its time)."""
    out = []
    for k, (start, alpha, bandwidth) in enumerate(marks):
        until = marks[k + 1][0] if k + 1 < len(marks) else end_s
        if until > start:
            out.append((until - start, alpha, bandwidth))
    return tuple(out)


def _bursts(traffic: JobTraffic) -> dict[Uplink, float]:
    """Return per uplink the most flows one of ``traffic``'s collectives sends across at once."""
    peak: dict[Uplink, float] = {}
    for collective in traffic.collectives:
        for uplink, own in collective.uplinks:
            peak[uplink] = max(peak.get(uplink, 0.0), own)
    return peak


def simulate(
    cluster: Cluster,
    trace: Sequence[SimJob],
    place: PlaceFn,
    *,
    constants: SimConstants = DEFAULT_CONSTANTS,
    uplink_aware: bool = False,
    faults: Sequence[LinkFault] = (),
    restart: RestartCost | None = None,
    restart_rule: RestartRule | None = None,
    record_pp_links: bool = False,
) -> SimRun:
    """Return what happens when ``trace`` is replayed with ``place`` on ``cluster``.

    ``uplink_aware``: hand the placer the running jobs' uplink load (else ``None``).
    ``faults``: links that degrade during the run; ``restart``: restart a job that meets one
    elsewhere at that cost (else it keeps running slow), when ``restart_rule`` says so (default:
    always). ``record_pp_links``: record each job's stage hop (:attr:`JobOutcome.pp_links`).
    """
    return _Simulation(
        cluster,
        trace,
        place,
        constants,
        uplink_aware=uplink_aware,
        faults=faults,
        restart=restart,
        restart_rule=restart_rule,
        record_pp_links=record_pp_links,
    ).replay()
