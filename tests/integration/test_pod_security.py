"""Worker pods are admitted wherever their template is: tpfabric's wiring adds no privilege.

The real API server enforces Pod Security admission by namespace label. A job namespace at
``baseline`` (the documented posture) runs the example TensorParallelJob and a pod group the
gang webhook wires, end to end: created, planned, released and bound. With a template that meets
``restricted``, the wired worker pods pass ``restricted`` too: the ``rdma-init`` container
tpfabric adds runs as a non-root user with no capability.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from control_plane_fixtures import (
    FabricFactory,
    clear_jobs_and_pods,
    gang_pod,
    operator_and_gang_webhook,
    opt_in,
    wait_for,
)
from tpfabric_core.api import GROUP, JOB_LABEL, PLURAL, VERSION
from tpfabric_core.gangs import GANG_LABEL, GANG_NAME_LABEL, GANG_SIZE_LABEL
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.gang_webhook import GangWebhook

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "llama-70b-tp8x4.yaml"
FABRIC = """
name: podsec
rails: 8
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: psa
  spines:
  - name: psa-su
    leaves:
    - {name: psa-leaf1, nodes: ["psa-l1-[01-04]"]}
    - {name: psa-leaf2, nodes: ["psa-l2-[01-04]"]}
"""
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.fixture(scope="module")
def components(tpfabric_scheduling: LocalCluster, api: client.ApiClient) -> Iterator[GangWebhook]:
    """The operator and the gang webhook (configured), beside the placer and the scheduler."""
    with operator_and_gang_webhook(tpfabric_scheduling, api) as hook:
        yield hook


def enforcing(level: str) -> Any:
    """A fixture: the test's namespace enforcing Pod Security ``level``, opted into gangs, with
    two leaves of four nodes."""

    @pytest.fixture
    def fixture(
        components: GangWebhook, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
    ) -> Iterator[str]:
        fake_nodes(FABRIC)
        client.CoreV1Api(api).patch_namespace(
            namespace,
            {
                "metadata": {
                    "labels": {
                        "pod-security.kubernetes.io/enforce": level,
                        "pod-security.kubernetes.io/warn": "restricted",
                    }
                }
            },
        )
        yield opt_in(api, namespace)
        clear_jobs_and_pods(api, namespace)

    return fixture


baseline = enforcing("baseline")
restricted = enforcing("restricted")


def running(api: client.ApiClient, namespace: str, selector: str, count: int) -> list[Any]:
    """Wait until ``count`` pods of ``selector`` run; return them (the job's events if not)."""
    core = client.CoreV1Api(api)

    def pods() -> list[Any] | None:
        found = core.list_namespaced_pod(namespace, label_selector=selector).items
        ok = len(found) == count and all(p.status.phase == "Running" for p in found)
        return found if ok else None

    def events() -> str:
        said = core.list_namespaced_event(namespace).items
        return "\n".join(f"{e.reason}: {e.message}" for e in said if e.type == "Warning")

    found: list[Any] = wait_for(
        pods, timeout=90, what=f"{count} pods of {selector}", explain=events
    )
    return found


def test_the_example_job_starts_in_a_namespace_enforcing_baseline(
    api: client.ApiClient, baseline: str
) -> None:
    job = yaml.safe_load(EXAMPLE.read_text())
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, baseline, PLURAL, job
    )
    pods = running(api, baseline, f"{JOB_LABEL}={job['metadata']['name']}", 4)
    for pod in pods:
        assert [c.name for c in pod.spec.init_containers] == ["rdma-init"]
        assert pod.spec.containers[0].security_context is None  # nothing added: no IPC_LOCK
    assert len({p.spec.node_name for p in pods}) == 4


def test_a_pod_group_the_webhook_wires_starts_in_a_namespace_enforcing_baseline(
    api: client.ApiClient, baseline: str
) -> None:
    core = client.CoreV1Api(api)
    labels = {GANG_NAME_LABEL: "pair", GANG_SIZE_LABEL: "2"}
    for index in range(2):
        core.create_namespaced_pod(baseline, gang_pod(f"pair-{index}", labels))
    pods = running(api, baseline, f"{GANG_LABEL}=pair", 2)
    assert all(p.spec.init_containers[0].name == "rdma-init" for p in pods)


def test_wired_pods_of_a_restricted_template_pass_restricted(
    api: client.ApiClient, restricted: str
) -> None:
    job = yaml.safe_load(EXAMPLE.read_text())
    spec = job["spec"]["template"]["spec"]
    spec["securityContext"] = RESTRICTED_POD
    spec["containers"][0]["securityContext"] = RESTRICTED_CONTAINER
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, restricted, PLURAL, job
    )
    pods = running(api, restricted, f"{JOB_LABEL}={job['metadata']['name']}", 4)
    init = pods[0].spec.init_containers[0]
    assert (init.security_context.run_as_user, init.security_context.run_as_non_root) == (
        65532,
        True,
    )
