"""What the operator should do next for one job, and the status it should show: pure policy.

``decide`` looks at the job, its worker pods and what the status remembers (``Memory``), and
returns an ``Intent`` (pods to create, stop or keep as evidence, a restart to charge, success or
failure); ``job_status`` turns the same facts into the operator-owned part of ``status``. The
reconciler carries the intent out and persists both in one status patch. The placer owns
``status.placement``; nothing here writes it.

Invariants:

- a terminal job (Succeeded or Failed) never creates a pod again; it only stops what still runs;
- one incident is charged once: the incident is written down (``restartingWorkers``, ``attempt``)
  in the same patch that charges it, and a worker already restarting is never charged again;
- a worker the placer deleted for a re-plan (``replanning``) is recreated without a charge;
- nothing is created while a pod of an older attempt, or of an older job of the same name (owned
  by it, or by nobody), still exists: with a static rendezvous the new gang must not meet the
  old one. A pod is never
  force-deleted: its containers may still run on a kubelet that does not answer, and a forced
  delete would let the next attempt start beside them. A pod stuck terminating is reported
  (:mod:`.obstacles`); once its node is tainted ``node.kubernetes.io/out-of-service``,
  kube-controller-manager's pod garbage collector removes it;
- one restart is charged per incident, for both restart strategies: an incident is every loss
  one reconcile sees (a node that takes two workers with it is one incident, not two).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

from tpfabric_core.api import FailureRule, TensorParallelJob
from tpfabric_core.pod_wiring import GPU_RESOURCE

__all__ = [
    "Failure",
    "Intent",
    "Memory",
    "Outcome",
    "WorkerPod",
    "decide",
    "honour_problem",
    "job_status",
    "rule_action",
]

Action = Literal["FailJob", "Restart", "RestartIgnoreLimit", "Ignore"]

#: how the kubelet's message starts when its admission refused a pod (it never started)
KUBELET_REJECTED = "Pod was rejected:"


@dataclass(frozen=True, slots=True)
class WorkerPod:
    """What the operator needs of one worker pod."""

    name: str
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool
    node: str | None
    deleting: bool = False
    reason: str = ""  # Error, OOMKilled, InitContainerFailed, Evicted, ... when it failed
    message: str = ""  # e.g. "container trainer exited 137 (OOMKilled)"
    exit_code: int | None = None
    conditions: frozenset[str] = frozenset()  # pod conditions with status True
    attempt: int = 0
    delete_deadline: float | None = None  # metadata.deletionTimestamp (epoch seconds)

    @property
    def active(self) -> bool:
        """Return whether the pod may still run (not finished, not being deleted)."""
        return not self.deleting and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed or lost worker, as ``status.lastFailure`` shows it."""

    worker: int
    reason: str
    message: str
    exit_code: int | None = None
    pod: str = ""


@dataclass(frozen=True, slots=True)
class Memory:
    """What the job's status remembers between reconciles."""

    phase: str | None = None
    created_before: bool = False
    restarts: int = 0
    attempt: int = 0
    restarting: frozenset[int] = frozenset()
    succeeded: frozenset[int] = frozenset()
    last_failure: float | None = None
    start_time: float | None = None
    completion_time: float | None = None
    replanning: bool = False


@dataclass(slots=True)
class Intent:
    """What to do now; empty when the job is as it should be."""

    create: list[int] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)  # failed pods to keep out of the gang
    attempt: int = 0  # the attempt of the pods to create (and of the job after this intent)
    restarting: set[int] = field(default_factory=set)
    succeeded: set[int] = field(default_factory=set)
    charged: int = 0  # restarts to add to status.restarts
    failure: Failure | None = None  # a new incident (status.lastFailure)
    fail: str | None = None
    fail_reason: str = ""
    succeed: str | None = None
    delete_job: bool = False
    wait_seconds: float | None = None


