"""An upgrade that loses nothing and an uninstall that leaves nothing, with the real chart.

The previous version is the chart and the code at commit 47e0b1f (the last stop that landed
before this round of work; the repository has no release tag yet): `git archive` of it is the
chart `helm install`s and the code its components run (the old image, as local processes). With
a TensorParallelJob and a gang of another controller running, `helm upgrade` to this tree's
chart, and the components replaced by this tree's: no pod is made again or restarted, every plan
is the one it was (nodes, the term of the placer that wrote it, when), the old objects are valid
under the new CRDs, and the new code fills what it adds (the Gang record's `PodsCreated`).

Then `helm uninstall`, its post-delete hook (kwok completes the Job; what it runs,
`tpfabric uninstall-cleanup`, runs here as a local process under the hook's own ServiceAccount
and RBAC, rendered from the chart): no Lease of tpfabric's (the agents' heartbeats included), no
kopf finalizer, no Gang record, no unbound pod naming tpfabric-scheduler, none of the fabric
agent's node label, annotation or condition; the topology labels stay (kept on purpose), and
running pods run on.

A control plane of its own for this module (real API server, controller manager, kube-scheduler
and tpfabric's, kwok nodes): the chart installs its CRDs itself.
"""

from __future__ import annotations

import base64
import io
import os
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import LOGS, run_kubectl, two_leaves_of_four, wait_for
from tpfabric_cli.uninstall import KOPF_FINALIZER
from tpfabric_core import labels
from tpfabric_core.api import GROUP, PLURAL, SCHEDULER_NAME, VERSION, TensorParallelJob
from tpfabric_core.api.gang import GANG_PLURAL, Gang
from tpfabric_core.fabric.agent_heartbeat import HEARTBEAT_LABEL, lease_name
from tpfabric_core.fabric.link_publish import CONDITION_TYPE, DETAIL_ANNOTATION
from tpfabric_core.fabric.roce_contract import CONTRACT_CONDITION
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_core.gangs import GANG_NAME_LABEL, GANG_SIZE_LABEL, NAMESPACE_OPT_IN_LABEL
from tpfabric_localcluster.cluster import LocalCluster, api_client, free_ports
from tpfabric_localcluster.gang_webhook import (
    GangWebhook,
    start_gang_webhook,
    webhook_configuration,
)
from tpfabric_localcluster.nodes import apply_fake_nodes, wait_ready
from tpfabric_localcluster.toolchain import find_toolchain
from tpfabric_localcluster.tpfabric import (
    EXTENDER,
    OPERATOR,
    TPFABRIC_SCHEDULER,
    service_account_kubeconfig,
    start_extender,
    start_operator,
)
from tpfabric_scheduler.kube_scheduler_config import scheduler_configuration

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
#: the previous version: the last stop that landed before this round (no release tag yet)
PREVIOUS = "47e0b1f40a65134fd706c4ce2e3ecf1308dfd2d2"
RELEASE, NAMESPACE, WORK = "tpfabric", "tpfabric-system", "team-a"
#: the chart's Lease names for release `tpfabric` (fullname `tpfabric`)
LEASES = ("tpfabric-operator", "tpfabric-placer", "tpfabric-scheduler")
CHART_LEASE_ARGS = {
    "placer": [f"--lease-namespace={NAMESPACE}", "--lease-name=tpfabric-placer"],
    "operator": [f"--lease-namespace={NAMESPACE}", "--lease-name=tpfabric-operator"],
}
OLD_OPERATOR_ENV = {
    "TPFABRIC_RECONCILE_SECONDS": "1",
    "TPFABRIC_GANG_SYNC_SECONDS": "2",
    "TPFABRIC_GANG_IDLE_SECONDS": "5",
}


# -- the previous version ------------------------------------------------------------------------


