"""Version skew: the chart on the oldest Kubernetes it supports (Chart.yaml ``kubeVersion``).

A second local control plane -- kube-apiserver, kube-controller-manager and kube-scheduler of
e2e/toolchain/kubernetes-minimum (built into the cache on first use) -- takes the whole chart:
the CRD with its validation rules, RBAC, and Deployments whose pods pass the ``restricted`` Pod
Security profile, and the example jobs validate against the CRD. Every other test runs the
pinned (newest) version.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from control_plane_fixtures import run_kubectl, wait_for
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.toolchain import find_toolchain

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tpfabric"
NAMESPACE = "tpfabric-system"


def _chart_minimum() -> tuple[int, int]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)\.\d+(-0)?", chart["kubeVersion"])
    assert found, f"Chart.yaml kubeVersion {chart['kubeVersion']!r}: expected '>=X.Y.Z-0'"
    return int(found.group(1)), int(found.group(2))


@pytest.fixture(scope="module")
def oldest(oldest_cluster: LocalCluster) -> LocalCluster:
    """Return the local cluster at the oldest supported Kubernetes (no nodes)."""
    return oldest_cluster


def test_the_oldest_control_plane_is_the_charts_minimum(oldest: LocalCluster) -> None:
    with api_client(oldest.kubeconfig) as api:
        info = client.VersionApi(api).get_code()
    assert (int(info.major), int(info.minor.rstrip("+"))) == _chart_minimum(), info.git_version


@pytest.mark.timeout(600)
def test_the_chart_installs_and_its_pods_are_admitted_on_the_oldest_kubernetes(
    oldest: LocalCluster, tmp_path: Path
) -> None:
    helm = find_toolchain(("helm",)).path("helm")
    env = {f"HELM_{k}_HOME": str(tmp_path / k) for k in ("CACHE", "CONFIG", "DATA")}
    done = run_kubectl(oldest, "create", "namespace", NAMESPACE)
    assert done.returncode == 0, done.stderr
    done = run_kubectl(
        oldest, "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
    )
    assert done.returncode == 0, done.stderr
    installed = subprocess.run(
        [str(helm), "install", "tpfabric", str(CHART), "-n", NAMESPACE,
         f"--kubeconfig={oldest.kubeconfig}"],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, **env},
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr

    # kube-controller-manager creates the pods: Pod Security admission of that version let them in
    with api_client(oldest.kubeconfig) as api:
        core = client.CoreV1Api(api)

        def pods() -> list[str]:
            return sorted(p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items)

        created = wait_for(
            lambda: len(pods()) >= 3 and pods(),  # operator + 2 scheduler replicas
            timeout=60,
            what="the chart's pods created (admitted under 'restricted')",
        )
        events = core.list_namespaced_event(NAMESPACE).items
        refused = [e.message for e in events if e.reason == "FailedCreate"]
        assert not refused, refused
    assert any("operator" in name for name in created), created

    for job in (
        REPO / "e2e" / "kind" / "tpj.yaml",
        *sorted((REPO / "examples" / "jobs").glob("*.yaml")),
    ):
        done = run_kubectl(oldest, "apply", "--dry-run=server", "-n", "default", "-f", str(job))
        assert done.returncode == 0, f"{job.name}: {done.stderr}"
