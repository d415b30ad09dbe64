"""The gang placer: one plan for a whole job on one consistent snapshot, persisted, then released.

For every TensorParallelJob whose worker pods all exist and are still gated:

1. with the store locked, build a capacity snapshot (free = allocatable - bound pods - workers of
   other planned jobs not bound yet) and ask the engine for a whole plan;
2. persist it in the job's ``status.placement`` (so a restart of any component finds it);
3. release each pod: narrow its required node affinity to the planned domain and drop our gate.

A job whose placement is already persisted skips to step 3 (a restart mid-release finishes the
same plan; nothing is planned twice). If no plan fits, the pods stay gated and the placement says
why, per candidate domain; the job is retried whenever the store changes. The placer owns
``status.placement`` and nothing else of the job.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_core import labels
from tpfabric_core.placement.planner import plan_gang
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot, NodeState, Taint, TaintEffect
from tpfabric_core.placement.topology import DEFAULT_LEVELS, ClusterTopology, LevelSpec
from tpfabric_scheduler.gang_request import gang_request
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.steering import domain_expressions, narrow_affinity, remaining_gates
from tpfabric_scheduler.store import (
    GANG_GATE,
    GPU_RESOURCE,
    ClusterStore,
    JobRecord,
    PodRecord,
)

__all__ = ["GangPlacer", "PlacementWork"]

log = logging.getLogger("tpfabric.scheduler.placer")


def _now_rfc3339(clock: Callable[[], float]) -> str:
    return dt.datetime.fromtimestamp(clock(), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class PlacementWork:
    """One job the placer must act on, with what it saw under the store lock."""

    job: JobRecord
    gated: list[PodRecord]
    persisted: dict[str, Any] | None  # the persisted Planned placement, if any


class GangPlacer:
    """Plans, persists and releases gangs; ``run_cycle`` is called whenever the store changes."""

    def __init__(
        self,
        store: ClusterStore,
        writer: KubeWriter,
        metrics: Metrics,
        *,
        levels: tuple[LevelSpec, ...] = DEFAULT_LEVELS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.writer = writer
        self.metrics = metrics
        self.levels = levels
        self.clock = clock
        self._topology: ClusterTopology | None = None
        self._topology_generation = -1
        #: plans persisted by us that the store has not seen yet: job key -> placement
        self._recent: dict[str, dict[str, Any]] = {}

    # -- reading the store (lock held) -------------------------------------------------------

    def _topology_now(self) -> ClusterTopology:
        if self._topology is None or self._topology_generation != self.store.topology_generation:
            self._topology = ClusterTopology.from_node_labels(
                {name: node.labels for name, node in self.store.nodes.items()}, self.levels
            )
            self._topology_generation = self.store.topology_generation
        return self._topology

    def _placement_of(self, job: JobRecord) -> dict[str, Any]:
        """Return the job's placement: ours if the store has not seen it yet, else stored."""
        stored = job.raw_status.get("placement") or {}
        recent = self._recent.get(job.key)
        if recent is not None:
            if stored.get("nodes") == recent.get("nodes"):
                del self._recent[job.key]  # the watch caught up
            else:
                return recent
        return dict(stored)

    def pending_work(self) -> list[PlacementWork]:
        """Return the jobs whose whole gang exists and still has gated pods, oldest first."""
        work = []
        for key in sorted(self.store.jobs):
            job = self.store.jobs[key]
            if job.job is None or job.job.spec.suspend:
                continue
            members = self.store.workers.get(key, {})
            gated = sorted((p for p in members.values() if p.gated), key=lambda p: p.name)
            if not gated or len(members) < job.job.spec.workers:
                continue
            placement = self._placement_of(job)
            planned = placement if placement.get("state") == "Planned" else None
            work.append(PlacementWork(job=job, gated=gated, persisted=planned))
        return work

    def _reserved(self) -> dict[str, int]:
        """Return GPUs per node held for existing, not yet bound workers of planned jobs."""
        reserved: dict[str, int] = {}
        for key, members in self.store.workers.items():
            job = self.store.jobs.get(key)
            if job is None or job.job is None:
                continue
            nodes = self._placement_of(job).get("nodes") or []
            for pod in members.values():
                index = pod.worker_index
                unbound = pod.node is None and not pod.terminal
                if unbound and index is not None and index < len(nodes):
                    node = nodes[index]
                    reserved[node] = reserved.get(node, 0) + job.job.spec.gpus_per_worker
        return reserved

    def capacity_snapshot(self, rdma_resource: str) -> CapacitySnapshot:
        """Return free capacity per node, reservations of planned gangs taken off."""
        topology = self._topology_now()
        reserved = self._reserved()
        states = []
        for name, node in self.store.nodes.items():
            held = reserved.get(name, 0)
            states.append(
                NodeState(
                    name=name,
                    free_gpus=self.store.free(name, GPU_RESOURCE) - held,
                    free_rdma=self.store.free(name, rdma_resource),
                    ready=node.ready,
                    schedulable=not node.unschedulable,
                    taints=tuple(
                        Taint(key=k, value=v, effect=_effect(e)) for k, v, e in node.taints
                    ),
                    health="degraded" if node.labels.get(labels.HEALTH) == "degraded" else "ok",
                )
            )
        return CapacitySnapshot.from_node_states(topology, states)

    # -- one cycle ---------------------------------------------------------------------------

    def suspended_with_plan(self) -> list[JobRecord]:
        """Return suspended jobs that still carry a placement (to be dropped)."""
        return [
            job
            for job in self.store.jobs.values()
            if job.job is not None and job.job.spec.suspend and self._placement_of(job)
        ]

    def run_cycle(self) -> None:
        """Plan, persist and release every job that is ready for it; never raises."""
        with self.store.lock:
            work = self.pending_work()
            suspended = self.suspended_with_plan()
        for job in suspended:
            try:
                # a suspended job has no pods; resuming plans the gang afresh
                self.writer.patch_job_status(job.namespace, job.name, {"placement": None})
                self._recent.pop(job.key, None)
            except ApiException as err:
                log.warning("job %s: dropping the plan failed: %s", job.key, err.reason)
        waiting = 0
        for item in work:
            try:
                if item.persisted is not None:
                    self._release(item, item.persisted)
                elif not self._plan_and_persist(item):
                    waiting += 1
            except ApiException as err:
                # a conflict means the job or a pod changed under us: the next cycle sees it
                self.metrics.plans.labels("error").inc()
                log.warning("job %s: API error %s %s", item.job.key, err.status, err.reason)
            except Exception:
                self.metrics.plans.labels("error").inc()
                log.exception("job %s: placement failed", item.job.key)
        self.metrics.jobs_waiting.set(waiting)

    def _plan_and_persist(self, item: PlacementWork) -> bool:
        """Return True when the job got a plan (persisted and released), False when it waits."""
        job = item.job
        assert job.job is not None
        request = gang_request(job.key, job.job)
        previous = job.raw_status.get("placement") or {}
        waiting_since = _parse_rfc3339(previous.get("waitingSince")) or self.clock()
        with self.store.lock:
            snapshot = self.capacity_snapshot(job.job.spec.rdma.resource_name)
            started = time.perf_counter()
            result = plan_gang(
                snapshot, request, waited_seconds=max(0.0, self.clock() - waiting_since)
            )
            self.metrics.plan_seconds.observe(time.perf_counter() - started)
        if isinstance(result, Unschedulable):
            self.metrics.plans.labels("waiting").inc()
            placement = _waiting_placement(result, _now_of(waiting_since))
            if _changed(previous, placement):
                self.writer.patch_job_status(job.namespace, job.name, {"placement": placement})
                if previous.get("state") != "Waiting":
                    self.writer.job_event(
                        job,
                        "Normal",
                        "WaitingForCapacity",
                        result.summary,
                    )
                log.info("job %s waits: %s", job.key, result.summary)
            return False
        placement = _planned_placement(result, _now_rfc3339(self.clock))
        self.writer.patch_job_status(job.namespace, job.name, {"placement": placement})
        self._recent[job.key] = placement
        self.writer.job_event(job, "Normal", "GangPlaced", placement["message"])
        self.metrics.plans.labels("planned").inc()
        log.info("job %s planned: %s", job.key, result.explain().splitlines()[0])
        self._release(item, placement)
        return True

    def _release(self, item: PlacementWork, placement: dict[str, Any]) -> None:
        """Constrain every gated pod of the job to the planned domain and drop our gate."""
        level = str(placement["level"])
        domain = str(placement["domain"])
        level_key = next((s.label_key for s in self.levels if s.name == level), None)
        expressions = domain_expressions(level_key, domain) if level_key else []
        for pod in item.gated:
            current = self.writer.read_pod(pod.namespace, pod.name)
            spec = current.get("spec") or {}
            gates = spec.get("schedulingGates") or []
            if not any(g.get("name") == GANG_GATE for g in gates):
                continue  # released already (a restart mid-release)
            # a cluster-wide plan (spread, the last resort) narrows nothing
            affinity = narrow_affinity(spec.get("affinity"), expressions) if expressions else None
            self.writer.release_pod(
                pod.namespace,
                pod.name,
                current["metadata"]["resourceVersion"],
                affinity,
                remaining_gates(gates),
            )
        log.info("job %s: released %d worker pod(s)", item.job.key, len(item.gated))


