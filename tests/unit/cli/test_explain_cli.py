"""`tpfabric explain`'s pure half: a job, its pods and node labels in; text, JSON, a picture out.

The objects are built as the API server serves them (camelCase dicts); nothing here reads a
cluster (tests/integration/test_explain.py does).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import tpfabric
from rich.console import Console

from tpfabric_cli.explain import (
    Explanation,
    JobKind,
    JobNotFoundError,
    choose_subject,
    draw_explanation,
    explain_object,
    print_explanation,
)
from tpfabric_cli.topology import Discovery, domain_tree
from tpfabric_cli.topology.node_health import NodeHealth
from tpfabric_core import labels
from tpfabric_core.api import JOB_LABEL, WORKER_INDEX_LABEL
from tpfabric_core.errors import InputError
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL

PLAN_MESSAGE = (
    "llama: 2 workers in leaf 'su1-leaf1', 1 hops, 1 leaf domain(s), modelled all-reduce "
    "0.412 ms (ring)"
)
WAIT_MESSAGE = "no leaf domain has 4 nodes with 8 free GPUs (2 of 8 leaf domains in reasons)"


def node_labels(leaf: str, spine: str = "su1", *, health: str = "ok") -> dict[str, str]:
    rails = {labels.rail_key(i): f"{leaf}-rail{i}" for i in range(8)}
    return {labels.LEAF: leaf, labels.SPINE: spine, labels.BLOCK: "pod1", labels.HEALTH: health,
            **rails}  # fmt: skip


NODES = {
    "n1": node_labels("su1-leaf1"),
    "n2": node_labels("su1-leaf1"),
    "n3": node_labels("su1-leaf2"),
    "n4": node_labels("su1-leaf2", health="degraded"),
}


def tpj(name: str = "llama", workers: int = 2, **placement: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tpfabric.io/v1alpha1",
        "kind": "TensorParallelJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"workers": workers},
        "status": {"phase": "Running", "ready": f"{workers}/{workers}", "placement": placement},
    }


def planned(nodes: list[str]) -> dict[str, Any]:
    return {
        "state": "Planned",
        "message": PLAN_MESSAGE,
        "level": "leaf",
        "domain": "su1-leaf1",
        "nodes": nodes,
        "hops": 1,
        "modelledAllreduceUs": 412.0,
        "waitingSince": "2025-01-02T03:00:00Z",
        "reasons": [
            {"level": "leaf", "domain": "su1-leaf1", "reason": "smallest domain that fits"}
        ],
    }


def pod(
    name: str, rank: int, node: str | None, *, key: str = WORKER_INDEX_LABEL, job: str = "llama"
) -> dict[str, Any]:
    owner = {JOB_LABEL: job} if key == WORKER_INDEX_LABEL else {GANG_LABEL: job}
    spec: dict[str, Any] = {"nodeName": node} if node else {"schedulingGates": [{"name": "g"}]}
    return {
        "metadata": {"name": name, "labels": {**owner, key: str(rank)}},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def text_of(explanation: Explanation) -> str:
    buffer = io.StringIO()
    print_explanation(explanation, Console(file=buffer, width=100, no_color=True, soft_wrap=True))
    return buffer.getvalue()


def test_a_planned_job_shows_the_placers_words_and_every_rank_on_its_node() -> None:
    job = tpj(**planned(["n1", "n2"]))
    explanation = explain_object(job, [pod("llama-w-1", 1, "n2"), pod("llama-w-0", 0, "n1")],
                                 NODES)  # fmt: skip
    text = text_of(explanation)
    assert "TensorParallelJob team-a/llama · Running 2/2 · 2 workers" in text
    assert f"placement Planned: {PLAN_MESSAGE}" in text
    assert "level leaf · domain su1-leaf1 · 1 switch hop · all-reduce 412 µs (modelled)" in text
    assert "why this domain:\n  - smallest domain that fits" in text
    rows = [line for line in text.splitlines() if "llama-w-" in line]
    assert len(rows) == 2
    for rank, line in enumerate(rows):
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        node = f"n{rank + 1}"
        assert cells[:7] == [str(rank), f"llama-w-{rank}", node, node, "su1-leaf1", "su1",
                             "su1-leaf1-rail[0-7]"]  # fmt: skip
        assert cells[-2:] == ["ok", "Running"]
    assert "off plan" not in text
    assert "waiting since" not in text, "a plan keeps its first wait; the job no longer waits"


def test_a_pod_off_its_planned_node_is_flagged_in_the_table_and_below_it() -> None:
    job = tpj(**planned(["n1", "n2"]))
    explanation = explain_object(job, [pod("llama-w-0", 0, "n1"), pod("llama-w-1", 1, "n3")],
                                 NODES)  # fmt: skip
    assert [row.rank for row in explanation.off_plan] == [1]
    text = text_of(explanation)
    row = next(line for line in text.splitlines() if "llama-w-1" in line)
    assert "n3 ✗ off plan" in row
    assert "su1-leaf2" in row, "the bound node's leaf, not the planned one's"
    assert "rank 1: pod llama-w-1 is bound to n3, not its planned node n2" in text


def test_json_carries_the_placement_verbatim_and_the_rank_rows() -> None:
    placement = planned(["n1", "n2"])
    job = tpj(**placement)
    explanation = explain_object(job, [pod("llama-w-0", 0, "n1"), pod("llama-w-1", 1, "n4")],
                                 NODES)  # fmt: skip
    document = json.loads(json.dumps(explanation.document()))
    assert document["placement"] == placement
    assert document["kind"] == "TensorParallelJob"
    assert (document["namespace"], document["name"]) == ("team-a", "llama")
    assert document["ranks"][1] == {
        "rank": 1, "pod": "llama-w-1", "plannedNode": "n2", "boundNode": "n4", "offPlan": True,
        "phase": "Running", "leaf": "su1-leaf2", "spine": "su1", "block": "pod1",
        "rails": "su1-leaf2-rail[0-7]", "health": "degraded",
    }  # fmt: skip
    assert "owner" not in document
    assert document["degraded"] is None


def test_a_degraded_job_shows_the_straggler_and_the_restart_weighing() -> None:
    job = tpj(**planned(["n1", "n4"]))
    words = (
        "straggler risk: rank 1 on node n4: rate 200 Gb/s, expected 400, on mlx5_2 port 1; kept "
        "running: running slow (steps 5.0% slower) is expected to lose 11.4 min, a restart costs "
        "25.0 min (10.0 min restore + 15.0 min redone since the last checkpoint)"
    )
    job["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "message": "2/2"},
        {"type": "Degraded", "status": "True", "reason": "DegradedLink", "message": words},
    ]
    explanation = explain_object(job, [pod("llama-w-0", 0, "n1"), pod("llama-w-1", 1, "n4")],
                                 NODES)  # fmt: skip
    assert explanation.degraded == words
    assert f"degraded: {words}" in text_of(explanation).replace("\n", " ")
    assert explanation.document()["degraded"] == words
    job["status"]["conditions"][1]["status"] = "False"
    healthy = explain_object(job, [], NODES)
    assert healthy.degraded is None
    assert "degraded:" not in text_of(healthy)


def test_a_job_without_rdma_says_it_runs_over_tcp_and_why() -> None:
    job = tpj(**planned(["n1", "n2"]))
    why = (
        "none of the 4 GPU node(s) that could hold the pod offers rdma/ib, so the gang runs over "
        "TCP sockets; if the nodes' RDMA device plugin advertises another resource, set the "
        "chart's rdma.resourceName to it"
    )
    job["status"]["conditions"] = [
        {"type": "RDMA", "status": "False", "reason": "NodesOfferNone", "message": why}
    ]
    explanation = explain_object(job, [pod("llama-w-0", 0, "n1")], NODES)
    text = text_of(explanation).replace("\n", " ")
    assert f"transport: TCP sockets, no RDMA (NodesOfferNone: {why})" in text
    assert explanation.document()["rdma"] == {
        "status": "False",
        "reason": "NodesOfferNone",
        "message": why,
    }
    job["status"]["conditions"] = [
        {"type": "RDMA", "status": "True", "reason": "NodesOffer", "message": "8 rdma/ib per pod"}
    ]
    assert "transport: RDMA (NodesOffer: 8 rdma/ib per pod)" in text_of(
        explain_object(job, [], NODES)
    )
    job["status"]["conditions"] = []
    assert "transport:" not in text_of(explain_object(job, [], NODES))


def test_a_waiting_job_shows_why_it_waits_and_the_refused_nodes() -> None:
    waiting: dict[str, Any] = {
        "state": "Waiting",
        "message": WAIT_MESSAGE,
        "nodes": [],
        "waitingSince": "2025-01-02T03:04:05Z",
        "reasons": [
            {"level": "leaf", "domain": "su1-leaf1", "reason": "leaf 'su1-leaf1': 2/4 workers fit"},
            {"level": "leaf", "domain": "su1-leaf2", "reason": "leaf 'su1-leaf2': 1/4 workers fit"},
        ],
        "refusedNodes": [
            {"node": "n3", "reason": "node(s) didn't have free ports", "since": "2025-01-02T03:05Z"}
        ],
        "previousNodes": ["n1", "n2"],
    }
    job = tpj(workers=4, **waiting)
    pods = [pod(f"llama-w-{i}", i, None) for i in range(4)]
    text = text_of(explain_object(job, pods, NODES))
    assert f"placement Waiting: {WAIT_MESSAGE}" in text
    assert "why it waits:" in text
    assert (
        "why it waits:\n  - leaf 'su1-leaf1': 2/4 workers fit\n  - leaf 'su1-leaf2': 1/4 " in text
    )
    assert "waiting since 2025-01-02T03:04:05Z" in text
    assert "  - n3: node(s) didn't have free ports (since 2025-01-02T03:05Z)" in text
    assert "nodes of the last plan: n[1-2]" in text
    assert text.count("Pending (gated)") == 4


def test_a_gang_shows_its_owner_size_problems_and_ranks_from_the_rank_label() -> None:
    gang: dict[str, Any] = {
        "kind": "Gang",
        "metadata": {"name": "lws-a-0", "namespace": "team-b"},
        "spec": {"owner": {"kind": "LeaderWorkerSet", "name": "lws-a"}, "workers": 3},
        "status": {
            "phase": "Pending",
            "problems": ["tpfabric.io/rank: ranks 1 are held by more than one pod"],
            "placement": {},
        },
    }
    pods = [pod(name, 1, None, key=RANK_LABEL, job="lws-a-0") for name in ("lws-a-0-1", "x-1")]
    pods.append(pod("lws-a-0", 0, None, key=RANK_LABEL, job="lws-a-0"))
    explanation = explain_object(gang, pods, NODES)
    text = text_of(explanation)
    assert "Gang team-b/lws-a-0 · Pending · 3 pods · owner LeaderWorkerSet lws-a" in text
    assert "tpfabric.io/rank: ranks 1 are held by more than one pod" in text
    assert "no placement yet" in text
    assert [(row.rank, row.pod) for row in explanation.ranks] == [
        (0, "lws-a-0"), (1, "lws-a-0-1"), (1, "x-1"), (2, None)
    ]  # fmt: skip
    assert "(no pod)" in text
    document = explanation.document()
    assert document["owner"] == {"kind": "LeaderWorkerSet", "name": "lws-a"}
    assert document["problems"] == gang["status"]["problems"]


def test_a_pod_without_a_readable_rank_gets_a_row_of_its_own() -> None:
    stray = pod("llama-w-x", 0, "n1")
    stray["metadata"]["labels"][WORKER_INDEX_LABEL] = "x"
    explanation = explain_object(tpj(workers=1, **planned(["n1"])), [stray], NODES)
    assert [(row.rank, row.rank_text, row.pod) for row in explanation.ranks] == [
        (0, "", None), (None, "x", "llama-w-x")
    ]  # fmt: skip
    assert "? x" in text_of(explanation)


def test_the_health_the_cluster_reports_is_shown_in_the_agents_words() -> None:
    sick = {"n2": NodeHealth("degraded", "SymbolErrors", "symbol errors 1,200/min on mlx5_3")}
    job = tpj(**planned(["n1", "n2"]))
    explanation = explain_object(job, [pod("llama-w-1", 1, "n2")], NODES, sick)
    assert explanation.ranks[1].health == (
        "degraded (SymbolErrors: symbol errors 1,200/min on mlx5_3)"
    )


def test_a_rank_on_a_node_whose_agent_is_silent_says_its_health_is_unknown() -> None:
    silent = {"n2": NodeHealth("unknown", "AgentSilent", "the fabric agent of node n2 is silent")}
    job = tpj(**planned(["n1", "n2"]))
    explanation = explain_object(job, [pod("llama-w-1", 1, "n2")], NODES, silent)
    assert explanation.ranks[1].health == (
        "unknown (AgentSilent: the fabric agent of node n2 is silent)"
    )
    assert "unknown (AgentSilent" in text_of(explanation)


def test_one_kind_found_is_chosen_none_is_an_error_naming_namespace_and_name() -> None:
    job = tpj()
    assert choose_subject({JobKind.TPJ: job, JobKind.GANG: None}, "ns", "llama") == (
        JobKind.TPJ, job
    )  # fmt: skip
    with pytest.raises(JobNotFoundError, match="no TensorParallelJob or Gang named 'llama' in "
                       "namespace 'ns'"):  # fmt: skip
        choose_subject({JobKind.TPJ: None, JobKind.GANG: None}, "ns", "llama")
    with pytest.raises(JobNotFoundError, match=r"^no Gang named 'llama' in namespace 'ns'$"):
        choose_subject({JobKind.GANG: None}, "ns", "llama")


def test_both_kinds_of_one_name_ask_for_kind() -> None:
    with pytest.raises(InputError, match="pass --kind tpj or --kind gang"):
        choose_subject({JobKind.TPJ: tpj(), JobKind.GANG: {"kind": "Gang"}}, "ns", "llama")


def test_the_picture_marks_the_jobs_nodes(tmp_path: Path) -> None:
    explanation = explain_object(tpj(**planned(["n1", "n2"])), [], NODES)
    assert explanation.placed_nodes == ("n1", "n2"), "planned nodes while no pod is bound"
    tree = domain_tree(Discovery("test", NODES))
    for name in ("job.png", "job.svg"):
        draw_explanation(explanation, tree, tmp_path / name)
    assert (tmp_path / "job.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "job.svg").read_text()
    assert "TensorParallelJob team-a/llama" in svg


def test_a_picture_of_another_format_is_refused_before_the_cluster_is_read() -> None:
    result = tpfabric("explain", "llama", "--picture", "job.jpg", "--kubeconfig", "/nonexistent")
    assert result.exit_code == 2
    assert "--picture: cannot draw job.jpg: unknown format; name a .png or .svg file" in (
        result.stderr
    )


def unranked(name: str, gang: str) -> dict[str, Any]:
    """A gang pod before its rank is given (ranks by creation, once every pod exists)."""
    return {
        "metadata": {"name": name, "labels": {GANG_LABEL: gang}},
        "spec": {"schedulingGates": [{"name": "tpfabric.io/gang"}]},
        "status": {"phase": "Pending"},
    }


def pod_group(name: str, workers: int) -> dict[str, Any]:
    return {
        "kind": "Gang",
        "metadata": {"name": name, "namespace": "team-b"},
        "spec": {"owner": {"kind": "PodGroup", "name": name}, "workers": workers},
        "status": {"phase": "Pending", "ready": f"0/{workers}", "pods": 3},
    }


def test_a_gang_short_of_unranked_pods_counts_the_pods_that_exist_not_empty_ranks() -> None:
    pods = [unranked(f"train-{i}", "train") for i in range(3)]
    explanation = explain_object(pod_group("train", 4), pods, NODES)
    text = text_of(explanation)
    assert [(row.rank, row.pod) for row in explanation.ranks] == [
        (None, "train-0"), (None, "train-1"), (None, "train-2")
    ]  # fmt: skip
    assert "(no pod)" not in text
    assert "? " not in text
    assert "- (not given yet)" in text
    assert "pods: 3 of 4 pods exist; 1 missing (ranks follow the order of creation" in text
    document = explanation.document()
    assert document["pods"]["present"] == 3
    assert document["pods"]["missingRanks"] is None


def test_a_gang_short_of_ranked_pods_names_the_missing_ranks() -> None:
    gang = pod_group("lws-a-0", 4)
    gang["spec"]["owner"] = {"kind": "LeaderWorkerSet", "name": "lws-a"}
    pods = [pod(f"lws-a-0-{r}", r, None, key=RANK_LABEL, job="lws-a-0") for r in (0, 1, 3)]
    explanation = explain_object(gang, pods, NODES)
    text = text_of(explanation)
    assert (
        "pods: 3 of 4 pods exist; missing rank 2: the gang waits until LeaderWorkerSet lws-a"
        in (text)
    )
    assert [(row.rank, row.pod) for row in explanation.ranks][2] == (2, None)
    assert explanation.document()["pods"]["missingRanks"] == [2]


def test_without_node_rights_the_rows_are_shown_and_the_node_details_said_hidden() -> None:
    job = tpj(**planned(["n1", "n2"]))
    pods = [pod("llama-w-0", 0, "n1"), pod("llama-w-1", 1, "n2")]
    explanation = explain_object(job, pods, {}, {}, nodes_hidden=True)
    text = text_of(explanation)
    assert "node details hidden: no permission to read nodes" in text
    assert [(row.rank, row.bound, row.leaf) for row in explanation.ranks] == [
        (0, "n1", None), (1, "n2", None)
    ]  # fmt: skip
    assert (
        explanation.document()["nodeDetails"] == "node details hidden: no permission to read nodes"
    )
