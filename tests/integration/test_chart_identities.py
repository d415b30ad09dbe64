"""The operator, the placer and the fabric agent as the chart runs them: their own
ServiceAccounts, exactly the chart's RBAC and admission policies, a uid without a passwd entry.

Every other integration test runs the components as an admin, as the local user: a permission the
chart forgets, a policy that refuses a write the component needs, or a library that asks the
passwd database who it is, passes there and fails in every real install (two happened: kopf's
getpass, the operator's node listing).

Their metrics too are served as in the chart: HTTPS, and only to a caller the real API server
authenticates (TokenReview) and authorizes (SubjectAccessReview of ``get /metrics``).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import CHART_NAMESPACE, FabricFactory, agent_pod, wait_for
from tpfabric_core import labels
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.fabric.link_publish import CONDITION_TYPE
from tpfabric_core.fabric.link_timeline import TIMELINE_ANNOTATION, read_timeline
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_localcluster.cluster import LocalCluster, api_client, free_ports
from tpfabric_localcluster.gang_webhook import start_gang_webhook
from tpfabric_localcluster.processes import log_tail
from tpfabric_localcluster.tpfabric import (
    EXTENDER,
    RunAs,
    metrics_url,
    service_account_kubeconfig,
    service_account_token,
    start_extender,
    start_operator,
)

OPERATOR_AS_CHART = "tpfabric-operator-chart-rbac"


@pytest.fixture(scope="module")
def as_chart(
    tpfabric_scheduling: LocalCluster, chart_identities: dict[str, RunAs]
) -> Iterator[LocalCluster]:
    """Run the placer (same port: kube-scheduler calls it) and the operator as the chart would."""
    cluster = tpfabric_scheduling
    state = cluster.state()
    assert state is not None
    port = state.components[EXTENDER].port()
    cluster.stop_component(EXTENDER)
    try:
        start_extender(
            cluster,
            port,
            extra_args=[f"--lease-namespace={CHART_NAMESPACE}", "--lease-name=tpfabric-placer"],
            run_as=chart_identities["scheduler"],
            metrics_auth="kubernetes",  # as in the chart: the API server reviews every scrape
        )
        (metrics_port,) = free_ports(1)
        start_operator(
            cluster,
            name=OPERATOR_AS_CHART,
            run_as=chart_identities["operator"],
            # the chart's lease, which only the chart's Role lets the operator take
            extra_args=[
                f"--lease-namespace={CHART_NAMESPACE}",
                "--lease-name=tpfabric-operator",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={metrics_port}",
            ],
        )
        yield cluster
    finally:
        cluster.stop_component(OPERATOR_AS_CHART)
        cluster.stop_component(EXTENDER)
        start_extender(cluster, port)  # back to the admin placer of the other tests


def test_the_components_run_as_a_uid_without_a_passwd_entry(
    as_chart: LocalCluster, chart_identities: dict[str, RunAs]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can run the components as another uid")
    state = as_chart.state()
    assert state is not None
    for name in (EXTENDER, OPERATOR_AS_CHART):
        process = psutil.Process(state.components[name].pid)
        leaf = ([process, *process.children(recursive=True)])[-1]
        assert leaf.uids().real == chart_identities["operator"].uid, leaf.cmdline()


def test_a_job_is_created_planned_and_placed_with_only_the_charts_permissions(
    as_chart: LocalCluster,
    api: client.ApiClient,
    namespace: str,
    fabric_nodes: dict[str, dict[str, str]],
) -> None:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": "chart-rbac"},
        "spec": {
            "workers": 2,
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
    try:

        def status() -> dict[str, Any]:
            got = custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "chart-rbac"
            )
            return dict(got.get("status") or {})

        deadline = time.monotonic() + 90
        while status().get("phase") != "Running" and time.monotonic() < deadline:
            time.sleep(0.5)
        final = status()
        state = as_chart.state()
        assert state is not None
        log = log_tail(Path(state.components[OPERATOR_AS_CHART].log), 8)
        assert final.get("phase") == "Running", (
            f"job not Running after 90 s under the chart's ServiceAccounts; status: {final}; "
            f"operator log:\n{log}"
        )
        pods = core.list_namespaced_pod(namespace).items
        assert sorted(p.spec.node_name for p in pods) == sorted(final["placement"]["nodes"])
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chart-rbac")
        wait_for(
            lambda: not core.list_namespaced_pod(namespace).items,
            timeout=60,
            what="the job's pods to be garbage-collected",
        )


AGENT_ACCOUNT = "tpfabric-fabric-agent"
AGENT_NODE_FABRIC = """
name: agent-rbac
rails: 2
railOptimized: true
node: {gpus: 8, rdma: 2, cpu: "64", memory: 1Ti, pods: 110}
blocks:
- name: ar
  spines:
  - name: ar-su
    leaves:
    - {name: ar-leaf, nodes: ["agent-rbac-01", "agent-rbac-02"]}
