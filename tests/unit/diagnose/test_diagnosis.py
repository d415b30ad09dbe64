"""The join: slow ranks -> pod -> node -> GPU -> HCA port -> leaf switch port -> uplinks, what
each port counted, and the findings; on the real DGX dump (topograph's ``example.out``), with the
pods and nodes as the API serves them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tpfabric_core.diagnose.diagnosis import (
    DiagnoseOptions,
    Diagnosis,
    JobInputs,
    NodeFacts,
    diagnose,
)
from tpfabric_core.diagnose.nccl_ras import parse_nccl_ras
from tpfabric_core.diagnose.rank_map import job_ranks
from tpfabric_core.diagnose.serve_trace import ServeTarget, TracedRequest
from tpfabric_core.diagnose.straggler_report import parse_straggler_report
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover
from tpfabric_core.fabric.link_samples import WATCHED_COUNTERS, PortSample
from tpfabric_core.fabric.link_timeline import TIMELINE_ANNOTATION, TimelineRecorder
from tpfabric_core.fabric.model import Fabric

DUMP = Path(__file__).parents[1] / "fabric" / "data" / "topograph" / "example.out"
NODES = ("a05-p1-dgx-01-c01", "a05-p1-dgx-01-c03")  # two DGX nodes under the same rail leaves
T0 = 1_786_356_000.0
RANK_LABEL = "tpfabric.io/worker-index"


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return parse_ibnetdiscover(DUMP.read_text(), "example.out")[0]


def guids(fabric: Fabric, node: str) -> dict[int, str]:
    return {h.rail: h.port_guid for h in fabric.hcas_of(node) if h.rail in (0, 1) and h.port_guid}


def pod(fabric: Fabric, worker: int, *, paired: bool = True) -> dict[str, Any]:
    node = NODES[worker]
    ports = guids(fabric, node)
    summary = {
        "v": 1,
        "outcome": "rdma",
        "rails": "annotation",
        "pairs": [[g, f"0000:{0x18 + g:02x}:00.0", f"mlx5_{g}", 1, ports[g], g] for g in (0, 1)],
    }
    state = {"terminated": {"exitCode": 0, "message": json.dumps(summary)}} if paired else {}
    return {
        "metadata": {"name": f"serve-worker-{worker}-a1", "labels": {RANK_LABEL: str(worker)}},
        "spec": {"nodeName": node, "hostname": f"serve-worker-{worker}"},
        "status": {
            "phase": "Running",
            "podIP": f"10.244.{worker}.10",
            "startTime": "2026-08-10T09:00:00Z",
            "initContainerStatuses": [{"name": "rdma-init", "state": state}],
        },
    }


def sample(fabric: Fabric, node: str, gpu: int, value: int) -> PortSample:
    """A port whose driver shows every watched counter but roce_adp_retrans, all quiet but
    packet_seq_err at ``value``."""
    counters = dict.fromkeys(WATCHED_COUNTERS, 0) | {"packet_seq_err": value}
    del counters["roce_adp_retrans"]
    return PortSample(
        f"mlx5_{gpu}", 1, "ACTIVE", "LinkUp", 400.0, 4, counters=counters,
        unread=frozenset({"roce_adp_retrans"}), guid=guids(fabric, node)[gpu],
    )  # fmt: skip


def node_facts(
    fabric: Fabric, node: str, *, bursts_on: int | None = None, every: float = 10.0
) -> NodeFacts:
    """The node as its agent published it over 60 s from T0 (1 s interval), with 400 NAK
    sequence errors in one interval every ``every`` seconds on GPU ``bursts_on``'s port."""
    recorder = TimelineRecorder(node, 1.0)
    total = 0
    for second in range(61):
        if bursts_on is not None and second % every == 5:
            total += 400
        ports = [sample(fabric, node, g, total if g == bursts_on else 0) for g in (0, 1)]
        recorder.observe(T0 + second, ports, {"mlx5_0": 0, "mlx5_1": 1})
    return NodeFacts(
        node,
        annotations={TIMELINE_ANNOTATION: recorder.annotation()},
        conditions={"FabricHealthy": {"status": "True"}},
        agent_written=float(int(recorder.timeline().at)),
    )


