"""A user with rights in one namespace only, given by an admin with Kubernetes' own `edit` role:
the chart's aggregated ClusterRoles let them run TensorParallelJobs and read Gang records, and
`tpfabric explain` and `tpfabric queue` work for them, node details hidden.

Real API server and kube-controller-manager (its ClusterRole aggregation controller folds the
chart's roles into `edit` and `view`), the real placer and tpfabric's kube-scheduler on the 64
kwok nodes of the small fabric. The user is a ServiceAccount with a TokenRequest token and one
RoleBinding, nothing cluster-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import (
    Jobs,
    clear_jobs_and_pods,
    render_chart,
    run_kubectl,
    wait_for,
    worker_pod,
)
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.tpfabric import service_account_kubeconfig

pytestmark = pytest.mark.integration

HIGH = "tpfabric-test-high"


def aggregated_roles(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Return the chart's ClusterRoles that aggregate into Kubernetes' user-facing roles."""
    return [
        d
        for d in render_chart(tmp_path_factory)
        if d["kind"] == "ClusterRole"
        and any(
            k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in d["metadata"]["labels"]
        )
    ]


@pytest.fixture(scope="module")
def user_roles(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[dict[str, Any]]]:
    """Apply the chart's aggregated roles; wait until `edit` and `view` carry their rules."""
    roles = aggregated_roles(tmp_path_factory)
    applied = run_kubectl(local_cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(roles))
    assert applied.returncode == 0, applied.stderr
    with api_client(local_cluster.kubeconfig) as api:
        rbac = client.RbacAuthorizationV1Api(api)

        def folded(role: str) -> bool:
            rules = rbac.read_cluster_role(role).rules or []
            return any("tensorparalleljobs" in (r.resources or []) for r in rules)

        for role in ("admin", "edit", "view"):
            wait_for(
                lambda role=role: folded(role), what=f"the chart's rules aggregated into {role}"
            )
    yield roles
    run_kubectl(local_cluster, "delete", "-f", "-", stdin=yaml.safe_dump_all(roles))


