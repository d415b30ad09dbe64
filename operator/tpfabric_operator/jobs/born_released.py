"""Workers born released: created onto their gang's plan, without the gate, when it exists.

The placer plans a gang once its first worker exists and releases its gated workers with one
patch each. A worker created after the plan, for the attempt the plan was made for, is created
as the placer would release it (:func:`born_released`: required node affinity narrowed to the
planned domain, our gate removed): one write instead of a create and a release patch. So a gang
with no word from the placer yet makes its first worker alone (:func:`create_gang`):

- a gang larger than one batch of creations waits for its plan inside the reconcile (up to
  ``plan_wait_seconds``; a few such gangs hold a handler thread each for a moment), then creates
  the rest, released, or gated without a plan;
- a burst of small gangs cannot do that: kopf runs reconciles on a few threads, and 100 gangs
  each holding one while its plan comes would stall the burst. So a small gang's first reconcile
  creates its first worker and returns; the reconcile that the plan wakes (the job's watch shows
  it, :meth:`PlanWaits.shown` says so) creates the rest released. The first reconcile after
  :attr:`PlanWaits.wait_seconds` asks the API server once for the plan (kopf's view of the job
  lags in a burst) and creates the rest released onto it, or gated without one, as the placer
  expects any gang it has not planned yet. Only a gang of which no worker exists yet begins such
  a wait: the rest of a gang whose creation was cut short (a refused worker, an operator restart)
  is created at once, not one worker at a time.

A first worker that is not made (refused, or its name taken by a pod that is not ours) ends the
round: the rest is not posted. The creation itself (one POST, a 409, the shared pool, the
backoff after a refusal) is the caller's: this module decides only what is created when, and
released onto which plan. It never patches a pod.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from tpfabric_core.api import ATTEMPT_LABEL, JOB_LABEL, WORKER_INDEX_LABEL
from tpfabric_core.api.placement import (
    INVALID,
    PLANNED,
    WAITING,
    StoredPlacement,
    placement_of_status,
    read_placement,
)
from tpfabric_core.input_limits import whole_number
from tpfabric_core.placement.born_released import release_onto_plan
from tpfabric_core.rdma_default import NodeOffer

__all__ = [
    "PLAN_ANSWERS",
    "Outcome",
    "PlanWaits",
    "born_released",
    "create_gang",
    "placement_state",
    "planned_for",
]

log = logging.getLogger("tpfabric.operator")

#: placement states that end a wait: a plan, or the placer's word that none comes soon
PLAN_ANSWERS = (PLANNED, WAITING, INVALID)
#: how often a big gang's wait reads the job's placement from the API server
PLAN_POLL_SECONDS = 0.05

Key = tuple[str, str]  # (job uid, attempt)
#: per worker: (the pod is ours now, the API server's words when it refused it)
Outcome = tuple[bool, str | None]


class PlacementReader(Protocol):
    """What the creation reads of the API server: the job's placement (None: the job is gone)."""

    def read_placement(
        self, namespace: str, name: str, uid: str | None
    ) -> StoredPlacement | None: ...