def trace(*, stall_every: float | None = 10.0, date_offset: float | None = 0.0) -> ServeTarget:
    """Twelve streams of 20 ms chunks from about 10 s to 58 s; with ``stall_every``, every
    stream waits 300 ms once half a second into each burst second. Their HTTP Date headers show
    the endpoint's clock ``date_offset`` seconds off the client's (None: no Date header)."""
    requests = []
    for stream in range(12):
        sent = T0 + 10.0 + stream * 0.37
        chunks, now = [], sent + 0.05
        while now < T0 + 58:
            phase = (now - T0) % stall_every - 5.5 if stall_every is not None else -1.0
            now += 0.3 if 0 <= phase < 0.02 else 0.02
            chunks.append(now)
        date = None if date_offset is None else float(int(sent + 0.01 + date_offset))
        requests.append(TracedRequest(sent, sent + 0.02, date, tuple(chunks)))
    return ServeTarget("serve", "http://serve:8000/v1", "llama", tuple(requests))


def run(
    fabric: Fabric,
    nodes: dict[str, NodeFacts],
    inputs: JobInputs,
    *,
    paired: bool = True,
    **options: Any,
) -> Diagnosis:
    pods = [pod(fabric, 0, paired=paired), pod(fabric, 1)]
    ranks = job_ranks(pods, RANK_LABEL)
    settings = DiagnoseOptions(now=T0 + 60, **options)
    return diagnose(
        "TensorParallelJob default/serve", ranks, nodes, inputs, settings, fabric=fabric
    )


def kinds(diagnosis: Diagnosis) -> list[str]:
    return [f.kind for f in diagnosis.findings]


def test_the_war_story_names_the_rank_its_port_its_switch_port_and_the_lined_up_spikes(
    fabric: Fabric,
) -> None:
    nodes = {
        NODES[0]: node_facts(fabric, NODES[0]),
        NODES[1]: node_facts(fabric, NODES[1], bursts_on=1),
    }
    inputs = JobInputs(trace=trace(), trace_source="trace.json")
    diagnosis = run(fabric, nodes, inputs, max_skew=0.5)
    assert kinds(diagnosis) == ["link"]
    (link,) = diagnosis.findings
    assert link.ranks == (3,)
    guid = guids(fabric, NODES[1])[1]
    leaf = fabric.switch_label(fabric.leaf_of(NODES[1], 1) or "")
    assert link.text.startswith(
        f"rank 3 = worker 1 GPU 1 on {NODES[1]} → mlx5_1 port 1 (0x{guid}) → leaf "
    )
    assert f"({leaf}) → 18 uplinks (leaf ports 33-50)" in link.text
    assert "packet_seq_err 2,000 in 5 bursts every 10 s, peak 400/s" in link.text
    assert (
        "matching the inter-token latency spikes: 5 of 5 fall in these bursts (+/-1.5 s; chance "
        "alone would put 42% there)" in link.text
    )
    (clock,) = diagnosis.clocks
    assert clock.startswith("trace.json: its clock and its endpoint's agree: the endpoint's is -0.")
    assert clock.endswith(" s off (HTTP Date headers), within the 0.5 s allowed")
    (words,) = diagnosis.inputs
    assert words.startswith(
        "serve trace trace.json (serve, http://serve:8000/v1): 12 requests, inter-token latency "
        "median 20 ms, p99 20 ms (p99/median 1.0x), worst 10 s from "
    )
    assert words.endswith("5 spikes over 100 ms, every 10 s")
    (path,) = [p for p in diagnosis.paths if p.rank.rank == 3]
    assert path.cable is not None
    assert path.cable.leaf.port is not None
    document = diagnosis.document()
    three = next(r for r in document["ranks"] if r["rank"] == 3)
    assert (three["pod"], three["hca"], three["portGuid"], three["rail"]) == (
        "serve-worker-1-a1",
        "mlx5_1",
        guid,
        1,
    )
    assert three["leaf"]["port"] == path.cable.leaf.port
    assert document["spikes"]["periodic"] is True