def honour_problem(job: TensorParallelJob, nodes: list[dict[str, int]]) -> str | None:
    """Return why no GPU node of the cluster could ever run one worker, or None when one can.

    ``nodes`` are the allocatable extended resources of every node. Only GPU nodes count: a
    cluster without any (empty, or its GPU pools scaled to zero) is not a problem, they may come.
    """
    gpu_nodes = [n for n in nodes if n.get(GPU_RESOURCE, 0) > 0]
    if not gpu_nodes:
        return None
    spec = job.spec
    gpus = max(n.get(GPU_RESOURCE, 0) for n in gpu_nodes)
    if gpus < spec.gpus_per_worker:
        return (
            f"gpusPerWorker is {spec.gpus_per_worker} but no node has more than {gpus} "
            "nvidia.com/gpu; re-create the job with a smaller gpusPerWorker (it cannot change) "
            "or add bigger nodes"
        )
    if spec.rdma.count:
        rdma = max(n.get(spec.rdma.resource_name, 0) for n in gpu_nodes)
        if rdma < spec.rdma.count:
            return (
                f"rdma asks {spec.rdma.count} {spec.rdma.resource_name} per worker but no node "
                f"advertises more than {rdma}; check the RDMA device plugin's resource name, or "
                "set rdma.count to 0 to run over TCP"
            )
    return None


def rule_action(rules: list[FailureRule], failure: Failure, conditions: frozenset[str]) -> Action:
    """Return the action of the first rule that matches ``failure``, else the default one.

    Defaults: a ``DisruptionTarget`` pod (preempted, evicted, drained) and a worker the kubelet
    refused for want of a device another pod took first (:func:`lost_admission_race`) restart
    without charge; anything else restarts, charged.
    """
    for rule in rules:
        if rule.on_exit_codes and failure.exit_code not in rule.on_exit_codes:
            continue
        if rule.on_pod_conditions and not conditions & set(rule.on_pod_conditions):
            continue
        if rule.on_reasons and failure.reason not in rule.on_reasons:
            continue
        return rule.action
    if "DisruptionTarget" in conditions or lost_admission_race(failure):
        return "RestartIgnoreLimit"
    return "Restart"


def lost_admission_race(failure: Failure) -> bool:
    """Return whether the kubelet refused the worker because the node was already full.

    Two schedulers (or a pod bound by ``nodeName``) can bind to one node from caches that do not
    yet show each other's pods; the kubelet admits the first and fails the later one before it
    starts: phase Failed, reason ``OutOf<resource>`` (``OutOfnvidia.com/gpu``), message
    ``Pod was rejected: Node didn't have enough resource: ...``. Nothing of the job ran, and the
    new attempt is planned with the other pod in view, so it is a disruption, not a failure of
    the job (Kubernetes Jobs charge it to ``backoffLimit``: KEP-3329 left admission failures
    without a ``DisruptionTarget``). Other admission refusals (``UnexpectedAdmissionError``,
    ``TopologyAffinityError``, ...) can repeat on the same node and stay charged.
    """
    return (
        failure.exit_code is None
        and failure.reason.startswith("OutOf")
        and failure.message.startswith(KUBELET_REJECTED)
    )


def _success(policy: str, done: set[int], workers: int, ignored: set[int]) -> str | None:
    """Return why the job succeeded, or None; ``ignored`` failures count as finished."""
    if policy == "Rank0" and 0 in done:
        return "worker 0 succeeded (successPolicy Rank0)"
    if policy == "AnyWorker" and done:
        return f"worker {min(done)} succeeded (successPolicy AnyWorker)"
    if done and len(done | ignored) >= workers:
        extra = f" ({len(ignored)} failure(s) ignored by a rule)" if ignored - done else ""
        return f"all {workers} workers succeeded{extra}"
    return None


def _ignored(job: TensorParallelJob, pods: list[WorkerPod]) -> set[int]:
    """Return the workers whose failure an `Ignore` rule matched (they count as finished)."""
    rules = job.spec.failure_policy.rules
    return {
        p.index
        for p in pods
        if p.phase == "Failed"
        and not p.deleting
        and rule_action(rules, _loss(p.index, p), p.conditions) == "Ignore"
    }


