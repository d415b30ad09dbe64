"""Metrics read off the placer's store at each scrape: how long gangs wait, and the fabric health
of the nodes as the placer sees it. Nothing of the placement cycle is touched: a scrape takes a
view of the store under its lock (O(nodes + jobs) references, as a cycle does) and reads it
without the lock; what it exports is what every replica's store holds (alerts take the ``max``
over replicas).

- ``tpfabric_placer_oldest_waiting_gang_seconds``: the age of the oldest wait
  (``status.placement.waitingSince`` of a gang ``Waiting`` or ``Replanning``); 0 when none waits;
- per waiting gang (the :data:`MAX_GANG_SERIES` oldest), its wait and the wait it may take
  before an alert: its ``maxWaitSeconds`` when set, else the placer's
  ``--gang-wait-alert-seconds``;
- per node whose agent is silent, the seconds since its last heartbeat; per node labelled
  degraded, the gang workers bound there; and the nodes by fabric health (ok, degraded, unknown).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tpfabric_core.labels import HEALTH
from tpfabric_scheduler.store import ClusterStore

__all__ = ["DEFAULT_GANG_WAIT_ALERT_SECONDS", "MAX_GANG_SERIES", "StoreMetrics"]

#: the wait past which a gang without ``maxWaitSeconds`` is reported (the alert's threshold)
DEFAULT_GANG_WAIT_ALERT_SECONDS = 1800.0
#: waiting gangs exported one by one at most (the oldest): a scrape stays bounded in a queue
#: of thousands
MAX_GANG_SERIES = 500
_WAITING = ("Waiting", "Replanning")
_GANG_LABELS = ("gang_namespace", "gang_name", "gang_kind")


class StoreMetrics(Collector):
    """A collector over ``store`` (register it in the extender's registry)."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        wait_alert_seconds: float = DEFAULT_GANG_WAIT_ALERT_SECONDS,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.wait_alert_seconds = wait_alert_seconds
        self.wall = wall

    def describe(self) -> Iterator[Metric]:
        """Yield the families without samples (what registration and the reference read)."""
        return iter(_Families())

    def collect(self) -> Iterator[Metric]:
        """Yield the families, read off the store now."""
        out = _Families()
        with self.store.lock:
            view = self.store.view()
            quiet = self.store.heartbeats.silent(self.store.clock(), self.store.nodes)
        now = self.wall()
        waits = []
        for job in view.jobs.values():
            placement = view.placement_of(job)
            since = placement.waiting_since_time
            if placement.state in _WAITING and since is not None:
                waits.append((max(0.0, now - since), job))
        waits.sort(key=lambda wait: -wait[0])
        out.oldest.add_metric([], waits[0][0] if waits else 0.0)
        for seconds, job in waits[:MAX_GANG_SERIES]:
            labels = [job.namespace, job.name, job.kind]
            out.waiting.add_metric(labels, seconds)
            asked = job.job.spec.topology.max_wait_seconds if job.job is not None else None
            out.limit.add_metric(labels, float(asked) if asked else self.wait_alert_seconds)
        for node, seconds in sorted(quiet.items()):
            out.silent.add_metric([node], seconds)
        unknown = view.silent_nodes & view.nodes.keys()
        degraded = {
            name
            for name, node in view.nodes.items()
            if node.labels.get(HEALTH) == "degraded" and name not in unknown
        }
        out.health.add_metric(["ok"], len(view.nodes) - len(unknown) - len(degraded))
        out.health.add_metric(["degraded"], len(degraded))
        out.health.add_metric(["unknown"], len(unknown))
        if degraded:
            bound: dict[str, int] = {}
            for members in view.workers.values():
                for pod in members.values():
                    if pod.node in degraded and not pod.terminal:
                        bound[pod.node] = bound.get(pod.node, 0) + 1
            for node, count in sorted(bound.items()):
                out.degraded.add_metric([node], count)
        return iter(out)


class _Families:
    """The families of one scrape (or of a description: no samples)."""

    def __init__(self) -> None:
        self.oldest = GaugeMetricFamily(
            "tpfabric_placer_oldest_waiting_gang_seconds",
            "Seconds the longest-waiting gang has waited for a plan (its status.placement."
            "waitingSince), 0 when none waits.",
        )
        self.waiting = GaugeMetricFamily(
            "tpfabric_placer_gang_waiting_seconds",
            f"Seconds each waiting gang has waited for a plan (the {MAX_GANG_SERIES} oldest).",
            labels=_GANG_LABELS,
        )
        self.limit = GaugeMetricFamily(
            "tpfabric_placer_gang_wait_limit_seconds",
            "The wait past which each waiting gang is reported: its topology.maxWaitSeconds, "
            "else the placer's --gang-wait-alert-seconds.",
            labels=_GANG_LABELS,
        )
        self.silent = GaugeMetricFamily(
            "tpfabric_placer_fabric_agent_silent_seconds",
            "Seconds since the fabric agent of each node whose agent is silent last renewed its "
            "heartbeat, as this replica saw it: the node's link health is unknown.",
            labels=("node",),
        )
        self.degraded = GaugeMetricFamily(
            "tpfabric_placer_degraded_node_gang_workers",
            "Gang workers bound to each node labelled degraded (nodes with none left out).",
            labels=("node",),
        )
        self.health = GaugeMetricFamily(
            "tpfabric_placer_nodes",
            "Nodes by fabric health as the placer sees it: ok, degraded (labelled so by its "
            "agent), unknown (its agent is silent).",
            labels=("fabric_health",),
        )

    def __iter__(self) -> Iterator[Metric]:
        return iter(
            (self.oldest, self.waiting, self.limit, self.silent, self.degraded, self.health)
        )
