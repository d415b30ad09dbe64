"""The pure parts of ``tpfabric bench gangs``: the LWS manifests, the leaf spread, one arm's
numbers, the admission histograms, the tables and the command line."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from tpfabric_bench.gangs import (
    APISERVER_HISTOGRAM,
    WEBHOOK_HISTOGRAM,
    admission_latency,
    bucket_quantile,
    burst_result,
    cpu_table,
    group_of,
    histogram_buckets,
    leaf_spread,
    lws_manifests,
    parse_args,
    summary_table,
    webhook_table,
    wired_manifests,
)
from tpfabric_core.pod_wiring import is_wired
from tpfabric_core.rdma_default import parse_decision

LEAF_OF = {"n1": "leaf-1", "n2": "leaf-1", "n3": "leaf-2", "n4": "leaf-2"}


def lws_pod(lws: str, group: int, node: str | None = None, **spec: Any) -> dict[str, Any]:
    """A pod of LWS group ``group`` as the watch sees it, bound to ``node`` when given."""
    labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
    }
    return {"metadata": {"labels": labels}, "spec": ({"nodeName": node} if node else {}) | spec}


def render(table: Table) -> str:
    text = io.StringIO()
    Console(file=text, width=200, highlight=False).print(table)
    return text.getvalue()


# -- manifests and groups -------------------------------------------------------------------------


def test_one_set_holds_every_group_and_names_nothing_of_tpfabric() -> None:
    (lws,) = lws_manifests(100, 8)
    assert lws["metadata"]["name"] == "serve"
    assert lws["spec"]["replicas"] == 100
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 8
    (container,) = template["workerTemplate"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "tpfabric" not in json.dumps(lws)


def test_groups_split_over_several_sets_as_evenly_as_can_be() -> None:
    sets = lws_manifests(10, 4, sets=3)
    assert [s["metadata"]["name"] for s in sets] == ["serve-0", "serve-1", "serve-2"]
    assert [s["spec"]["replicas"] for s in sets] == [4, 3, 3]


@pytest.mark.parametrize(("groups", "size", "sets"), [(3, 8, 4), (3, 0, 1), (3, 8, 0)])
def test_impossible_splits_are_refused(groups: int, size: int, sets: int) -> None:
    with pytest.raises(ValueError, match="sets"):
        lws_manifests(groups, size, sets)


def test_a_pods_group_is_its_lws_and_group_index_and_none_without_them() -> None:
    assert group_of(lws_pod("serve", 7)) == "serve-7"
    assert group_of(lws_pod("serve", 0)) == "serve-0"
    assert group_of({"metadata": {"labels": {"app": "x"}}}) is None
    assert group_of({}) is None


# -- leaf spread ----------------------------------------------------------------------------------


def test_groups_under_more_than_one_leaf_are_counted_with_their_width() -> None:
    pods = [
        lws_pod("serve", 0, "n1"),
        lws_pod("serve", 0, "n2"),  # group 0: one leaf
        lws_pod("serve", 1, "n3"),
        lws_pod("serve", 1, "n1"),  # group 1: two leaves
        lws_pod("serve", 2, "n4"),
        lws_pod("serve", 2, "n9"),  # n9 unknown: a leaf of its own
    ]
    spread = leaf_spread(pods, LEAF_OF)
    assert spread == {"groups_spanning_leaves": 2, "leaves_per_group": {"1": 1, "2": 2}}


def test_unbound_pods_and_pods_of_no_group_do_not_count() -> None:
    pods = [
        lws_pod("serve", 0, "n1"),
        lws_pod("serve", 0),  # not bound yet
        {"metadata": {"labels": {}}, "spec": {"nodeName": "n3"}},
    ]
    assert leaf_spread(pods, LEAF_OF) == {
        "groups_spanning_leaves": 0,
        "leaves_per_group": {"1": 1},
    }


# -- one arm --------------------------------------------------------------------------------------


def test_an_arm_ends_each_mark_at_its_last_pod_from_the_create_call() -> None:
    pods = {
        "ns/serve-0": lws_pod("serve", 0, "n1", schedulerName="tpfabric-scheduler"),
        "ns/serve-0-1": lws_pod("serve", 0, "n2", schedulerName="tpfabric-scheduler"),
        "ns/serve-1": lws_pod("serve", 1, "n3", schedulerName="tpfabric-scheduler"),
        "ns/serve-1-1": lws_pod("serve", 1, "n1", schedulerName="tpfabric-scheduler"),
    }
    stamps = {
        "ns/serve-0": {"seen": 100.5, "ungated": 101.0, "bound": 101.5, "running": 102.0},
        "ns/serve-0-1": {"seen": 100.7, "ungated": 101.0, "bound": 101.6, "running": 102.5},
        "ns/serve-1": {"seen": 100.6, "ungated": 101.2, "bound": 101.8, "running": 103.0},
        "ns/serve-1-1": {"seen": 100.9, "ungated": 101.2, "bound": 101.9, "running": 104.0},
    }
    result = burst_result(stamps, pods, 100.0, expected=4, size=2, leaf_of=LEAF_OF)
    assert result["complete"] is True
    assert result["pods_running"] == 4
    assert result["all_seen_s"] == 0.9
    assert result["all_ungated_s"] == 1.2
    assert result["all_bound_s"] == 1.9
    assert result["all_running_s"] == 4.0
    assert result["groups_running"] == 2
    assert result["group_running_s"]["max"] == 4.0
    assert result["group_running_s"]["count"] == 2
    assert result["schedulers"] == {"tpfabric-scheduler": 4}
    assert result["groups_spanning_leaves"] == 1


def test_an_arm_short_of_its_pods_has_no_end_times_and_is_incomplete() -> None:
    pods = {
        "ns/serve-0": lws_pod("serve", 0, "n1"),
        "ns/serve-0-1": lws_pod("serve", 0),
    }
    stamps = {
        "ns/serve-0": {"seen": 1.0, "ungated": 1.0, "bound": 2.0, "running": 3.0},
        "ns/serve-0-1": {"seen": 1.0},
    }
    result = burst_result(stamps, pods, 0.0, expected=4, size=2, leaf_of=LEAF_OF)
    assert result["complete"] is False
    assert result["pods_running"] == 1
    assert result["all_seen_s"] is None, "2 of the 4 pods exist"
    assert result["all_running_s"] is None
    assert result["groups_running"] == 0
    assert result["group_running_s"]["count"] == 0
    assert result["schedulers"] == {"default-scheduler": 2}


# -- admission histograms -------------------------------------------------------------------------


def webhook_metrics(counts: dict[str, int], seconds: float) -> str:
    """A webhook /metrics text with cumulative ``counts`` per ``le`` and their sum."""
    lines = [f'{WEBHOOK_HISTOGRAM}_bucket{{le="{le}"}} {n}.0' for le, n in counts.items()]
    total = counts["+Inf"]
    lines += [f"{WEBHOOK_HISTOGRAM}_count {total}.0", f"{WEBHOOK_HISTOGRAM}_sum {seconds}"]
    lines.append('tpfabric_webhook_answers_total{outcome="wired"} 3.0')
    return "\n".join(lines) + "\n"


def test_buckets_are_read_per_bound_and_summed_over_the_kept_series() -> None:
    text = "\n".join(
        [
            f'{APISERVER_HISTOGRAM}_bucket{{name="a.tpfabric.io",type="admit",le="0.005"}} 3',
            f'{APISERVER_HISTOGRAM}_bucket{{name="a.tpfabric.io",type="admit",le="+Inf"}} 4',
            f'{APISERVER_HISTOGRAM}_bucket{{name="b.tpfabric.io",type="admit",le="0.005"}} 1',
            f'{APISERVER_HISTOGRAM}_bucket{{name="b.tpfabric.io",type="admit",le="+Inf"}} 1',
            f'{APISERVER_HISTOGRAM}_bucket{{name="mpod.kb.io",type="admit",le="+Inf"}} 99',
            f'{APISERVER_HISTOGRAM}_sum{{name="a.tpfabric.io",type="admit"}} 0.5',
        ]
    )
    ours = histogram_buckets(
        text, APISERVER_HISTOGRAM, lambda f: f["name"].endswith(".tpfabric.io")
    )
    assert ours == {0.005: 4.0, math.inf: 5.0}
    assert histogram_buckets(text, APISERVER_HISTOGRAM)[math.inf] == 104.0


def test_a_quantile_is_interpolated_inside_its_bucket_as_prometheus_does() -> None:
    buckets = {0.001: 50.0, 0.002: 90.0, 0.005: 100.0, math.inf: 100.0}
    assert bucket_quantile(buckets, 0.5) == pytest.approx(0.001)
    assert bucket_quantile(buckets, 0.7) == pytest.approx(0.0015)
    assert bucket_quantile(buckets, 0.99) == pytest.approx(0.0047)
    assert bucket_quantile(buckets, 0.25) == pytest.approx(0.0005), "the first bucket from 0"


def test_a_quantile_above_the_last_finite_bound_is_that_bound_and_none_without_data() -> None:
    assert bucket_quantile({0.01: 1.0, math.inf: 10.0}, 0.99) == 0.01
    assert bucket_quantile({0.01: 0.0, math.inf: 0.0}, 0.5) is None
    assert bucket_quantile({}, 0.5) is None


def test_the_burst_latency_is_the_difference_of_two_scrapes() -> None:
    before = webhook_metrics({"0.001": 10, "0.005": 10, "0.01": 10, "+Inf": 10}, 0.005)
    after = webhook_metrics({"0.001": 60, "0.005": 108, "0.01": 109, "+Inf": 110}, 0.305)
    latency = admission_latency(before, after, WEBHOOK_HISTOGRAM)
    assert latency["reviews"] == 100
    assert latency["mean_ms"] == pytest.approx(3.0)
    assert latency["p50_ms"] == pytest.approx(1.0)
    assert latency["within_10ms"] == 0.99
    assert latency["p99_ms"] == pytest.approx(10.0)
    assert latency["buckets_ms"] == {"1": 50, "5": 98, "10": 99, "inf": 100}


def test_no_reviews_between_the_scrapes_is_no_latency() -> None:
    text = webhook_metrics({"0.001": 4, "0.01": 4, "+Inf": 4}, 0.002)
    latency = admission_latency(text, text, WEBHOOK_HISTOGRAM)
    assert latency["reviews"] == 0
    assert latency["p99_ms"] is None
    assert latency["mean_ms"] is None
    assert latency["within_10ms"] is None


# -- tables and the command line ------------------------------------------------------------------


def arm(opted_in: bool, running_s: float, spanning: int) -> dict[str, Any]:
    """One arm's result as ``run_gangs`` stores it (the parts the tables read)."""
    return {
        "create_s": 0.02,
        "expected_pods": 800,
        "pods": 800,
        "pods_running": 800,
        "complete": True,
        "all_seen_s": 10.0,
        "all_ungated_s": 12.0 if opted_in else 10.0,
        "all_bound_s": running_s - 1,
        "all_running_s": running_s,
        "groups_running": 100,
        "group_running_s": {"count": 100, "p50": 20.0, "p90": 30.0, "p99": 39.0, "max": 40.0},
        "schedulers": {"tpfabric-scheduler" if opted_in else "default-scheduler": 800},
        "groups_spanning_leaves": spanning,
        "leaves_per_group": {"1": 100} if not spanning else {"1": 100 - spanning, "2": spanning},
        "opted_in": opted_in,
        "phase_s": running_s,
        "processes": {"kube-apiserver": {"cpu_s": running_s / 2, "peak_rss_mib": 900.0}},
        "cpu_s_total": running_s,
        "admission": {
            "webhook": {
                "reviews": 1600,
                "p50_ms": 0.9,
                "p99_ms": 4.5,
                "mean_ms": 1.1,
                "within_10ms": 0.9994,
            },
            "apiserver": {
                "reviews": 1600,
                "p50_ms": 12.0,
                "p99_ms": 24.0,
                "mean_ms": 13.0,
                "within_10ms": None,
            },
        },
    }