def _stop(pods: list[WorkerPod]) -> list[str]:
    """Return the pods to delete to stop every pod that may still run."""
    return [p.name for p in pods if p.active]


def _loss(index: int, pod: WorkerPod | None) -> Failure:
    if pod is None:
        return Failure(index, "Lost", f"worker {index}'s pod disappeared")
    if pod.phase == "Failed":
        message = pod.message or f"{pod.name} failed"
        return Failure(index, pod.reason or "Error", message, pod.exit_code, pod.name)
    why = "Evicted" if "DisruptionTarget" in pod.conditions else "Deleted"
    return Failure(index, why, f"{pod.name} was deleted while it ran", None, pod.name)


def decide(  # noqa: PLR0911, PLR0912 - one state machine, read top to bottom
    job: TensorParallelJob,
    pods: list[WorkerPod],
    memory: Memory,
    *,
    now: float,
    stale: list[WorkerPod] | None = None,
    foreign: list[WorkerPod] | None = None,
    move: dict[int, str] | None = None,
) -> Intent:
    """Return the intent for ``job`` given every pod it owns and what its status remembers.

    ``stale`` are pods with the job's name owned by an older job of the same name: they are
    deleted and nothing is created until they are gone. ``foreign`` are pods with the job's name
    that no job owns (:mod:`.obstacles`): never adopted, never deleted, and nothing is created
    while one exists. ``move`` are running workers to restart
    elsewhere, with why (a degraded node and ``onDegradedLink: restart-elsewhere``): an incident
    of reason ``DegradedLink`` that, like a disruption, is not charged unless a rule says so.
    """
    spec = job.spec
    intent = Intent(attempt=memory.attempt, restarting=set(memory.restarting))
    intent.succeeded = set(memory.succeeded) | {p.index for p in pods if p.phase == "Succeeded"}
    if memory.phase in ("Succeeded", "Failed"):
        return _finished(job, pods, memory, intent, now)
    for pod in stale or []:
        if not pod.deleting:
            intent.delete.append(pod.name)
    if spec.suspend:
        # a suspended job keeps no pods; resuming starts the whole gang again
        intent.keep = [p.name for p in pods if _evidence(job, p)]
        intent.delete += [p.name for p in pods if not p.deleting and p.name not in intent.keep]
        intent.restarting, intent.succeeded = set(), set()
        return intent
    success = _success(spec.success_policy, intent.succeeded, spec.workers, _ignored(job, pods))
    if success:
        intent.succeed = success
        intent.delete = _stop(pods)
        return intent
    deadline = spec.active_deadline_seconds
    if deadline is not None and memory.start_time is not None:
        if now - memory.start_time >= deadline:
            intent.fail = f"the job ran longer than activeDeadlineSeconds ({deadline}s)"
            intent.fail_reason = "DeadlineExceeded"
            intent.delete = _stop(pods)
            return intent
        intent.wait_seconds = memory.start_time + deadline - now
    current, old = _attempts(job, pods, memory, intent.succeeded)
    lost, ignored = _losses(job, current, memory, intent.succeeded)
    if not lost and move:
        lost = [
            (
                Failure(index, "DegradedLink", why, None, current[index].name),
                frozenset({"DisruptionTarget"}),
            )
            for index, why in sorted(move.items())
            if index in current and current[index].active and index not in memory.restarting
        ]
    if lost:
        return _incident(job, pods, memory, intent, lost=lost)
    # stop what belongs to an older attempt; keep its failures as evidence
    for pod in old:
        if _evidence(job, pod):
            intent.keep.append(pod.name)
        elif not pod.deleting:
            intent.delete.append(pod.name)
    # a new attempt never meets the old one, nor the pods of an older job of the same name
    blocked = bool(stale) or bool(foreign) or any(not _evidence(job, p) for p in old)
    if memory.restarting:
        backoff = spec.failure_policy.backoff_seconds
        if blocked:
            return intent
        if memory.last_failure is not None and now - memory.last_failure < backoff:
            intent.wait_seconds = backoff - (now - memory.last_failure)
            return intent
        intent.create = sorted(i for i in memory.restarting if i not in current)
        return intent
    if not blocked:
        # the first creation, or a re-plan's recreation (never charged); a worker missing
        # otherwise was a loss, handled above
        intent.create = [
            i
            for i in range(spec.workers)
            if i not in intent.succeeded and i not in ignored and i not in current
        ]
    return intent


