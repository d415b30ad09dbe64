"""A TensorParallelJob's Kueue ``Workload``, as Kueue's external-framework contract has it: pure.

A job labelled ``kueue.x-k8s.io/queue-name`` is one Kueue ``Workload`` with one pod set of
``workers`` pods. The operator keeps such a job suspended (no pods, so no plan and no reservation
by the gang placer) until Kueue admits the workload; Kueue's eviction (preemption, a deactivated
workload, ``waitForPodsReady``'s timeout) suspends it again, every pod is stopped uncharged, and
once all are gone the workload's quota reservation is released (once per eviction) so that Kueue
requeues it. A finished job marks its workload Finished, which returns its quota. Why not Kueue's
plain-pod groups: those gate pods that already exist, and the gang placer would plan (and reserve
nodes for) a gang that has no quota yet.

This module makes the Workload (its name, pod set, priority, maximum execution time) and says
whether the one that exists is still the job's (:func:`out_of_step`). Kueue's verdict on it and
what the job tells Kueue back (``PodsReady``, reclaimable pods, the requeue, Finished) are
:mod:`.admission`'s; what an admission adds to the pods (flavors, admission checks' pod-set
updates, a TAS topology assignment) is :mod:`.podsets`'s.

Nothing here talks to the API server: manifests and decisions only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api import API_VERSION, KIND, TensorParallelJob
from tpfabric_core.input_limits import whole_number
from tpfabric_core.labels import level_key

__all__ = [
    "MAX_EXEC_TIME_LABEL",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_LABEL",
    "RESOURCE_IN_USE",
    "SUPPORTED_VERSIONS",
    "WORKLOAD_GROUP",
    "WORKLOAD_PLURAL",
    "WORKLOAD_VERSION",
    "Priority",
    "has_quota_reservation",
    "out_of_step",
    "priority_source",
    "version_problem",
    "workload_conditions",
    "workload_for",
    "workload_name",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: a Kueue WorkloadPriorityClass for the job (before the template's ``priorityClassName``)
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: seconds the job may run admitted before Kueue evicts and deactivates it
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
#: Kueue's finalizer of a Workload whose pods may still hold what its quota counts
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: Kueue's pod-template annotations asking for a topology (TAS), read from the job or template
TOPOLOGY_ANNOTATIONS = {
    "kueue.x-k8s.io/podset-required-topology": "required",
    "kueue.x-k8s.io/podset-preferred-topology": "preferred",
}
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta2"
#: the Kueue API versions tpfabric speaks: v1beta2, served by Kueue v0.15 and later (v0.17.0
#: is the version tested); older Kueue serves only v1beta1
SUPPORTED_VERSIONS = (WORKLOAD_VERSION,)
WORKLOAD_PLURAL = "workloads"
POD_SET = "workers"


def workload_name(job: str, uid: str) -> str:
    """Return the name of the job's Workload (unique per job object, at most 63 characters)."""
    return f"tpj-{job}-{uid[:8]}"


def version_problem(served: tuple[str, ...] | None) -> str | None:
    """Return why queued jobs cannot be run with the Kueue the API server serves (None: they can).

    ``served``: the versions of ``kueue.x-k8s.io`` the API server serves (None: not asked yet).
    """
    if served is None or WORKLOAD_VERSION in served:
        return None
    if not served:
        return (
            "Kueue is not installed: the API server serves no kueue.x-k8s.io API; install "
            "Kueue v0.15 or later, or remove the kueue.x-k8s.io/queue-name label"
        )
    return (
        f"Kueue serves kueue.x-k8s.io {', '.join(served)} only (Kueue older than v0.15); "
        f"tpfabric needs {WORKLOAD_GROUP}/{WORKLOAD_VERSION} (Kueue v0.15 or later): upgrade "
        "Kueue, or remove the kueue.x-k8s.io/queue-name label"
    )


@dataclass(frozen=True, slots=True)
class Priority:
    """A Workload's priority: the class it names and that class's value."""

    group: str  # scheduling.k8s.io (PriorityClass) or kueue.x-k8s.io (WorkloadPriorityClass)
    kind: str
    name: str
    value: int


def priority_source(job: TensorParallelJob) -> tuple[str, str, str] | None:
    """Return (group, kind, name) of the class that sets the job's priority, as Kueue picks it:
    the ``kueue.x-k8s.io/priority-class`` label (a WorkloadPriorityClass), else the template's
    ``priorityClassName`` (a PriorityClass); None: neither (priority 0, or the cluster's
    default PriorityClass, which Kueue's webhook does not fill in for us either)."""
    label = str((job.metadata.get("labels") or {}).get(PRIORITY_CLASS_LABEL) or "")
    if label:
        return WORKLOAD_GROUP, "WorkloadPriorityClass", label
    name = str(job.spec.template.spec.get("priorityClassName") or "")
    if name:
        return "scheduling.k8s.io", "PriorityClass", name
    return None


def _demand(container: dict[str, Any]) -> dict[str, Any]:
    resources = dict(container.get("resources") or {})
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {
        "name": container["name"],
        "image": container.get("image", "x"),
        "resources": {"requests": requests, "limits": dict(resources.get("limits") or {})},
    }


