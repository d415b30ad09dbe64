"""The gang webhook with a real kube-apiserver calling it: pods of gangs other controllers make are
gated for tpfabric's scheduler and wired for RDMA at creation; every other pod passes untouched,
also while the webhook is down.

The webhook runs as its own process on loopback (``tpfabric_localcluster.gang_webhook``), with the
configuration a cluster gets. No placer runs in this module: a gated gang pod stays gated here.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import (
    configured_gang_webhook,
    gang_pod,
    opt_in,
    run_kubectl,
    wait_for,
)
from tpfabric_core.api import GANG_GATE, SCHEDULER_NAME
from tpfabric_core.gangs import GANG_LABEL, GANG_NAME_LABEL, GANG_SIZE_LABEL, RANK_LABEL
from tpfabric_core.rdma_default import RDMA_ANNOTATION, parse_decision
from tpfabric_localcluster.cluster import LocalCluster, free_ports
from tpfabric_localcluster.gang_webhook import (
    NAMESPACE_LABEL,
    GangWebhook,
    webhook_configuration,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def webhook(local_cluster: LocalCluster, api: client.ApiClient) -> Iterator[GangWebhook]:
    """The running webhook, its configuration applied; both removed afterwards."""
    with configured_gang_webhook(local_cluster, api) as hook:
        yield hook


@pytest.fixture
def enabled(api: client.ApiClient, namespace: str) -> str:
    """The test's namespace, opted in."""
    return opt_in(api, namespace)


def _wired(pod: client.V1Pod, gang: str) -> None:
    spec = pod.spec
    assert spec.scheduler_name == SCHEDULER_NAME
    assert [g.name for g in spec.scheduling_gates or []] == [GANG_GATE]
    assert spec.init_containers[0].name == "rdma-init"
    # the RDMA devices the nodes offer (none here but in a test that makes nodes), and why
    decision = parse_decision((pod.metadata.annotations or {}).get(RDMA_ANNOTATION))
    assert decision is not None
    rdma = {"rdma/ib": str(decision.count)} if decision.count else {}
    assert spec.init_containers[0].resources.limits == {"nvidia.com/gpu": "8", **rdma}
    env = {e.name: e.value for e in spec.containers[0].env}
    assert env["NCCL_CONF_FILE"] == "/tpfabric/nccl.conf"
    assert pod.metadata.labels[GANG_LABEL] == gang


def _untouched(pod: client.V1Pod) -> None:
    assert pod.spec.scheduler_name == "default-scheduler"
    assert not pod.spec.scheduling_gates
    assert not pod.spec.init_containers


def test_a_plain_gangs_pods_are_gated_and_wired_as_they_are_created(
    webhook: GangWebhook, api: client.ApiClient, enabled: str
) -> None:
    core = client.CoreV1Api(api)
    for rank in range(2):
        labels = {GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "2", RANK_LABEL: str(rank)}
        core.create_namespaced_pod(enabled, gang_pod(f"bert-{rank}", labels))
    for rank in range(2):
        pod = core.read_namespaced_pod(f"bert-{rank}", enabled)
        _wired(pod, "bert")
        assert pod.metadata.labels[RANK_LABEL] == str(rank)

    def gated() -> bool:
        conditions = core.read_namespaced_pod("bert-0", enabled).status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "SchedulingGated" for c in conditions)

    wait_for(gated, what="bert-0 to be held by its scheduling gate")


def test_pods_a_controller_creates_are_wired_too(
    webhook: GangWebhook, api: client.ApiClient, enabled: str
) -> None:
    """kube-controller-manager's Job controller makes the pods, through the webhook."""
    labels = {GANG_NAME_LABEL: "indexed", GANG_SIZE_LABEL: "3"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed"},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": labels},
                "spec": {**gang_pod("x", labels)["spec"], "restartPolicy": "Never"},
            },
        },
    }
    client.BatchV1Api(api).create_namespaced_job(enabled, job)
    core = client.CoreV1Api(api)

    def three() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(enabled, label_selector="job-name=indexed").items
        return pods if len(pods) == 3 else None

    pods = wait_for(three, what="the Job's three pods")
    for pod in pods:
        _wired(pod, "indexed")


