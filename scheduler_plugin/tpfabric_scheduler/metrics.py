"""Prometheus metrics of the extender and the placer (one registry per process).

What is counted as it happens lives here; what is read off the store at each scrape (the
waiting gangs' ages, the nodes' fabric health) is :mod:`.store_metrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tpfabric_core.api.placement import INVALID, PLANNED, StoredPlacement

__all__ = ["DROP_REASONS", "GANG_WAIT_BUCKETS", "REFUSE_REASONS", "Metrics"]

#: seconds: a gang planned at once, within a cycle or two, within minutes, hours, a day
GANG_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
#: why a plan is dropped (``tpfabric_placer_plans_dropped_total{reason}``)
DROP_REASONS = (
    "bind_timeout",  # released pods not bound within the bind bound
    "node_taken",  # a planned node taken by other pods, the rank not bound elsewhere in time
    "workers_missing",  # workers of the plan's attempt never created within the bind bound
    "workers_refused",  # the API server refused a worker (a quota): planned again once whole
    "node_gone",  # a planned node left the cluster and its domain has no room for its rank
    "no_room",  # a replacement worker found no node in the planned domain
)
#: why the placer will not plan a gang (``tpfabric_placer_plans_refused_total{reason}``)
REFUSE_REASONS = (
    "invalid",  # its topology request can never be met as written (status state Invalid)
    "not_opted_in",  # a Gang record in a namespace not opted in to gangs
)


class Metrics:
    """The metrics, on their own registry so tests can make several servers."""

    def __init__(self) -> None:
        # the objects the informers could not read whole are counted in the process's default
        # registry (tpfabric_malformed_objects_total), which the metrics port serves beside this
        # one: registered here too, a scrape would carry that family twice
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "tpfabric_extender_request_seconds",
            "Time to answer one extender request, by verb.",
            ["verb"],
            buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "tpfabric_extender_bad_requests_total",
            "Requests answered 400, by verb.",
            ["verb"],
            registry=self.registry,
        )
        self.filtered_nodes = Counter(
            "tpfabric_extender_filtered_nodes_total",
            "Nodes the filter removed, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.plans = Counter(
            "tpfabric_placer_plans_total",
            "Gang plans attempted, by result (planned, waiting, error).",
            ["result"],
            registry=self.registry,
        )
        self.plan_seconds = Histogram(
            "tpfabric_placer_plan_seconds",
            "Time the placement engine took for one gang plan.",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
            registry=self.registry,
        )
        self.release_write_seconds = Histogram(
            "tpfabric_placer_release_write_seconds",
            "Time the placer waited for one pod's release write (affinity + gate), as the API "
            "server answered it.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.jobs_waiting = Gauge(
            "tpfabric_placer_jobs_waiting",
            "Jobs whose whole gang waits for a domain.",
            registry=self.registry,
        )
        self.placer_leader = Gauge(
            "tpfabric_placer_leader",
            "1 while this replica holds the placer lease (only the leader plans), else 0.",
            registry=self.registry,
        )
        self.gang_wait_seconds = Histogram(
            "tpfabric_placer_gang_wait_seconds",
            "Time a gang waited for its plan, from its first wait (status.placement."
            "waitingSince) to the plan, by outcome (planned; invalid: the placer found it can "
            "never be planned as written) and the level of the domain planned (empty for "
            "invalid).",
            ["outcome", "level"],
            buckets=GANG_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.plans_dropped = Counter(
            "tpfabric_placer_plans_dropped",
            "Plans the placer dropped after persisting them (the gang is recreated and planned "
            "again), by reason: bind_timeout (released pods not bound within the bind bound), "
            "node_taken, workers_missing, workers_refused, node_gone, no_room.",
            ["reason"],
            registry=self.registry,
        )
        self.plans_refused = Counter(
            "tpfabric_placer_plans_refused",
            "Gangs the placer will not plan, by reason: invalid (a topology request that can "
            "never be met as written), not_opted_in (a Gang record whose namespace has not "
            "opted in to gangs).",
            ["reason"],
            registry=self.registry,
        )
        for reason in DROP_REASONS:
            self.plans_dropped.labels(reason)
        for reason in REFUSE_REASONS:
            self.plans_refused.labels(reason)

    def placement_written(
        self, previous: StoredPlacement, written: StoredPlacement, now: float
    ) -> None:
        """Count what a placement write ends: a wait that got its plan, a gang found invalid.
        ``now`` is the time of the write (the wait of a gang found invalid ends then)."""
        if written.state == previous.state:
            return
        if written.state == PLANNED:
            since = written.waiting_since_time
            planned = written.planned_at_time or now
            if since is not None:
                level = written.level or ""
                self.gang_wait_seconds.labels("planned", level).observe(max(0.0, planned - since))
        elif written.state == INVALID:
            self.plans_refused.labels("invalid").inc()
            since = previous.waiting_since_time
            if since is not None:
                self.gang_wait_seconds.labels("invalid", "").observe(max(0.0, now - since))
