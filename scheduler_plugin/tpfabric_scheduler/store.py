"""The extender's in-memory view of the cluster: nodes, pods and TensorParallelJobs.

Fed by list+watch (:mod:`.kube`), read by the extender's hot path and the gang placer. Updates
are O(1) per event: per-node GPU/RDMA use is kept incrementally, so answering "what is free"
never walks the pods. All methods must be called with ``lock`` held by the caller when threads
mix. The pod and job records and their indexes are :mod:`.records`'; a node's record, with its
fabric health, is :mod:`.node_record`'s. Pure data: no I/O here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tpfabric_core.api import KIND
from tpfabric_core.api.placement import StoredPlacement, finished, read_placement
from tpfabric_core.fabric.agent_heartbeat import HeartbeatLease, Heartbeats, node_of_lease
from tpfabric_scheduler.freed import FreedLog
from tpfabric_scheduler.node_record import NodeRecord, index_nodes
from tpfabric_scheduler.plan_memo import PlanMemo
from tpfabric_scheduler.records import (
    JobRecord,
    PodIndex,
    PodRecord,
    account,
    capacity_facts,
    frees,
    gang_key,
    holds_nodes,
    index_jobs,
    index_pods,
    planning_facts,
)

#: the records are the store's vocabulary: importable from here, defined in :mod:`.records` and
#: :mod:`.node_record`
__all__ = [
    "ClusterStore",
    "JobRecord",
    "NodeRecord",
    "PodIndex",
    "PodRecord",
    "gang_key",
    "index_jobs",
    "index_nodes",
    "index_pods",
]


class ClusterStore:
    """Nodes, pods and jobs by key, with per-node resource use kept incrementally."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.jobs: dict[str, JobRecord] = {}
        #: the kinds of record ``jobs`` may hold (TensorParallelJob, Gang)
        self._kinds: set[str] = set()
        self.used: dict[str, dict[str, int]] = {}  # node -> resource -> amount
        self.workers: dict[str, dict[str, PodRecord]] = {}  # job key -> pod key -> pod
        #: node -> (protocol, hostPort) -> pods holding it (only nodes where some pod has one)
        self.ports_used: dict[str, dict[tuple[str, int], int]] = {}
        #: bumped whenever the node set or a node's labels change (topology must be rebuilt)
        self.topology_generation = 0
        #: bumped on every change (the placer's "something happened" signal)
        self.generation = 0
        #: bumped when free capacity may have changed: nodes, pods bound/unbound/gone, plans
        self.capacity_generation = 0
        #: where capacity was freed, by generation (:mod:`.freed`)
        self.freed = FreedLog()
        #: plans written by the placer that the job watch has not delivered yet: job uid -> plan
        self.fresh_plans: dict[str, StoredPlacement] = {}
        #: the namespaces that opted in to gangs of other controllers (``tpfabric.io/gangs=
        #: enabled``); None while they are not watched (every namespace counts as opted in)
        self.gang_namespaces: frozenset[str] | None = None
        #: monotonic time the placer loop last finished a cycle (liveness); None before the first
        self.placer_heartbeat: float | None = None
        #: the fabric agents' heartbeats (their Leases, as this process saw them renewed)
        self.heartbeats = Heartbeats()
        #: the nodes whose fabric agent is silent: their link health is unknown, and new plans
        #: treat them as degraded (set by :mod:`.agent_silence`)
        self.silent_nodes: frozenset[str] = frozenset()
        #: the clock heartbeats are timed by (monotonic seconds)
        self.clock: Callable[[], float] = time.monotonic
        self._reservations: tuple[int, dict[str, tuple[tuple[str, int], ...]]] = (-1, {})
        #: what each job's plan reads, remembered from one change of it to the next
        #: (:class:`~.plan_memo.PlanMemo`): shared with every view, each entry checked by the
        #: identity of the records it was read from (the store replaces them, never changes them)
        self._memo = PlanMemo()

    def view(self) -> ClusterStore:
        """Return a copy of the store to read without its lock (call with the lock held).

        O(nodes + jobs) references: the inner maps (a node's use, a job's workers) are shared,
        and the store replaces them rather than changing them (:func:`~.records.account`);
        records are never changed. The placer plans on a view, so that the extender's answers
        (which take the lock) never wait for a cycle's reading of 5,000 nodes and every job. A
        view holds no pods by key (the placer reads a job's pods from ``workers``), and nobody
        writes to it but what it caches itself.
        """
        copy = ClusterStore()
        copy.nodes = dict(self.nodes)
        copy.jobs = dict(self.jobs)
        copy._kinds = set(self._kinds)
        copy.used = dict(self.used)
        copy.workers = dict(self.workers)
        copy.ports_used = dict(self.ports_used)
        copy.fresh_plans = dict(self.fresh_plans)
        copy.gang_namespaces = self.gang_namespaces
        copy.silent_nodes = self.silent_nodes
        copy.topology_generation = self.topology_generation
        copy.generation = self.generation
        copy.capacity_generation = self.capacity_generation
        copy.freed = self.freed.view()
        copy._reservations = self._reservations  # immutable once made
        copy._memo = self._memo  # every entry names the records it was read from
        return copy

    @property
    def freed_generation(self) -> int:
        """Return the generation of capacity freed: bumped only when capacity may have grown for
        a waiting gang (a pod binding or a new plan never lets one fit, :mod:`.freed`)."""
        return self.freed.generation

    # -- nodes -------------------------------------------------------------------------------

    def upsert_node(self, obj: dict[str, Any]) -> None:
        """Add or replace a node."""
        self.put_node(NodeRecord.from_object(obj))

    def put_node(self, node: NodeRecord) -> None:
        """Add or replace a node record (parsed outside the lock)."""
        old = self.nodes.get(node.name)
        reshaped = old is None or old.labels != node.labels
        if reshaped:
            self.topology_generation += 1
        if old != node:
            self.capacity_generation += 1
            # a domain changed shape: what could fit anywhere is asked again
            self.freed.record(None if reshaped else node.name)
        self.nodes[node.name] = node
        self.generation += 1

    def delete_node(self, name: str) -> None:
        """Forget a node."""
        if self.nodes.pop(name, None) is not None:
            self.topology_generation += 1
            self.capacity_generation += 1
            self.freed.record(None)  # a domain changed shape: what could fit is asked again
            self.generation += 1

    # -- fabric agents' heartbeats ---------------------------------------------------------

    def install_heartbeats(self, leases: list[HeartbeatLease]) -> None:
        """Replace every heartbeat (after a list of the agents' Leases)."""
        self.heartbeats.replace(leases, self.clock())

    def put_heartbeat(self, lease: HeartbeatLease) -> None:
        """Note a heartbeat Lease as its watch delivered it."""
        self.heartbeats.observe(lease, self.clock())

    def delete_heartbeat(self, key: str) -> None:
        """Forget the heartbeat of the Lease ``namespace/name`` (deleted)."""
        node = node_of_lease(key.split("/", 1)[-1])
        if node is not None:
            self.heartbeats.forget(node)

    def mark_silent(self, nodes: frozenset[str]) -> bool:
        """Set the nodes whose agent is silent; return whether that changed (the snapshot's
        health changes with it: what may fit is looked at again)."""
        if nodes == self.silent_nodes:
            return False
        changed = nodes ^ self.silent_nodes
        self.silent_nodes = nodes
        self.capacity_generation += 1
        # a node whose agent speaks again may now be used by a gang that avoids degraded nodes
        self.freed.record(*sorted(changed))
        self.generation += 1
        return True

    def replace_nodes(self, objs: list[dict[str, Any]]) -> None:
        """Replace every node (after a relist)."""
        self.install_nodes(index_nodes(map(NodeRecord.from_object, objs)))

    # -- namespaces opted in to gangs ---------------------------------------------------------

    def gangs_allowed_in(self, namespace: str) -> bool:
        """Return whether Gang records of ``namespace`` may be planned (it opted in)."""
        return self.gang_namespaces is None or namespace in self.gang_namespaces

    def install_gang_namespaces(self, names: frozenset[str]) -> frozenset[str] | None:
        """Replace the opted-in namespaces (after a list); return the set replaced."""
        old, self.gang_namespaces = self.gang_namespaces, names
        self.generation += 1
        self.capacity_generation += 1
        return old

    def put_gang_namespace(self, name: str) -> None:
        """Note a namespace that opted in."""
        self.gang_namespaces = (self.gang_namespaces or frozenset()) | {name}
        self.generation += 1
        self.capacity_generation += 1

    def delete_gang_namespace(self, name: str) -> None:
        """Forget a namespace that opted out (or was deleted)."""
        self.gang_namespaces = (self.gang_namespaces or frozenset()) - {name}
        self.generation += 1

    def install_nodes(self, nodes: dict[str, NodeRecord]) -> dict[str, NodeRecord]:
        """Replace every node with ``nodes`` (from :func:`index_nodes`): O(1) under the lock.

        Return the nodes replaced, for the caller to free outside the lock.
        """
        old, self.nodes = self.nodes, nodes
        self.topology_generation += 1
        self.capacity_generation += 1
        self.freed.record(None)
        self.generation += 1
        return old

    # -- pods --------------------------------------------------------------------------------

    def _account(self, pod: PodRecord, sign: int) -> None:
        account(self.used, self.ports_used, self.workers, pod, sign)

    def upsert_pod(self, obj: dict[str, Any]) -> None:
        """Add or replace a pod, keeping per-node use current."""
        self.put_pod(PodRecord.from_object(obj))

    def put_pod(self, pod: PodRecord) -> None:
        """Add or replace a pod record (parsed outside the lock), keeping per-node use current."""
        old = self.pods.get(pod.key)
        if old is not None:
            self._account(old, -1)
        self.pods[pod.key] = pod
        self._account(pod, +1)
        if old is None or capacity_facts(old) != capacity_facts(pod):
            self.capacity_generation += 1
            if old is not None and frees(old, pod):
                self.freed.record(*self._freed_by(old, pod))
        self.generation += 1

    def delete_pod(self, key: str) -> None:
        """Forget a pod."""
        old = self.pods.pop(key, None)
        if old is not None:
            self._account(old, -1)
            self.capacity_generation += 1
            if old.node is not None and not old.terminal:
                self.freed.record(old.node)
            self.generation += 1

    def replace_pods(self, objs: list[dict[str, Any]]) -> None:
        """Replace every pod (after a relist)."""
        self.install_pods(index_pods(map(PodRecord.from_object, objs)))

    def install_pods(self, index: PodIndex) -> PodIndex:
        """Replace every pod with ``index`` (from :func:`index_pods`, built outside the lock):
        O(1) under the lock, so a relist of 50,000 pods never holds the extender's requests.

        Return the index replaced: freeing 50,000 records at once is one long deallocation that
        holds the interpreter, so the caller frees it outside the lock, piece by piece.
        """
        old = PodIndex(self.pods, self.used, self.workers, self.ports_used)
        self.pods, self.used = index.pods, index.used
        self.workers, self.ports_used = index.workers, index.ports_used
        self.capacity_generation += 1
        self.freed.record(None)
        self.generation += 1
        return old

    # -- jobs --------------------------------------------------------------------------------

    def upsert_job(self, obj: dict[str, Any]) -> None:
        """Add or replace a TensorParallelJob."""
        self.put_job(JobRecord.from_object(obj))

    def put_job(self, job: JobRecord) -> None:
        """Add or replace a TensorParallelJob record (parsed and validated outside the lock)."""
        old = self.jobs.get(job.key)
        # read on every event, not only when the plan went: placement_of also forgets the
        # placer's fresh write once the watch has delivered it (a later event must not find it)
        held = self.placement_of(old).nodes if old is not None else []
        self.jobs[job.key] = job
        self._kinds.add(job.kind)
        if old is None or planning_facts(old) != planning_facts(job):
            self.capacity_generation += 1
            if old is not None and holds_nodes(old) and not holds_nodes(job):
                self.freed.record(*held)  # its plan's reservations went
        self.generation += 1

    def delete_job(self, key: str) -> None:
        """Forget a TensorParallelJob."""
        old = self.jobs.get(key)
        if old is not None:
            held = self.placement_of(old).nodes
            del self.jobs[key]
            self.fresh_plans.pop(old.uid, None)
            self.capacity_generation += 1
            self.freed.record(*held)  # its plan's reservations went (its pods go on their own)
            self.generation += 1

    def replace_jobs(self, objs: list[dict[str, Any]]) -> None:
        """Replace every job (after a relist)."""
        self.install_jobs(index_jobs(map(JobRecord.from_object, objs)))

    def install_jobs(self, jobs: dict[str, JobRecord], kind: str = KIND) -> dict[str, JobRecord]:
        """Replace every record of ``kind`` with ``jobs`` (from :func:`index_jobs`).

        O(1) under the lock while the store holds one kind only; with TensorParallelJobs and
        Gangs both, the other kind's records are copied over. Return the records replaced, for
        the caller to free outside the lock.
        """
        old = self.jobs
        if self._kinds <= {kind}:
            self.jobs = jobs
        else:
            self.jobs = {**{k: j for k, j in old.items() if j.kind != kind}, **jobs}
        # may name a kind no record has any more (a later install then copies, nothing else)
        self._kinds = (self._kinds - {kind}) | ({kind} if jobs else set())
        self.capacity_generation += 1
        self.freed.record(None)
        self.generation += 1
        return old

    def _freed_by(self, old: PodRecord, new: PodRecord) -> list[str | None]:
        """Return the nodes where a pod's change (one that :func:`~.records.frees`) freed
        capacity: the node it left or finished on, or, for a worker that bound, the node its
        rank's reservation held."""
        if old.node is not None:
            return [old.node]
        job = self.jobs.get(new.job or "")
        planned = self.placement_of(job).nodes if job is not None else []
        rank = new.worker_index
        if rank is None or not 0 <= rank < len(planned):
            return [None]  # a reservation we cannot name: anywhere
        return [planned[rank]]

    # -- plans -------------------------------------------------------------------------------

    def record_plan(
        self, job: JobRecord, placement: StoredPlacement | Mapping[str, Any] | None
    ) -> None:
        """Remember a placement just written for ``job`` until its watch event arrives.

        Keyed by the job's uid, so a job deleted and created again under the same name never
        sees the old job's plan. ``None`` records that the plan was dropped.
        """
        fresh = read_placement(placement)
        held = self.placement_of(job).nodes
        self.fresh_plans[job.uid] = fresh
        self.generation += 1
        self.capacity_generation += 1
        if not fresh.planned:
            self.freed.record(*held)  # the dropped plan's reservations went

    def placement_of(self, job: JobRecord) -> StoredPlacement:
        """Return the job's placement: the placer's fresh write if the watch lags, else stored."""
        stored = job.placement
        fresh = self.fresh_plans.get(job.uid)
        if fresh is None:
            return stored
        if self._memo.same_plan(job.uid, stored, fresh):
            del self.fresh_plans[job.uid]  # the watch caught up
            return stored
        return fresh

    def holding_plans(self) -> Iterator[tuple[str, JobRecord, StoredPlacement]]:
        """Yield (key, job, placement) of every job whose plan holds nodes: valid, not
        suspended, not finished (a finished job holds nothing, whatever its plan says)."""
        memo = self._memo
        memo.trim(len(self.jobs))
        for key, job in self.jobs.items():
            placement = self.placement_of(job)
            kept = memo.holding.get(key)
            if kept is None or kept[0] is not job or kept[1] is not placement:
                kept = memo.holding[key] = (job, placement, _holds(job, placement))
            if kept[2]:
                yield key, job, placement

    def reservations(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Return node -> every (job key, rank) of a planned job not bound yet that the plan
        puts there, in job and rank order.

        A planned rank holds its node until its pod binds there (or the plan is dropped), also
        while the rank's pod is missing (a replacement in its backoff). Every rank counts:
        ranks of a gang whose workers take part of a node (4-GPU workers on 8-GPU nodes) share
        it, each holding its own demand. Cached per ``capacity_generation``: O(planned ranks)
        once per change, O(1) after that.
        """
        generation, cached = self._reservations
        if generation == self.capacity_generation:
            return cached
        held: dict[str, list[tuple[str, int]]] = {}
        for key, _, placement in self.holding_plans():
            pods = self.workers.get(key)
            kept = self._memo.unbound.get(key)
            if kept is not None and kept[0] is placement and kept[1] is pods:
                ranks = kept[2]
            else:
                # a rank holds its node unless its pod is bound there or has finished
                settled = {
                    pod.worker_index
                    for pod in (pods or {}).values()
                    if pod.node is not None or pod.terminal
                }
                ranks = tuple(
                    (rank, node) for rank, node in enumerate(placement.nodes) if rank not in settled
                )
                self._memo.unbound[key] = (placement, pods, ranks)
            for rank, node in ranks:
                held.setdefault(node, []).append((key, rank))
        frozen = {node: tuple(holders) for node, holders in held.items()}
        self._reservations = (self.capacity_generation, frozen)
        return frozen

    # -- queries -----------------------------------------------------------------------------

    def free(self, node: str, resource: str) -> int:
        """Return the amount of ``resource`` allocatable on ``node`` and not used by bound pods."""
        record = self.nodes.get(node)
        if record is None:
            return 0
        return record.allocatable.get(resource, 0) - self.used.get(node, {}).get(resource, 0)


def _holds(job: JobRecord, placement: StoredPlacement) -> bool:
    """Return whether ``job``'s ``placement`` holds nodes (:meth:`ClusterStore.holding_plans`)."""
    if job.job is None or job.job.spec.suspend:
        return False
    return not finished(job.raw_status) and placement.planned
