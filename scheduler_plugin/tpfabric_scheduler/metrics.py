"""Prometheus metrics of the extender and the placer (one registry per process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tpfabric_kube.malformed import MALFORMED_OBJECTS

__all__ = ["Metrics"]


class Metrics:
    """The metrics, on their own registry so tests can make several servers."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # the objects the informers could not read whole (counted in the process's default
        # registry, served here too)
        self.registry.register(MALFORMED_OBJECTS)
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
