"""The agent's one adapter to the API server: read its own Node, patch its label, annotations and
its ``FabricHealthy`` and ``FabricContractMet`` conditions. Nothing else, and nothing of another
node.

Writes happen only when what the node carries differs from what the agent publishes: the node
is read once at start and every ``resync_seconds`` after (to repair a value someone else
overwrote); between reads, the last written values stand for what the node carries.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, config

from tpfabric_core.fabric.link_publish import (
    AGENT_FIELD_MANAGER,
    CONDITION_TYPE,
    FabricPublication,
    condition_patch,
    metadata_patch,
)
from tpfabric_core.fabric.roce_contract import CONTRACT_CONDITION, contract_condition_patch
from tpfabric_core.rail_ports import RAIL_PORTS_ANNOTATION

__all__ = ["FIELD_MANAGER", "NodePublisher", "api_client"]

FIELD_MANAGER = AGENT_FIELD_MANAGER
_TIMEOUT_S = 10
log = logging.getLogger("tpfabric.fabric_agent")


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """Return a client from ``kubeconfig``, else the in-cluster service account."""
    settings = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=settings)
    else:
        try:
            config.load_incluster_config(client_configuration=settings)
        except config.ConfigException:
            config.load_kube_config(client_configuration=settings)
    return client.ApiClient(settings)


def _as_read(found: Any) -> dict[str, Any] | None:
    """Return a condition of the node as read (status, reason, message, since), None if none."""
    if found is None:
        return None
    return {
        "status": found.status,
        "reason": found.reason,
        "message": found.message,
        "lastTransitionTime": _rfc3339(found.last_transition_time.timestamp())
        if found.last_transition_time
        else None,
    }


def _rfc3339(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodePublisher:
    """Publishes one node's fabric health; counts its writes.

    ``core`` is a ``CoreV1Api`` (or anything with its ``read_node``, ``patch_node`` and
    ``patch_node_status``, such as :class:`~tpfabric_fabric_agent.memory_node.MemoryNode`).
    """

    def __init__(
        self,
        node: str,
        core: Any,
        *,
        resync_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_write: Callable[[str], None] | None = None,
    ) -> None:
        self.node = node
        self.core = core
        self.resync_seconds = resync_seconds
        self._clock = clock
        self._wall = wall
        self._on_write = on_write
        self._read_at: float | None = None
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}
        self._condition: dict[str, Any] | None = None
        self._uid: str | None = None
        self._contract: dict[str, Any] | None = None
        self.writes = 0

    def _refresh(self) -> None:
        obj = self.core.read_node(self.node, _request_timeout=_TIMEOUT_S)
        self._uid = obj.metadata.uid
        self._labels = dict(obj.metadata.labels or {})
        self._annotations = dict(obj.metadata.annotations or {})
        conditions = obj.status.conditions or []
        self._condition = _as_read(next((c for c in conditions if c.type == CONDITION_TYPE), None))
        self._contract = _as_read(
            next((c for c in conditions if c.type == CONTRACT_CONDITION), None)
        )
        self._read_at = self._clock()

    def node_uid(self) -> str | None:
        """Return the node's uid (read at the first call)."""
        if self._read_at is None:
            self._refresh()
        return self._uid

    def expire(self) -> None:
        """Read the node again before the next publish (someone else may have written its
        condition meanwhile: the placer, while this agent was silent)."""
        self._read_at = None

    def rail_map(self) -> str | None:
        """Return the node's rail map (``topology.tpfabric.io/rail-ports``) as last read: at the
        first call, then as every resync reads the node again."""
        if self._read_at is None:
            self._refresh()
        return self._annotations.get(RAIL_PORTS_ANNOTATION)

    def publish(self, publication: FabricPublication) -> int:
        """Bring the node to ``publication``; return the number of PATCH requests sent (0 when
        it already said so)."""
        if self._read_at is None or self._clock() - self._read_at >= self.resync_seconds:
            self._refresh()
        sent = 0
        meta = metadata_patch(publication, self._labels, self._annotations)
        if meta is not None:
            self.core.patch_node(
                self.node,
                meta,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _request_timeout=_TIMEOUT_S,
            )
            self._labels.update(meta["metadata"].get("labels") or {})
            self._annotations.update(meta["metadata"].get("annotations") or {})
            sent += 1
            self._count("metadata")
        now = _rfc3339(self._wall())
        condition = condition_patch(publication, self._condition, now)
        contract = (
            contract_condition_patch(publication.contract, self._contract, now)
            if publication.contract is not None
            else None
        )
        changed = [c for c in (condition, contract) if c is not None]
        if changed:
            # strategic merge: conditions merge on `type`, the kubelet's own stay as they are
            self.core.patch_node_status(
                self.node,
                {"status": {"conditions": changed}},
                field_manager=FIELD_MANAGER,
                _content_type="application/strategic-merge-patch+json",
                _request_timeout=_TIMEOUT_S,
            )
            self._condition = condition or self._condition
            self._contract = contract or self._contract
            sent += 1
            self._count("status")
        if sent:
            log.info(
                "node %s: FabricHealthy=%s (%s) %s",
                self.node,
                publication.status,
                publication.reason,
                publication.message,
            )
        self.writes += sent
        return sent

    def _count(self, target: str) -> None:
        if self._on_write is not None:
            self._on_write(target)