"""


def test_the_fabric_agent_publishes_its_node_with_only_the_charts_permissions(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    chart_identities: dict[str, RunAs],
    fake_nodes: FabricFactory,
    tmp_path: Path,
) -> None:
    node, other = fake_nodes(AGENT_NODE_FABRIC)
    sysfs = FakeSysfs(tmp_path / "sys", hcas=2, gpus=1)
    chart = chart_identities["fabric-agent"]
    # the token of an agent pod on `node`, as the kubelet projects it: it names the node, by
    # which the chart's admission policy holds the agent to it
    agent_pod(local_cluster, CHART_NAMESPACE, AGENT_ACCOUNT, node, f"fabric-agent-{node}")
    identity = RunAs(
        service_account_kubeconfig(
            local_cluster,
            CHART_NAMESPACE,
            AGENT_ACCOUNT,
            tmp_path / "identity" / "agent.kubeconfig",
            pod=f"fabric-agent-{node}",
        ),
        chart.uid,
    )
    (metrics_port,) = free_ports(1)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_fabric_agent",
        f"--node={node}",
        f"--sys-root={sysfs.root}",
        "--interval=0.5",
        "--window-seconds=2",
        "--recover-seconds=1",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics_port}",
        f"--kubeconfig={identity.kubeconfig}",
    ]
    core = client.CoreV1Api(api)

    def health(name: str) -> tuple[str | None, str | None]:
        got = core.read_node(name)
        condition = next((c for c in got.status.conditions or [] if c.type == CONDITION_TYPE), None)
        return (got.metadata.labels or {}).get(labels.HEALTH), condition and condition.status

    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(identity.wrap(argv), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: health(node) == ("ok", "True"), timeout=30, what="FabricHealthy True")
        sysfs.set_up("mlx5_1", 1, up=False)
        wait_for(
            lambda: health(node) == ("degraded", "False"), timeout=30, what="FabricHealthy False"
        )
        assert agent.poll() is None, (tmp_path / "agent.log").read_text()
        if identity.uid is not None:
            leaf = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(True)][-1]
            assert leaf.uids().real == identity.uid, leaf.cmdline()
        assert health(other) == ("ok", None), "the agent touches no other node"
        assert "403" not in (tmp_path / "agent.log").read_text()
        # its link timeline, written under the same policy, reads back
        timeline, problem = read_timeline(
            core.read_node(node).metadata.annotations.get(TIMELINE_ANNOTATION)
        )
        assert problem == ""
        assert timeline is not None
        assert timeline.node == node
        url = f"https://127.0.0.1:{metrics_port}/metrics"
        status, body = scrape(url, reader_token(local_cluster))
        assert status == 200
        assert 'node_infiniband_packet_sequence_errors_total{device="mlx5_0",port="1"} 0.0' in body
    finally:
        agent.terminate()
        agent.wait(timeout=10)
        log.close()


# -- metrics, as the chart serves them ----------------------------------------------------------

METRICS_READER = "tpfabric-metrics-reader"  # the chart's ClusterRole of get /metrics


def scrape(url: str, token: str | None = None) -> tuple[int, str]:
    """Return the status and body of a GET of ``url`` (its self-signed certificate unverified,
    as Prometheus's insecureSkipVerify)."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def a_service_account(cluster: LocalCluster, name: str) -> str:
    """Return a token of a new ServiceAccount ``name`` of the chart's namespace (no roles)."""
    with api_client(cluster.kubeconfig) as api:
        core = client.CoreV1Api(api)
        if not core.list_namespaced_service_account(
            CHART_NAMESPACE, field_selector=f"metadata.name={name}"
        ).items:
            core.create_namespaced_service_account(CHART_NAMESPACE, {"metadata": {"name": name}})
    return service_account_token(cluster, CHART_NAMESPACE, name, seconds=3600)


def reader_token(cluster: LocalCluster) -> str:
    """Return a token of an account bound to the chart's metrics reader (a Prometheus)."""
    token = a_service_account(cluster, "prometheus")
    binding = {
        "metadata": {"name": "test-prometheus-reads-tpfabric"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": METRICS_READER,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "prometheus", "namespace": CHART_NAMESPACE}
        ],
    }
    with api_client(cluster.kubeconfig) as api:
        rbac = client.RbacAuthorizationV1Api(api)
        if not rbac.list_cluster_role_binding(
            field_selector="metadata.name=test-prometheus-reads-tpfabric"
        ).items:
            rbac.create_cluster_role_binding(binding)
    return token


def test_metrics_are_read_only_by_a_caller_the_api_server_authorizes(
    as_chart: LocalCluster,
) -> None:
    """The extender and the operator under the chart's accounts review every scrape with the
    real API server (the chart's metrics-auth role lets them): no token 401, a token of an
    account without the metrics reader role 403, Prometheus's 200; health stays open."""
    state = as_chart.state()
    assert state is not None
    stranger = a_service_account(as_chart, "not-prometheus")
    reader = reader_token(as_chart)
    for name in (EXTENDER, OPERATOR_AS_CHART):
        url = metrics_url(state.components[name].argv)
        assert url.startswith("https://"), url
        assert scrape(url)[0] == 401, name
        assert scrape(url, "not-a-token")[0] == 401, name
        status, body = scrape(url, stranger)
        assert status == 403, (name, body)
        assert "may not get /metrics" in body
        # RBAC takes a moment to reach the authorizer's cache
        wait_for(lambda url=url: scrape(url, reader)[0] == 200, timeout=20, what=f"{name} 200")
        assert "process_cpu_seconds_total" in scrape(url, reader)[1]  # the default registry too
    extender = scrape(metrics_url(state.components[EXTENDER].argv), reader)[1]
    assert "tpfabric_placer_leader" in extender
    assert scrape(metrics_url(state.components[EXTENDER].argv, "/readyz"))[0] == 200


def test_the_gang_webhook_reads_the_nodes_with_the_charts_rbac(
    tpfabric_scheduling: LocalCluster, chart_identities: dict[str, RunAs]
) -> None:
    """With ``rdmaCount: auto`` the webhook lists and watches nodes before it serves: under its
    own ServiceAccount, with exactly the chart's RBAC, it comes up (and may not write nodes);
    it may list and watch JobSets, and not read one by one nor write them."""
    identity = chart_identities["gang-webhook"]
    hook = start_gang_webhook(tpfabric_scheduling, extra=(f"--kubeconfig={identity.kubeconfig}",))
    try:
        assert hook.healthy()
        with api_client(identity.kubeconfig) as api:
            core = client.CoreV1Api(api)
            core.list_node(limit=1)
            with pytest.raises(ApiException) as refused:
                core.patch_node("no-such-node", {"metadata": {"labels": {"x": "y"}}})
            assert refused.value.status == 403
            # the JobSets' view that ranks a JobSet's pods at admission: read, never written
            access = client.AuthorizationV1Api(api)
            for verb, allowed in (
                ("list", True),
                ("watch", True),
                ("get", False),
                ("patch", False),
            ):
                review = {
                    "spec": {
                        "resourceAttributes": {
                            "group": "jobset.x-k8s.io",
                            "resource": "jobsets",
                            "verb": verb,
                        }
                    }
                }
                answer = access.create_self_subject_access_review(review)
                assert answer.status.allowed is allowed, f"{verb} jobsets"
    finally:
        hook.stop()