def _topology_request(job: TensorParallelJob, tas_levels: tuple[str, ...]) -> dict[str, Any] | None:
    """Return the pod set's ``topologyRequest``: Kueue's annotations on the job (or its
    template, where Kueue's own jobs carry them) first; else, in a TAS ClusterQueue whose
    Topology has the job's level as a level (``tas_levels``: its node label keys), the job's
    own policy (``required`` or ``preferred`` on that level), so that Kueue assigns a domain the
    placer can honour. Without it Kueue's implied request may spread the gang over several
    leaves, and a job that requires one leaf would wait forever inside that assignment."""
    template_meta = job.spec.template.metadata or {}
    for notes in (job.metadata.get("annotations"), template_meta.get("annotations")):
        for key, field in TOPOLOGY_ANNOTATIONS.items():
            level = str((notes or {}).get(key) or "")
            if level:
                return {field: level}
    key = level_key(job.spec.topology.level)
    if key in tas_levels:
        return {job.spec.topology.mode: key}
    return None


def _max_exec_seconds(job: TensorParallelJob) -> int | None:
    value = whole_number((job.metadata.get("labels") or {}).get(MAX_EXEC_TIME_LABEL))
    return value or None


def workload_for(
    job: TensorParallelJob,
    worker: dict[str, Any],
    *,
    name: str,
    namespace: str,
    uid: str,
    priority: Priority | None = None,
    tas_levels: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Return the Workload of ``job``: one pod set of ``workers`` pods shaped like ``worker``.

    ``tas_levels``: the levels of the Topology of the job's ClusterQueue (a TAS queue), else
    empty (see :func:`_topology_request`).

    ``worker`` is one worker pod's manifest; only what quota counts is kept (container
    resources, with limits standing in for missing requests, and the node constraints).
    The Workload carries Kueue's ``resource-in-use`` finalizer: the operator removes it once
    the job's pods are gone (a deleted job's quota is not free while its pods terminate).
    """
    spec = worker["spec"]
    template_spec: dict[str, Any] = {
        "containers": [_demand(c) for c in spec.get("containers") or []],
        "restartPolicy": "Never",
    }
    if spec.get("initContainers"):
        template_spec["initContainers"] = [_demand(c) for c in spec["initContainers"]]
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        if spec.get(key):
            template_spec[key] = spec[key]
    queue = str((job.metadata.get("labels") or {}).get(QUEUE_LABEL, ""))
    pod_set: dict[str, Any] = {
        "name": POD_SET,
        "count": job.spec.workers,
        "template": {"spec": template_spec},
    }
    topology = _topology_request(job, tas_levels)
    if topology:
        pod_set["topologyRequest"] = topology
    workload_spec: dict[str, Any] = {"queueName": queue, "podSets": [pod_set]}
    if priority is not None:
        workload_spec["priorityClassRef"] = {
            "group": priority.group,
            "kind": priority.kind,
            "name": priority.name,
        }
        workload_spec["priority"] = priority.value
    seconds = _max_exec_seconds(job)
    if seconds:
        workload_spec["maximumExecutionTimeSeconds"] = seconds
    return {
        "apiVersion": f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(name, uid),
            "namespace": namespace,
            "labels": {JOB_UID_LABEL: uid},
            "finalizers": [RESOURCE_IN_USE],
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": workload_spec,
    }


def _shape(pod_set: Mapping[str, Any], *, topology: bool = True) -> tuple[Any, ...]:
    """Return what quota counts of a pod set: count, each container's requests, the node
    constraints and (with ``topology``) the topology request."""
    spec = (pod_set.get("template") or {}).get("spec") or {}

    def requests(containers: Any) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        return tuple(
            (
                str(c.get("name")),
                tuple(
                    sorted(
                        (str(k), str(v))
                        for k, v in ((c.get("resources") or {}).get("requests") or {}).items()
                    )
                ),
            )
            for c in containers or []
        )

    return (
        int(pod_set.get("count") or 0),
        requests(spec.get("containers")),
        requests(spec.get("initContainers")),
        tuple(sorted((spec.get("nodeSelector") or {}).items())),
        repr(spec.get("tolerations") or []),
        repr(sorted((pod_set.get("topologyRequest") or {}).items())) if topology else "",
    )


def out_of_step(workload: Mapping[str, Any], wanted: Mapping[str, Any]) -> str | None:
    """Return how ``workload`` no longer matches the job's (``wanted``, from :func:`workload_for`),
    in words; None when it matches.

    The demand (pod count, requests, node constraints, topology request) makes a new Workload;
    the queue name alone is updated in place while the job is suspended (Kueue's rules). The
    topology request counts only while no quota is reserved: a ClusterQueue given a Topology
    later does not stop the jobs it admitted before.
    """
    topology = not has_quota_reservation(workload)
    have = [_shape(p, topology=topology) for p in (workload.get("spec") or {}).get("podSets") or []]
    want = [_shape(p, topology=topology) for p in (wanted.get("spec") or {}).get("podSets") or []]
    if have != want:
        return "the job's demand changed (workers, resources, node constraints or topology)"
    queue = (workload.get("spec") or {}).get("queueName")
    if queue != (wanted.get("spec") or {}).get("queueName"):
        return f"the job's queue changed from {queue!r}"
    return None


def workload_conditions(workload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the Workload's status conditions by type."""
    return {str(c.get("type")): c for c in (workload.get("status") or {}).get("conditions") or []}


def has_quota_reservation(workload: Mapping[str, Any]) -> bool:
    """Return whether the workload holds quota (``QuotaReserved`` True), as Kueue's
    ``HasQuotaReservation`` reads it."""
    return workload_conditions(workload).get("QuotaReserved", {}).get("status") == "True"
