"""Benchmark of the fabric agent: CPU and memory per node, and API writes per hour.

``tpfabric bench fabric-agent --hcas 8 --ports 2 --hours 2`` builds a fake ``/sys`` of one node
(the kernel's layout: 8 HCAs x 2 ports with every error counter, 8 GPUs) and runs the real agent
loop on it (read, judge, publish) at the default 10 s interval on a simulated clock, so two hours
take seconds. Publishing goes through the agent's own :class:`NodePublisher` (write only on
change, re-read every 5 min) against an in-memory Node that applies the patches, which counts
every write the agent would send.

- ``cpu_ms_per_interval``: process CPU time of one step (median over the run), and the share of
  one core it takes at the interval;
- ``heap_kib``: Python heap the agent holds once its windows are full (tracemalloc, measured in a
  separate run so it does not slow the timed one), and the process's ``ru_maxrss``;
- ``writes_per_hour_quiet``: writes in the last simulated hour of a quiet fabric (target zero:
  only the first publication writes);
- ``writes_incident``: writes for one port whose symbol errors climb for 5 minutes and then stop
  (degraded once, ok once after the hysteresis, and the link timeline's burst: opened with the
  degraded write, cut once at its 300 s cap, closed when the errors stop).

It measures; it never asserts.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_fabric_agent.memory_node import MemoryNode

__all__ = ["main", "run"]

INTERVAL = 10.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _agent(
    root: Path, hcas: int, ports: int, gpus: int
) -> tuple[FakeSysfs, FabricAgent, MemoryNode, _Clock]:
    sysfs = FakeSysfs(root, hcas=hcas, ports=ports, gpus=gpus)
    clock, node = _Clock(), MemoryNode()
    publisher = NodePublisher("bench-node", node, clock=clock)
    settings = AgentSettings(node="bench-node", sys_root=root, interval_seconds=INTERVAL)
    return sysfs, FabricAgent(settings, publisher, clock=clock, wall=clock), node, clock


def _steps(agent: FabricAgent, clock: _Clock, count: int) -> list[float]:
    """Run ``count`` intervals; return the CPU seconds of each step."""
    cpu = []
    for _ in range(count):
        started = time.process_time()
        agent.step()
        cpu.append(time.process_time() - started)
        clock.now += INTERVAL
    return cpu


def run(hcas: int = 8, ports: int = 2, gpus: int = 8, hours: int = 2) -> dict[str, Any]:
    """Return the benchmark's numbers (see the module docstring)."""
    per_hour = int(3600 / INTERVAL)
    with tempfile.TemporaryDirectory(prefix="tpfabric-agent-bench-") as folder:
        _, agent, node, clock = _agent(Path(folder) / "quiet", hcas, ports, gpus)
        cpu: list[float] = []
        writes_before_last_hour = 0
        for hour in range(hours):
            if hour == hours - 1:
                writes_before_last_hour = len(node.writes)
            cpu += _steps(agent, clock, per_hour)
        quiet_last_hour = len(node.writes) - writes_before_last_hour

        sysfs, incident, incident_node, incident_clock = _agent(
            Path(folder) / "incident", hcas, ports, gpus
        )
        _steps(incident, incident_clock, 3)
        before = len(incident_node.writes)
        for _ in range(int(300 / INTERVAL)):  # 5 minutes of 1,200 symbol errors/min
            sysfs.add_errors("mlx5_0", 1, "symbol_error", 200)
            _steps(incident, incident_clock, 1)
        _steps(incident, incident_clock, per_hour)
        incident_writes = len(incident_node.writes) - before

        tracemalloc.start()
        baseline = tracemalloc.take_snapshot()
        _, held, _, held_clock = _agent(Path(folder) / "heap", hcas, ports, gpus)
        _steps(held, held_clock, int(held.settings.judge.window_seconds / INTERVAL) + 5)
        heap = sum(
            stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(baseline, "filename")
        )
        tracemalloc.stop()
    median = statistics.median(cpu)
    return {
        "hcas": hcas,
        "ports_per_hca": ports,
        "gpus": gpus,
        "interval_seconds": INTERVAL,
        "cpu_ms_per_interval_median": round(median * 1000, 3),
        "cpu_ms_per_interval_p99": round(sorted(cpu)[int(len(cpu) * 0.99) - 1] * 1000, 3),
        "cpu_share_of_one_core": round(median / INTERVAL, 6),
        "heap_kib": round(heap / 1024, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "simulated_hours": hours,
        "writes_before_last_hour": writes_before_last_hour,
        "writes_per_hour_quiet": quiet_last_hour,
        "node_reads_per_hour": round(node.reads / hours, 1),
        "writes_incident": incident_writes,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (and ``--json FILE``); return 0."""
    parser = argparse.ArgumentParser(prog="tpfabric bench fabric-agent", description=__doc__)
    parser.add_argument("--hcas", type=int, default=8)
    parser.add_argument("--ports", type=int, default=2, help="ports per HCA")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=int, default=2, help="simulated hours (>= 2)")
    parser.add_argument("--json", type=Path, help="write the numbers to this file")
    args = parser.parse_args(argv)
    result = run(args.hcas, args.ports, args.gpus, max(2, args.hours))
    table = Table("measure", "value", title="fabric agent, one node")
    for key, value in result.items():
        table.add_row(key, str(value))
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
