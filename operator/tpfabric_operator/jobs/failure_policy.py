"""The failure policy: what a failed or lost worker costs, and the incident it makes.

:func:`rule_action` matches a failure against ``spec.failurePolicy.rules`` (with the defaults for
disruptions); :func:`losses` finds the workers lost now; :func:`incident` charges one restart for
all of them, or fails the job. Pure: pods and the status's memory in, an intent out.

Invariants:

- one restart is charged per incident, for both restart strategies: an incident is every loss
  one reconcile sees (a node that takes two workers with it is one incident, not two);
- a worker already restarting is never charged again; one the placer deleted for a re-plan
  (``replanning``) is not lost at all.
"""

from __future__ import annotations

from typing import Literal

from tpfabric_core.api import FailureRule, TensorParallelJob
from tpfabric_operator.jobs.job_state import Failure, Intent, Memory, WorkerPod, to_stop

__all__ = [
    "KUBELET_REJECTED",
    "Action",
    "incident",
    "kept_as_evidence",
    "loss_of",
    "losses",
    "lost_admission_race",
    "rule_action",
]

Action = Literal["FailJob", "Restart", "RestartIgnoreLimit", "Ignore"]

#: how the kubelet's message starts when its admission refused a pod (it never started)
KUBELET_REJECTED = "Pod was rejected:"


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


def loss_of(index: int, pod: WorkerPod | None) -> Failure:
    """Return worker ``index``'s failure as ``status.lastFailure`` shows it (``pod`` None: gone)."""
    if pod is None:
        return Failure(index, "Lost", f"worker {index}'s pod disappeared")
    if pod.phase == "Failed":
        message = pod.message or f"{pod.name} failed"
        return Failure(index, pod.reason or "Error", message, pod.exit_code, pod.name)
    why = "Evicted" if "DisruptionTarget" in pod.conditions else "Deleted"
    return Failure(index, why, f"{pod.name} was deleted while it ran", None, pod.name)


def kept_as_evidence(job: TensorParallelJob, pod: WorkerPod) -> bool:
    """Return whether a pod is a failure to keep for ``kubectl logs``."""
    return pod.phase == "Failed" and job.spec.failure_policy.keep_failed_pods


def losses(
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
                lost.append((loss_of(index, None), frozenset()))
            continue
        if pod.phase != "Failed" and not (pod.deleting and charged):
            continue
        failure = loss_of(index, pod)
        if pod.phase == "Failed" and rule_action(rules, failure, pod.conditions) == "Ignore":
            ignored.add(index)
        else:
            lost.append((failure, pod.conditions))
    return lost, ignored


def incident(
    job: TensorParallelJob,
    pods: list[WorkerPod],
    memory: Memory,
    intent: Intent,
    *,
    lost: list[tuple[Failure, frozenset[str]]],
) -> Intent:
    """Return ``intent`` for the workers lost now: one restart charged (for either strategy: the
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
        intent.delete = to_stop(pods)
        intent.keep = [p.name for p in pods if kept_as_evidence(job, p)]
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
        if kept_as_evidence(job, pod):
            intent.keep.append(pod.name)
        elif not pod.deleting:
            intent.delete.append(pod.name)
    return intent
