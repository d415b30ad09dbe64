from __future__ import annotations

import json
from pathlib import Path

from tpfabric_bench.placement import POLICIES, main

KEYS = {
    "jobs_done",
    "jobs_unfinished",
    "mean_jct_s",
    "p95_jct_s",
    "mean_wait_s",
    "makespan_s",
    "gpu_utilization",
    "fragmentation",
    "comm_share_mean",
    "comm_share_p95",
    "plan_ms_p50",
    "plan_ms_p99",
}


def test_a_small_run_writes_every_metric_per_placer_and_the_plots(tmp_path: Path) -> None:
    out = tmp_path / "placement.json"
    argv = ["--nodes", "64", "--jobs", "30", "--json", str(out), "--plot", str(tmp_path)]
    assert main([*argv, "--scale-nodes", "256", "--scale-samples", "3"]) == 0
    result = json.loads(out.read_text())
    assert list(result["policies"]) == list(POLICIES)
    assert {"kueue_bestfit", "kueue_unconstrained", "optimal"} <= set(POLICIES)
    for name in ("tpfabric", "kueue_bestfit", "spread"):
        metrics = result["policies"][name]
        assert set(metrics) >= KEYS
        assert metrics["jobs_done"] + metrics["jobs_unfinished"] == 30
    assert set(result["tpfabric_vs"]) == {
        "mean_jct_gain_vs_kueue",
        "fragmentation_minus_kueue",
        "comm_share_vs_spread",
    }
    assert result["scale"]["tpfabric"]["workers"] == 32
    for png in ("jct_cdf.png", "comm_share.png", "summary.png"):
        assert (tmp_path / png).stat().st_size > 0


def test_a_written_trace_replays_as_a_csv_file(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    assert main(["--nodes", "64", "--jobs", "12", "--write-trace", str(trace)]) == 0
    assert trace.read_text().startswith("name,arrival_s,workers,gpus_per_worker,params_b")
    out = tmp_path / "out.json"
    argv = ["--nodes", "64", "--trace", str(trace), "--policies", "tpfabric,spread"]
    assert main([*argv, "--scale-nodes", "0", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["trace"]["jobs"] == 12
    assert result["policies"]["tpfabric"]["jobs_done"] == 12