def _evidence(job: TensorParallelJob, pod: WorkerPod) -> bool:
    """Return whether a pod is a failure to keep for ``kubectl logs``."""
    return pod.phase == "Failed" and job.spec.failure_policy.keep_failed_pods


def _finished(
    job: TensorParallelJob, pods: list[WorkerPod], memory: Memory, intent: Intent, now: float
) -> Intent:
    """Return the intent of a Succeeded or Failed job: stop what runs, delete it after its TTL."""
    intent.delete = _stop(pods)
    intent.restarting = set()
    ttl = job.spec.ttl_seconds_after_finished
    if ttl is not None and memory.completion_time is not None:
        left = memory.completion_time + ttl - now
        intent.delete_job = left <= 0
        intent.wait_seconds = None if left <= 0 else left
    return intent


def _attempts(
    job: TensorParallelJob, pods: list[WorkerPod], memory: Memory, done: set[int]
) -> tuple[dict[int, WorkerPod], list[WorkerPod]]:
    """Return (the current pod of each worker, pods of older attempts)."""
    newest: dict[int, WorkerPod] = {}
    for candidate in sorted(pods, key=lambda p: p.attempt):
        if candidate.index not in done or candidate.phase == "Succeeded":
            newest[candidate.index] = candidate
    if job.spec.failure_policy.restart_strategy == "RecreateGang":
        current = {i: p for i, p in newest.items() if p.attempt >= memory.attempt}
    else:
        current = newest
    old = [p for p in pods if current.get(p.index) is not p and p.phase != "Succeeded"]
    return current, old


def _losses(
    job: TensorParallelJob, current: dict[int, WorkerPod], memory: Memory, done: set[int]
) -> tuple[list[tuple[Failure, frozenset[str]]], set[int]]:
    """Return (workers lost now with their pod's conditions, failed workers to ignore).

    A worker already restarting is never lost again; one the placer deleted for a re-plan
    (``replanning``) is not lost at all, nor is a worker before the gang was first created.
    """
    rules = job.spec.failure_policy.rules
    charged = memory.created_before and not memory.replanning
    lost: list[tuple[Failure, frozenset[str]]] = []
    ignored: set[int] = set()
    for index in range(job.spec.workers):
        if index in done or index in memory.restarting:
            continue
        pod = current.get(index)
        if pod is None:
            if charged:
                lost.append((_loss(index, None), frozenset()))
            continue
        if pod.phase != "Failed" and not (pod.deleting and charged):
            continue
        failure = _loss(index, pod)
        if pod.phase == "Failed" and rule_action(rules, failure, pod.conditions) == "Ignore":
            ignored.add(index)
        else:
            lost.append((failure, pod.conditions))
    return lost, ignored


