"""``tpfabric bench queue``: its cluster, the writer that applies the placer's writes, the plan
latency it reports, and one short run of the real placer on a small fabric."""

from __future__ import annotations

import io
import math
import pstats
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException
from rich.console import Console

from tpfabric_bench._queue_cluster import GANG_WORKERS, QueueShape, load_cluster
from tpfabric_bench.queue import parse_args, queue_table, run_child, stream_latency


def test_every_node_is_busy_and_the_backlog_waits_gated() -> None:
    writes = load_cluster(QueueShape(nodes=64, waiting=3), now=1_800_000_000.0)
    store = writes.store
    assert len(store.nodes) == 64
    assert all(store.free(node, "nvidia.com/gpu") == 0 for node in store.nodes)
    backlog = [job for key, job in store.jobs.items() if key.startswith("backlog/")]
    assert len(backlog) == 3
    for job in backlog:
        members = store.workers[job.key].values()
        assert len(members) == GANG_WORKERS
        assert all(p.gated and p.node is None for p in members)
    assert len(writes.running) == 64, "one running worker per node: what the churn completes"


def test_a_status_patch_is_refused_when_its_test_fails_and_applied_when_it_holds() -> None:
    writes = load_cluster(QueueShape(nodes=8, waiting=1), now=1_800_000_000.0)
    uid = writes.jobs["backlog/wait-00000"]["metadata"]["uid"]
    stale = [{"op": "test", "path": "/status/placement", "value": {"state": "Planned"}}]
    with pytest.raises(ApiException):
        writes.patch_job_status("backlog", "wait-00000", {"placement": {}}, uid=uid, tests=stale)
    fresh = [{"op": "test", "path": "/status/placement", "value": None}]
    waiting = {"placement": {"state": "Waiting", "message": "no leaf"}}
    writes.patch_job_status("backlog", "wait-00000", waiting, uid=uid, tests=fresh)
    assert writes.store.jobs["backlog/wait-00000"].placement.waiting
    assert writes.backlog_waiting == {"backlog/wait-00000"}


def test_a_completion_frees_its_node_and_a_stream_gang_arrives_gated() -> None:
    writes = load_cluster(QueueShape(nodes=16, waiting=0), now=1_800_000_000.0)
    node = writes.complete(lambda n: 0)
    assert node is not None
    assert writes.store.free(node, "nvidia.com/gpu") == 8
    writes.add_gang("fit-00000", 2, {"mode": "preferred", "level": "leaf"})
    gang = writes.store.workers["stream/fit-00000"].values()
    assert sorted(p.worker_index for p in gang) == [0, 1]
    assert all(p.gated for p in gang)


def test_a_gang_never_planned_makes_the_quantiles_it_reaches_never() -> None:
    arrived = {f"g{k}": 10.0 for k in range(100)}
    planned = {f"g{k}": 10.5 for k in range(99)}
    late = stream_latency(arrived, planned)
    assert (late["arrived"], late["planned"]) == (100, 99)
    assert late["p50"] == 0.5
    assert late["p99"] == 0.5
    assert late["max"] is None
    assert stream_latency({"g": 1.0}, {})["p50"] is None
    assert not math.isnan(float(stream_latency({}, {})["p99"] or 0.0))


def test_a_short_run_plans_every_stream_gang_and_no_backlog_gang() -> None:
    args = parse_args(
        ["--nodes", "64", "--waiting", "4", "--seconds", "1.5", "--drain-seconds", "5"]
    )
    args.nodes, args.waiting = 64, 4
    result = run_child(args)
    late = result["plan_latency_s"]
    assert late["arrived"] > 0
    assert late["planned"] == late["arrived"]
    assert result["warmup"]["backlog_told"] == 4
    assert result["backlog_planned"] == 0
    assert result["cycles"]["count"] > 0
    text = io.StringIO()
    Console(file=text, width=250).print(queue_table([result]))
    assert "64" in text.getvalue()


def test_the_command_line_takes_lists_of_sizes_and_refuses_nonsense() -> None:
    args = parse_args(["--nodes", "5000,16000", "--waiting", "100,1000"])
    assert (args.nodes, args.waiting) == ([5000, 16000], [100, 1000])
    with pytest.raises(SystemExit):
        parse_args(["--nodes", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--completions", "0"])


def test_a_profiled_run_writes_the_placer_s_steady_state_cycles(tmp_path: Path) -> None:
    out = tmp_path / "queue.pstats"
    size = ["--nodes", "64", "--waiting", "4"]
    args = parse_args([*size, "--seconds", "1", "--drain-seconds", "2", "--profile", str(out)])
    args.nodes, args.waiting = 64, 4
    run_child(args)
    stats = pstats.Stats(str(out))
    assert any(name == "run_cycle" for _, _, name in stats.stats)  # type: ignore[attr-defined]


def test_a_profile_takes_one_configuration() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--nodes", "5000,16000", "--profile", "out.pstats"])