def previous_tree(folder: Path) -> Path:
    """Return ``folder`` holding the chart and the Python packages of the previous version."""
    parts = ["charts", "core", "kube", "operator", "scheduler_plugin"]
    archived = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS, *parts],
        capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    if archived.returncode != 0:
        pytest.fail(
            f"the previous version {PREVIOUS[:7]} is not in this clone's history "
            f"({archived.stderr.decode().strip()}): fetch it, e.g. `git fetch --unshallow`",
            pytrace=False,
        )
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def old_env(tree: Path) -> dict[str, str]:
    """Return the environment that runs the previous version's packages (its image)."""
    paths = [tree / part for part in ("core", "kube", "operator", "scheduler_plugin")]
    return {"PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


@dataclass(frozen=True)
class OldWebhook:
    """The previous gang webhook: where it serves, and the CA of its certificate (it had no
    metrics port of its own, so :class:`GangWebhook` does not describe it)."""

    url: str
    ca: Path

    def healthy(self) -> bool:
        """Return whether it answers ``/healthz`` over TLS (verified with the CA)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2, context=context) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@dataclass
class Old:
    """The previous version's components, as local processes."""

    extender_port: int
    webhook: OldWebhook


def start_old_components(cluster: LocalCluster, tree: Path) -> Old:
    """Start the previous placer/extender, operator and gang webhook (their own flags)."""
    env = old_env(tree)
    port, liveness, hook_port = free_ports(3)
    cluster.add_component(
        "old-extender",
        [sys.executable, "-m", "tpfabric_scheduler", f"--kubeconfig={cluster.kubeconfig}",
         "--host=127.0.0.1", f"--port={port}", "--identity=old-extender",
         "--bind-timeout-seconds=30", *CHART_LEASE_ARGS["placer"]],
        f"http://127.0.0.1:{port}/readyz",
        env={**env, "TPFABRIC_LOG_LEVEL": "DEBUG"},
    )  # fmt: skip
    cluster.start_scheduler(TPFABRIC_SCHEDULER, scheduler_configuration(f"http://127.0.0.1:{port}"))
    cluster.add_component(
        "old-operator",
        [sys.executable, "-m", "tpfabric_operator", f"--kubeconfig={cluster.kubeconfig}",
         f"--liveness=http://127.0.0.1:{liveness}/healthz", *CHART_LEASE_ARGS["operator"]],
        f"http://127.0.0.1:{liveness}/healthz",
        env={**env, **OLD_OPERATOR_ENV},
    )  # fmt: skip
    certs = cluster.folder / "old-webhook"
    certs.mkdir(exist_ok=True)
    for name in ("crt", "key"):
        (certs / f"tls.{name}").write_bytes(
            (cluster.folder / "pki" / f"apiserver.{name}").read_bytes()
        )
    argv = [sys.executable, "-m", "tpfabric_operator.webhook", f"--cert-dir={certs}",
            f"--port={hook_port}", "--init-image=tpfabric/rdma-init:0.1.0",
            f"--kubeconfig={cluster.kubeconfig}"]  # fmt: skip
    hook = OldWebhook(f"https://127.0.0.1:{hook_port}", cluster.folder / "pki" / "ca.crt")
    cluster.add_component("old-webhook", argv, env=env)
    wait_for(hook.healthy, 30, what="the previous gang webhook serving TLS")
    configure_webhook(cluster, hook)
    return Old(port, hook)


def configure_webhook(cluster: LocalCluster, hook: GangWebhook | OldWebhook) -> None:
    """Point the gang webhook configuration at ``hook`` (made, or replaced)."""
    config = webhook_configuration(
        {
            "url": f"{hook.url}/mutate-pods",
            "caBundle": base64.b64encode(hook.ca.read_bytes()).decode(),
        }
    )
    with api_client(cluster.kubeconfig) as api:
        registrations = client.AdmissionregistrationV1Api(api)
        try:
            registrations.delete_mutating_webhook_configuration(config["metadata"]["name"])
        except ApiException as err:
            if err.status != 404:
                raise
        registrations.create_mutating_webhook_configuration(config)


def start_new_components(cluster: LocalCluster, old: Old) -> None:
    """Replace the previous components with this tree's (same leases, same extender port)."""
    for name in ("old-extender", "old-operator", "old-webhook"):
        cluster.stop_component(name)
    start_extender(cluster, old.extender_port, extra_args=CHART_LEASE_ARGS["placer"])
    start_operator(cluster, extra_args=CHART_LEASE_ARGS["operator"])
    configure_webhook(cluster, start_gang_webhook(cluster))


# -- the cluster, the release, the workloads -----------------------------------------------------


def helm(
    cluster: LocalCluster, home: Path, *args: str, values: dict[str, Any] | None = None
) -> str:
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k) for k in ("CACHE", "CONFIG", "DATA")}}
    flags = ["--values", "-"] if values is not None else []
    done = subprocess.run(
        [str(find_toolchain(("helm",)).path("helm")), *args, f"--kubeconfig={cluster.kubeconfig}",
         *flags],
        input=yaml.safe_dump(values) if values is not None else None,
        capture_output=True, text=True, timeout=400, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, f"helm {args[0]}: {done.stderr}"
    return done.stdout


def job(name: str, workers: int, **topology: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "tensorParallelSize": 8,
            "topology": {"level": "leaf", **topology},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
    }


def gang_member(name: str, gang: str, size: int, **annotations: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "8", "cpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {GANG_NAME_LABEL: gang, GANG_SIZE_LABEL: str(size)},
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


@dataclass
class Seen:
    """What the workloads were before the upgrade."""

    pods: dict[str, tuple[str, str, int]]  # name -> (uid, node, restarts)
    placements: dict[str, dict[str, Any]]  # kind/name -> status.placement


def seen(api: client.ApiClient) -> Seen:
    custom = client.CustomObjectsApi(api)
    pods = {
        p.metadata.name: (
            p.metadata.uid,
            p.spec.node_name,
            sum(s.restart_count for s in p.status.container_statuses or []),
        )
        for p in client.CoreV1Api(api).list_namespaced_pod(WORK).items
    }
    placements = {}
    for plural in (PLURAL, GANG_PLURAL):
        for obj in custom.list_namespaced_custom_object(GROUP, VERSION, WORK, plural)["items"]:
            placements[f"{plural}/{obj['metadata']['name']}"] = dict(
                (obj.get("status") or {}).get("placement") or {}
            )
    return Seen(pods, placements)


def phase(api: client.ApiClient, plural: str, name: str) -> str:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, WORK, plural, name
    )
    return str((obj.get("status") or {}).get("phase") or "")


@dataclass
class Upgraded:
    cluster: LocalCluster
    before: Seen
    after: Seen
    home: Path


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upgraded]:
    """A cluster on which the previous release ran a job and a gang, upgraded to this tree."""
    cluster = LocalCluster(
        f"upg-{uuid.uuid4().hex[:6]}", state_root=tmp_path_factory.mktemp("clusters-upgrade")
    )
    cluster.up()
    try:
        yield _upgrade(cluster, tmp_path_factory)
    finally:
        cluster.down(keep_logs=LOGS / cluster.name)


