"""The operator's one adapter to the API server beyond kopf: create and delete pods and Services,
read node capacity. Conflicts and not-found answers that mean "already so" are not errors."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GROUP, PLURAL, VERSION

__all__ = ["KubeAdapter"]

NODE_CACHE_SECONDS = 30.0


class KubeAdapter:
    """Thin wrapper over the Kubernetes client for the operator's writes."""

    def __init__(self, api: client.ApiClient | None = None) -> None:
        if api is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api = client.ApiClient()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._nodes: list[dict[str, int]] = []
        self._nodes_at = 0.0
        self._lock = threading.Lock()

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create a Pod or Service; return False when it already exists."""
        namespace = manifest["metadata"]["namespace"]
        try:
            if manifest["kind"] == "Pod":
                self.core.create_namespaced_pod(namespace, manifest)
            else:
                self.core.create_namespaced_service(namespace, manifest)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete a pod; return False when it was gone already."""
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=30)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

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

    def read_placement_state(self, namespace: str, name: str) -> str | None:
        """Return the job's ``status.placement.state`` as the API server has it now."""
        try:
            job = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        state = ((job.get("status") or {}).get("placement") or {}).get("state")
        return str(state) if state else None

    def node_capacity(self) -> list[dict[str, int]]:
        """Return the allocatable extended resources of every node (cached for 30 s)."""
        with self._lock:
            if time.monotonic() - self._nodes_at > NODE_CACHE_SECONDS:
                nodes = []
                for node in self.core.list_node(_request_timeout=30).items:
                    allocatable = node.status.allocatable or {}
                    counts = {}
                    for key, value in allocatable.items():
                        if "/" in key and str(value).isdigit():
                            counts[key] = int(value)
                    nodes.append(counts)
                self._nodes, self._nodes_at = nodes, time.monotonic()
            return list(self._nodes)
