"""Prometheus metrics of the fabric agent, per port (one registry per agent, so tests can run
several agents in one process).

The raw counters the agent reads go out under the names node_exporter's InfiniBand collector
gives them (``collector/infiniband_linux.go``: namespace ``node``, subsystem ``infiniband``,
labels ``device`` and ``port``), so dashboards and alerts written for it work on the agent's
series too (where both run, tell them apart by ``job``). A counter the driver does not expose
is left out of the exposition: unknown, never zero. ``tpfabric_fabric_port_info`` joins a
``device``/``port`` to its rail and port GUID.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tpfabric_core.fabric.link_judge import JUDGED_COUNTERS, NodeVerdict
from tpfabric_core.fabric.link_samples import (
    CONGESTION_HW_COUNTERS,
    HW_COUNTERS,
    RETRANSMISSION_COUNTERS,
    PortSample,
)

__all__ = ["NODE_EXPORTER_NAMES", "AgentMetrics"]

_STATE_VALUE = {"ok": 0, "degraded": 1, "down": 2}

#: sysfs counter -> node_exporter's metric name (without ``_total``, which a counter gets), for
#: every counter the agent reads that its InfiniBand collector exports
NODE_EXPORTER_NAMES: dict[str, str] = {
    "symbol_error": "node_infiniband_symbol_error",
    "link_error_recovery": "node_infiniband_link_error_recovery",
    "link_downed": "node_infiniband_link_downed",
    "port_rcv_errors": "node_infiniband_port_errors_received",
    "port_rcv_remote_physical_errors": "node_infiniband_port_receive_remote_physical_errors",
    "local_link_integrity_errors": "node_infiniband_local_link_integrity_errors",
    "excessive_buffer_overrun_errors": "node_infiniband_excessive_buffer_overrun_errors",
    "port_xmit_discards": "node_infiniband_port_discards_transmitted",
    "port_xmit_wait": "node_infiniband_port_transmit_wait",
    "rnr_nak_retry_err": "node_infiniband_rnr_nak_retry_packets_received",
    "local_ack_timeout_err": "node_infiniband_local_ack_timeout_errors",
    "roce_slow_restart": "node_infiniband_roce_slow_restart_used",
    "packet_seq_err": "node_infiniband_packet_sequence_errors",
    "out_of_sequence": "node_infiniband_out_of_sequence_packets_received",
    "implied_nak_seq_err": "node_infiniband_implied_nak_seq_errors",
    "duplicate_request": "node_infiniband_duplicate_requests_packets",
    "roce_adp_retrans": "node_infiniband_roce_adp_retransmits",
    "np_cnp_sent": "node_infiniband_np_cnp_packets_sent",
    "rp_cnp_handled": "node_infiniband_rp_cnp_packets_handled",
    "np_ecn_marked_roce_packets": "node_infiniband_np_ecn_marked_roce_packets_received",
}
_DRIVER = frozenset((*HW_COUNTERS, *RETRANSMISSION_COUNTERS, *CONGESTION_HW_COUNTERS))


class _RawCounters(Collector):
    """Yields the last raw value of each counter read, as node_exporter names it."""

    def __init__(self) -> None:
        self.ports: tuple[PortSample, ...] = ()
        self.rails: Mapping[str, int] = {}

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Yield every family this collector may export, without samples (what registration
        and the metrics reference read)."""
        yield from _raw_families((), {}, keep_empty=True)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Yield the counters of the ports last read (a counter none of them has is absent)."""
        yield from _raw_families(self.ports, self.rails, keep_empty=False)


def _raw_families(
    ports: Sequence[PortSample], rails: Mapping[str, int], *, keep_empty: bool
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """Yield the raw counters of ``ports`` under node_exporter's names, and each port's info."""
    for counter, name in NODE_EXPORTER_NAMES.items():
        folder = "hw_counters" if counter in _DRIVER else "counters"
        words = f"The port's sysfs {folder}/{counter} (node_exporter's name and labels)."
        family = CounterMetricFamily(name, words, labels=["device", "port"])
        for port in ports:
            if counter in port.counters:
                family.add_metric([port.hca, str(port.port)], port.counters[counter])
        if family.samples or keep_empty:
            yield family
    info = GaugeMetricFamily(
        "tpfabric_fabric_port_info",
        "A judged port's rail and port GUID (value 1), to join node_infiniband_* series "
        "(device, port) to the fabric's rail numbering.",
        labels=["device", "port", "rail", "port_guid"],
    )
    for port in ports:
        rail = rails.get(port.hca)
        info.add_metric(
            [port.hca, str(port.port), "" if rail is None else str(rail), port.guid or ""], 1
        )
    yield info


class AgentMetrics:
    """Gauges of the last verdict, the raw counters last read, and counters of what the agent
    did."""

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
            "Increase per minute over the sliding window of each judged counter (errors and "
            "retransmissions), by sysfs counter name.",
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
        self._raw = _RawCounters()
        self.registry.register(self._raw)

        self.last_read = Gauge(
            "tpfabric_fabric_agent_last_read_timestamp_seconds",
            "When the agent last read and judged its node's links (Unix time).",
            ["node"],
            registry=self.registry,
        )

    def read_done(self, node: str) -> None:
        """Note a read and judgement of ``node``'s links that succeeded, now."""
        self.last_read.labels(node).set(time.time())

    def record(
        self,
        verdict: NodeVerdict,
        ports: Sequence[PortSample] = (),
        rails: Mapping[str, int] | None = None,
    ) -> None:
        """Set the gauges from one verdict and keep the raw counters of ``ports``."""
        for port in verdict.ports:
            number = str(port.port)
            rail = "" if port.rail is None else str(port.rail)
            self.port_state.labels(port.hca, number, rail).set(_STATE_VALUE[port.state])
            for counter, rate in port.rates.items():
                if counter in JUDGED_COUNTERS:
                    self.error_rate.labels(port.hca, number, counter).set(rate)
            if port.rate_gbps is not None:
                self.link_rate.labels(port.hca, number).set(port.rate_gbps)
            if port.width is not None:
                self.link_width.labels(port.hca, number).set(port.width)
        self.pcie_degraded.set(len(verdict.pcie))
        self.node_healthy.set(1 if verdict.ports and verdict.state == "ok" else 0)
        self._raw.ports, self._raw.rails = tuple(ports), dict(rails or {})
