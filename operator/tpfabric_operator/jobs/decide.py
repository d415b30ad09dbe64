"""What the operator should do next for one job: the decision, and the success policy.

``decide`` looks at the job, its worker pods and what the status remembers (``Memory``), and
returns an ``Intent`` (pods to create, stop or keep as evidence, a restart to charge, success or
failure); what a failure costs is :mod:`.failure_policy`'s, and :mod:`.job_status` turns the
same facts into the operator-owned part of ``status``. The reconciler carries the intent out and
persists both in one status patch. The placer owns ``status.placement``; nothing here writes it.

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
- one restart is charged per incident (:mod:`.failure_policy`);
- a move off a degraded node is written down before its workers stop (``_move``): its reason is
  where they run, which stopping them erases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_operator.jobs.failure_policy import (
    incident,
    kept_as_evidence,
    loss_of,
    losses,
    rule_action,
)
from tpfabric_operator.jobs.job_state import Failure, Intent, Memory, WorkerPod, to_stop

__all__ = ["decide", "honour_problem"]


def honour_problem(
    job: TensorParallelJob, nodes: Sequence[Mapping[str, int]], resource: str = "rdma/ib"
) -> str | None:
    """Return why no GPU node of the cluster could ever run one worker, or None when one can.

    ``nodes`` are the allocatable extended resources of every node. Only GPU nodes count: a
    cluster without any (empty, or its GPU pools scaled to zero) is not a problem, they may come.
    ``resource``: the cluster's RDMA resource (for a job that names none). An unset
    ``spec.rdma.count`` follows what the nodes offer and is never a problem.
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
    count, resource = spec.rdma.count, spec.rdma.resource_name or resource
    if count:
        most = max(n.get(resource, 0) for n in gpu_nodes)
        if most < count:
            return (
                f"rdma asks {count} {resource} per worker but no node "
                f"advertises more than {most}; check the RDMA device plugin's resource name, or "
                "set rdma.count to 0 to run over TCP (unset: what the nodes offer)"
            )
    return None


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
        and rule_action(rules, loss_of(p.index, p), p.conditions) == "Ignore"
    }


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
        intent.keep = [p.name for p in pods if kept_as_evidence(job, p)]
        intent.delete += [p.name for p in pods if not p.deleting and p.name not in intent.keep]
        intent.restarting, intent.succeeded = set(), set()
        return intent
    success = _success(spec.success_policy, intent.succeeded, spec.workers, _ignored(job, pods))
    if success:
        intent.succeed = success
        intent.delete = to_stop(pods)
        return intent
    deadline = spec.active_deadline_seconds
    if deadline is not None and memory.start_time is not None:
        if now - memory.start_time >= deadline:
            intent.fail = f"the job ran longer than activeDeadlineSeconds ({deadline}s)"
            intent.fail_reason = "DeadlineExceeded"
            intent.delete = to_stop(pods)
            return intent
        intent.wait_seconds = memory.start_time + deadline - now
    current, old = _attempts(job, pods, memory, intent.succeeded)
    lost, ignored = losses(job, current, memory, intent.succeeded)
    if not lost and move:
        moving = [
            (
                Failure(index, "DegradedLink", why, None, current[index].name),
                frozenset({"DisruptionTarget"}),
            )
            for index, why in sorted(move.items())
            if index in current and current[index].active and index not in memory.restarting
        ]
        if moving:
            return _move(job, pods, memory, intent, moving)
    if lost:
        return incident(job, pods, memory, intent, lost=lost)
    # stop what belongs to an older attempt; keep its failures as evidence
    for pod in old:
        if kept_as_evidence(job, pod):
            intent.keep.append(pod.name)
        elif not pod.deleting:
            intent.delete.append(pod.name)
    # a new attempt never meets the old one, nor the pods of an older job of the same name
    blocked = bool(stale) or bool(foreign) or any(not kept_as_evidence(job, p) for p in old)
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


def _move(
    job: TensorParallelJob,
    pods: list[WorkerPod],
    memory: Memory,
    intent: Intent,
    moving: list[tuple[Failure, frozenset[str]]],
) -> Intent:
    """Return the intent that writes a move off a degraded node down, and stops nothing yet.

    A failed worker is its own evidence; a move's reason is where its workers run, which
    stopping them erases. Written down first (``attempt``, ``restartingWorkers``,
    ``lastFailure``, ``movedOffNodes``), the next reconcile stops the workers of the older
    attempt as after any incident: an operator that died between stopping them and writing
    the move down used to find workers lost for no reason it could see, and charge the move.
    A job the move would fail (a rule charges it past ``maxRestarts``) stops at once: its
    phase is its record.
    """
    before = list(intent.delete), list(intent.keep)
    intent = incident(job, pods, memory, intent, lost=moving)
    if intent.fail is None:
        intent.delete, intent.keep = before
    return intent


def _finished(
    job: TensorParallelJob, pods: list[WorkerPod], memory: Memory, intent: Intent, now: float
) -> Intent:
    """Return the intent of a Succeeded or Failed job: stop what runs, delete it after its TTL."""
    intent.delete = to_stop(pods)
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
        # a restarting worker's pod from before its incident is of an older attempt (a move is
        # written down before its pods stop: see _move)
        current = {
            i: p
            for i, p in newest.items()
            if i not in memory.restarting or p.attempt >= memory.attempt or p.phase == "Succeeded"
        }
    old = [p for p in pods if current.get(p.index) is not p and p.phase != "Succeeded"]
    return current, old
