"""Benchmark of topology discovery: parse, build and label a generated rail-optimized fabric.

``tpfabric bench topology --nodes 4096 --rails 8`` generates a SuperPOD-like fabric (units of 32
nodes, one leaf per rail per unit, ``--units-per-block`` units per spine group under a core tier),
writes it as ibnetdiscover text, then times each phase of ``topology discover`` on that text:

- ``parse``: ``parse_ibnetdiscover`` (text -> checked, immutable Fabric; includes one build);
- ``build``: ``FabricBuilder`` -> ``Fabric`` from the parsed switches, HCAs and cables alone
  (indexes, domains, the frozen graph), so ``parse - build`` is the cost of reading text;
- ``rails``: ``analyze_rails`` (rail wiring and cabling anomalies);
- ``label``: ``fabric_node_labels`` plus a ``label_diff`` per node against empty labels.

Times are wall-clock seconds, best and median of ``--repeat`` runs. Peak memory is measured in a
separate run with tracemalloc on (it slows Python down, so it never overlaps the timed runs), and
``ru_maxrss`` gives the process's high-water mark including the generator and the text. It prints a
rich table and, with ``--json FILE``, writes the same numbers. It measures; it never asserts.

``--nodes 4096,12288`` runs each size in turn and adds how discovery scales: its best time per
node at each size, over the first size's (1.0: linear; the target is under 2.0). The JSON is then
``{"benchmark": "topology", "runs": [...], "scaling": [...]}``, one run document per size.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tpfabric_core.fabric.builder import FabricBuilder
from tpfabric_core.fabric.generator import generate_superpod, write_ibnetdiscover
from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover
from tpfabric_core.fabric.model import Fabric
from tpfabric_core.fabric.node_labels import fabric_node_labels, label_diff
from tpfabric_core.fabric.rails import analyze_rails

__all__ = ["main", "run", "scaling"]

_UNIT = 32  # nodes per scalable unit, as in a DGX SuperPOD
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Phase:
    """The timed runs of one phase, in seconds."""

    name: str
    runs: tuple[float, ...]

    @property
    def best(self) -> float:
        """Return the fastest run."""
        return min(self.runs)

    @property
    def median(self) -> float:
        """Return the median run."""
        return statistics.median(self.runs)


def _rebuild(fabric: Fabric) -> Fabric:
    """Return a new Fabric built from ``fabric``'s switches, HCAs and cables (the build phase)."""
    builder = FabricBuilder()
    for switch in fabric.switches.values():
        builder.add_switch(switch.id, switch.description, switch.group)
    for hca in fabric.hcas.values():
        builder.add_hca(hca.guid, hca.description, hca.node, hca.rail, hca.role)
    for link in fabric.links:
        builder.add_link(
            link.a, link.a_port, link.b, link.b_port, width=link.width, speed=link.speed
        )
    return builder.build()


def _label(fabric: Fabric) -> int:
    """Return the number of label changes that labelling unlabelled nodes takes."""
    return sum(len(label_diff({}, wanted)[0]) for wanted in fabric_node_labels(fabric).values())


def _timed(repeat: int, action: Callable[[], object]) -> tuple[float, ...]:
    runs = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        action()
        runs.append(time.perf_counter() - start)
    return tuple(runs)


def _pipeline(text: str) -> None:
    fabric, _ = parse_ibnetdiscover(text, "bench")
    _rebuild(fabric)
    analyze_rails(fabric)
    _label(fabric)