def _upgrade(cluster: LocalCluster, factory: pytest.TempPathFactory) -> Upgraded:
    tree = previous_tree(factory.mktemp("previous"))
    home = factory.mktemp("helm-home")
    with api_client(cluster.kubeconfig) as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        nodes = apply_fake_nodes(
            api, parse_fabric_description(two_leaves_of_four("upgrade", "upg", rails=8))
        )
        wait_ready(api, nodes)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespace(
            {"metadata": {"name": WORK, "labels": {NAMESPACE_OPT_IN_LABEL: "enabled"}}}
        )
        wait_for(lambda: core.list_namespaced_service_account(WORK).items, what="default SA")
        helm(cluster, home, "install", RELEASE, str(tree / "charts" / "tpfabric"), "-n", NAMESPACE)
        run_kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s",
                    f"crd/{PLURAL}.{GROUP}", f"crd/{GANG_PLURAL}.{GROUP}")  # fmt: skip
        old = start_old_components(cluster, tree)
        custom.create_namespaced_custom_object(GROUP, VERSION, WORK, PLURAL, job("llama", 2))
        for index in range(2):
            core.create_namespaced_pod(WORK, gang_member(f"grp-{index}", "grp", 2))
        for plural, name in ((PLURAL, "llama"), (GANG_PLURAL, "grp")):
            wait_for(
                lambda p=plural, n=name: phase(api, p, n) == "Running", 90, what=f"{name} Running"
            )
        before = seen(api)
        assert len(before.pods) == 4

        helm(cluster, home, "upgrade", RELEASE, str(REPO / "charts" / "tpfabric"), "-n", NAMESPACE)
        start_new_components(cluster, old)
        # the new gang record's condition: the new operator has looked at the gang
        wait_for(
            lambda: any(
                c["type"] == "PodsCreated"
                for c in (
                    custom.get_namespaced_custom_object(
                        GROUP, VERSION, WORK, GANG_PLURAL, "grp"
                    ).get("status")
                    or {}
                ).get("conditions")
                or []
            ),
            60,
            what="the new operator's PodsCreated condition on the gang record",
        )
        time.sleep(15)  # several placer cycles and reconciles: nothing may move
        after = seen(api)
    return Upgraded(cluster, before, after, home)


def test_an_upgrade_restarts_nothing_and_loses_no_plan(upgraded: Upgraded) -> None:
    assert upgraded.after.pods == upgraded.before.pods  # same pods (uids), nodes, no restart
    for key, placement in upgraded.before.placements.items():
        assert placement["state"] == "Planned", key
        kept = {
            k: upgraded.after.placements[key].get(k)
            for k in ("nodes", "term", "plannedAt", "domain")
        }
        assert kept == {k: placement.get(k) for k in kept}, key
    with api_client(upgraded.cluster.kubeconfig) as api:
        assert phase(api, PLURAL, "llama") == "Running"
        assert phase(api, GANG_PLURAL, "grp") == "Running"