def test_stalls_with_clean_counters_are_not_the_network_saying_what_was_read(
    fabric: Fabric,
) -> None:
    nodes = {name: node_facts(fabric, name) for name in NODES}
    diagnosis = run(fabric, nodes, JobInputs(trace=trace(), trace_source="trace.json"))
    assert kinds(diagnosis) == ["not-the-network"]
    text = diagnosis.findings[0].text
    assert text.startswith("not the network: 4 ports of ranks 0-3 on a05-p1-dgx-01-c01, a05-")
    assert "counted no error, retransmission or congestion burst from 10:00:10 to 10:00:58" in text
    assert "21 counters read each: symbol_error, link_error_recovery" in text
    assert text.endswith("; unknown (not exposed by the driver): roce_adp_retrans")


def test_a_clock_disagreement_beyond_the_skew_is_said_and_nothing_lined_up(fabric: Fabric) -> None:
    nodes = {
        NODES[0]: node_facts(fabric, NODES[0]),
        NODES[1]: node_facts(fabric, NODES[1], bursts_on=1),
    }
    inputs = JobInputs(trace=trace(date_offset=12.3), trace_source="trace.json")
    diagnosis = run(fabric, nodes, inputs)
    (clock,) = diagnosis.clocks
    assert clock.startswith("trace.json: its clock is 12.")
    assert "s behind its endpoint's (HTTP Date headers); lining up needs them within 2 s" in clock
    (link,) = diagnosis.findings
    assert "matching" not in link.text
    assert "lined up" not in link.text  # no events: nothing claimed either way


def test_a_trace_without_date_headers_is_lined_up_only_on_a_stated_assumption(
    fabric: Fabric,
) -> None:
    nodes = {
        NODES[0]: node_facts(fabric, NODES[0]),
        NODES[1]: node_facts(fabric, NODES[1], bursts_on=1),
    }
    inputs = JobInputs(trace=trace(date_offset=None), trace_source="trace.json")
    diagnosis = run(fabric, nodes, inputs)
    assert "no HTTP Date header" in diagnosis.clocks[0]
    assert diagnosis.findings[0].text.endswith(
        "(clocks assumed to agree, not checked); FabricHealthy True"
    )


def test_an_agent_clock_off_the_api_servers_keeps_its_node_out_of_the_lining_up(
    fabric: Fabric,
) -> None:
    bad = node_facts(fabric, NODES[1], bursts_on=1)
    bad = NodeFacts(
        bad.name,
        annotations=bad.annotations,
        conditions=bad.conditions,
        agent_written=(bad.agent_written or 0) + 42,
    )
    nodes = {NODES[0]: node_facts(fabric, NODES[0]), NODES[1]: bad}
    diagnosis = run(fabric, nodes, JobInputs(trace=trace(), trace_source="trace.json"))
    assert (
        f"node {NODES[1]}: its agent's clock is about 42 s behind the API server's"
        in (diagnosis.clocks[0])
    )
    assert "not lined up with the job's times (the node's clock disagrees)" in (
        diagnosis.findings[0].text
    )


def ras_document(
    hosts_and_ranks: list[tuple[str, int, int]], missing: list[tuple[str, int, int]]
) -> str:
    def entry(host: str, rank: int, gpu: int, status: dict[str, Any]) -> dict[str, Any]:
        return {
            "rank": rank,
            "host": host,
            "pid": 1,
            "cuda_dev": gpu,
            "nvml_dev": gpu,
            "status": status,
        }

    return json.dumps(
        {
            "nccl_version": "2.29.1",
            "timestamp": "2026-08-10 10:00:00",
            "communicators": [
                {
                    "hash": "0xabc",
                    "size": len(hosts_and_ranks) + len(missing),
                    "ranks": [entry(h, r, g, {"init_state": 0, "async_error": 0})
                              for h, r, g in hosts_and_ranks],
                    "missing_ranks": [entry(h, r, g, {"unresponsive": True})
                                      for h, r, g in missing],
                }
            ],
        }
    )  # fmt: skip


