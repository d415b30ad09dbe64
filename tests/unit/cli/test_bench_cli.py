"""`tpfabric bench topology` hands its arguments to the benchmark and writes its JSON."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import tpfabric


def test_bench_topology_passes_its_arguments_through(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = tpfabric(
        "bench", "topology", "--nodes", "64", "--rails", "2", "--repeat", "1", "--json", out
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["params"]["nodes"] == 64
    assert report["fabric"]["hcas"] == 128
    assert set(report["phases"]) == {"parse", "build", "rails", "label"}
    assert report["memory"]["tracemalloc_peak_mib"] > 0
    assert "parse" in result.stdout


def test_bench_topology_help_is_the_benchmarks_own() -> None:
    result = tpfabric("bench", "topology", "--help")
    assert result.exit_code == 0
    assert "--units-per-block" in result.stdout
