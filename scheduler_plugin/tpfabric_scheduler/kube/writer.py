"""The writes of the placer, each one API call: job status, pod releases, deletions, Events, a
silent agent's node condition (and the read of its heartbeat Lease that precedes it).

Nothing here decides anything: :mod:`tpfabric_scheduler.writes` fences each write and says
what to send.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_kube.events import event_body, pod_object
from tpfabric_scheduler.store import JobRecord, PodRecord

if TYPE_CHECKING:
    from tpfabric_scheduler.kube.informers import Informer

__all__ = ["JSON_PATCH", "KubeWriter"]

log = logging.getLogger("tpfabric.scheduler.kube")
JSON_PATCH = "application/json-patch+json"
_UNPROCESSABLE = 422


def _pointer(key: str) -> str:
    """Return ``key`` as one JSON pointer (RFC 6901) segment."""
    return key.replace("~", "~0").replace("/", "~1")


class KubeWriter:
    """The writes of the placer, each one API call."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        uid: str | None = None,
        tests: list[dict[str, Any]] | None = None,
        plural: str = PLURAL,
    ) -> None:
        """Write ``status`` into the job's status subresource; None values remove keys.

        ``plural``: the record's resource (a Gang's ``gangs``).

        Without ``uid``: a merge patch (nested maps merge). With ``uid``: only this incarnation
        of the job is written, and each top-level key of ``status`` is replaced whole (no stale
        keys of an earlier placement survive). A merge patch cannot do that: the status
        subresource ignores ``metadata.uid`` in a patch (checked against kube-apiserver 1.37), so
        this is a JSON patch led by a ``test`` of the uid; the API server refuses it (422) when a
        job of the same name was created since. ``tests``: more JSON patch ``test`` ops that must
        hold (the placer's fence: the placement it computed from is still there). A job without
        any status yet gets it whole, guarded by a ``test`` that it still has none.
        """
        if not uid:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, {"status": status}
            )
            return
        same_job: dict[str, Any] = {"op": "test", "path": "/metadata/uid", "value": uid}
        ops = [same_job, *(tests or [])] + [
            {"op": "add", "path": f"/status/{_pointer(key)}", "value": value}
            for key, value in status.items()
        ]
        try:
            self._json_patch_status(namespace, name, ops, plural)
        except ApiException as err:
            if err.status != _UNPROCESSABLE:
                raise
            # another job, or no /status to add into: the first status, if it still has none
            first: list[dict[str, Any]] = [
                same_job,
                {"op": "test", "path": "/status", "value": None},
                {"op": "add", "path": "/status", "value": status},
            ]
            self._json_patch_status(namespace, name, first, plural)

    def _json_patch_status(
        self, namespace: str, name: str, ops: list[dict[str, Any]], plural: str
    ) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, ops, _content_type=JSON_PATCH
        )

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod, only its incarnation ``uid`` (a delete precondition; the chart's
        admission policy refuses this account a delete that names none); one already gone, or
        made again under that name, is fine."""
        try:
            self.core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": uid}})
        except ApiException as err:
            if err.status not in {404, 409}:  # 409: the uid precondition, a newer pod
                raise

    def job_event(self, job: JobRecord, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job (best effort: a lost event is only a lost note)."""
        involved = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": job.kind,
            "name": job.name,
            "namespace": job.namespace,
            "uid": job.uid,
        }
        self._event(involved, kind, reason, message)

    def pod_event(self, pod: PodRecord, reason: str, message: str) -> None:
        """Record a Normal Event on a worker pod (best effort, as :meth:`job_event`):
        ``kubectl describe pod`` shows it under Events."""
        self._event(pod_object(pod.name, pod.namespace, pod.uid), "Normal", reason, message)

    def _event(self, involved: dict[str, str], kind: str, reason: str, message: str) -> None:
        """Create a core/v1 Event about ``involved``; a refusal is logged, never raised."""
        namespace, name = involved["namespace"], involved["name"]
        body = event_body(
            involved,
            reason=reason,
            message=message,
            component="tpfabric-placer",
            warning=kind == "Warning",
        )
        try:
            self.core.create_namespaced_event(namespace, body, _preload_content=False).read()
        except ApiException as err:
            log.warning(
                "event for %s %s/%s not recorded: %s", involved["kind"], namespace, name, err.reason
            )

    def read_lease_renewal(self, namespace: str, name: str) -> str | None:
        """Return a Lease's ``renewTime`` as the API server has it now (None: no Lease)."""
        try:
            response = self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        spec = orjson.loads(response.data).get("spec") or {}
        renewed = spec.get("renewTime") or spec.get("acquireTime")
        return str(renewed) if renewed else None

    def patch_fabric_condition(self, node: str, condition: dict[str, Any]) -> None:
        """Set ``node``'s ``FabricHealthy`` condition (a strategic merge on the condition's
        type: every other condition stays as it is)."""
        self.core.patch_node_status(
            node,
            {"status": {"conditions": [condition]}},
            field_manager="tpfabric-placer",
            _content_type="application/strategic-merge-patch+json",
        )

    def read_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the job as stored now (for a consistent read before writing a plan)."""
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        return result

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the pod as stored now."""
        response = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        result: dict[str, Any] = orjson.loads(response.data)
        return result

    def release_pod(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: Mapping[str, str] | None = None,
        annotated: bool = True,
    ) -> None:
        """Set the gated pod's (narrowed) affinity, write the plan's ``annotations`` (its rails,
        its plan level) and drop our gate, in one JSON patch; ``annotated``: whether the pod has
        annotations already (as read).

        The ``test`` op makes it optimistic: if the pod changed since it was read, the API
        server refuses the patch (409/422) and nothing is half-applied.
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            *_annotation_ops(annotations or {}, annotated=annotated),
        ]
        if affinity is not None:  # None: a cluster-wide plan narrows nothing
            ops.append({"op": "add", "path": "/spec/affinity", "value": affinity})
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": remaining_gates})
        # the answer is not read into a client model (a burst releases thousands of pods)
        self.core.patch_namespaced_pod(name, namespace, ops, _preload_content=False).read()

    def release_known_pod(
        self,
        pod: PodRecord,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Release ``pod`` as the store knows it, in one write and without reading it first;
        ``annotations`` (the plan's rails and level) are added to the ones it has.

        ``test`` ops make it exact: the patch applies only to that pod (uid) with exactly the
        gates and affinity the store holds; anything else is refused (422) and nothing changes,
        and the caller falls back to :meth:`read_pod` + :meth:`release_pod` (so does a pod
        without any annotation, which a key cannot be added to).
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": pod.uid},
            {"op": "test", "path": "/spec/schedulingGates", "value": list(pod.gates)},
            *_annotation_ops(annotations or {}, annotated=True),
        ]
        before = pod.scheduling.get("affinity")
        if before is not None:
            ops.append({"op": "test", "path": "/spec/affinity", "value": before})
        if affinity is not None:
            ops.append({"op": "add", "path": "/spec/affinity", "value": affinity})
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": remaining_gates})
        self.core.patch_namespaced_pod(pod.name, pod.namespace, ops, _preload_content=False).read()

    @staticmethod
    def wait_synced(informers: list[Informer], timeout: float) -> bool:
        """Return whether every informer listed once within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in informers)


def _annotation_ops(annotations: Mapping[str, str], *, annotated: bool) -> list[dict[str, Any]]:
    """Return the JSON patch ops that add ``annotations``: one per key to a pod that has
    annotations (``/`` escaped as ``~1``), else the whole map."""
    if not annotations:
        return []
    if not annotated:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    return [
        {
            "op": "add",
            "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
            "value": value,
        }
        for key, value in annotations.items()
    ]
