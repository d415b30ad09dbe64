"""Pods that hold a job back and that the operator must not remove itself: pure words and checks.

- A pod **stuck terminating**: deleted, but its kubelet has not confirmed that the containers
  stopped (the node is NotReady or cut off), so they may still run. Kubernetes never
  force-deletes such a pod on its own, and neither does the operator: a forced delete frees the
  name while the old containers may still run beside the next attempt (same hostname, same
  ``MASTER_ADDR``). The pod stays until its node answers, or until the node is NotReady and
  tainted ``node.kubernetes.io/out-of-service``: then kube-controller-manager's pod garbage
  collector deletes it (``gcTerminating`` in ``pkg/controller/podgc/gc_controller.go``, every
  20 s). The operator says which pod, on which node, and that taint.
- A pod **not owned by the job**: labelled with the job's name but without an owner (kept by
  ``kubectl delete --cascade=orphan`` of an earlier job of that name). It is not adopted (it may
  run another job's containers) and not deleted (it is the user's now); nothing of the job is
  created while it exists, since it would meet the new gang under the same DNS names.

Nothing here talks to the API server.
"""

from __future__ import annotations

from tpfabric_operator.jobs.job_state import WorkerPod

__all__ = ["STUCK_AFTER_SECONDS", "not_owned_message", "stuck_message", "stuck_terminating"]

#: a pod still terminating this long after its deletion deadline is on a node that cannot
#: confirm it (NotReady, partitioned): it is reported, never force-deleted
STUCK_AFTER_SECONDS = 30.0
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


def stuck_terminating(pods: list[WorkerPod], now: float) -> list[WorkerPod]:
    """Return the pods still terminating ``STUCK_AFTER_SECONDS`` past their deletion deadline."""
    return [
        p
        for p in pods
        if p.deleting
        and p.delete_deadline is not None
        and now - p.delete_deadline > STUCK_AFTER_SECONDS
    ]


def stuck_message(pods: list[WorkerPod], now: float) -> str:
    """Return what to tell people of pods stuck terminating: which, where, and the fix."""
    where = ", ".join(
        f"{p.name} on node {p.node or '(none)'} ({now - (p.delete_deadline or now):.0f}s past "
        "its deletion deadline)"
        for p in pods
    )
    nodes = " ".join(sorted({p.node for p in pods if p.node})) or "<node>"
    return (
        f"pod(s) {where} still terminating: the node has not confirmed that the containers "
        "stopped, so the job creates nothing new while they may still run. If the node is down "
        f"for good, taint it (kubectl taint nodes {nodes} {OUT_OF_SERVICE_TAINT}): once it is "
        "NotReady, kube-controller-manager deletes its terminating pods. Do not force-delete them"
    )


def not_owned_message(pods: list[WorkerPod], job: str, namespace: str) -> str:
    """Return what to tell people of pods labelled for ``job`` that it does not own."""
    names = sorted(p.name for p in pods)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"pod(s) {shown} carry the label of job {job} but are not owned by this job (no owner "
        "reference: kept by `kubectl delete --cascade=orphan` of an earlier job of this name?). "
        "They are neither adopted nor deleted, and no worker is created while they exist; "
        f"delete them (kubectl delete pod -n {namespace} {' '.join(names[:5])}"
        f"{' ...' if len(names) > 5 else ''}) or give the job another name"
    )
