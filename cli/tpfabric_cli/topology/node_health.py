"""What the live cluster says about each node's fabric health, read into one :class:`NodeHealth`.

The fabric health agent (:mod:`tpfabric_core.fabric.link_publish`) publishes, per node, the
label ``topology.tpfabric.io/health`` (``ok`` or ``degraded``; ``down`` is read too), the node
condition ``FabricHealthy`` whose reason and message say what is wrong (e.g. "symbol errors
1,200/min on mlx5_3 port 1"), and a per-rail detail annotation. A node is unhealthy when the label
or the condition says so: the label is what the placer reads, the condition carries the words,
the annotation names the rails. A node whose agent went silent (condition ``Unknown``, reason
``AgentSilent``, written by the placer) is ``unknown``, whatever its last label said. Pure: this
module takes what :mod:`tpfabric_cli.kube_nodes` read and never reads the cluster itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpfabric_core import labels
from tpfabric_core.fabric.agent_heartbeat import AGENT_SILENT_REASON
from tpfabric_core.fabric.link_publish import RailDetail, parse_detail

if TYPE_CHECKING:
    from tpfabric_cli.kube_nodes import NodeCondition

__all__ = ["DEGRADED", "DOWN", "UNKNOWN", "NodeHealth", "node_health"]

DEGRADED = "degraded"
DOWN = "down"
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """An unhealthy node: ``state`` is ``degraded``, ``down`` or ``unknown`` (its agent is
    silent); why, in the agent's (or the placer's) words; and the rails the agent found degraded
    or down."""

    state: str
    reason: str = ""
    message: str = ""
    rails: tuple[RailDetail, ...] = ()

    def describe(self) -> str:
        """Return ``state``, then the reason, message and sick rails where the agent gave them."""
        rails = ", ".join(f"rail {r.rail} ({r.hca}) {r.state}" for r in self.rails)
        words = ": ".join(part for part in (self.reason, self.message) if part)
        words = "; ".join(part for part in (words, rails) if part)
        return f"{self.state} ({words})" if words else self.state


def node_health(
    node_labels: Mapping[str, str], condition: NodeCondition | None, detail: str | None = None
) -> NodeHealth | None:
    """Return the health of a node from its labels, ``FabricHealthy`` condition and detail
    annotation; ``None`` when neither the label nor the condition reports a problem (a missing
    label or condition is no news, not bad news)."""
    if condition is not None and (condition.status, condition.reason) == (
        "Unknown",
        AGENT_SILENT_REASON,
    ):
        return NodeHealth(UNKNOWN, condition.reason, condition.message)
    label = node_labels.get(labels.HEALTH, "")
    failing = condition is not None and condition.status == "False"
    if label not in (DEGRADED, DOWN) and not failing:
        return None
    state = label if label in (DEGRADED, DOWN) else DEGRADED
    rails = tuple(rail for rail in parse_detail(detail) if rail.state != "ok")
    if condition is None or condition.status != "False":
        return NodeHealth(state, rails=rails)
    return NodeHealth(state, condition.reason, condition.message, rails)