def _incident(
    job: TensorParallelJob,
    pods: list[WorkerPod],
    memory: Memory,
    intent: Intent,
    *,
    lost: list[tuple[Failure, frozenset[str]]],
) -> Intent:
    """Return the intent for workers lost now: one restart charged (for either strategy: the
    losses one reconcile sees are one incident), or the job failed."""
    policy = job.spec.failure_policy
    gang = policy.restart_strategy == "RecreateGang"
    actions = [rule_action(policy.rules, f, c) for f, c in lost]
    # the most telling failure of the incident: one a FailJob rule matched, one with an exit
    # code, else the first
    fatal = [f for (f, _), a in zip(lost, actions, strict=True) if a == "FailJob"]
    first = (fatal or [f for f, _ in lost if f.exit_code] or [lost[0][0]])[0]
    intent.failure = first
    charge = min(1, actions.count("Restart"))
    if fatal or not policy.replace_failed_workers or memory.restarts + charge > policy.max_restarts:
        why = f"worker {first.worker} ({first.reason}: {first.message})"
        if fatal:
            intent.fail, intent.fail_reason = f"{why} failed; a FailJob rule matched", "FailJob"
        elif not policy.replace_failed_workers:
            intent.fail = f"{why} failed and the job may not restart workers"
            intent.fail_reason = "WorkerFailed"
        else:
            intent.fail = f"{why} failed after {memory.restarts} of {policy.max_restarts} restarts"
            intent.fail_reason = "RestartsExhausted"
        intent.delete = _stop(pods)
        intent.keep = [p.name for p in pods if _evidence(job, p)]
        return intent
    intent.charged = charge
    intent.attempt = memory.attempt + 1
    lost_workers = {f.worker for f, _ in lost}
    if gang:
        # every rank starts again, also those that finished: a static rendezvous needs all
        intent.restarting = set(range(job.spec.workers))
        intent.succeeded = set()
        victims = pods
    else:
        intent.restarting |= lost_workers
        victims = [p for p in pods if p.index in lost_workers]
    for pod in victims:
        if _evidence(job, pod):
            intent.keep.append(pod.name)
        elif not pod.deleting:
            intent.delete.append(pod.name)
    return intent