def _effect(text: str) -> TaintEffect:
    if text == "NoExecute":
        return "NoExecute"
    if text == "PreferNoSchedule":
        return "PreferNoSchedule"
    return "NoSchedule"


def _now_of(timestamp: float) -> str:
    return _now_rfc3339(lambda: timestamp)


def _planned_placement(plan: GangPlan, now: str) -> dict[str, Any]:
    return {
        "state": "Planned",
        "message": plan.explain().splitlines()[0],
        "level": plan.level,
        "domain": plan.domain,
        "nodes": list(plan.nodes_by_rank),
        "hops": plan.hops,
        "modelledAllreduceUs": round(plan.cost.best_s * 1e6, 3),
        "plannedAt": now,
        "waitingSince": None,
        "reasons": [
            {"level": plan.level, "domain": plan.domain, "reason": r} for r in plan.reasons
        ],
    }


def _waiting_placement(result: Unschedulable, waiting_since: str) -> dict[str, Any]:
    return {
        "state": "Waiting",
        "message": result.summary,
        "level": None,
        "domain": None,
        "nodes": [],
        "hops": None,
        "modelledAllreduceUs": None,
        "plannedAt": None,
        "waitingSince": waiting_since,
        "reasons": [
            {"level": c.level, "domain": c.domain, "reason": str(c)} for c in result.candidates
        ],
    }


def _changed(previous: dict[str, Any], placement: dict[str, Any]) -> bool:
    """Return whether writing ``placement`` would change what is stored (ignoring nulls)."""
    keys = ("state", "message", "reasons", "waitingSince")
    return any(previous.get(k) != placement.get(k) for k in keys)
