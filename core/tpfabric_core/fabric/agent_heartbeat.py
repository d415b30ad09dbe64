"""Fabric health that cannot go stale: the fabric agent's heartbeat, and when a node's agent
counts as silent.

Each fabric agent renews a Lease of its own once per interval, after a read of its node's links
that succeeded (``coordination.k8s.io/v1``, named :func:`lease_name`, in the agent's namespace,
owned by its Node so that it goes with the node). A Lease, not the ``FabricHealthy`` condition's
``lastHeartbeatTime``, for the reason the kubelet moved its own heartbeat to Leases (KEP-589): a
node status patch per interval per node sends the whole Node object to every watcher of nodes
(both kube-schedulers, the controller manager, the placer, the operator, CNI agents), where a
Lease renewal is a few hundred bytes that only the placer watches.

A node whose agent has renewed its Lease at least once and has not renewed it within the
Lease's ``leaseDurationSeconds`` is **silent**: its link health is *unknown* (neither healthy
nor degraded) whatever its label and condition last said. The placer tells it apart by
:class:`Heartbeats`, which, like the node lifecycle controller, times each renewal by its own
clock when it sees it, never by the ``renewTime`` the agent wrote (clocks of nodes drift), and
gives every Lease a full duration from the moment it is first seen. A node without a Lease
(no agent was ever deployed there) is judged by its label as before.

Pure: no I/O. The agent writes the Lease, the placer watches it and writes the condition of
:func:`silent_condition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.fabric.link_publish import CONDITION_TYPE
from tpfabric_core.fabric.node_condition import condition

__all__ = [
    "AGENT_SILENT_REASON",
    "HEARTBEAT_LABEL",
    "LEASE_PREFIX",
    "MIN_GRACE_SECONDS",
    "HeartbeatLease",
    "Heartbeats",
    "default_grace_seconds",
    "heartbeat_lease",
    "lease_name",
    "node_of_lease",
    "silent_condition",
    "silent_words",
]

#: the Lease of node N is ``fabric-agent-N`` (a prefix, so that no node's name can take the
#: name of another Lease of the namespace, such as the placer's)
LEASE_PREFIX = "fabric-agent-"
#: the label every heartbeat Lease carries (the placer watches by it)
HEARTBEAT_LABEL = "tpfabric.io/heartbeat"
#: the reason of the ``FabricHealthy`` condition of a node whose agent is silent
AGENT_SILENT_REASON = "AgentSilent"
#: the least silence that counts: two missed renewals of a 10 s interval and then some (the
#: kubelet's node lease is 40 s)
MIN_GRACE_SECONDS = 40.0
#: renewals an agent may miss before it counts as silent
MISSED_RENEWALS = 4


def default_grace_seconds(interval_seconds: float) -> float:
    """Return how long an agent reading every ``interval_seconds`` may be silent before its
    node's health is unknown: MISSED_RENEWALS intervals, at least MIN_GRACE_SECONDS."""
    return max(MIN_GRACE_SECONDS, MISSED_RENEWALS * interval_seconds)


def lease_name(node: str) -> str:
    """Return the name of the heartbeat Lease of ``node``'s agent."""
    return f"{LEASE_PREFIX}{node}"


def node_of_lease(name: str) -> str | None:
    """Return the node a heartbeat Lease is of (None: not a heartbeat Lease's name)."""
    node = name.removeprefix(LEASE_PREFIX)
    return node if node != name and node else None


@dataclass(frozen=True, slots=True)
class HeartbeatLease:
    """A heartbeat Lease as read: whose agent, its last renewal (the text the agent wrote:
    compared, never trusted as a time) and how long a silence it allows."""

    node: str
    renew_time: str
    grace_seconds: float