def user(
    cluster: LocalCluster, api: client.ApiClient, namespace: str, role: str, folder: Path
) -> Path:
    """Return the kubeconfig of a ServiceAccount given ``role`` in ``namespace`` only."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": f"user-{role}"}})
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"user-{role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": f"user-{role}", "namespace": namespace}
            ],
        },
    )
    return service_account_kubeconfig(
        cluster, namespace, f"user-{role}", folder / f"{role}.kubeconfig"
    )


def tpfabric(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpfabric_cli", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def jobs(api: client.ApiClient, namespace: str, scheduling: LocalCluster) -> Iterator[Jobs]:
    yield Jobs(api, namespace)
    clear_jobs_and_pods(api, namespace)


def test_the_charts_roles_fold_into_kubernetes_own_and_never_write_gangs(
    user_roles: list[dict[str, Any]],
) -> None:
    by_name = {r["metadata"]["name"]: r for r in user_roles}
    assert set(by_name) == {"tpfabric-edit", "tpfabric-view"}
    assert (
        by_name["tpfabric-edit"]["metadata"]["labels"][
            "rbac.authorization.k8s.io/aggregate-to-edit"
        ]
        == "true"
    )
    for role in user_roles:
        for rule in role["rules"]:
            if "gangs" in rule["resources"]:
                assert set(rule["verbs"]) == {"get", "list", "watch"}


def test_an_editor_of_one_namespace_runs_a_job_and_explains_it_without_node_rights(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    namespace: str,
    jobs: Jobs,
    user_roles: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    editor = user(local_cluster, api, namespace, "edit", tmp_path)
    with api_client(editor) as as_user:
        custom = client.CustomObjectsApi(as_user)
        job = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TensorParallelJob",
            "metadata": {"name": "mine"},
            "spec": {
                "workers": 2,
                "tensorParallelSize": 8,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
        assert (
            custom.list_namespaced_custom_object(GROUP, VERSION, namespace, GANG_PLURAL)["items"]
            == []
        )
        with pytest.raises(ApiException) as refused:  # Gang records are the operator's
            custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                GANG_PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Gang",
                    "metadata": {"name": "x"},
                    "spec": {"owner": {"kind": "PodGroup", "name": "x"}, "workers": 1},
                },
            )
        assert refused.value.status == 403
        with pytest.raises(ApiException) as nodes:
            client.CoreV1Api(as_user).list_node()
        assert nodes.value.status == 403
    jobs.make_workers("mine", range(2))  # as the operator would (not running in this module)
    pods = jobs.wait_running("mine")
    placement = jobs.placement("mine")

    shown = tpfabric(editor, "explain", "mine", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert f"placement Planned: {placement['message']}" in shown.stdout
    assert "node details hidden: no permission to read nodes" in shown.stdout
    for rank, pod in enumerate(pods):
        row = next(line for line in shown.stdout.splitlines() if pod.metadata.name in line)
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        assert cells[:4] == [
            str(rank),
            pod.metadata.name,
            placement["nodes"][rank],
            placement["nodes"][rank],
        ]
    as_json = tpfabric(editor, "explain", "mine", "-n", namespace, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert (
        json.loads(as_json.stdout)["nodeDetails"]
        == "node details hidden: no permission to read nodes"
    )

    # the admin, who may read nodes, is shown them
    admin = tpfabric(local_cluster.kubeconfig, "explain", "mine", "-n", namespace)
    assert admin.returncode == 0, admin.stderr
    assert "node details hidden" not in admin.stdout
    assert json.loads(
        tpfabric(local_cluster.kubeconfig, "explain", "mine", "-n", namespace, "--json").stdout
    )["ranks"][0]["leaf"]


@pytest.fixture
def high_priority(api: client.ApiClient) -> Iterator[str]:
    scheduling = client.SchedulingV1Api(api)
    scheduling.create_priority_class({"metadata": {"name": HIGH}, "value": 1000})
    yield HIGH
    scheduling.delete_priority_class(HIGH)


def test_a_viewer_sees_the_waiting_gangs_in_the_placers_order_with_what_each_waits_for(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    namespace: str,
    jobs: Jobs,
    user_roles: list[dict[str, Any]],
    high_priority: str,
    tmp_path: Path,
) -> None:
    # three jobs that no leaf of eight nodes can hold (required: one leaf), the second of higher
    # priority: the placer considers it first, then the others by arrival
    for name, priority in (("first", None), ("urgent", high_priority), ("last", None)):
        jobs.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TensorParallelJob",
                "metadata": {"name": name},
                "spec": {
                    "workers": 9,
                    "tensorParallelSize": 8,
                    "topology": {"mode": "required", "level": "leaf"},
                    "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
                },
            },
        )
        extra = {"priorityClassName": priority} if priority else {}
        for index in range(9):
            jobs.core.create_namespaced_pod(namespace, worker_pod(name, index, **extra))
    for name in ("first", "urgent", "last"):
        wait_for(
            lambda name=name: jobs.placement(name).get("state") == "Waiting", what=f"{name} waiting"
        )
    viewer = user(local_cluster, api, namespace, "view", tmp_path)

    listed = tpfabric(viewer, "queue", "-n", namespace, "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [(e["position"], e["name"], e["priority"]) for e in entries] == [
        (1, "urgent", 1000), (2, "first", 0), (3, "last", 0)
    ]  # fmt: skip
    for entry in entries:
        assert entry["state"] == "Waiting"
        assert entry["waitsFor"] == jobs.placement(entry["name"])["message"]
        assert entry["gpus"] == 72
    table = tpfabric(viewer, "queue", "-n", namespace)
    assert table.returncode == 0, table.stderr
    assert [line.split()[2] for line in table.stdout.splitlines()[1:]] == [
        "urgent",
        "first",
        "last",
    ]
    everywhere = tpfabric(viewer, "queue", "-A")
    assert everywhere.returncode == 1
    assert "403" in everywhere.stderr
