"""The operator's one adapter to the API server beyond kopf: create and delete pods, Services and
finished jobs, keep failed pods out of their gang. Conflicts and not-found
answers that mean "already so" are not errors."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GROUP, JOB_LABEL, PLURAL, VERSION, WORKER_INDEX_LABEL
from tpfabric_core.api.placement import StoredPlacement, placement_of_status
from tpfabric_core.input_limits import whole_number
from tpfabric_kube.request_timeouts import with_default_timeout
from tpfabric_operator.jobs.children import FAILED_WORKER_LABEL, service_name
from tpfabric_operator.jobs.kueue.workload import (
    QUEUE_LABEL,
    WORKLOAD_GROUP,
    WORKLOAD_PLURAL,
    WORKLOAD_VERSION,
)

__all__ = ["KubeAdapter", "extended_resources"]

log = logging.getLogger("tpfabric.operator")


class KubeAdapter:
    """Thin wrapper over the Kubernetes client for the operator's writes."""

    def __init__(self, api: client.ApiClient | None = None) -> None:
        if api is None:
            settings = client.Configuration()
            try:
                config.load_incluster_config(client_configuration=settings)
            except config.ConfigException:
                config.load_kube_config(client_configuration=settings)
            # a gang's pods are created CREATE_CONCURRENCY at a time: keep their connections
            settings.connection_pool_maxsize = max(settings.connection_pool_maxsize, 32)
            api = client.ApiClient(settings)
            # no call may hold a reconcile (and its job) forever on a half-open connection
            api.rest_client.request = with_default_timeout(api.rest_client.request)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)  # the operator's leader election
        self.apis = client.ApisApi(api)  # which Kueue API versions are served
        self.scheduling = client.SchedulingV1Api(api)  # PriorityClass values for Workloads

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create a Pod or Service; return False when it already exists."""
        namespace = manifest["metadata"]["namespace"]
        try:
            # the created object is not parsed into models (CPU a burst of pod creations
            # needs), but its body is read to the end: only then does the connection go back
            # to the pool (unread, every create would open a new TLS connection)
            if manifest["kind"] == "Pod":
                response = self.core.create_namespaced_pod(
                    namespace, manifest, _preload_content=False
                )
            else:
                response = self.core.create_namespaced_service(
                    namespace, manifest, _preload_content=False
                )
            response.read()
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the pod ``uid`` with its own grace period; return False when it was gone
        already (or a pod of that name is another one now).

        The uid is a delete precondition: a pod made again under the same name meanwhile is
        never taken for the one meant (and the chart's admission policy refuses a delete of
        this account that names no uid). No grace period is given: the pod's
        ``terminationGracePeriodSeconds`` applies (a checkpoint on SIGTERM may need minutes),
        and a pod is never force-deleted (:mod:`.obstacles`).
        """
        try:
            self.core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": uid}})
        except ApiException as err:
            if err.status in (404, 409):  # 409: the precondition, another pod of that name
                return False
            raise
        return True

    def keep_failed_pod(self, namespace: str, name: str, job: str) -> None:
        """Take a failed pod out of its gang (no job or worker label) and mark it kept."""
        labels = {JOB_LABEL: None, WORKER_INDEX_LABEL: None, FAILED_WORKER_LABEL: job}
        try:
            self.core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": labels}})
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_service(self, namespace: str, job: str) -> None:
        """Delete the job's headless Service (one of an older job of the same name)."""
        try:
            self.core.delete_namespaced_service(service_name(job), namespace)
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a TensorParallelJob (its pods and Service go by garbage collection)."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Return a Kueue Workload, or None when it does not exist."""
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def create_workload(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a Kueue Workload; return it (the existing one on a conflict)."""
        namespace = manifest["metadata"]["namespace"]
        try:
            created: dict[str, Any] = self.custom.create_namespaced_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, manifest
            )
        except ApiException as err:
            if err.status != 409:
                raise
            return self.workload(namespace, manifest["metadata"]["name"]) or manifest
        return created

    def replace_workload_status(self, workload: dict[str, Any], status: dict[str, Any]) -> None:
        """Write a Workload's status, guarded by the resourceVersion it was read at: a conflict
        (Kueue wrote meanwhile) or a refusal is logged and tried again by the next reconcile,
        never raised into it."""
        meta = workload["metadata"]
        body = {**workload, "status": status}
        try:
            self.custom.replace_namespaced_custom_object_status(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                meta["namespace"],
                WORKLOAD_PLURAL,
                meta["name"],
                body,
            )
        except ApiException as err:
            if err.status not in (404, 409):
                log.warning(
                    "Workload %s/%s status refused: %s", meta["namespace"], meta["name"], err.reason
                )

    def set_workload_queue(self, workload: dict[str, Any], queue: str) -> None:
        """Move a Workload that holds no quota to LocalQueue ``queue`` (Kueue's rule for a
        suspended job whose queue label changed)."""
        self._patch_workload(workload, {"spec": {"queueName": queue}})

    def remove_workload_finalizer(self, workload: dict[str, Any], finalizer: str) -> None:
        """Remove ``finalizer`` from a Workload."""
        kept = [f for f in workload["metadata"].get("finalizers") or [] if f != finalizer]
        self._patch_workload(workload, {"metadata": {"finalizers": kept}})

    def _patch_workload(self, workload: dict[str, Any], patch: dict[str, Any]) -> None:
        """Merge ``patch`` into a Workload, guarded by the resourceVersion it was read at (a
        conflict, or a Workload gone meanwhile, is left to the next reconcile)."""
        meta = workload["metadata"]
        guarded = {
            **patch,
            "metadata": {
                **patch.get("metadata", {}),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        try:
            self.custom.patch_namespaced_custom_object(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                meta["namespace"],
                WORKLOAD_PLURAL,
                meta["name"],
                guarded,
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def delete_workload(self, namespace: str, name: str) -> None:
        """Delete a Workload (gone already: nothing to do)."""
        try:
            self.custom.delete_namespaced_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, name
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def kueue_versions(self) -> tuple[str, ...]:
        """Return the versions of kueue.x-k8s.io the API server serves (empty: none)."""
        for group in self.apis.get_api_versions().groups or []:
            if group.name == WORKLOAD_GROUP:
                return tuple(v.version for v in group.versions or [])
        return ()

    def resource_flavor(self, name: str) -> dict[str, Any] | None:
        """Return a Kueue ResourceFlavor, or None when it does not exist."""
        try:
            found: dict[str, Any] = self.custom.get_cluster_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, "resourceflavors", name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def queue_topology_levels(self, namespace: str, local_queue: str) -> tuple[str, ...]:
        """Return the node-label levels of the Topology behind LocalQueue ``local_queue`` when
        every flavor of its ClusterQueue uses that one Topology (a TAS queue); else empty."""

        def get(plural: str, name: str, where: str | None = None) -> dict[str, Any]:
            try:
                if where is not None:
                    return dict(
                        self.custom.get_namespaced_custom_object(
                            WORKLOAD_GROUP, WORKLOAD_VERSION, where, plural, name
                        )
                    )
                return dict(
                    self.custom.get_cluster_custom_object(
                        WORKLOAD_GROUP, WORKLOAD_VERSION, plural, name
                    )
                )
            except ApiException as err:
                if err.status == 404:
                    return {}
                raise

        queue = get("localqueues", local_queue, namespace)
        cluster_queue = get("clusterqueues", str((queue.get("spec") or {}).get("clusterQueue")))
        flavors = {
            str(f.get("name"))
            for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
            for f in group.get("flavors") or []
        }
        topologies = {
            str((get("resourceflavors", f).get("spec") or {}).get("topologyName") or "")
            for f in flavors
        }
        if len(topologies) != 1 or "" in topologies:
            return ()
        topology = get("topologies", topologies.pop())
        return tuple(
            str(level.get("nodeLabel"))
            for level in (topology.get("spec") or {}).get("levels") or []
        )

    def priority_value(self, group: str, kind: str, name: str) -> int | None:
        """Return the value of a PriorityClass or a Kueue WorkloadPriorityClass (None: none)."""
        try:
            if kind == "PriorityClass":
                return int(self.scheduling.read_priority_class(name).value)
            found = self.custom.get_cluster_custom_object(
                group, WORKLOAD_VERSION, "workloadpriorityclasses", name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return int(found.get("value") or 0)

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        """Return whether the Kueue LocalQueue ``name`` exists in ``namespace``."""
        try:
            self.custom.get_namespaced_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, "localqueues", name
            )
        except ApiException as err:
            if err.status in (403, 404):
                return False
            raise
        return True

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """Return the labels of ``namespace`` (None when it is gone). Where it cannot be read
        (403), only ``kubernetes.io/metadata.name``, which the API server sets on every
        namespace, is taken to be there."""
        try:
            found = self.core.read_namespace(namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            if err.status != 403:
                raise
            log.warning(
                "namespace %s cannot be read (%s): only its name is known", namespace, err.reason
            )
            return {"kubernetes.io/metadata.name": namespace}
        return dict(found.metadata.labels or {})

    def queue_job(self, namespace: str, name: str, queue: str) -> None:
        """Give a TensorParallelJob the queue label ``queue`` and suspend it, in one write (an
        unsuspended job's queue label may not change: the chart's policy refuses it)."""
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"metadata": {"labels": {QUEUE_LABEL: queue}}, "spec": {"suspend": True}},
        )

    def set_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        """Set a TensorParallelJob's ``spec.suspend`` (Kueue's admission decides it)."""
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": {"suspend": suspend}}
        )

    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """Return the job's worker pods as the API server has them now (one list call)."""
        response = self.core.list_namespaced_pod(
            namespace, label_selector=f"{JOB_LABEL}={job}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
        return items

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Return the pod as the API server has it now, or None when it does not exist."""
        try:
            response = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        result: dict[str, Any] = json.loads(response.data)
        return result

    def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the job's status (None values remove keys), as kopf writes a
        handler's patch."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": dict(status)},
            _preload_content=False,
        ).read()

    def read_placement(
        self, namespace: str, name: str, uid: str | None = None
    ) -> StoredPlacement | None:
        """Return the job's ``status.placement`` as the API server has it now, read typed (None:
        the job, or the job of that ``uid``, is gone)."""
        try:
            job = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        if uid is not None and job["metadata"].get("uid") != uid:
            return None
        return placement_of_status(job.get("status"))


def extended_resources(allocatable: Mapping[str, Any]) -> dict[str, int]:
    """Return a node's allocatable extended resources (``domain/name``: whole count)."""
    return {
        key: amount
        for key, value in allocatable.items()
        if "/" in key and (amount := whole_number(str(value))) is not None
    }