class PlanWaits:
    """The gangs (job uid, attempt) whose first worker waits for the plan, and since when."""

    def __init__(self, wait_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_seconds = wait_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._since: dict[str, tuple[str, float]] = {}  # job uid -> (attempt, when it began)
        self._answered: set[str] = set()  # job uids whose answer the job's watch has shown

    def phase(self, key: Key) -> Literal["new", "waiting", "over"]:
        """Return whether ``key`` has not begun waiting, waits still, or waited long enough."""
        uid, attempt = key
        with self._lock:
            began = self._since.get(uid)
        if began is None or began[0] != attempt:
            return "new"
        return "waiting" if self.clock() - began[1] < self.wait_seconds else "over"

    def begin(self, key: Key) -> None:
        """Start ``key``'s wait (its first worker exists now)."""
        uid, attempt = key
        now = self.clock()
        with self._lock:
            if len(self._since) > 1_000:  # waits of jobs deleted meanwhile never end: forget
                horizon = 10 * self.wait_seconds + 60
                for old in [u for u, (_, t) in self._since.items() if now - t > horizon]:
                    self._end(old)
            self._since[uid] = (attempt, now)
            self._answered.discard(uid)

    def end(self, key: Key) -> None:
        """End ``key``'s wait (its other workers are being created)."""
        uid, attempt = key
        with self._lock:
            began = self._since.get(uid)
            if began is not None and began[0] == attempt:
                self._end(uid)

    def _end(self, uid: str) -> None:
        self._since.pop(uid, None)
        self._answered.discard(uid)

    def answered(self, uid: str) -> bool:
        """Note that the job's watch shows the placer's answer; return True when a wait of the
        job hears it (the caller wakes the job's reconcile)."""
        with self._lock:
            if uid not in self._since:
                return False
            self._answered.add(uid)
            return True

    def shown(self, uid: str, state: object) -> bool:
        """Note the placement ``state`` the job's watch shows; return True when it answers a wait
        of the job (the caller wakes the job's reconcile)."""
        return state in PLAN_ANSWERS and self.answered(uid)

    def unseen(self, uid: str, state: object) -> bool:
        """Return whether a reconcile woken by the job's answer acts on a view of the job that
        does not show it yet (``state``): it must be tried again."""
        return self.heard(uid) and state not in PLAN_ANSWERS

    def heard(self, uid: str) -> bool:
        """Return whether the job's answer was seen and its wait has not ended yet: a woken
        reconcile that acts on an older view of the job must be tried again."""
        with self._lock:
            return uid in self._answered


def born_released(
    manifest: dict[str, Any],
    placement: StoredPlacement | Mapping[str, Any] | None,
    nodes: Mapping[str, NodeOffer] | None = None,
) -> dict[str, Any] | None:
    """Return ``manifest`` released onto the gang's plan, or None when no plan covers it.

    The placer plans a gang once its first worker exists; a worker created after that, for the
    attempt the plan was made for, is created as the placer would release it (its required node
    affinity narrowed to the planned domain, without our gate, told its plan level and its rails
    on its planned node, from ``nodes``): one write instead of a create and a release patch. The
    extender still steers it to its rank's planned node.
    """
    plan = read_placement(placement)
    if not plan.planned:
        return None
    labels = manifest["metadata"].get("labels") or {}
    attempt = plan.attempt
    if attempt is None or labels.get(ATTEMPT_LABEL) != str(attempt):
        return None
    index = whole_number(labels.get(WORKER_INDEX_LABEL))
    if index is None:
        return None
    return release_onto_plan(manifest, plan, index, nodes)


def placement_state(status: Mapping[str, Any] | None) -> str | None:
    """Return ``status.placement.state`` of a job's ``status`` (None: none)."""
    return placement_of_status(status).state


def planned_for(placement: StoredPlacement, attempt: str) -> bool:
    """Return whether ``placement`` is the placer's plan for the gang's ``attempt``."""
    return placement.planned and str(placement.attempt) == attempt


def _wait_for_plan(
    kube: PlacementReader, namespace: str, name: str, uid: str, attempt: str, *, seconds: float
) -> StoredPlacement | None:
    """Return the placer's plan of ``attempt`` once the API server has it, or None when none
    comes within ``seconds`` (read from the API server: kopf delivers no event of a job to the
    index while a handler of that job runs, and this runs inside one)."""
    deadline = time.monotonic() + seconds
    while True:
        placement = kube.read_placement(namespace, name, uid)
        if placement is None:
            return None  # the job is gone
        if planned_for(placement, attempt):
            return placement
        if placement.state in (WAITING, INVALID) or time.monotonic() >= deadline:
            return None  # no plan soon: the rest is created gated, released when planned
        time.sleep(PLAN_POLL_SECONDS)


def create_gang(
    kube: PlacementReader,
    manifests: list[dict[str, Any]],
    uid: str,
    placement: StoredPlacement | Mapping[str, Any] | None,
    *,
    waits: PlanWaits,
    create: Callable[[dict[str, Any]], Outcome],
    post: Callable[[Callable[[dict[str, Any]], Outcome], list[dict[str, Any]]], list[Outcome]],
    whole_gang: bool,
    batch: int,
    plan_wait_seconds: float,
    nodes: Mapping[str, NodeOffer] | None = None,
) -> list[Outcome]:
    """Return, per manifest in order, what ``create`` made of it (``(False, None)``: not posted).

    ``placement``: the job's as the reconcile saw it. ``create`` posts one worker; ``post`` posts
    workers through ``create`` until one is refused; ``batch`` workers go out at once, and a gang
    larger than that waits up to ``plan_wait_seconds`` for its plan after its first worker.
    ``whole_gang``: none of the gang's workers exists yet (only then may a small gang wait).
    Every worker a plan of its attempt covers when it is posted is born released (told its
    rails on its planned node from ``nodes``, what every node offers).
    """
    if not manifests:
        return []
    meta = manifests[0]["metadata"]
    labels = meta.get("labels") or {}
    namespace, name = meta["namespace"], str(labels.get(JOB_LABEL, ""))
    attempt = str(labels.get(ATTEMPT_LABEL, ""))
    plan = read_placement(placement) if placement is not None else None
    state = plan.state if plan is not None else None

    def released(manifest: dict[str, Any]) -> Outcome:
        return create(born_released(manifest, plan, nodes) or manifest)

    if len(manifests) <= 1:
        return [released(m) for m in manifests]
    key = (uid, attempt)
    # a small gang waits only for a first plan: under a plan (of this attempt, or of an earlier
    # one whose ranks the placer moves as replacements), a wait or a re-plan it is made at once
    if not state and len(manifests) <= batch:
        phase = waits.phase(key)
        later: list[Outcome] = [(False, None)] * (len(manifests) - 1)
        if phase == "new" and whole_gang:
            first = released(manifests[0])
            if first[0]:
                waits.begin(key)
                log.info("job %s/%s: first worker made; the rest follow its plan", namespace, name)
            return [first, *later]  # made: the rest follows its plan; else the round ends
        if phase != "new":
            # past the wait: ask the API server once (kopf's view of the job lags in a burst)
            seen = None if phase == "waiting" else kube.read_placement(namespace, name, uid)
            if seen is None:  # still waiting, or the job is gone
                return [(False, None), *later]
            if planned_for(seen, attempt):
                plan = seen
            else:
                log.info("job %s/%s: no plan yet; the rest is created gated", namespace, name)
    waits.end(key)
    first_done: list[Outcome] = []
    if len(manifests) > batch and state != PLANNED:
        first_done = [released(manifests[0])]
        if not first_done[0][0]:  # refused (or the name is taken): the round ends
            return first_done + [(False, None)] * (len(manifests) - 1)
        plan = _wait_for_plan(kube, namespace, name, uid, attempt, seconds=plan_wait_seconds)
        if plan is not None:
            log.info("job %s/%s: planned; the other workers are created released", namespace, name)
        manifests = manifests[1:]
    return first_done + post(released, manifests)