def test_slow_ranks_on_two_nodes_of_one_leaf_with_clean_links_point_at_its_uplinks(
    fabric: Fabric,
) -> None:
    nodes = {name: node_facts(fabric, name) for name in NODES}
    text = ras_document(
        [("10.244.0.10", 0, 0), ("10.244.1.10", 2, 0)],
        [("10.244.0.10", 1, 1), ("10.244.1.10", 3, 1)],
    )
    inputs = JobInputs(ras=parse_nccl_ras(text, "ras.json"))
    diagnosis = run(fabric, nodes, inputs, window_seconds=50)  # the agents' history: 60 s
    assert kinds(diagnosis) == ["uplink", "not-the-network"]
    uplink = diagnosis.findings[0]
    assert uplink.ranks == (1, 3)
    assert uplink.text.startswith("ranks 1, 3 on 2 nodes are slow and share leaf ")
    assert "(A09-P1-IBLEAF-02-01), while their own links counted no fault" in uplink.text
    assert "the common part is that leaf's 18 uplinks (leaf ports 33-50)" in uplink.text
    assert "tpfabric does not count switch ports: read them with perfquery or UFM" in uplink.text
    assert diagnosis.paths[0].why == (
        "NCCL RAS: missing: RAS could not reach it (unresponsive) in communicator 0xabc",
    )


def test_a_ras_host_that_is_none_of_the_jobs_pods_is_refused_naming_the_input(
    fabric: Fabric,
) -> None:
    nodes = {name: node_facts(fabric, name) for name in NODES}
    text = ras_document([("10.244.0.10", 0, 0)], [("172.16.64.245", 1, 1)])
    with pytest.raises(InputError) as raised:
        run(fabric, nodes, JobInputs(ras=parse_nccl_ras(text, "ras.json")))
    assert str(raised.value).startswith(
        "ras.json:1: NCCL RAS rank 1 names host 172.16.64.245, none of the job's pods ("
    )
    assert "the input is another job's, or the pods were replaced since" in str(raised.value)


def test_a_straggler_rank_the_job_does_not_have_is_refused(fabric: Fabric) -> None:
    nodes = {name: node_facts(fabric, name) for name in NODES}
    report = parse_straggler_report("Relative GPU performance scores:\n{17: 0.4}\n", "s.txt")
    with pytest.raises(InputError, match=r"s\.txt:2: rank 17 is none of the job's 4 ranks"):
        run(fabric, nodes, JobInputs(stragglers=(report,)))


def test_a_trace_from_before_the_jobs_pods_started_is_refused(fabric: Fabric) -> None:
    nodes = {name: node_facts(fabric, name) for name in NODES}
    early = trace()
    shifted = ServeTarget(
        early.label, early.endpoint, early.model,
        tuple(TracedRequest(r.sent - 86_400, None, None, tuple(t - 86_400 for t in r.chunks))
              for r in early.requests),
    )  # fmt: skip
    with pytest.raises(InputError, match="before the job's pods started"):
        run(fabric, nodes, JobInputs(trace=shifted, trace_source="old.json"))


def test_a_rank_without_a_published_pairing_cannot_be_told_and_says_why(fabric: Fabric) -> None:
    nodes = {name: node_facts(fabric, name) for name in NODES}
    diagnosis = run(fabric, nodes, JobInputs(trace=trace(), trace_source="t.json"), paired=False)
    unknown = [f for f in diagnosis.findings if f.kind == "unknown"]
    assert [f.ranks for f in unknown] == [(0,), (1,)]
    assert unknown[0].text == (
        f"rank 0 = worker 0 GPU 0 on {NODES[0]}: cannot tell: pod serve-worker-0-a1: rdma-init "
        "has not finished"
    )
    assert "not-the-network" not in kinds(diagnosis)  # not with ranks unchecked


def test_a_node_without_a_timeline_is_unknown_not_clean(fabric: Fabric) -> None:
    nodes = {NODES[0]: node_facts(fabric, NODES[0]), NODES[1]: NodeFacts(NODES[1])}
    diagnosis = run(fabric, nodes, JobInputs(trace=trace(), trace_source="t.json"))
    unknown = [f.text for f in diagnosis.findings if f.kind == "unknown"]
    assert len(unknown) == 2
    assert f"node {NODES[1]} has no topology.tpfabric.io/link-timeline" in unknown[0]