def heartbeat_lease(obj: Mapping[str, Any]) -> HeartbeatLease:
    """Return the heartbeat of a Lease object (a dict as the API serves it); ValueError naming
    the field when it is not a heartbeat Lease an agent wrote. A Lease not renewed yet has an
    empty ``renew_time``."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = str(meta.get("name") or "")
    node = node_of_lease(name)
    if node is None:
        raise ValueError(f"metadata.name: {name!r} is not {LEASE_PREFIX}<node>")
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
        raise ValueError(
            f"spec.leaseDurationSeconds: expected a positive integer, got {duration!r}"
        )
    # absent: created and not renewed yet (the agent creates it, then renews it); compared as
    # text only, never read as a time
    renewed = str(spec.get("renewTime") or spec.get("acquireTime") or "")
    return HeartbeatLease(node, renewed, float(duration))


@dataclass(slots=True)
class _Beat:
    renew_time: str
    seen_at: float
    grace_seconds: float


class Heartbeats:
    """The agents' heartbeats as one observer sees them: node -> when its Lease was last seen
    renewed, by the observer's clock. Methods take ``now`` (monotonic seconds); not
    thread-safe (the placer's store lock guards it)."""

    def __init__(self) -> None:
        self._beats: dict[str, _Beat] = {}

    def observe(self, lease: HeartbeatLease, now: float) -> None:
        """Record a Lease as read: a renewal not seen before counts from ``now``."""
        beat = self._beats.get(lease.node)
        if beat is None or beat.renew_time != lease.renew_time:
            self._beats[lease.node] = _Beat(lease.renew_time, now, lease.grace_seconds)
        else:
            beat.grace_seconds = lease.grace_seconds

    def replace(self, leases: Iterable[HeartbeatLease], now: float) -> None:
        """Replace every heartbeat with ``leases`` (a list), each renewal not seen before
        counting from ``now``."""
        current = {lease.node: lease for lease in leases}
        for node in [n for n in self._beats if n not in current]:
            del self._beats[node]
        for lease in current.values():
            self.observe(lease, now)

    def renew_time_of(self, node: str) -> str | None:
        """Return the last renewal of ``node``'s Lease as read (None: it has no heartbeat)."""
        beat = self._beats.get(node)
        return None if beat is None else beat.renew_time

    def forget(self, node: str) -> None:
        """Forget ``node``'s Lease (deleted: its node went, or the agent was uninstalled)."""
        self._beats.pop(node, None)

    def silent(self, now: float, nodes: Iterable[str] | None = None) -> dict[str, float]:
        """Return ``{node: seconds since its last renewal}`` of the silent agents (of ``nodes``
        only, when given)."""
        wanted = None if nodes is None else set(nodes)
        return {
            node: now - beat.seen_at
            for node, beat in self._beats.items()
            if (wanted is None or node in wanted) and now - beat.seen_at > beat.grace_seconds
        }

    def grace_of(self, node: str) -> float | None:
        """Return the silence ``node``'s agent is allowed (None: it has no heartbeat)."""
        beat = self._beats.get(node)
        return None if beat is None else beat.grace_seconds

    def __len__(self) -> int:
        return len(self._beats)


def silent_words(node: str, namespace: str, silent_for: float, grace: float) -> str:
    """Return the sentence that says ``node``'s agent is silent, and what to do."""
    return (
        f"the fabric agent of node {node} has not renewed its heartbeat (Lease "
        f"{namespace}/{lease_name(node)}) for {silent_for:.0f} s, more than its {grace:g} s: the "
        "node's link health is unknown (the placer gives it to new gangs as it would a degraded "
        "node, and moves nothing off it); check the agent pod on the node (kubectl -n "
        f"{namespace} get pods -o wide --field-selector spec.nodeName={node})"
    )


def silent_condition(message: str, now: str, current: dict[str, Any] | None) -> dict[str, Any]:
    """Return the ``FabricHealthy`` condition of a node whose agent is silent (``Unknown``,
    reason :data:`AGENT_SILENT_REASON`), its transition time kept while it stays Unknown."""
    return condition(
        CONDITION_TYPE,
        status="Unknown",
        reason=AGENT_SILENT_REASON,
        message=message,
        current=current,
        now=now,
    )
