"""What an operator of tpfabric watches, on the local control plane with every component a real
process: the extender/placer, the operator, the gang webhook and a fabric agent reading a fake
sysfs tree of a kwok node.

- each component's /metrics, as scraped, passes Prometheus's own lint (`promtool check metrics`)
  and carries its build info, process metrics and stabilities;
- a fabric agent that stops makes its node's health unknown: the placer marks the node's
  FabricHealthy condition Unknown (AgentSilent), `tpfabric explain` says so, the placer's
  metrics say so, and a new gang that avoids degraded links keeps off the node; the agent
  started again makes the node healthy again and the gang is planned;
- every line every tpfabric component wrote in this session is one JSON object.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_explain import explain
from test_operator import Tpj, small_job

from control_plane_fixtures import configured_gang_webhook, wait_for
from tpfabric_core.fabric.agent_heartbeat import AGENT_SILENT_REASON, lease_name
from tpfabric_core.fabric.link_publish import CONDITION_TYPE
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_localcluster.cluster import LocalCluster, api_client, free_ports
from tpfabric_localcluster.gang_webhook import GANG_WEBHOOK, GangWebhook
from tpfabric_localcluster.nodes import apply_fake_nodes, delete_nodes, wait_ready
from tpfabric_localcluster.toolchain import find_toolchain
from tpfabric_localcluster.tpfabric import EXTENDER, OPERATOR, metrics_url, start_operator

FABRIC = """
name: observed
rails: 2
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: ob
  spines:
  - name: ob-su
    leaves:
    - {name: ob-leaf1, nodes: ["ob-l1-[01-02]"]}