def test_the_old_objects_are_valid_under_the_new_api_and_the_new_defaults_are_there(
    upgraded: Upgraded,
) -> None:
    with api_client(upgraded.cluster.kubeconfig) as api:
        custom = client.CustomObjectsApi(api)
        tpj = custom.get_namespaced_custom_object(GROUP, VERSION, WORK, PLURAL, "llama")
        TensorParallelJob.model_validate(tpj)
        record = custom.get_namespaced_custom_object(GROUP, VERSION, WORK, GANG_PLURAL, "grp")
        Gang.model_validate(record)
        # every CEL rule of the new CRD (with its old object) holds for them: a write is admitted
        for plural, name in ((PLURAL, "llama"), (GANG_PLURAL, "grp")):
            done = run_kubectl(
                upgraded.cluster, "label", "--dry-run=server", "-n", WORK,
                f"{plural}.{GROUP}/{name}", "upgraded=yes",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
        # what the new chart adds exists with its defaults
        rbac = client.RbacAuthorizationV1Api(api)
        assert (
            rbac.read_cluster_role("tpfabric-edit").metadata.labels[
                "rbac.authorization.k8s.io/aggregate-to-edit"
            ]
            == "true"
        )
        budgets = client.PolicyV1Api(api).list_namespaced_pod_disruption_budget(NAMESPACE).items
        assert {b.metadata.name for b in budgets} == {"tpfabric-operator", "tpfabric-scheduler"}
        extender = next(
            c
            for d in client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE).items
            for c in d.spec.template.spec.containers
            if c.name == "extender"
        )
        default = ",".join(
            f"{level}={labels.PREFIX}{level}" for level in ("block", "spine", "leaf")
        )
        assert f"--levels={default}" in extender.command  # topology.levels, new, defaulted


# -- uninstall -----------------------------------------------------------------------------------


def hook_objects(home: Path, cluster: LocalCluster) -> tuple[list[dict[str, Any]], list[str]]:
    """Return the uninstall hook's account and RBAC, and its Job's command line, as rendered."""
    rendered = helm(
        cluster, home, "template", RELEASE, str(REPO / "charts" / "tpfabric"), "-n", NAMESPACE,
        "--show-only", "templates/uninstall-cleanup.yaml",
    )  # fmt: skip
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    (hook_job,) = [d for d in objects if d["kind"] == "Job"]
    (container,) = hook_job["spec"]["template"]["spec"]["containers"]
    rbac = [d for d in objects if d["kind"] != "Job"]
    for obj in rbac:
        obj["metadata"].pop("annotations", None)  # made here for good, not as a hook
    return rbac, [*container["command"][1:], *container["args"]]


