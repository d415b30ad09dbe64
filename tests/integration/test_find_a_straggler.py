"""The war story, reproduced on the local control plane (docs/find-a-straggler.md).

A serving group (a TensorParallelJob of two DGX-class workers, placed by tpfabric's scheduler and
run by the operator) sits on two kwok nodes. Each node has its own fabric agent loop (a thread
with its own API client, as its DaemonSet pod would) reading a fake ``/sys`` in the kernel's
layout; each pod's ``rdma-init`` status carries the pairing it would write (the test plays the
kubelet's part for that field: kwok runs no container; rdma-init's own writing of it is unit
tested); the fabric's ``ibnetdiscover`` dump names the nodes' real port GUIDs. A stand-in
OpenAI-compatible endpoint (the serving group's front) stalls its tokens on a schedule.

- **Positive**: one optical transceiver with bit errors: the fake port ``mlx5_5`` of the second
  node counts NAK sequence errors in bursts, and the endpoint stalls in step. ``tpfabric bench
  serve --trace`` shows the inter-token spikes; ``tpfabric diagnose --serve-trace --fabric``
  names the rank, the port (by GUID) and the leaf switch port, and lines the bursts up with the
  spikes.
- **Negative**: the same stalls with clean counters: ``tpfabric diagnose`` says "not the
  network", naming what it read.

The schedule is compressed (a burst of 1.5 s every 10 s instead of every four to six minutes,
a 0.25 s agent interval) so that a run takes seconds, and the stalls are long (0.3 s on 50 ms
tokens) so that a machine shared with other work does not drown them; every clock is the
machine's.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_operator import Tpj, small_job

from control_plane_fixtures import clear_jobs_and_pods, wait_for
from serve_stand_in import KEY, serving
from tpfabric_bench.serve import main as bench_serve
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.link_timeline import TIMELINE_ANNOTATION, read_timeline
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.nodes import apply_fake_nodes, delete_nodes, wait_ready
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator

INTERVAL = 0.25
PERIOD = 10.0  # a burst (and a stall) every PERIOD seconds
BURST = 1.5  # how long each lasts
SICK_HCA = "mlx5_5"
SPINE = "MF0;ws-spine:MQM9700/U1"
SPINE_ID = "S-0000aa0000000100"
JOB = "serve-70b"
FABRIC = """
name: straggler
rails: 8
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: ws
  spines:
  - name: ws-su
    leaves:
    - {name: ws-leaf1, nodes: ["ws-l1-01", "ws-l1-02"]}
"""


def in_burst(now: float) -> bool:
    """Return whether Unix time ``now`` falls in a burst of the schedule."""
    return now % PERIOD < BURST


class Fabric:
    """The two nodes' agents, the burster, and the dump of the fabric they sit on."""

    def __init__(self, cluster: LocalCluster, names: list[str], root: Path) -> None:
        self.stop = threading.Event()
        self.bursting = threading.Event()
        self.sysfs: dict[str, FakeSysfs] = {}
        self.apis: list[client.ApiClient] = []
        threads = []
        for index, name in enumerate(names):
            sysfs = FakeSysfs(
                root / name, hcas=8, gpus=8, node_guid=0xB83FD20300000001 + (index << 32)
            )
            self.sysfs[name] = sysfs
            api = api_client(cluster.kubeconfig)
            self.apis.append(api)
            settings = AgentSettings(
                node=name, sys_root=sysfs.root, interval_seconds=INTERVAL,
                judge=LinkJudgeConfig(window_seconds=4.0, recover_seconds=2.0),
            )  # fmt: skip
            agent = FabricAgent(settings, NodePublisher(name, client.CoreV1Api(api)))
            threads.append(threading.Thread(target=agent.run, args=(self.stop,), daemon=True))
        threads.append(threading.Thread(target=self._burst, daemon=True))
        self.threads = threads
        for thread in threads:
            thread.start()
        self.sick = names[1]

    def _burst(self) -> None:
        """While bursting: 40 NAK sequence errors per 50 ms in each burst of the schedule."""
        while not self.stop.wait(0.05):
            if self.bursting.is_set() and in_burst(time.time()):
                self.sysfs[self.sick].add_hw(SICK_HCA, 1, "packet_seq_err", 40)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        for api in self.apis:
            api.close()

    def dump(self) -> str:
        """Return the ``ibnetdiscover`` dump of the fabric: one leaf per rail, the nodes' HCAs
        on its ports 1 and 2, two uplinks from each leaf to one spine."""
        names = list(self.sysfs)
        lines = []
        for rail in range(8):
            leaf = f"S-0000aa00000000{rail:02x}"
            lines.append(
                f'Switch\t40 "{leaf}"\t\t# "{leaf_name(rail)}" enhanced port 0 lid 1 lmc 0'
            )
            for port, name in enumerate(names, start=1):
                guid = self.sysfs[name].port_guid(f"mlx5_{rail}")
                lines.append(
                    f'[{port}]\t"H-{guid}"[1]({guid}) \t\t# "{name} mlx5_{rail}" lid 2 4xNDR'
                )
            lines += [f'[{up}]\t"{SPINE_ID}"[{2 * rail + up - 32}]\t\t# "{SPINE}" lid 3 4xNDR'
                      for up in (33, 34)]  # fmt: skip
            lines.append("")
        lines.append(f'Switch\t40 "{SPINE_ID}"\t\t# "{SPINE}" enhanced port 0 lid 3 lmc 0')
        lines += [
            f'[{2 * rail + up - 32}]\t"S-0000aa00000000{rail:02x}"[{up}]\t\t# "{leaf_name(rail)}"'
            " lid 1 4xNDR"
            for rail in range(8)
            for up in (33, 34)
        ]
        lines.append("")
        for port, name in enumerate(names, start=1):
            for rail in range(8):
                guid = self.sysfs[name].port_guid(f"mlx5_{rail}")
                lines.append(f'Ca\t1 "H-{guid}"\t\t# "{name} mlx5_{rail}"')
                lines.append(f'[1]({guid}) \t"S-0000aa00000000{rail:02x}"[{port}]\t\t# lid 2 lmc 0 '
                             f'"{leaf_name(rail)}" lid 1 4xNDR')  # fmt: skip
                lines.append("")
        return "\n".join(lines)


