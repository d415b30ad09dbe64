"""An in-memory Node that answers the agent's reads and applies its patches, counting both.

For unit tests and the benchmark of the publisher's write-on-change logic; the integration tests
hold the real API server to account. It implements exactly the three ``CoreV1Api`` calls
:class:`~tpfabric_fabric_agent.kube.NodePublisher` makes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["MemoryNode"]


class MemoryNode:
    """One Node's labels, annotations and conditions, and the calls made on them."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.conditions: list[dict[str, Any]] = []
        self.writes: list[str] = []
        self.reads = 0
        self.uid = "node-uid"

    def read_node(self, name: str, **_: Any) -> Any:
        """Return the node as the client's models would (attributes, not keys)."""
        self.reads += 1
        conditions = [
            SimpleNamespace(
                type=c["type"],
                status=c["status"],
                reason=c["reason"],
                message=c["message"],
                last_transition_time=None,
            )
            for c in self.conditions
        ]
        return SimpleNamespace(
            metadata=SimpleNamespace(
                labels=dict(self.labels), annotations=dict(self.annotations), uid=self.uid
            ),
            status=SimpleNamespace(conditions=conditions),
        )

    def patch_node(self, name: str, body: dict[str, Any], **_: Any) -> None:
        """Apply a metadata merge patch."""
        self.writes.append("metadata")
        self.labels.update(body["metadata"].get("labels") or {})
        self.annotations.update(body["metadata"].get("annotations") or {})

    def patch_node_status(self, name: str, body: dict[str, Any], **_: Any) -> None:
        """Apply a conditions patch, merging on ``type`` as the API server's strategic merge
        does."""
        self.writes.append("status")
        patched = {c["type"]: c for c in body["status"]["conditions"]}
        kept = [c for c in self.conditions if c["type"] not in patched]
        self.conditions = [*kept, *patched.values()]