def leftovers(api: client.ApiClient) -> dict[str, Any]:
    """Return what tpfabric wrote that is still in the cluster."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    leases = [
        lease.metadata.name
        for lease in client.CoordinationV1Api(api).list_namespaced_lease(NAMESPACE).items
        if lease.metadata.name in LEASES or HEARTBEAT_LABEL in (lease.metadata.labels or {})
    ]
    finalized = [
        j["metadata"]["name"]
        for j in custom.list_namespaced_custom_object(GROUP, VERSION, WORK, PLURAL)["items"]
        if KOPF_FINALIZER in (j["metadata"].get("finalizers") or [])
    ]
    gangs = [
        g["metadata"]["name"]
        for g in custom.list_namespaced_custom_object(GROUP, VERSION, WORK, GANG_PLURAL)["items"]
    ]
    waiting = [
        p.metadata.name
        for p in core.list_namespaced_pod(WORK).items
        if not p.spec.node_name
        and (p.spec.scheduler_name == SCHEDULER_NAME or p.spec.scheduling_gates)
    ]
    marked = sorted(
        n.metadata.name
        for n in core.list_node().items
        if labels.HEALTH in (n.metadata.labels or {})
        or DETAIL_ANNOTATION in (n.metadata.annotations or {})
        or any(c.type in (CONDITION_TYPE, CONTRACT_CONDITION) for c in n.status.conditions or [])
    )
    return {"leases": leases, "finalizers": finalized, "gangs": gangs, "waiting pods": waiting,
            "nodes with agent health": marked}  # fmt: skip


def test_an_uninstall_and_its_hook_leave_nothing_of_tpfabric(upgraded: Upgraded) -> None:
    cluster = upgraded.cluster
    with api_client(cluster.kubeconfig) as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        # what else an uninstall meets: a job and a gang that wait (gated), the agent's health on
        # a node, kube-scheduler's lease (the local one runs without election)
        custom.create_namespaced_custom_object(
            GROUP, VERSION, WORK, PLURAL, job("huge", 5, mode="required")
        )
        for index in range(5):
            core.create_namespaced_pod(
                WORK, gang_member(f"big-{index}", "big", 5, **{
                    "tpfabric.io/topology-level": "leaf", "tpfabric.io/topology-mode": "required"})
            )  # fmt: skip
        wait_for(lambda: len(leftovers(api)["waiting pods"]) == 10, 60, what="the waiting pods")
        node = core.list_node().items[0].metadata.name
        core.patch_node(node, {"metadata": {"labels": {labels.HEALTH: "ok"},
                                            "annotations": {DETAIL_ANNOTATION: "{}"}}})  # fmt: skip
        core.patch_node_status(
            node,
            {"status": {"conditions": [{"type": CONDITION_TYPE, "status": "True",
                                        "reason": "LinksHealthy", "message": "ok"},
                                       {"type": CONTRACT_CONDITION, "status": "True",
                                        "reason": "SettingsMatch", "message": "ok"}]}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
        client.CoordinationV1Api(api).create_namespaced_lease(
            NAMESPACE, {"metadata": {"name": "tpfabric-scheduler"}, "spec": {"holderIdentity": "x"}}
        )
        node_uid = core.read_node(node).metadata.uid
        # the fabric agent's heartbeat, as it makes it
        client.CoordinationV1Api(api).create_namespaced_lease(
            NAMESPACE,
            {"metadata": {"name": lease_name(node), "labels": {HEARTBEAT_LABEL: "fabric-agent"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                               "uid": node_uid}]},
             "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}},
        )  # fmt: skip
        topology_before = {n.metadata.name: {k: v for k, v in n.metadata.labels.items()
                                             if k.startswith(labels.PREFIX) and k != labels.HEALTH}
                           for n in core.list_node().items}  # fmt: skip
        running = {
            p.metadata.name: p.metadata.uid
            for p in core.list_namespaced_pod(WORK).items
            if p.spec.node_name
        }

        for name in (EXTENDER, OPERATOR, "tpfabric-gang-webhook"):  # their pods go with the release
            cluster.stop_component(name)
        helm(cluster, upgraded.home, "uninstall", RELEASE, "-n", NAMESPACE, "--timeout=120s")

        left = leftovers(api)  # what the release's own deletion leaves
        assert set(left["leases"]) == {*LEASES, lease_name(node)}
        assert sorted(left["finalizers"]) == ["huge", "llama"]
        assert sorted(left["gangs"]) == ["big", "grp"]
        assert len(left["waiting pods"]) == 10
        assert node in left["nodes with agent health"]  # the fake nodes carry the label too

        # the hook's command, under the hook's own account and RBAC
        rbac, command = hook_objects(upgraded.home, cluster)
        applied = run_kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
        assert applied.returncode == 0, applied.stderr
        try:
            kubeconfig = service_account_kubeconfig(
                cluster,
                NAMESPACE,
                "tpfabric-uninstall-cleanup",
                cluster.folder / "cleanup.kubeconfig",
            )
            cleaned = subprocess.run(
                [sys.executable, "-m", "tpfabric_cli", *command, "--wait-seconds=60",
                 f"--kubeconfig={kubeconfig}"],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        finally:
            run_kubectl(cluster, "delete", "-f", "-", stdin=yaml.safe_dump_all(rbac))
        print(cleaned.stdout)

        assert leftovers(api) == {
            "leases": [], "finalizers": [], "gangs": [], "waiting pods": [],
            "nodes with agent health": [],
        }  # fmt: skip
        assert "warning" not in cleaned.stdout
        after = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(WORK).items}
        assert {n: after.get(n) for n in running} == running  # running pods run on
        topology_after = {
            n.metadata.name: {
                k: v for k, v in n.metadata.labels.items() if k.startswith(labels.PREFIX)
            }
            for n in core.list_node().items
        }
        assert topology_after == topology_before  # discovery's labels are kept
        # a job deleted now goes: no finalizer waits for an operator that is gone
        custom.delete_namespaced_custom_object(GROUP, VERSION, WORK, PLURAL, "llama")
        wait_for(
            lambda: (
                "llama"
                not in [
                    j["metadata"]["name"]
                    for j in custom.list_namespaced_custom_object(GROUP, VERSION, WORK, PLURAL)[
                        "items"
                    ]
                ]
            ),
            30,
            what="the job deleted",
        )