def run(nodes: int, rails: int, seed: int, repeat: int, units_per_block: int) -> dict[str, Any]:
    """Return the benchmark's results as a JSON-ready mapping (see the module docstring)."""
    units = max(1, -(-nodes // _UNIT))
    start = time.perf_counter()
    generated = generate_superpod(
        units=units,
        nodes_per_unit=min(nodes, _UNIT),
        rails=rails,
        units_per_block=units_per_block if units > units_per_block else None,
        seed=seed,
    )
    text = write_ibnetdiscover(generated.fabric)
    generate_s = time.perf_counter() - start

    fabric, _ = parse_ibnetdiscover(text, "bench")
    phases = [
        Phase("parse", _timed(repeat, lambda: parse_ibnetdiscover(text, "bench"))),
        Phase("build", _timed(repeat, lambda: _rebuild(fabric))),
        Phase("rails", _timed(repeat, lambda: analyze_rails(fabric))),
        Phase("label", _timed(repeat, lambda: _label(fabric))),
    ]
    gc.collect()
    tracemalloc.start()
    _pipeline(text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    return {
        "benchmark": "topology",
        "params": {
            "nodes": len(fabric.nodes), "rails": rails, "seed": seed, "repeat": repeat,
            "units_per_block": units_per_block,
        },
        "fabric": {
            "switches": len(fabric.switches), "hcas": len(fabric.hcas), "links": len(fabric.links),
            "leaves": len(fabric.leaves), "text_mib": round(len(text.encode()) / _MIB, 2),
            "labels": _label(fabric),
        },
        "generate_s": round(generate_s, 3),
        "phases": {
            p.name: {"best_s": round(p.best, 4), "median_s": round(p.median, 4),
                     "runs_s": [round(r, 4) for r in p.runs]}
            for p in phases
        },
        "discover_best_s": round(sum(p.best for p in phases if p.name != "build"), 4),
        "memory": {
            "tracemalloc_peak_mib": round(peak / _MIB, 1),
            "ru_maxrss_mib": round(maxrss_kib / 1024, 1),
        },
        "python": sys.version.split()[0],
        "machine": platform.machine(),
    }  # fmt: skip


def scaling(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return, per run, discovery's best time per node and its ratio to the first run's."""
    per_node = [r["discover_best_s"] / r["params"]["nodes"] for r in results]
    return [
        {"nodes": r["params"]["nodes"], "discover_best_s": r["discover_best_s"],
         "discover_us_per_node": round(t * 1e6, 1), "per_node_vs_first": round(t / per_node[0], 2)}
        for r, t in zip(results, per_node, strict=True)
    ]  # fmt: skip


def _scaling_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("nodes", "discover best (s)", "µs per node", "per node vs first",
                  title="topology discovery: scaling")  # fmt: skip
    for row in rows:
        table.add_row(
            str(row["nodes"]), f"{row['discover_best_s']:.3f}",
            f"{row['discover_us_per_node']:.1f}", f"{row['per_node_vs_first']:.2f}x",
        )  # fmt: skip
    return table


def _node_counts(text: str) -> list[int]:
    """Return the sizes of ``--nodes`` (``4096`` or ``4096,12288``)."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError as error:
        message = f"expected sizes such as 4096,12288, got {text!r}"
        raise argparse.ArgumentTypeError(message) from error
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be >= 1, got {text!r}")
    return sizes


def _table(result: dict[str, Any]) -> Table:
    fabric, params = result["fabric"], result["params"]
    table = Table(
        "phase", "best (s)", "median (s)",
        title=(
            f"topology discovery: {params['nodes']} nodes x {params['rails']} rails — "
            f"{fabric['switches']} switches, {fabric['hcas']} HCAs, {fabric['links']} cables, "
            f"{fabric['text_mib']} MiB of ibnetdiscover text"
        ),
    )  # fmt: skip
    for name, phase in result["phases"].items():
        table.add_row(name, f"{phase['best_s']:.3f}", f"{phase['median_s']:.3f}")
    table.add_row("discover (parse+rails+label)", f"{result['discover_best_s']:.3f}", "")
    memory = result["memory"]
    table.caption = (
        f"peak memory: {memory['tracemalloc_peak_mib']} MiB traced (parse+build+rails+label), "
        f"{memory['ru_maxrss_mib']} MiB max RSS; best/median of {params['repeat']} runs; "
        f"generating took {result['generate_s']} s"
    )
    return table


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line ``argv``; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench topology",
        description="Time parse, build, rails and label of a generated ibnetdiscover fabric.",
    )
    parser.add_argument(
        "--nodes", type=_node_counts, default=[4096], metavar="N[,N...]",
        help="nodes (units of 32); several sizes also report per-node scaling",
    )  # fmt: skip
    parser.add_argument("--rails", type=int, default=8, choices=range(1, 9), metavar="1..8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per phase")
    parser.add_argument("--units-per-block", type=int, default=16, help="units per spine group")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.units_per_block < 1:
        parser.error("--repeat and --units-per-block must be >= 1")
    console = Console(highlight=False)
    results = []
    for nodes in args.nodes:
        results.append(run(nodes, args.rails, args.seed, args.repeat, args.units_per_block))
        console.print(_table(results[-1]))
    document: dict[str, Any] = results[0]
    if len(results) > 1:
        rows = scaling(results)
        console.print(_scaling_table(rows))
        document = {"benchmark": "topology", "runs": results, "scaling": rows}
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