def three_arms() -> dict[str, Any]:
    return {
        "nodes": 1000,
        "leaves": 125,
        "nodes_per_leaf": 8,
        "groups": 100,
        "size": 8,
        "pods": 800,
        "gpus_per_pod": 8,
        "leaderworkersets": [{"name": "serve", "replicas": 100}],
        "cluster_up_s": 15.0,
        "nodes_ready_s": 40.0,
        "baseline": arm(opted_in=False, running_s=40.0, spanning=87),
        "wired": arm(opted_in=False, running_s=46.0, spanning=90),
        "tpfabric": arm(opted_in=True, running_s=50.0, spanning=0)
        | {"gang_states": {"Planned": 100}},
        "ratio": 1.25,
        "ratio_to_wired": 1.09,
        "wiring_ratio": 1.15,
    }


def test_the_summary_shows_the_arms_the_ratios_and_the_leaf_spans() -> None:
    text = render(summary_table(three_arms()))
    assert "100 LeaderWorkerSet groups x 8 pods (800 pods of 8 GPUs, 1 LWS)" in text
    assert "1.25x" in text, "with tpfabric over the plain pods"
    assert "1.09x" in text, "over the pods wired by hand: tpfabric's machinery alone"
    assert "1.15x" in text, "the wiring alone"
    assert "wired by hand" in text
    assert "87 of 100" in text
    assert "0 of 100" in text
    assert "(never gated)" in text
    assert "tpfabric-scheduler 800" in text
    assert "Planned 100" in text


