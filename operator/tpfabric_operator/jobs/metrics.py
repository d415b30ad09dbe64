"""Prometheus metrics of the operator's TensorParallelJob half, in a registry of their own (served
on the operator's metrics port beside the process's default registry, where the malformed objects
it skipped are counted)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["DEGRADED_MOVES", "REGISTRY"]

REGISTRY = CollectorRegistry()
DEGRADED_MOVES = Counter(
    "tpfabric_operator_degraded_link_moves",
    "Moves of TensorParallelJobs off nodes with degraded fabric links the operator decided "
    "(the workers there restarted elsewhere, into healthy room the placer found), by the job's "
    "onDegradedLink policy (restart-elsewhere, restart-when-it-pays).",
    ["policy"],
    registry=REGISTRY,
)
