"""Nodes whose fabric agent went silent: their link health is *unknown*, neither healthy nor
degraded (:mod:`tpfabric_core.fabric.agent_heartbeat` says when an agent counts as silent).

Every ``CHECK_SECONDS`` (on every replica: the extender answers from its own store) the silent
nodes are worked out from the heartbeats the store holds and set in the store; a change wakes
the placer. How the placer uses an unknown node:

- a new plan treats it as it treats a degraded node, by the gang's ``avoidDegraded`` (``avoid``:
  kept off it; ``penalize``: used when no placement of known health fits, or it is cheaper;
  ``ignore``: used as any node), and the extender scores it as a degraded node: a node whose
  links nobody vouches for is not given to a gang that asked to avoid bad links, as the kubelet's
  silence taints its node ``unreachable`` for new pods;
- a gang running there is left alone: no ``Degraded`` condition, no move off it, no healthy room
  looked for (the operator reads the health label, which an unknown node keeps): moving work
  needs evidence, and a silent agent is none.

The placer that leads also says it on the node: its ``FabricHealthy`` condition turns
``Unknown`` with reason ``AgentSilent`` and a message naming the Lease and what to check, once
per silence, after reading the Lease again from the API server (a renewal its watch has not
delivered yet writes nothing). The agent, once it reads again, writes its own condition back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from kubernetes.client.rest import ApiException

from tpfabric_core.fabric.agent_heartbeat import (
    AGENT_SILENT_REASON,
    lease_name,
    silent_condition,
    silent_words,
)
from tpfabric_core.timestamps import rfc3339
from tpfabric_kube.structured_logs import about
from tpfabric_scheduler.kube import KubeWriter
from tpfabric_scheduler.store import ClusterStore

__all__ = ["CHECK_SECONDS", "SilenceWatch"]

log = logging.getLogger("tpfabric.scheduler.agent_silence")
#: how often the heartbeats are looked at
CHECK_SECONDS = 2.0


class SilenceWatch:
    """Marks the nodes whose agent is silent, in the store and (while leading) on the node."""

    def __init__(
        self,
        store: ClusterStore,
        writer: KubeWriter,
        namespace: str,
        *,
        leading: Callable[[], bool],
        wake: Callable[[], None],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.writer = writer
        #: the namespace of the agents' Leases
        self.namespace = namespace
        self.leading = leading
        self.wake = wake
        self.wall = wall
        #: node -> the renewal its condition was written for (once per silence)
        self._said: dict[str, str | None] = {}

    def check(self) -> dict[str, float]:
        """Set the silent nodes in the store, and (leading) on the nodes; return them, with
        the seconds each has been silent."""
        with self.store.lock:
            silent = self.store.heartbeats.silent(self.store.clock(), self.store.nodes)
            changed = self.store.mark_silent(frozenset(silent))
            said = {n: self.store.nodes[n].fabric_condition for n in silent}
            graces = {n: self.store.heartbeats.grace_of(n) or 0.0 for n in silent}
            renewals = {n: self.store.heartbeats.renew_time_of(n) for n in silent}
        if changed:
            log.info("nodes whose fabric agent is silent (link health unknown): %s", sorted(silent))
            self.wake()
        for node in [n for n in self._said if n not in silent]:
            del self._said[node]
        if not self.leading():
            return silent
        for node, quiet in sorted(silent.items()):
            condition = said[node]
            if condition[:2] == ("Unknown", AGENT_SILENT_REASON) or node in self._said:
                continue
            self._say(node, quiet, graces[node], renewals[node], condition)
        return silent

    def _say(
        self,
        node: str,
        quiet: float,
        grace: float,
        renewal: str | None,
        condition: tuple[str, ...],
    ) -> None:
        """Write ``node``'s condition ``Unknown``/``AgentSilent`` unless its Lease was renewed
        meanwhile (read again: the watch may lag)."""
        try:
            now = self.writer.read_lease_renewal(self.namespace, lease_name(node))
            if now is not None and now != renewal:
                return  # renewed: the watch will say so
            message = silent_words(node, self.namespace, quiet, grace)
            current = (
                {"status": condition[0], "lastTransitionTime": condition[2]} if condition else None
            )
            self.writer.patch_fabric_condition(
                node, silent_condition(message, rfc3339(self.wall()), current)
            )
        except ApiException as err:
            log.warning(
                "node %s: its fabric agent is silent, but marking its FabricHealthy condition "
                "Unknown failed: %s %s",
                node,
                err.status,
                err.reason,
                extra=about("Node", name=node),
            )
            return
        self._said[node] = renewal
        log.warning("node %s: %s", node, message, extra=about("Node", name=node))

    async def run(self, stop: asyncio.Event) -> None:
        """Check every CHECK_SECONDS until ``stop`` is set (the API calls off the loop)."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                await loop.run_in_executor(None, self.check)
            except Exception:  # the next check tries again
                log.exception("checking the fabric agents' heartbeats failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_SECONDS)