"""
AGENT = "tpfabric-fabric-agent-observed"
WATCHED = "ob-l1-01"  # the node whose agent runs (and stops)
HEARTBEAT_NAMESPACE = "kube-system"  # the local placer's --fabric-agent-namespace
GRACE_SECONDS = 4
#: the modules of tpfabric's own components (the processes whose every line must be JSON)
COMPONENT_MODULES = (
    "tpfabric_scheduler",
    "tpfabric_operator",
    "tpfabric_operator.webhook",
    "tpfabric_fabric_agent",
)


@dataclass
class Observed:
    cluster: LocalCluster
    api: client.ApiClient
    webhook: GangWebhook
    agent_argv: list[str]
    nodes: list[str]

    def scrape(self, component: str) -> str:
        state = self.cluster.state()
        assert state is not None
        url = {
            "scheduler": metrics_url(state.components[EXTENDER].argv),
            "operator": metrics_url(state.components[OPERATOR].argv),
            "gang-webhook": self.webhook.metrics_url,
            "fabric-agent": metrics_url(self.agent_argv),
        }[component]
        with urllib.request.urlopen(url, timeout=10) as answer:
            return str(answer.read().decode())

    def start_agent(self) -> None:
        self.cluster.add_component(
            AGENT, self.agent_argv, metrics_url(self.agent_argv, "/readyz"), timeout=60
        )

    def condition(self) -> tuple[str, str, str]:
        node = client.CoreV1Api(self.api).read_node(WATCHED)
        found = next((c for c in node.status.conditions or [] if c.type == CONDITION_TYPE), None)
        return (found.status, found.reason, found.message) if found else ("", "", "")


@pytest.fixture(scope="module")
def observed(
    tpfabric_scheduling: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    cluster = tpfabric_scheduling
    with api_client(cluster.kubeconfig) as api:
        nodes = apply_fake_nodes(api, parse_fabric_description(FABRIC))
        wait_ready(api, nodes)
        sysfs = tmp_path_factory.mktemp("observed-sysfs")
        FakeSysfs(sysfs, hcas=2, ports=1, gpus=2)
        (metrics_port,) = free_ports(1)
        agent_argv = [
            sys.executable,
            "-m",
            "tpfabric_fabric_agent",
            f"--node={WATCHED}",
            f"--sys-root={sysfs}",
            "--interval=1",
            f"--heartbeat-namespace={HEARTBEAT_NAMESPACE}",
            f"--heartbeat-grace-seconds={GRACE_SECONDS}",
            f"--kubeconfig={cluster.kubeconfig}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            "--metrics-auth=none",
        ]
        (operator_metrics,) = free_ports(1)
        start_operator(
            cluster,
            extra_args=(
                "--metrics-address=127.0.0.1",
                f"--metrics-port={operator_metrics}",
                "--metrics-auth=none",
            ),
        )
        try:
            with configured_gang_webhook(cluster, api) as webhook:
                world = Observed(cluster, api, webhook, agent_argv, nodes)
                world.start_agent()
                try:
                    yield world
                finally:
                    cluster.stop_component(AGENT)
        finally:
            cluster.stop_component(OPERATOR)
            delete_nodes(api, nodes)
            coordination = client.CoordinationV1Api(api)
            try:
                coordination.delete_namespaced_lease(lease_name(WATCHED), HEARTBEAT_NAMESPACE)
            except client.ApiException as err:
                if err.status != 404:
                    raise


@pytest.fixture
def tpj(observed: Observed, namespace: str) -> Iterator[Tpj]:
    yield Tpj(observed.api, observed.cluster, namespace)
    custom = client.CustomObjectsApi(observed.api)
    for job in custom.list_namespaced_custom_object(
        "tpfabric.io", "v1alpha1", namespace, "tensorparalleljobs"
    )["items"]:
        custom.delete_namespaced_custom_object(
            "tpfabric.io", "v1alpha1", namespace, "tensorparalleljobs", job["metadata"]["name"]
        )
    core = client.CoreV1Api(observed.api)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, what="the pods to go")


@pytest.fixture(scope="module")
def promtool() -> Path:
    toolchain = find_toolchain(("promtool",))
    if toolchain.missing:
        pytest.fail(
            "promtool is missing: run `tpfabric toolchain build --promtool` (`make "
            "test-integration` does it)",
            pytrace=False,
        )
    return toolchain.path("promtool")


@pytest.mark.parametrize("component", ["scheduler", "operator", "gang-webhook", "fabric-agent"])
def test_each_components_scrape_passes_promtools_lint(
    observed: Observed, promtool: Path, component: str
) -> None:
    scrape = observed.scrape(component)
    lint = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=scrape,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (lint.returncode, lint.stdout + lint.stderr) == (0, "")
    assert f'tpfabric_build_info{{component="{component}"' in scrape
    assert "# TYPE process_resident_memory_bytes gauge" in scrape
    helps = [line for line in scrape.splitlines() if line.startswith("# HELP tpfabric_")]
    assert helps
    assert all(" [ALPHA] " in line for line in helps), helps


def test_the_agent_renews_its_heartbeat_and_reports_its_reads(observed: Observed) -> None:
    coordination = client.CoordinationV1Api(observed.api)
    first = coordination.read_namespaced_lease(lease_name(WATCHED), HEARTBEAT_NAMESPACE)
    assert first.spec.holder_identity == WATCHED
    assert first.spec.lease_duration_seconds == GRACE_SECONDS
    assert [r.kind for r in first.metadata.owner_references] == ["Node"]
    wait_for(
        lambda: (
            coordination.read_namespaced_lease(
                lease_name(WATCHED), HEARTBEAT_NAMESPACE
            ).spec.renew_time
            != first.spec.renew_time
        ),
        10,
        what="the heartbeat renewed",
    )
    assert observed.condition()[0] == "True"
    scrape = observed.scrape("fabric-agent")
    assert f'tpfabric_fabric_agent_last_read_timestamp_seconds{{node="{WATCHED}"}}' in scrape
    assert 'tpfabric_fabric_agent_api_writes_total{target="lease"}' in scrape


def _silent_in_scrape(observed: Observed) -> bool:
    scrape = observed.scrape("scheduler")
    return (
        f'tpfabric_placer_fabric_agent_silent_seconds{{node="{WATCHED}"}}' in scrape
        and 'tpfabric_placer_nodes{fabric_health="unknown"} 1.0' in scrape
    )


def test_a_stopped_agent_makes_its_node_unknown_and_a_restarted_one_known_again(
    observed: Observed, tpj: Tpj, namespace: str
) -> None:
    wait_for(lambda: observed.condition()[0] == "True", 30, what="the node FabricHealthy=True")
    running = tpj.apply(small_job("running", workers=2))
    tpj.wait_phase(running, "Running", timeout=120)
    assert sorted(p.spec.node_name for p in tpj.pods(running)) == sorted(observed.nodes)

    observed.cluster.stop_component(AGENT)
    _, reason, message = wait_for(
        lambda: (c := observed.condition())[0] == "Unknown" and c,
        GRACE_SECONDS + 30,
        interval=0.5,
        what=f"{WATCHED} FabricHealthy=Unknown",
    )
    assert reason == AGENT_SILENT_REASON
    assert f"Lease {HEARTBEAT_NAMESPACE}/{lease_name(WATCHED)}" in message
    wait_for(lambda: _silent_in_scrape(observed), 20, what="the placer's metrics to say so")
    told = explain(observed.cluster, running, "-n", namespace, "--json")
    assert told.returncode == 0, told.stderr
    health = {row["boundNode"]: row["health"] for row in json.loads(told.stdout)["ranks"]}
    assert health[WATCHED].startswith("unknown (AgentSilent: the fabric agent of node ")
    assert tpj.status(running)["phase"] == "Running", "a running gang is left alone"

    custom = client.CustomObjectsApi(observed.api)
    custom.delete_namespaced_custom_object(
        "tpfabric.io", "v1alpha1", namespace, "tensorparalleljobs", running
    )
    core = client.CoreV1Api(observed.api)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, what="its pods to go")
    waiting = tpj.apply(small_job("waiting", workers=2))  # avoidDegraded: avoid (the default)
    placement = wait_for(
        lambda: (p := tpj.status(waiting).get("placement") or {}).get("state") == "Waiting" and p,
        60,
        what="the new gang to wait",
    )
    assert "degraded" in json.dumps(placement), placement

    observed.start_agent()
    wait_for(lambda: observed.condition()[0] == "True", 30, what="the agent's own condition back")
    tpj.wait_phase(waiting, "Running", timeout=120)
    assert sorted(p.spec.node_name for p in tpj.pods(waiting)) == sorted(observed.nodes)
    assert not _silent_in_scrape(observed)


def _component_logs(cluster: LocalCluster) -> dict[str, Path]:
    state = cluster.state()
    assert state is not None
    found = {}
    for name, process in state.components.items():
        argv = process.argv
        modules = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-m"}
        if modules & set(COMPONENT_MODULES):
            found[name] = Path(process.log)
    return found


def test_every_line_every_tpfabric_component_wrote_is_a_json_object(observed: Observed) -> None:
    logs = _component_logs(observed.cluster)
    assert {EXTENDER, OPERATOR, GANG_WEBHOOK, AGENT} <= set(logs)
    broken: list[str] = []
    lines: list[dict[str, Any]] = []
    for name, path in sorted(logs.items()):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                broken.append(f"{path.name}:{number}: {line[:200]}")
                continue
            if not isinstance(parsed, dict) or not {"time", "level", "logger", "message"} <= set(
                parsed
            ):
                broken.append(f"{path.name}:{number}: not a log object: {line[:200]}")
                continue
            lines.append({**parsed, "_log": name})
    assert broken == []
    components = {line["component"] for line in lines}
    assert components >= {"scheduler", "operator", "gang-webhook", "fabric-agent"}
    about_nodes = [
        line for line in lines if line.get("kind") == "Node" and line.get("name") == WATCHED
    ]
    assert about_nodes, "the placer's and the agent's lines about the node name it"
