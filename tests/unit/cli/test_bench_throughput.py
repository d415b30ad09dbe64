"""The pure parts of ``tpfabric bench operator``: the job mix, the plain twins, the breakdown."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from tpfabric_bench._harness import (
    mean_ms_grown,
    request_counts,
    request_seconds,
    scheduling_seconds,
    summary,
)
from tpfabric_bench._operator_tables import scheduler_time_table
from tpfabric_bench.operator import (
    EXTENDER_FILTER,
    NEVER_FIT,
    OVERCOMMIT,
    PLAIN_LABEL,
    RELEASE_WRITE,
    TWIN_INIT_IMAGE,
    JobShape,
    gang_breakdown,
    idle_writes,
    job_manifest,
    job_mix,
    last_stage_ends,
    median_ratio,
    parse_args,
    placer_time_totals,
    plain_pods,
    settled,
    stage_ends,
)
from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.jobs.children import worker_pod


def test_the_default_mix_overcommits_the_nodes_with_jobs_of_2_to_16() -> None:
    shapes = job_mix(100, 1000, seed=7)
    assert len(shapes) == 100
    assert sum(s.workers for s in shapes) == math.ceil(1000 * OVERCOMMIT)
    assert all(2 <= s.workers <= 16 for s in shapes)
    never = [s for s in shapes if s.never_fits]
    assert len(never) == NEVER_FIT
    assert all(s.mode == "required" and s.workers > 8 for s in never)
    assert job_mix(100, 1000, seed=7) == shapes  # seeded


def test_the_large_mix_has_one_gang_of_the_largest_size_and_a_few_large_ones() -> None:
    shapes = job_mix(500, 5000, seed=7, max_workers=256)
    sizes = sorted((s.workers for s in shapes), reverse=True)
    assert sizes[0] == 256
    large = [w for w in sizes if w > 16]
    assert 1 < len(large) <= 20
    assert all(w & (w - 1) == 0 for w in large)  # powers of two
    assert sum(large) <= math.ceil(5000 * OVERCOMMIT) // 2
    assert sum(sizes) >= math.ceil(5000 * OVERCOMMIT)
    assert all(s.mode == "preferred" for s in shapes if s.workers > 16)


@pytest.mark.parametrize("twins", ["same", "lean"])
def test_every_worker_has_a_plain_twin_with_the_same_requests(twins: str) -> None:
    pods = plain_pods(
        [JobShape("a", 3, "required", False), JobShape("b", 2, "preferred", False)],
        "rdma/ib",
        twins,
    )
    assert [p["metadata"]["name"] for p in pods] == [
        "a-plain-0", "a-plain-1", "a-plain-2", "b-plain-0", "b-plain-1",
    ]  # fmt: skip
    for pod in pods:
        assert "schedulerName" not in pod["spec"]  # the default scheduler
        assert "schedulingGates" not in pod["spec"]
        assert pod["metadata"]["labels"] == {PLAIN_LABEL: pod["metadata"]["name"][0]}
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {
            "nvidia.com/gpu": "8",
            "rdma/ib": "8",
        }


def test_a_same_twin_is_the_operators_worker_pod_less_the_gate_and_the_scheduler() -> None:
    shape = JobShape("a", 3, "required", False)
    (twin,) = [p for p in plain_pods([shape], "rdma/ib") if p["metadata"]["name"] == "a-plain-1"]
    job = TensorParallelJob.model_validate(job_manifest(shape, "rdma/ib"))
    worker = worker_pod(job, "a", twin["metadata"]["namespace"], 1, TWIN_INIT_IMAGE)
    assert worker["spec"].pop("schedulingGates")
    assert worker["spec"].pop("schedulerName") != "default-scheduler"
    worker["spec"]["terminationGracePeriodSeconds"] = 0
    assert twin["spec"] == worker["spec"]  # init container, env, volumes: all of it


def test_rounds_report_every_ratio_and_their_median() -> None:
    rounds = [
        {"baseline_settle_s": 30.0, "tpfabric_settle_s": 45.0, "settle_ratio": 1.5},
        {"baseline_settle_s": 25.0, "tpfabric_settle_s": 30.0, "settle_ratio": 1.2},
        {"baseline_settle_s": 20.0, "tpfabric_settle_s": 40.0, "settle_ratio": 2.0},
    ]
    assert median_ratio(rounds) == 1.5
    without_baseline = [{"baseline_settle_s": None, "tpfabric_settle_s": 9.0, "settle_ratio": None}]
    assert median_ratio(without_baseline) is None


def test_rounds_must_be_at_least_one() -> None:
    assert parse_args(["--rounds", "3"]).rounds == 3
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_twins_other_than_same_or_lean_are_refused() -> None:
    with pytest.raises(ValueError, match="twins"):
        plain_pods([JobShape("a", 1, "required", False)], "rdma/ib", "fat")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Running"}, "Running"),
        ({"phase": "Failed"}, "Failed"),
        ({"phase": "Waiting", "placement": {"state": "Waiting", "message": "no leaf"}}, "Waiting"),
        ({"phase": "Waiting", "placement": {"state": "Waiting"}}, None),  # no reason yet
        ({"phase": "Pending", "placement": {"state": "Planned"}}, None),
        ({}, None),
    ],
)
def test_a_job_has_settled_when_it_runs_failed_or_waits_with_a_reason(
    status: dict[str, object], expected: str | None
) -> None:
    assert settled({"status": status}) == expected


def test_the_breakdown_ends_each_stage_at_the_gangs_last_worker() -> None:
    created = {"a": 100.0, "b": 100.0, "c": 100.0}
    jobs = {
        "a": {"planned": 102.0, "running": 110.0},
        "b": {"planned": 101.0, "running": 104.0},
        "c": {"planned": 101.0},  # never ran: not counted
    }
    pods = {
        "ns/a-0": {"seen": 100.5, "ungated": 103.0, "bound": 105.0, "running": 107.5},
        "ns/a-1": {"seen": 101.0, "ungated": 102.5, "bound": 106.0, "running": 107.0},
        # b: the watch saw the bind before the release
        "ns/b-0": {"seen": 100.2, "ungated": 101.5, "bound": 101.0, "running": 103.0},
        "ns/c-0": {"seen": 100.1},
    }
    pod_job = {"ns/a-0": "a", "ns/a-1": "a", "ns/b-0": "b", "ns/c-0": "c"}
    ends = stage_ends(created, jobs, pods, pod_job)
    result = gang_breakdown(created, ends)
    assert result["total"]["count"] == 2
    assert result["total"]["max"] == 10.0  # a: 100 -> 110
    assert result["created"]["max"] == 1.0  # a's last worker at 101
    assert result["planned"]["max"] == 1.0  # a: 101 -> 102
    assert result["released"]["max"] == 1.0  # a: 102 -> 103
    assert result["bound"]["max"] == 3.0  # a: 103 -> 106
    assert result["bound"]["p50"] >= 0  # b's bind seen before its release never counts negative
    assert result["pods_running"]["max"] == 1.5  # a: 106 -> 107.5 (its last worker)
    assert result["running"]["max"] == 2.5  # a: 107.5 -> 110 (the operator's status)
    last = last_stage_ends(ends, t0=100.0)
    # the last worker Running at 107.5 (a's), the last job Running at 110 (a's status)
    assert last["pods_running"] == 7.5
    assert last["running"] == 10.0
    assert last["created"] == 1.0  # a-1 seen at 101


def test_the_summary_of_nothing_is_zeros_and_of_values_their_percentiles() -> None:
    assert summary([]) == {"count": 0, "p50": 0.0, "p90": 0.0, "max": 0.0}
    result = summary([float(k) for k in range(1, 101)], (0.5, 0.99))
    assert result["count"] == 100
    assert result["max"] == 100.0
    assert 50 <= result["p50"] <= 51
    assert 99 <= result["p99"] <= 100


def test_the_api_servers_request_counters_are_summed_per_verb_resource_and_code() -> None:
    prefix = 'apiserver_request_total{code="201",component="apiserver",'
    text = "\n".join(
        [
            "# HELP apiserver_request_total counter",
            prefix + 'group="",resource="pods",subresource="",verb="POST",version="v1"} 5',
            prefix + 'group="",resource="pods",subresource="binding",verb="POST",version="v1"} 3',
            prefix + 'group="x",resource="pods",subresource="",verb="POST",version="v1"} 2',
            'apiserver_request_sli_duration_seconds_bucket{le="0.1",verb="POST"} 9',
        ]
    )
    assert request_counts(text) == {"POST pods 201": 7, "POST pods/binding 201": 3}


def test_the_api_servers_time_per_request_is_the_mean_of_the_requests_in_between() -> None:
    def metrics(patch_sum: float, patch_count: int) -> str:
        labels = 'component="apiserver",dry_run="",group="",resource="pods",scope="resource",'
        return "\n".join(
            [
                "# HELP apiserver_request_duration_seconds histogram",
                "apiserver_request_duration_seconds_bucket{"
                + labels
                + f'subresource="",verb="PATCH",version="v1",le="0.1"}} {patch_count}',
                "apiserver_request_duration_seconds_sum{"
                + labels
                + f'subresource="",verb="PATCH",version="v1"}} {patch_sum}',
                "apiserver_request_duration_seconds_count{"
                + labels
                + f'subresource="",verb="PATCH",version="v1"}} {patch_count}',
                "apiserver_request_duration_seconds_sum{"
                + labels
                + 'subresource="",verb="WATCH",version="v1"} 900',
                "apiserver_request_duration_seconds_count{"
                + labels
                + 'subresource="",verb="WATCH",version="v1"} 3',
                'apiserver_request_sli_duration_seconds_sum{verb="PATCH"} 7',
            ]
        )

    before = request_seconds(metrics(1.0, 10))
    assert before == {"PATCH pods": (1.0, 10)}
    after = request_seconds(metrics(3.5, 60))
    assert mean_ms_grown(after, before) == {"PATCH pods": {"requests": 50, "mean_ms": 50.0}}
    assert mean_ms_grown(after, after) == {}


def test_kube_schedulers_own_time_is_its_algorithm_and_three_extension_points() -> None:
    def metrics(filter_sum: float, pods: int) -> str:
        point = 'scheduler_framework_extension_point_duration_seconds_{}{{extension_point="{}",'
        point += 'profile="tpfabric-scheduler",status="{}"}} {}'
        return "\n".join(
            [
                "# TYPE scheduler_scheduling_algorithm_duration_seconds histogram",
                'scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 3',
                f"scheduler_scheduling_algorithm_duration_seconds_sum {filter_sum * 2}",
                f"scheduler_scheduling_algorithm_duration_seconds_count {pods}",
                point.format("sum", "Filter", "Success", filter_sum),
                point.format("count", "Filter", "Success", pods),
                point.format("sum", "Filter", "Unschedulable", 0.5),
                point.format("count", "Filter", "Unschedulable", 2),
                point.format("sum", "PreFilter", "Success", 0.04),
                point.format("count", "PreFilter", "Success", pods),
                point.format("sum", "Bind", "Success", 0.09 * pods),
                point.format("count", "Bind", "Success", pods),
                (
                    'scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",'
                    'plugin="NodeResourcesFit",status="Success"} 0.3'
                ),
            ]
        )

    before = scheduling_seconds(metrics(1.0, 100))
    assert before == {
        "algorithm: filters, extender, scores": (2.0, 100),
        "Filter plugins (every node)": (1.5, 102),  # every status of the point, summed
        "Bind (the binding API call)": (9.0, 100),
    }
    after = scheduling_seconds(metrics(2.0, 300))
    assert mean_ms_grown(after, before) == {
        "algorithm: filters, extender, scores": {"requests": 200, "mean_ms": 10.0},
        "Filter plugins (every node)": {"requests": 200, "mean_ms": 5.0},
        "Bind (the binding API call)": {"requests": 200, "mean_ms": 90.0},
    }


def test_the_scheduler_table_has_a_row_per_time_and_a_dash_where_a_phase_has_none() -> None:
    result = {
        "baseline": {"scheduler_ms": {"Score plugins": {"requests": 256, "mean_ms": 0.95}}},
        "tpfabric": {
            "scheduler_ms": {
                "Filter plugins (every node)": {"requests": 256, "mean_ms": 7.456},
                EXTENDER_FILTER: {"requests": 256, "mean_ms": 1.09},
            }
        },
    }
    text = io.StringIO()
    Console(file=text, width=200, highlight=False).print(scheduler_time_table(result))
    rows = {
        cells[0]: cells[1:]
        for line in text.getvalue().splitlines()
        if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 3
    }
    assert rows["Score plugins"] == ["256 / 0.95", "-"]
    assert rows["Filter plugins (every node)"] == ["-", "256 / 7.46"]
    assert rows[EXTENDER_FILTER] == ["-", "256 / 1.09"]


def test_idle_writes_leave_out_reads_and_leases_and_give_a_rate() -> None:
    requests = {
        "PUT leases 200": 300,
        "GET tensorparalleljobs 200": 10,
        "WATCH pods 200": 2,
        "PATCH tensorparalleljobs/status 200": 3,
        "POST events 201": 3,
    }
    idle = idle_writes(requests, 30.0)
    assert idle["writes"] == {"PATCH tensorparalleljobs/status 200": 3, "POST events 201": 3}
    assert idle["writes_per_s"] == 0.2


def test_the_placers_release_writes_are_read_from_its_own_metrics() -> None:
    from prometheus_client import generate_latest  # noqa: PLC0415

    from tpfabric_scheduler.metrics import Metrics  # noqa: PLC0415

    metrics = Metrics()
    assert placer_time_totals(generate_latest(metrics.registry).decode()) == {
        RELEASE_WRITE: (0.0, 0),
        EXTENDER_FILTER: (0.0, 0),
    }
    for seconds in (0.25, 0.5):
        metrics.release_write_seconds.observe(seconds)
    metrics.request_seconds.labels("filter").observe(0.004)
    metrics.request_seconds.labels("prioritize").observe(0.5)  # not a filter answer
    assert placer_time_totals(generate_latest(metrics.registry).decode()) == {
        RELEASE_WRITE: (0.75, 2),
        EXTENDER_FILTER: (0.004, 1),
    }
