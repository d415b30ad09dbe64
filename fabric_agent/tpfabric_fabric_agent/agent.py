"""The agent's loop: every interval read the node's sysfs, judge it, publish what changed.

One :meth:`FabricAgent.step` is a read of ``ports x (4 + counters)`` small files plus the PCIe
link files, one :class:`~tpfabric_core.fabric.link_judgement.LinkJudge` observation, and API
writes only when the publication changed (none on a quiet fabric). The clock is injected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tpfabric_core.fabric.fabric_condition import FabricPublication, publication_of
from tpfabric_core.fabric.link_judgement import (
    LinkJudge,
    LinkJudgeConfig,
    NodeSample,
    NodeVerdict,
)
from tpfabric_core.fabric.sysfs_links import (
    find_gpus,
    hca_sort_key,
    read_pcie_links,
    read_port_samples,
)
from tpfabric_fabric_agent.metrics import AgentMetrics

__all__ = ["AgentSettings", "FabricAgent", "Publisher", "fabric_rails"]

log = logging.getLogger("tpfabric.fabric_agent")


class Publisher(Protocol):
    """Where a publication goes (the node through the API, or a test's list)."""

    def publish(self, publication: FabricPublication) -> int:
        """Publish; return the number of API writes it took."""
        ...


@dataclass(frozen=True)
class AgentSettings:
    """What one agent watches and how often."""

    node: str
    sys_root: Path = Path("/sys")
    interval_seconds: float = 10.0
    #: the fabric HCAs in rail order (rail i is hcas[i]); empty: every InfiniBand HCA
    hcas: tuple[str, ...] = ()
    judge: LinkJudgeConfig = field(default_factory=LinkJudgeConfig)


def fabric_rails(sys_root: Path, hcas: tuple[str, ...] = ()) -> dict[str, int]:
    """Return ``{hca: rail}``: ``hcas`` in order, else the InfiniBand HCAs in natural order (all
    HCAs when none is InfiniBand, e.g. a RoCE fabric)."""
    if hcas:
        return {name: rail for rail, name in enumerate(hcas)}
    ports = read_port_samples(sys_root)
    names = sorted({p.hca for p in ports if p.link_layer == "InfiniBand"}, key=hca_sort_key)
    if not names:
        names = sorted({p.hca for p in ports}, key=hca_sort_key)
    return {name: rail for rail, name in enumerate(names)}


class FabricAgent:
    """Watches one node; :meth:`step` once per interval, or :meth:`run` until stopped."""

    def __init__(
        self,
        settings: AgentSettings,
        publisher: Publisher,
        metrics: AgentMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.publisher = publisher
        self.metrics = metrics or AgentMetrics()
        self._clock = clock
        self.rails = fabric_rails(settings.sys_root, settings.hcas)
        self.gpus = find_gpus(settings.sys_root) if settings.judge.check_pcie else []
        self.judge = LinkJudge(settings.judge, self.rails)
        self.last: NodeVerdict | None = None

    def read(self) -> NodeSample:
        """Return what sysfs shows now (fabric HCAs' ports, their PCIe links and the GPUs')."""
        root = self.settings.sys_root
        ports = tuple(p for p in read_port_samples(root) if p.hca in self.rails)
        pcie = (
            tuple(read_pcie_links(root, list(self.rails), self.gpus))
            if self.settings.judge.check_pcie
            else ()
        )
        return NodeSample(self._clock(), ports, pcie)

    def step(self) -> NodeVerdict:
        """Read, judge, record metrics and publish once; return the verdict."""
        verdict = self.judge.observe(self.read())
        self.metrics.record(verdict)
        self.publisher.publish(publication_of(verdict))
        self.last = verdict
        return verdict

    def run(self, stop: threading.Event) -> None:
        """Step every interval until ``stop`` is set; a failed step is logged and retried."""
        while not stop.is_set():
            started = self._clock()
            try:
                self.step()
            except Exception:  # the agent outlives a bad read or an API hiccup
                self.metrics.read_errors.labels("step").inc()
                log.exception("node %s: fabric health step failed", self.settings.node)
            stop.wait(max(0.0, self.settings.interval_seconds - (self._clock() - started)))