def test_the_webhook_table_has_its_own_and_the_api_servers_view() -> None:
    result = three_arms()
    text = render(webhook_table(result))
    assert "4.50" in text, "the webhook's p99"
    assert "99.94%" in text
    assert "24.00" in text, "the API server's p99"
    assert "2.00 reviews a pod" in text
    result["tpfabric"]["admission"]["webhook"] = None
    assert "could not be read" in render(webhook_table(result))


def test_the_cpu_table_has_a_row_per_process_and_the_cores_each_arm_kept_busy() -> None:
    text = render(cpu_table(three_arms() | {"vm_hwm_mib": {"kube-apiserver": 1234.0}}))
    assert "kube-apiserver" in text
    assert "20.0 / 900" in text, "without tpfabric: 40 s of 20 CPU s"
    assert "25.0 / 900" in text
    assert "1234" in text
    assert "lws-controller" in text
    assert "0.0 / 0" in text, "a process not sampled"
    assert "40.0 (1.00)" in text, "40 CPU s over 40 s: one core"
    assert "23.0 / 900" in text, "the arm wired by hand"


def test_a_result_is_json() -> None:
    assert json.loads(json.dumps(three_arms()))["tpfabric"]["groups_spanning_leaves"] == 0


def test_the_sizes_are_flags_and_must_fit_the_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--nodes", "64", "--groups", "4", "--size", "4"])
    assert (args.nodes, args.groups, args.size, args.sets) == (64, 4, 4, 1)
    defaults = parse_args([])
    assert (defaults.nodes, defaults.groups, defaults.size) == (1000, 100, 8)
    with pytest.raises(SystemExit):
        parse_args(["--nodes", "64", "--groups", "9", "--size", "8"])
    assert "need 72 nodes" in capsys.readouterr().err


def test_the_wired_arm_carries_the_webhooks_rdma_wiring_and_nothing_else_of_tpfabric() -> None:
    plain = lws_manifests(groups=4, size=2)
    wired = wired_manifests(plain)
    assert plain == lws_manifests(groups=4, size=2), "the plain manifests are left as they were"
    template = wired[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    spec = template["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["rdma-init"]
    assert is_wired(spec), "the webhook would take it for wired already"
    main = spec["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "8", "cpu": "1", "rdma/ib": "8"}
    assert {"name": "NCCL_CONF_FILE", "value": "/tpfabric/nccl.conf"} in main["env"]
    assert {v["name"] for v in spec["volumes"]} >= {"tpfabric-shared", "tpfabric-podinfo"}
    decision = parse_decision(template["metadata"]["annotations"]["tpfabric.io/rdma"])
    assert decision is not None
    assert (decision.resource, decision.count) == ("rdma/ib", 8)
    text = json.dumps(wired)
    for of_tpfabric in ("schedulingGates", "schedulerName", "tpfabric.io/gang", "tpfabric.io/rank"):
        assert of_tpfabric not in text
    assert wired[0]["spec"]["replicas"] == 4
    assert wired[0]["spec"]["leaderWorkerTemplate"]["size"] == 2
