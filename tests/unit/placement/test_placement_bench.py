from __future__ import annotations

import json
from pathlib import Path

from tpfabric_bench.placement import main

KEYS = {
    "jobs_placed",
    "jobs_waiting",
    "optimal_domain_fraction",
    "mean_leaves_spanned",
    "modelled_allreduce_ratio",
    "gpu_utilization",
    "fragmentation",
    "plan_ms_p50",
    "plan_ms_p99",
}


def test_a_small_run_writes_every_metric_per_policy_and_the_plots(tmp_path: Path) -> None:
    out = tmp_path / "placement.json"
    argv = ["--units", "2", "--jobs", "30", "--json", str(out), "--plot", str(tmp_path)]
    assert main([*argv, "--scale-nodes", "256", "--scale-samples", "3"]) == 0
    result = json.loads(out.read_text())
    policies = ["tpfabric", "spread", "first_fit", "kueue_bestfit", "optimal"]
    assert list(result["policies"]) == policies
    for metrics in result["policies"].values():
        assert set(metrics) >= KEYS
    assert result["scale"]["tpfabric"]["workers"] == 32
    assert (tmp_path / "placement_map.png").stat().st_size > 0
    assert (tmp_path / "metrics.png").stat().st_size > 0