def leaf_name(rail: int) -> str:
    return f"MF0;ws-leaf1-rail{rail}:MQM9700/U1"


@pytest.fixture(scope="module")
def fabric(
    tpfabric_scheduling: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fabric]:
    with api_client(tpfabric_scheduling.kubeconfig) as api:
        names = apply_fake_nodes(api, parse_fabric_description(FABRIC))
        wait_ready(api, names)
        running = Fabric(tpfabric_scheduling, sorted(names), tmp_path_factory.mktemp("sysfs"))
        start_operator(tpfabric_scheduling)
        try:
            yield running
        finally:
            tpfabric_scheduling.stop_component(OPERATOR)
            running.close()
            delete_nodes(api, names)


def pairing_message(sysfs: FakeSysfs) -> str:
    """Return the termination message rdma-init writes on a DGX-class node whose GPU i pairs
    with mlx5_i (as its PCIe switches place them): the pairing summary's format."""
    pairs = [
        [i, f"0000:{0x40 + i:02x}:00.0", f"mlx5_{i}", 1, sysfs.port_guid(f"mlx5_{i}"), i]
        for i in range(8)
    ]
    return json.dumps({"v": 1, "outcome": "rdma", "rails": "annotation", "pairs": pairs})


@pytest.fixture(scope="module")
def serving_group(
    fabric: Fabric, tpfabric_scheduling: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tpj]:
    """The serving group, Running, its pods' rdma-init statuses carrying their pairing."""
    api = api_client(tpfabric_scheduling.kubeconfig)
    core = client.CoreV1Api(api)
    namespace = "straggler"
    core.create_namespace({"metadata": {"name": namespace}})
    jobs = Tpj(api, tpfabric_scheduling, namespace)
    jobs.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, small_job(JOB, 2)
    )
    jobs.wait_phase(JOB, "Running")
    for pod in jobs.pods(JOB):
        message = pairing_message(fabric.sysfs[pod.spec.node_name])
        status = {
            "initContainerStatuses": [
                {
                    "name": "rdma-init",
                    "image": "init",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "message": message,
                            "startedAt": "2026-01-01T00:00:00Z",
                            "finishedAt": "2026-01-01T00:00:01Z",
                        }
                    },
                }
            ]
        }
        core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": status})
    try:
        yield jobs
    finally:
        clear_jobs_and_pods(api, namespace)
        core.delete_namespace(namespace)
        api.close()


def stalls_in_step(now: float) -> float:
    """The endpoint's stall: 300 ms more for every token due in a burst of the schedule."""
    return 0.3 if in_burst(now) else 0.0


def bench_trace(path: Path, seconds: float) -> dict[str, Any]:
    """Run ``tpfabric bench serve`` against the stalling endpoint for about ``seconds``; return
    its JSON summary of the endpoint (the trace goes to ``path``)."""
    summary = path.with_suffix(".summary.json")
    # four streams at a time, six rounds: sends spread over the run, so the responses' Date
    # headers bound the endpoint's clock to a few milliseconds
    tokens = int(seconds / 6 / 0.06)
    with serving(tokens=tokens, token_delay=0.05, stall=stalls_in_step) as server:
        argv = ["--endpoint", server.url, "--model", "tiny-chat", "--api-key", KEY,
                "--requests", "24", "--concurrency", "4", "--max-tokens", str(tokens),
                "--json", str(summary), "--trace", str(path)]  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert bench_serve(argv) == 0
    (endpoint,) = json.loads(summary.read_text())["endpoints"]
    return dict(endpoint)


