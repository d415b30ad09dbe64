"""The write pipeline of the gang placer: persist a plan, then release its gang.

A cycle's plans are written by a small pool (``PERSIST_CONCURRENCY``) while the cycle plans the
next gangs; a gang's releases (one patch per pod: narrow its node affinity to the planned domain,
tell it its rails and plan level, drop our gate) go to the same pool behind every plan write of
the cycle, and only once the gang's own plan was written. Every write is fenced: a placer that
no longer leads in its term writes nothing (``NotLeadingError``), and a placement is patched only
while the job still holds the one the write was computed from. Errors are logged, never raised
into the cycle.

This module is the placer's I/O and decides nothing: what to write, and when, is the policies'
(:mod:`tpfabric_scheduler.policy`), applied by :mod:`tpfabric_scheduler.apply`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_core.api import GANG_GATE
from tpfabric_core.api.placement import StoredPlacement, prepare_drop, prepare_write
from tpfabric_core.placement.steering import narrow_affinity, plan_expressions, remaining_gates
from tpfabric_core.placement.topology import LevelSpec
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_core.rail_ports import PLAN_LEVEL_ANNOTATION, RAILS_ANNOTATION, pod_rails
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord

__all__ = ["NotLeadingError", "WritePipeline"]

log = logging.getLogger("tpfabric.scheduler.placer")

#: a gang's release writes in flight at once (the API client's pool holds as many connections)
RELEASE_CONCURRENCY = 16
#: gangs whose plan is persisted and released at once while the cycle plans the next ones
PERSIST_CONCURRENCY = 4
#: a released pod the store still shows gated (its watch event not in yet) is not released
#: again for this long
RELEASED_MEMORY_SECONDS = 30.0


class NotLeadingError(RuntimeError):
    """A write was about to go out from a placer that no longer leads in its term."""


@dataclass(eq=False)
class WritePipeline:
    """Persists plans and releases gangs for one placer (its term, its lease, its pools)."""

    store: ClusterStore
    writer: KubeWriter
    metrics: Metrics
    #: the topology levels a release narrows each pod's required node affinity to
    levels: tuple[LevelSpec, ...]
    clock: Callable[[], float]
    #: whether the placer still leads in its term: every write is fenced by it
    leading: Callable[[], bool]
    #: the lease term written into every placement
    term: int
    #: pod uid -> monotonic time this placer ungated it (until the store sees it ungated)
    released: dict[str, float] = field(default_factory=dict, init=False)
    #: pod uid -> its key (``namespace/name``) for each of ``released``: looked up alone, not
    #: found among every pod of the store
    _released_keys: dict[str, str] = field(default_factory=dict, init=False)
    #: the cycle's persisting pool (None outside a cycle: persist inline)
    _persisting: ThreadPoolExecutor | None = field(default=None, init=False)
    _persisted: list[Future[bool]] = field(default_factory=list, init=False)
    #: the cycle's releases, sent once its plans are written: (job, its plan's write, action)
    _to_release: list[tuple[JobRecord, Future[bool] | None, Callable[[], None]]] = field(
        default_factory=list, init=False
    )
    #: the pod writes of every gang being released share this bound
    _releasing: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        self._releasing = ThreadPoolExecutor(RELEASE_CONCURRENCY, thread_name_prefix="release")

    @contextmanager
    def cycle(self) -> Iterator[None]:
        """Return a context in which plan writes go to the cycle's pool; on leaving it, queue
        the cycle's releases behind them and wait for every write."""
        # planned gangs are persisted by a small pool while the loop plans the next ones (each
        # plan is already taken from the cycle's snapshot); their releases go to the same pool
        # once the loop is done, behind every plan of the cycle: a plan is what the operator
        # waits for to create a gang's other workers released, and it must not queue behind
        # the release writes of the gangs planned before it. The cycle ends when every write
        # has returned, so the next one starts from what the API server holds
        self._persisting = ThreadPoolExecutor(PERSIST_CONCURRENCY, thread_name_prefix="persist")
        try:
            yield
        finally:
            self._send_releases()
            self._persisting.shutdown(wait=True)
            self._persisting = None
            for future in self._persisted:
                future.result()  # each logs its own errors; this only re-raises the unexpected
            self._persisted = []

    def persist(self, job: JobRecord, action: Callable[[], None]) -> Future[bool]:
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

    def then_release(
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

    def _note_released(self, pod: PodRecord) -> None:
        """Remember that this placer ungated ``pod`` (until the store sees it ungated)."""
        self._released_keys[pod.uid] = pod.key
        self.released[pod.uid] = time.monotonic()

    def forget_released(self) -> None:
        """Forget released pods the store sees ungated (or gone), and any after the memory."""
        if not self.released:
            return
        now = time.monotonic()
        released = list(self.released.items())  # releases of this cycle may still be going
        keys = self._released_keys
        with self.store.lock:
            pods = self.store.pods
            gated = {
                uid
                for uid, _ in released
                if (pod := pods.get(keys.get(uid, ""))) is not None and pod.uid == uid and pod.gated
            }
        for uid, when in released:
            if uid not in gated or now - when > RELEASED_MEMORY_SECONDS:
                self.released.pop(uid, None)
                keys.pop(uid, None)

    def write(
        self,
        job: JobRecord,
        previous: StoredPlacement,
        placement: Mapping[str, Any],
        event: str,
    ) -> StoredPlacement:
        """Persist ``placement`` for ``job`` over ``previous`` (if its meaning changed, see
        :func:`~tpfabric_core.api.placement.prepare_write`) and record ``event`` (if any);
        return the placement as written."""
        write = prepare_write(previous, placement, now=self.clock(), term=self.term)
        written = write.written  # read once: the store, the metrics and the Event share it
        if write.send:
            self.fence()
            self.writer.patch_job_status(
                job.namespace,
                job.name,
                write.patch,
                uid=job.uid,
                tests=[write.test],
                plural=job.plural,
            )
            with self.store.lock:
                self.store.record_plan(job, written)
            self.metrics.placement_written(previous, written, self.clock())
        if event:
            self.event(job, event, written)
        return written

    def drop(self, job: JobRecord, previous: StoredPlacement) -> None:
        """Remove ``previous``, the placement of ``job``, while it is still the one stored (the
        same compare-and-swap test and fence as every other placement write)."""
        drop = prepare_drop(previous)
        self.fence()
        self.writer.patch_job_status(
            job.namespace, job.name, drop.patch, uid=job.uid, tests=[drop.test], plural=job.plural
        )
        with self.store.lock:
            self.store.record_plan(job, None)

    def delete_pods(self, pods: Iterable[PodRecord]) -> int:
        """Delete ``pods`` (those not being deleted already), each by name and uid: a pod made
        again under the same name since stays. RELEASE_CONCURRENCY at a time, every delete
        fenced; the first error is raised once all were tried. Return how many were asked.

        One delete per pod, never a delete-collection by label: the admission policy of the
        chart lets this account delete only a pod it names by uid, and a label selector would
        also take a pod someone else labelled so."""
        targets = [p for p in pods if not p.deleting]

        def delete(pod: PodRecord) -> None:
            self.fence()
            self.writer.delete_pod(pod.namespace, pod.name, pod.uid)

        self._together(delete, targets)
        return len(targets)

    def _together(self, write: Callable[[PodRecord], None], pods: list[PodRecord]) -> None:
        """Run ``write`` for every pod, RELEASE_CONCURRENCY at a time over every gang being
        written (one pod: inline); raise the first error once all were tried."""
        if len(pods) <= 1:
            for pod in pods:
                write(pod)
        else:
            for _ in self._releasing.map(write, pods):
                pass  # re-raises the first error

    def fence(self) -> None:
        """Raise NotLeadingError unless this placer still leads in its term (every write)."""
        if not self.leading():
            raise NotLeadingError(f"this placer no longer leads in term {self.term}")

    def event(self, job: JobRecord, event: str, placement: StoredPlacement) -> None:
        """Record ``event`` on the job, worded by ``placement``'s message."""
        kind = "Warning" if event in ("GangReplanning", "InvalidTopology") else "Normal"
        self.fence()
        self.writer.job_event(job, kind, event, placement.message)

    def tell(self, job: JobRecord, pods: Iterable[PodRecord], words: str) -> None:
        """Post one ``GangWaiting`` Event on each of ``pods`` in ``words``, on the cycle's pool
        (``kubectl describe pod`` then says why the pod waits, not only ``SchedulingGated``)."""
        told = list(pods)

        def tell() -> None:
            for pod in told:
                self.fence()
                self.writer.pod_event(pod, "GangWaiting", words)

        self.persist(job, tell)

    def plan_annotations(
        self, placement: StoredPlacement, pods: list[PodRecord]
    ) -> dict[str, dict[str, str]]:
        """Return what each pod (by uid) is told of its plan: its rails on its planned node
        (``tpfabric.io/rails``, pinned by port GUID where the node's rail map gives them) and
        the level whose one domain holds the gang (``tpfabric.io/plan-level``)."""
        nodes = placement.nodes
        level = placement.plan_level
        result: dict[str, dict[str, str]] = {}
        with self.store.lock:
            for pod in pods:
                notes = {PLAN_LEVEL_ANNOTATION: level} if level else {}
                rank = pod.worker_index
                record = (
                    self.store.nodes.get(nodes[rank])
                    if rank is not None and 0 <= rank < len(nodes)
                    else None
                )
                if record is not None:
                    gpus = pod.requests.get(GPU_RESOURCE, 0)
                    rails = pod_rails(record.rails, gpus, record.allocatable.get(GPU_RESOURCE, 0))
                    if rails is not None:
                        notes[RAILS_ANNOTATION] = rails
                result[pod.uid] = notes
        return result

    def release(self, job: JobRecord, placement: StoredPlacement, pods: list[PodRecord]) -> None:
        """Constrain every gated pod to the planned domain (every level's label), tell it its
        rails and plan level (annotations) and ungate it."""
        expressions = plan_expressions(placement, self.levels) or []
        told = self.plan_annotations(placement, pods)

        def release(pod: PodRecord) -> None:
            self.fence()
            notes = told.get(pod.uid, {})
            if pod.gates and any(g.get("name") == GANG_GATE for g in pod.gates):
                # one write, from what the store knows; refused if the pod changed meanwhile
                before = pod.scheduling.get("affinity")
                affinity = narrow_affinity(before, expressions) if expressions else None
                started = time.perf_counter()
                try:
                    self.writer.release_known_pod(
                        pod, affinity, remaining_gates(list(pod.gates)), annotations=notes
                    )
                except ApiException as err:
                    if err.status not in (409, 422):
                        raise
                else:
                    self.metrics.release_write_seconds.observe(time.perf_counter() - started)
                    self._note_released(pod)
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
            self.fence()
            self.writer.release_pod(
                pod.namespace,
                pod.name,
                current["metadata"]["resourceVersion"],
                affinity,
                remaining_gates(gates),
                annotations=notes,
                annotated=bool(current["metadata"].get("annotations")),
            )
            self._note_released(pod)

        # a gang's writes go out together (RELEASE_CONCURRENCY at a time over every gang being
        # persisted): one by one, a 256-worker gang waits 256 round trips before kube-scheduler
        # sees its last worker
        self._together(release, pods)
        log.info("job %s: released %d worker pod(s)", job.key, len(pods))
