"""`tpfabric bench` hands its arguments to the benchmarks; the extender's memory run's parts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pytest
from cli_runner import tpfabric

from tpfabric_bench._fake_apiserver import ClusterShape, FakeList, api_pod
from tpfabric_bench._memory import CASE_ALL, CASE_DOMAIN, measure, measure_traced
from tpfabric_bench._relist import run_relist
from tpfabric_bench._sizing import _submitted
from tpfabric_core.api import JOB_LABEL
from tpfabric_scheduler.kube import POD_PAGE_SIZE, list_pages


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


def test_bench_topology_reports_per_node_scaling_over_several_sizes(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = tpfabric(
        "bench", "topology", "--nodes", "32,96", "--rails", "1", "--repeat", "1", "--json", out
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [run["params"]["nodes"] for run in report["runs"]] == [32, 96]
    assert [row["nodes"] for row in report["scaling"]] == [32, 96]
    assert report["scaling"][0]["per_node_vs_first"] == 1.0
    assert "scaling" in result.stdout


def test_bench_topology_help_is_the_benchmarks_own() -> None:
    result = tpfabric("bench", "topology", "--help")
    assert result.exit_code == 0
    assert "--units-per-block" in result.stdout


def test_bench_extender_help_documents_the_memory_run() -> None:
    result = tpfabric("bench", "extender", "--help")
    assert result.exit_code == 0
    assert "--memory-pods" in result.stdout
    assert "0 skips" in result.stdout


def test_bench_extender_refuses_a_memory_run_too_small_to_hold_a_job() -> None:
    result = tpfabric("bench", "extender", "--skip-cluster", "--memory-pods", "50")
    assert result.exit_code == 2
    assert "--memory-pods must be 0 (skip) or >= 100" in result.output


@pytest.mark.parametrize("prebuilt", [False, True])
def test_the_fake_api_server_serves_every_object_once_across_pages(prebuilt: bool) -> None:
    fake = FakeList(lambda k: {"metadata": {"name": f"object-{k}"}}, count=1_234)
    if prebuilt:
        fake.prebuild(500)
    objects, version = list_pages(fake, lambda obj: obj)
    assert [o["metadata"]["name"] for o in objects] == [f"object-{k}" for k in range(1_234)]
    assert version == fake.version
    assert fake.served == [range(500), range(500, 1_000), range(1_000, 1_234)]


def test_the_fake_api_server_refuses_a_token_of_another_list() -> None:
    fake = FakeList(lambda k: {"metadata": {"name": f"object-{k}"}}, count=10)
    other = FakeList(fake.make, count=10, version="1")
    token = orjson.loads(fake(limit=4).data)["metadata"]["continue"]
    with pytest.raises(ValueError, match="not of this list"):
        other(limit=4, _continue=token)


def test_the_fake_cluster_is_api_sized_workers_and_other_pods() -> None:
    shape = ClusterShape(pods=400, nodes=40)
    pods = [api_pod(shape, k) for k in range(shape.pods)]
    sizes = [len(orjson.dumps(pod)) for pod in pods]
    assert 4_000 <= sum(sizes) / len(sizes) <= 10_000
    assert all(pod["metadata"]["managedFields"] for pod in pods)
    workers = [p for p in pods if JOB_LABEL in p["metadata"]["labels"]]
    assert len(workers) == shape.workers == 160
    assert any(p["spec"].get("schedulingGates") for p in workers)  # a job waiting for a plan
    assert len({(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}) == 400


def test_the_memory_measurement_reports_lists_store_rss_and_decisions() -> None:
    result = measure(pods=400, nodes=40, samples=5, warmup=1)
    assert set(result) >= {"lists", "store", "rss", "gc_full_ms", "decisions", "page_size"}
    assert result["lists"]["pods"]["pages"] == math.ceil(400 / POD_PAGE_SIZE)
    assert result["store"] == {
        "nodes": 40,
        "pods": 400,
        "jobs": 20,
        "jobs_with_workers": 20,
        "reserved_nodes": 8,  # the probed job's ranks, released and not bound yet
    }
    cases = {(row["case"], row["pods"]) for row in result["decisions"]}
    assert cases == {(CASE_DOMAIN, 400), (CASE_DOMAIN, 8), (CASE_ALL, 400), (CASE_ALL, 8)}
    for row in result["decisions"]:
        assert row["answer"]["kept"] == 1  # its own planned node
        assert set(row["combined_ms"]) == {"count", "p50", "p99", "max"}


def test_the_traced_measurement_reports_the_peak_and_the_store() -> None:
    result = measure_traced(pods=100, nodes=16)
    assert set(result["kinds"]) == {"nodes", "tensorparalleljobs", "pods"}
    assert result["peak_mib"] >= result["store_mib"] > 0


def test_the_relist_run_times_filter_before_during_and_after_a_relist() -> None:
    result = run_relist(pods=400, nodes=40, quiet_s=0.3, log=lambda _: None)
    assert result["store_pods"] == 400
    relist = result["relist"]
    assert relist["start"] <= relist["listed"] <= relist["end"]
    assert result["outside"]["count"] > 0, "requests were answered before and after"
    assert result["list"]["count"] + result["cycle"]["count"] > 0, "and while it relisted"
    for window in ("list", "cycle", "outside"):
        assert set(result[window]) == {"count", "p50", "p99", "max", "over_50ms"}


def test_the_sizing_pods_are_submitted_as_their_creators_make_them() -> None:
    shape = ClusterShape(400, 40)
    bodies = [_submitted(shape, k) for k in range(400)]
    for body in bodies:
        assert "status" not in body
        assert "managedFields" not in body["metadata"]
        assert "uid" not in body["metadata"]
        assert "priority" not in body["spec"], "the Priority admission refuses a given priority"
    bound = [b for b in bodies if b["spec"].get("nodeName")]
    assert bound, "running pods are bound by nodeName"
    assert all(b["spec"]["nodeName"] in shape.node_names for b in bound)
    gated = [b for b in bodies if b["spec"].get("schedulingGates")]
    assert all(b["spec"]["schedulerName"] == "tpfabric-scheduler" for b in gated)