def test_pods_that_do_not_opt_in_pass_untouched(
    webhook: GangWebhook, api: client.ApiClient, enabled: str, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(enabled, gang_pod("web", {"app": "web"}))
    _untouched(core.read_namespaced_pod("web", enabled))
    other = f"{namespace}-off"
    core.create_namespace({"metadata": {"name": other}})
    try:
        wait_for(lambda: core.list_namespaced_service_account(other).items, what="default SA")
        labels = {GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "2"}
        core.create_namespaced_pod(other, gang_pod("bert-0", labels))
        _untouched(core.read_namespaced_pod("bert-0", other))  # the namespace did not opt in
    finally:
        core.delete_namespace(other)


def test_bad_gang_labels_admit_the_pod_unwired_with_a_warning(
    webhook: GangWebhook, local_cluster: LocalCluster, api: client.ApiClient, enabled: str
) -> None:
    manifest = gang_pod("no-size", {GANG_NAME_LABEL: "bert"})
    done = run_kubectl(
        local_cluster, "create", "-n", enabled, "-f", "-", stdin=json.dumps(manifest)
    )
    assert done.returncode == 0, done.stderr
    assert "Warning: tpfabric: pod admitted unwired, not placed as gang 'bert'" in done.stderr
    assert f"{GANG_SIZE_LABEL}: missing: a gang needs its size" in done.stderr
    _untouched(client.CoreV1Api(api).read_namespaced_pod("no-size", enabled))


def test_with_the_webhook_down_other_pods_are_created_and_gang_pods_wait_for_it(
    webhook: GangWebhook, api: client.ApiClient, enabled: str
) -> None:
    core = client.CoreV1Api(api)
    webhook.stop()
    try:
        started = time.monotonic()
        core.create_namespaced_pod(enabled, gang_pod("web", {"app": "web"}))
        assert time.monotonic() - started < 2.0  # the API server never called the webhook
        _untouched(core.read_namespaced_pod("web", enabled))
        labels = {GANG_NAME_LABEL: "late", GANG_SIZE_LABEL: "1"}
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(enabled, gang_pod("late-0", labels))
        assert refused.value.status == 500
        assert "failed calling webhook" in str(refused.value.body)
        assert "gang-pods.tpfabric.io" in str(refused.value.body)
    finally:
        webhook.start()
    core.create_namespaced_pod(enabled, gang_pod("late-0", labels))  # the controller's retry
    _wired(core.read_namespaced_pod("late-0", enabled), "late")


def test_the_webhook_makes_its_certificate_and_rotates_it_without_cert_manager(
    local_cluster: LocalCluster, api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """``--manage-certs``: the CA and serving pair in a Secret, the CA in the configuration's
    caBundle (the API server then trusts the webhook), and a new pair when the Secret goes."""
    core, registrations = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    (port,) = free_ports(1)
    # the API server reaches it by name: the serving certificate's names are the Service's
    config = webhook_configuration({"url": f"https://localhost:{port}/mutate-pods"})
    config["metadata"]["name"] = "tpfabric-gangs-certs"
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {NAMESPACE_LABEL: "managed-certs"}}
    registrations.create_mutating_webhook_configuration(config)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_operator.webhook",
        f"--cert-dir={tmp_path}",
        "--host=127.0.0.1",
        f"--port={port}",
        "--init-image=tpfabric/rdma-init:dev",
        "--manage-certs",
        f"--kubeconfig={local_cluster.kubeconfig}",
        f"--namespace={namespace}",
        "--secret=gang-webhook-tls",
        "--service=localhost",
        "--webhook-configuration=tpfabric-gangs-certs",
        "--renew-check-seconds=1",
        "--reload-seconds=1",
    ]
    local_cluster.add_component("gang-webhook-certs", argv)
    try:

        def secret_ca() -> bytes | None:
            try:
                data = core.read_namespaced_secret("gang-webhook-tls", namespace).data or {}
            except ApiException:
                return None
            return base64.b64decode(data["ca.crt"]) if len(data) == 4 else None

        first = wait_for(secret_ca, 30, what="the webhook's Secret")

        def trusted(ca: bytes) -> bool:
            hooks = registrations.read_mutating_webhook_configuration(config["metadata"]["name"])
            bundles = {h.client_config.ca_bundle for h in hooks.webhooks}
            return bundles == {base64.b64encode(ca).decode()}

        wait_for(lambda: trusted(first), 30, what="the CA in every webhook's caBundle")
        core.patch_namespace(
            namespace, {"metadata": {"labels": {NAMESPACE_LABEL: "managed-certs"}}}
        )
        labels = {GANG_NAME_LABEL: "certs", GANG_SIZE_LABEL: "2"}
        core.create_namespaced_pod(namespace, gang_pod("certs-0", labels))
        _wired(core.read_namespaced_pod("certs-0", namespace), "certs")

        core.delete_namespaced_secret("gang-webhook-tls", namespace)  # lost, or rotated away
        second = wait_for(
            lambda: (ca := secret_ca()) is not None and ca != first and ca,
            30,
            what="a new CA in the Secret",
        )
        wait_for(lambda: trusted(second), 30, what="the new CA in every caBundle")

        def admitted_with_the_new_pair() -> bool:
            try:
                core.create_namespaced_pod(namespace, gang_pod("certs-1", labels))
            except ApiException as err:  # the old pair served until the files were read again
                if "failed calling webhook" not in str(err.body):
                    raise
                return False
            return True

        wait_for(admitted_with_the_new_pair, 30, interval=1, what="a pod admitted after rotation")
        _wired(core.read_namespaced_pod("certs-1", namespace), "certs")
    finally:
        local_cluster.stop_component("gang-webhook-certs")
        registrations.delete_mutating_webhook_configuration(config["metadata"]["name"])
