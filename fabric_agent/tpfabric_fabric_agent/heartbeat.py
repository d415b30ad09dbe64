"""The agent's heartbeat: its node's Lease (:mod:`tpfabric_core.fabric.agent_heartbeat`),
renewed after every read of the node's links that succeeded, so that the placer can tell a
silent agent from a quiet fabric.

One write per interval: a merge patch of ``renewTime``; the first beat (and a beat that finds
the Lease gone) creates it first, owned by the Node (it goes when the node goes). The Lease holds
nothing else: the node's health stays in its condition and label.

When a beat comes after a gap longer than half the Lease's duration (the agent hung, the API
server was unreachable), the placer may have marked the node's condition ``AgentSilent``
meanwhile: ``on_lapse`` is called, and the agent reads its node again before it next publishes,
so that it writes its own condition back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_core.fabric.agent_heartbeat import HEARTBEAT_LABEL, lease_name
from tpfabric_core.fabric.link_publish import AGENT_FIELD_MANAGER
from tpfabric_core.timestamps import micro_time
from tpfabric_kube.structured_logs import about

__all__ = ["FIELD_MANAGER", "LeaseHeartbeat"]

FIELD_MANAGER = AGENT_FIELD_MANAGER
_TIMEOUT_S = 10
_MERGE_PATCH = "application/merge-patch+json"
log = logging.getLogger("tpfabric.fabric_agent.heartbeat")


class LeaseHeartbeat:
    """Renews ``node``'s heartbeat Lease in ``namespace`` through ``coordination`` (a
    ``CoordinationV1Api``); ``node_uid`` returns the Node's uid (its owner reference)."""

    def __init__(
        self,
        node: str,
        namespace: str,
        coordination: Any,
        *,
        grace_seconds: float,
        node_uid: Callable[[], str | None],
        on_lapse: Callable[[], None] | None = None,
        on_write: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.namespace = namespace
        self.name = lease_name(node)
        self.coordination = coordination
        self.grace_seconds = grace_seconds
        self._node_uid = node_uid
        self._on_lapse = on_lapse
        self._on_write = on_write
        self._clock = clock
        self._wall = wall
        self._last: float | None = None
        self._exists = False

    def beat(self) -> None:
        """Renew the Lease (create it when missing); raise the API's error when it fails."""
        now = self._clock()
        renewed = micro_time(self._wall())
        if not self._exists:
            self._create()
        try:
            self._renew(renewed)
        except ApiException as err:
            if err.status != 404:
                raise
            self._create()  # deleted meanwhile (by hand): made again
            self._renew(renewed)
        self._count()
        lapsed = self._last is not None and now - self._last > self.grace_seconds / 2
        self._last = now
        if lapsed and self._on_lapse is not None:
            log.info(
                "node %s: heartbeat renewed after a gap: the node is read again",
                self.node,
                extra=about("Node", name=self.node),
            )
            self._on_lapse()

    def _renew(self, renewed: str) -> None:
        """Patch the Lease's renewal (a merge patch the client sends as written: its typed
        models would rewrite a MicroTime of a whole second without the microseconds the API
        server requires)."""
        self.coordination.patch_namespaced_lease(
            self.name,
            self.namespace,
            {
                "spec": {
                    "renewTime": renewed,
                    "holderIdentity": self.node,
                    "leaseDurationSeconds": max(1, round(self.grace_seconds)),
                }
            },
            field_manager=FIELD_MANAGER,
            _content_type=_MERGE_PATCH,
            _request_timeout=_TIMEOUT_S,
            _preload_content=False,
        ).read()

    def _create(self) -> None:
        """Create the Lease, owned by the node, without a time (the renewal that follows sets
        it); one left by an earlier run of this agent is taken over as it is."""
        uid = self._node_uid()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {HEARTBEAT_LABEL: "fabric-agent"},
                "ownerReferences": (
                    [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}]
                    if uid
                    else []
                ),
            },
            "spec": {
                "holderIdentity": self.node,
                "leaseDurationSeconds": max(1, round(self.grace_seconds)),
            },
        }
        try:
            self.coordination.create_namespaced_lease(
                self.namespace, body, field_manager=FIELD_MANAGER, _request_timeout=_TIMEOUT_S
            )
        except ApiException as err:
            if err.status != 409:
                raise
        self._exists = True

    def _count(self) -> None:
        if self._on_write is not None:
            self._on_write()