def diagnose(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tpfabric_cli", "diagnose", JOB, "-n", "straggler", *args]
    return subprocess.run(
        [*command, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def wait_healthy(api: client.ApiClient, names: list[str]) -> None:
    def healthy() -> bool:
        for name in names:
            node = client.CoreV1Api(api).read_node(name)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            if conditions.get("FabricHealthy") != "True":
                return False
        return True

    wait_for(healthy, timeout=30, interval=0.25, what="both nodes FabricHealthy=True")


def findings(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout)["findings"])


def test_stalls_with_clean_counters_are_not_the_network(
    fabric: Fabric, serving_group: Tpj, tpfabric_scheduling: LocalCluster, tmp_path: Path
) -> None:
    with api_client(tpfabric_scheduling.kubeconfig) as api:
        wait_healthy(api, list(fabric.sysfs))
    trace = tmp_path / "trace.json"
    endpoint = bench_trace(trace, 25)
    spikes = endpoint["itl_spikes"]
    assert spikes["p99_over_median"] > 5
    assert len(spikes["spikes"]) >= 2
    dump = tmp_path / "fabric.topo"
    dump.write_text(fabric.dump())
    result = diagnose(tpfabric_scheduling, "--serve-trace", str(trace), "--fabric", str(dump),
                      "--json")  # fmt: skip
    (finding,) = findings(result)
    assert finding["kind"] == "not-the-network"
    assert finding["text"].startswith("not the network: 16 ports of ranks 0-15 on ws-l1-01, ")
    assert "counted no error, retransmission or congestion burst" in finding["text"]
    words = diagnose(tpfabric_scheduling, "--serve-trace", str(trace))
    assert words.returncode == 0, words.stderr
    assert "not the network: 16 ports of ranks 0-15" in words.stdout


def test_the_straggler_is_traced_to_its_port_its_switch_port_and_its_rank(
    fabric: Fabric, serving_group: Tpj, tpfabric_scheduling: LocalCluster, tmp_path: Path
) -> None:
    fabric.bursting.set()
    try:
        trace = tmp_path / "trace.json"
        endpoint = bench_trace(trace, 35)
    finally:
        fabric.bursting.clear()
    spikes = endpoint["itl_spikes"]
    assert spikes["p99_over_median"] > 5
    # each spike runs from the last token before a burst to the last one stalled in it
    in_step = [s for s in spikes["spikes"] if in_burst(s["start"] + 0.5)]
    assert len(in_step) >= 3
    assert len(in_step) >= 0.75 * len(spikes["spikes"])  # a loaded machine adds a stray one
    with api_client(tpfabric_scheduling.kubeconfig) as api:
        node = client.CoreV1Api(api).read_node(fabric.sick)
        timeline, problem = read_timeline(node.metadata.annotations[TIMELINE_ANNOTATION])
    assert problem == ""
    assert timeline is not None
    sick = timeline.port(hca=SICK_HCA)
    assert sick is not None
    assert len(sick.bursts) >= 3
    dump = tmp_path / "fabric.topo"
    dump.write_text(fabric.dump())
    result = diagnose(tpfabric_scheduling, "--serve-trace", str(trace), "--fabric", str(dump),
                      "--max-skew", "0.5", "--json")  # fmt: skip
    found = findings(result)
    (link,) = [f for f in found if f["kind"] == "link"]
    guid = fabric.sysfs[fabric.sick].port_guid(SICK_HCA)
    assert link["ranks"] == [13]  # worker 1, GPU 5
    assert link["text"].startswith(
        f"rank 13 = worker 1 GPU 5 on {fabric.sick} → mlx5_5 port 1 (0x{guid}) → leaf "
        "S-0000aa0000000005 port 2 (ws-leaf1-rail5) → 2 uplinks (leaf ports 33-34): "
        "packet_seq_err "
    )
    assert "matching the inter-token latency spikes" in link["text"]
    document = json.loads(result.stdout)
    rank = next(r for r in document["ranks"] if r["rank"] == 13)
    assert (rank["node"], rank["hca"], rank["portGuid"]) == (fabric.sick, SICK_HCA, guid)
    assert rank["leaf"] == {"switch": "S-0000aa0000000005", "name": "ws-leaf1-rail5", "port": 2}
    words = diagnose(tpfabric_scheduling, "--serve-trace", str(trace), "--fabric", str(dump),
                     "--max-skew", "0.5")  # fmt: skip
    assert words.returncode == 0, words.stderr
    assert f"rank 13 = worker 1 GPU 5 on {fabric.sick}" in words.stdout
    assert "port 2 (ws-leaf1-rail5)" in words.stdout
