"""Prometheus metrics of the fabric agent, per port (one registry per agent, so tests can run
several agents in one process)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from tpfabric_core.fabric.link_judge import NodeVerdict

__all__ = ["AgentMetrics"]

_STATE_VALUE = {"ok": 0, "degraded": 1, "down": 2}


class AgentMetrics:
    """Gauges of the last verdict and counters of what the agent did."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.port_state = Gauge(
            "tpfabric_fabric_port_state",
            "Judged state of an HCA port: 0 ok, 1 degraded, 2 down (after hysteresis).",
            ["hca", "port", "rail"],
            registry=self.registry,
        )
        self.error_rate = Gauge(
            "tpfabric_fabric_port_errors_per_minute",
            "Error counter increase per minute over the sliding window, by sysfs counter name.",
            ["hca", "port", "counter"],
            registry=self.registry,
        )
        self.link_rate = Gauge(
            "tpfabric_fabric_port_rate_gbps",
            "Link rate the port runs at (sysfs rate), in Gb/s.",
            ["hca", "port"],
            registry=self.registry,
        )
        self.link_width = Gauge(
            "tpfabric_fabric_port_width_lanes",
            "Lanes the port runs on (the 4 of 4X).",
            ["hca", "port"],
            registry=self.registry,
        )
        self.pcie_degraded = Gauge(
            "tpfabric_fabric_pcie_links_degraded",
            "HCA and GPU PCIe links trained below their capability.",
            registry=self.registry,
        )
        self.node_healthy = Gauge(
            "tpfabric_fabric_node_healthy",
            "1 while the node's FabricHealthy condition is True, else 0.",
            registry=self.registry,
        )
        self.api_writes = Counter(
            "tpfabric_fabric_agent_api_writes_total",
            "Writes the agent sent, by target (metadata, status: PATCHes of its node; lease: "
            "renewals of its heartbeat).",
            ["target"],
            registry=self.registry,
        )
        self.read_errors = Counter(
            "tpfabric_fabric_agent_errors_total",
            "Failed intervals (sysfs unreadable, API errors), by stage.",
            ["stage"],
            registry=self.registry,
        )

        self.last_read = Gauge(
            "tpfabric_fabric_agent_last_read_timestamp_seconds",
            "When the agent last read and judged its node's links (Unix time).",
            ["node"],
            registry=self.registry,
        )

    def read_done(self, node: str) -> None:
        """Note a read and judgement of ``node``'s links that succeeded, now."""
        self.last_read.labels(node).set(time.time())

    def record(self, verdict: NodeVerdict) -> None:
        """Set the gauges from one verdict."""
        for port in verdict.ports:
            number = str(port.port)
            rail = "" if port.rail is None else str(port.rail)
            self.port_state.labels(port.hca, number, rail).set(_STATE_VALUE[port.state])
            for counter, rate in port.rates.items():
                self.error_rate.labels(port.hca, number, counter).set(rate)
            if port.rate_gbps is not None:
                self.link_rate.labels(port.hca, number).set(port.rate_gbps)
            if port.width is not None:
                self.link_width.labels(port.hca, number).set(port.width)
        self.pcie_degraded.set(len(verdict.pcie))
        self.node_healthy.set(1 if verdict.ports and verdict.state == "ok" else 0)
