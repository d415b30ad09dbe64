"""What of each watched object the store keeps: the fields its records read, cut out of a list
page before the next one is fetched (so at most one page of raw objects is alive at a time).

Every cut keeps what :mod:`tpfabric_scheduler.records` and the store's node record read, so a
slim object makes the same record as the whole one (a test holds each kind to it). Pure.
"""

from __future__ import annotations

from typing import Any

__all__ = ["slim_job", "slim_node", "slim_pod"]

#: annotations nothing of ours reads that can be as large as the object itself
_BULKY_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
_POD_SPEC_BULK = frozenset({"volumes", "ephemeralContainers"})
_POD_STATUS_BULK = frozenset(
    {"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses", "conditions"}
)
_NODE_STATUS_BULK = frozenset({"images", "volumesInUse", "volumesAttached"})


def _slim_meta(meta: dict[str, Any]) -> dict[str, Any]:
    slim = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = slim.get("annotations")
    if annotations and any(a in annotations for a in _BULKY_ANNOTATIONS):
        slim["annotations"] = {k: v for k, v in annotations.items() if k not in _BULKY_ANNOTATIONS}
    return slim


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` without the bulk no pod record reads (managed fields, volumes, env, ...).

    Metadata, the scheduling fields of the spec and the status phase stay whole; of each
    container only its name, resources and (init containers) restart policy.
    """
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    slim_spec = {k: v for k, v in spec.items() if k not in _POD_SPEC_BULK}
    for key in ("containers", "initContainers"):
        if key in spec:
            # restartPolicy marks a sidecar (an init container that keeps running): it changes
            # the pod's requests (kube-scheduler's arithmetic in pod_fit.pod_requests)
            slim_spec[key] = [
                {
                    "name": c.get("name"),
                    "resources": c.get("resources") or {},
                    **({"restartPolicy": c["restartPolicy"]} if c.get("restartPolicy") else {}),
                    # host ports are a filter of their own (NodePorts)
                    **(
                        {"ports": [p for p in c["ports"] if p.get("hostPort")]}
                        if any(p.get("hostPort") for p in c.get("ports") or [])
                        else {}
                    ),
                }
                for c in spec[key] or []
            ]
    slim_status = {k: v for k, v in status.items() if k not in _POD_STATUS_BULK}
    unscheduled = [
        c
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    if unscheduled:  # why kube-scheduler could not bind it: pending pods only, few
        slim_status["conditions"] = unscheduled
    return {
        "metadata": _slim_meta(obj.get("metadata") or {}),
        "spec": slim_spec,
        "status": slim_status,
    }


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` without the bulk no node record reads (managed fields, images, ...)."""
    status = obj.get("status") or {}
    return {
        "metadata": _slim_meta(obj.get("metadata") or {}),
        "spec": obj.get("spec") or {},
        "status": {k: v for k, v in status.items() if k not in _NODE_STATUS_BULK},
    }


def slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` without its managed fields (jobs are few; spec and status stay whole)."""
    return {**obj, "metadata": _slim_meta(obj.get("metadata") or {})}