def _rfc3339(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    *,
    previous: dict[str, dict[str, Any]],
    kind: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: float,
) -> dict[str, Any]:
    text = "True" if status else "False"
    before = previous.get(kind)
    since = (
        before.get("lastTransitionTime")
        if before and before.get("status") == text and before.get("lastTransitionTime")
        else _rfc3339(now)
    )
    return {
        "type": kind,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the job stands after this reconcile (inputs of ``job_status`` beyond the pods)."""

    restarts: int = 0
    restarting: frozenset[int] = frozenset()
    terminal: Literal["Succeeded", "Failed"] | None = None
    terminal_reason: str = ""
    terminal_message: str = ""
    create_error: str | None = None  # why creating a child failed (WorkersCreated False)
    admitted: tuple[bool, str, str] | None = None  # (admitted, reason, message) by a queue
    degraded_links: str = ""  # ranks on degraded nodes, in words (fabric_health)
    stuck: str = ""  # pods stuck terminating, in words (:func:`stuck_message`)
    #: the gang existed whole before (``status.workersCreated``): a missing worker is lost, not
    #: still to come (a small gang's first worker is made a moment before the rest)
    created_before: bool = True


def job_status(  # noqa: PLR0912, PLR0915 - the facts a status is made of
    job: TensorParallelJob,
    pods: list[WorkerPod],
    *,
    placement: dict[str, Any],
    previous_conditions: list[dict[str, Any]],
    outcome: Outcome,
    generation: int,
    now: float,
) -> dict[str, Any]:
    """Return the operator-owned status fields for the job as it is now."""
    spec = job.spec
    total = spec.workers
    running = [p for p in pods if p.active]
    holding = [p for p in pods if p.phase not in ("Succeeded", "Failed")]  # hold their GPUs
    ready = sum(1 for p in running if p.ready and p.phase == "Running")
    succeeded = {p.index for p in pods if p.phase == "Succeeded"}
    finished = sum(1 for i in range(total) if i in succeeded)
    state = placement.get("state")
    terminal = outcome.terminal
    phase: str
    if terminal:
        phase = terminal
    elif spec.suspend:
        phase = "Suspended" if not holding else "Running" if ready else "Pending"
    elif outcome.restarting:
        phase = "Restarting"
    elif ready and ready + finished >= total:
        phase = "Running"  # a worker that finished first keeps the job Running
    elif state in ("Waiting", "Replanning", "Invalid"):
        phase = "Waiting"
    elif state == "Planned":
        phase = "Placed"
    else:
        phase = "Pending"
    before = {c.get("type", ""): c for c in previous_conditions}
    present = {p.index for p in pods if not p.deleting}
    missing = 0 if spec.suspend or terminal else total - len(present | succeeded)
    lost = missing if outcome.created_before else 0

    def cond(kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return _condition(
            previous=before,
            kind=kind,
            status=status,
            reason=reason,
            message=message,
            generation=generation,
            now=now,
        )

    if state == "Planned":
        placed = cond("Placed", True, "GangPlaced", str(placement.get("message") or "planned"))
    elif state in ("Waiting", "Replanning", "Invalid"):
        reason = {
            "Waiting": "WaitingForCapacity",
            "Replanning": "Replanning",
            "Invalid": "InvalidTopology",
        }[str(state)]
        placed = cond("Placed", False, reason, str(placement.get("message") or "waiting"))
    else:
        placed = cond(
            "Placed",
            False,
            "NotPlanned",
            "not planned yet: the placer plans the gang once its first worker exists (once every"
            " worker exists, after the API server refused one)",
        )
    if outcome.create_error:
        created = cond("WorkersCreated", False, "CreateFailed", outcome.create_error)
    elif spec.suspend or terminal:
        created = cond("WorkersCreated", False, "NoWorkers", "the job keeps no running workers")
    elif missing:
        created = cond("WorkersCreated", False, "Creating", f"{total - missing}/{total} exist")
    else:
        created = cond(
            "WorkersCreated", True, "WorkersCreated", f"{total} worker pods and a headless Service"
        )
    if spec.suspend:
        suspended = (
            cond("Suspended", True, "JobSuspended", "no pods; resuming plans the gang again")
            if not holding
            else cond("Suspended", False, "Stopping", f"{len(holding)} pod(s) still stopping")
        )
    else:
        suspended = cond("Suspended", False, "JobResumed", "the job is not suspended")
    conditions = []
    if outcome.admitted is not None:
        admitted, why, text = outcome.admitted
        conditions.append(cond("Admitted", admitted, why, text))
    conditions += [
        created,
        suspended,
        placed,
        cond(
            "Ready",
            bool(ready) and ready + finished >= total and not terminal,
            "AllWorkersReady" if ready + finished >= total else "WorkersNotReady",
            f"{ready}/{total} workers ready",
        ),
        cond(
            "Degraded",
            bool(outcome.stuck)
            or (
                bool(lost or outcome.restarting or outcome.degraded_links)
                and not terminal
                and not spec.suspend
            ),
            # a stuck pod first: it is why a restart (or a suspend) does not go on
            "PodStuckTerminating"
            if outcome.stuck
            else "Restarting"
            if outcome.restarting
            else "WorkerLost"
            if lost
            else "DegradedLink"
            if outcome.degraded_links
            else "Creating"
            if missing
            else "AllWorkersPresent",
            outcome.stuck or f"restarting worker(s) {sorted(outcome.restarting)}"
            if outcome.stuck or outcome.restarting
            else f"{lost} worker(s) missing"
            if lost
            else outcome.degraded_links
            or (f"{total - missing}/{total} workers created so far" if missing else "")
            or "every worker pod exists",
        ),
        cond(
            "Failed",
            terminal == "Failed",
            outcome.terminal_reason if terminal == "Failed" else "NoFailure",
            outcome.terminal_message if terminal == "Failed" else "",
        ),
        cond(
            "Succeeded",
            terminal == "Succeeded",
            "SuccessPolicyMet" if terminal == "Succeeded" else "NotFinished",
            outcome.terminal_message
            if terminal == "Succeeded"
            else f"{finished}/{total} workers succeeded",
        ),
    ]
    if "InvalidSpec" in before:  # the spec was invalid (handlers._invalid_spec), valid now
        conditions.append(cond("InvalidSpec", False, "SpecValid", "the spec is valid"))
    return {
        "phase": phase,
        "ready": f"{ready}/{total}",
        "workersReady": ready,
        "workersTotal": total,
        "restarts": outcome.restarts,
        "conditions": conditions,
        "observedGeneration": generation,
    }
