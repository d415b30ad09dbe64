"""Fixtures on the local control plane, shared by the integration and soak tiers (their conftests
import them): one real cluster per session, a namespace per test, and
fake GPU nodes made from a fabric description.

The cluster runs the real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(see ``tpfabric_localcluster``). A test that leaves a component crashed fails with its log tail.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GANG_GATE, GROUP, JOB_LABEL, PLURAL, VERSION, WORKER_INDEX_LABEL
from tpfabric_core.api.crd import crd_files, crd_name
from tpfabric_core.fabric_description import FabricDescription, parse_fabric_description
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.gang_webhook import NAMESPACE_LABEL, GangWebhook, start_gang_webhook
from tpfabric_localcluster.nodes import apply_fake_nodes, delete_nodes, wait_ready
from tpfabric_localcluster.toolchain import (
    ensure_minimum_toolchain,
    find_toolchain,
    pinned_versions,
)
from tpfabric_localcluster.tpfabric import (
    OPERATOR,
    SCHEDULER_NAME,
    RunAs,
    service_account_kubeconfig,
    start_operator,
    start_scheduling,
    unused_uid,
)

CRD_FILE = Path(__file__).parents[1] / "crds" / f"{crd_name()}.yaml"
#: every CRD the chart installs (the generated files of crds/)
CRD_NAMES = tuple(name.removesuffix(".yaml") for name in crd_files())
LOGS = Path(os.environ.get("TPFABRIC_TEST_LOGS", "/tmp/tpfabric-test-logs"))


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Return a running local cluster (no nodes); stopped at the end of the session."""
    toolchain = find_toolchain()
    if toolchain.missing:
        pytest.fail(
            f"missing binaries {toolchain.missing}: run `make toolchain` (the `make test` "
            "target does it)",
            pytrace=False,
        )
    cluster = LocalCluster(
        f"test-{uuid.uuid4().hex[:6]}",
        state_root=tmp_path_factory.mktemp("clusters"),
        # the upstream Workload API (scheduling.k8s.io PodGroups: beta, and its topology
        # constraints alpha, both off by default in v1.37): tpfabric reads a gang from a pod's
        # spec.schedulingGroup, and kube-scheduler's own gang plugins run beside tpfabric's,
        # as test_gangs_placed shows
        feature_gates={"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True},
        runtime_config=("scheduling.k8s.io/v1beta1=true",),
    )
    cluster.up()
    yield cluster
    cluster.down(keep_logs=LOGS / cluster.name)


@pytest.fixture(scope="module")
def oldest_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Return a local cluster at the oldest Kubernetes the chart supports (``kubernetes-minimum``
    of e2e/toolchain, built into the cache on first use), without nodes; one per module."""
    cluster = LocalCluster(
        f"min-{uuid.uuid4().hex[:6]}",
        state_root=tmp_path_factory.mktemp("clusters-minimum"),
        toolchain=ensure_minimum_toolchain(),
    )
    cluster.up()
    yield cluster
    cluster.down(keep_logs=LOGS / cluster.name)


@pytest.fixture(scope="session")
def api(local_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """Return an admin API client of the session cluster."""
    with api_client(local_cluster.kubeconfig) as api:
        yield api


@pytest.fixture(autouse=True)
def _components_survive(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "local_cluster" in request.fixturenames:
        cluster: LocalCluster = request.getfixturevalue("local_cluster")
        crashed = cluster.crashed()
        assert not crashed, "\n".join(crashed)


def run_kubectl(
    cluster: LocalCluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Return the finished ``kubectl`` (the toolchain's) run against ``cluster``."""
    binary = find_toolchain(("kubectl",)).path("kubectl")
    return subprocess.run(
        [str(binary), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "",
    explain: Callable[[], str] | None = None,
) -> Any:
    """Return the first truthy value of ``condition()``; fail the test after ``timeout``, with
    what ``explain()`` says of the state then (if given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    said = f"\n{explain()}" if explain is not None else ""
    pytest.fail(
        f"timed out after {timeout:.0f}s waiting for {what or condition}{said}", pytrace=False
    )


def wait_serving(cluster: LocalCluster) -> None:
    """Wait until the API server lists TensorParallelJobs from a ready cache.

    The API server makes a CRD's storage on its first use, and for a few milliseconds its watch
    cache answers 429 "storage is (re)initializing". A CRD deleted before anything used it has
    the API server's CRD finalizer make the storage and fail its first list of instances
    (condition Terminating, reason InstanceDeletionFailed). Now and then the finalizer does not
    retry until its informer resyncs, 5 minutes later: the delete stalls (twice in 19 apply and
    delete rounds here; once in a CI run, where every later test of the CRD failed: 34 failures,
    13 errors; also seen upstream, operator-framework/operator-controller#1437). A list without a
    limit is answered from the cache (``kubectl get`` pages, and a page skips an unready cache),
    so it is the check.
    """
    with api_client(cluster.kubeconfig) as api:
        custom = client.CustomObjectsApi(api)

        def serving() -> bool:
            try:
                custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            except ApiException as err:
                if err.status in (404, 429):  # not yet routed; cache not yet ready
                    return False
                raise
            return True

        wait_for(serving, what="the API server to serve TensorParallelJobs from its cache")


def apply_crd(cluster: LocalCluster) -> None:
    """Apply the generated CRDs (crds/: TensorParallelJob, Gang); wait until they are established
    and TensorParallelJobs are served (:func:`wait_serving`)."""
    applied = run_kubectl(cluster, "apply", "-f", str(CRD_FILE.parent))
    assert applied.returncode == 0, applied.stderr
    names = [f"crd/{name}" for name in CRD_NAMES]
    ready = run_kubectl(cluster, "wait", "--for=condition=Established", *names)
    assert ready.returncode == 0, ready.stderr
    wait_serving(cluster)


@pytest.fixture
def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """Return a fresh namespace (its default service account exists); deleted afterwards."""
    core = client.CoreV1Api(api)
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(c for c in name if c.isalnum() or c == "-")
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: core.list_namespaced_service_account(name).items,
        what=f"default service account in {name}",
    )
    yield name
    core.delete_namespace(name)


def clear_jobs_and_pods(api: client.ApiClient, namespace: str) -> None:
    """Delete the namespace's TensorParallelJobs, then its pods, and wait until both are gone.

    Jobs first: a planned job whose pods are gone still holds its nodes (a replacement in its
    backoff keeps its reservation), so the next test would see less capacity.
    """
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(
        lambda: (
            not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
            and not core.list_namespaced_pod(namespace).items
        ),
        what="the test's jobs and pods to be gone (capacity back for the next test)",
    )


FabricFactory = Callable[[FabricDescription | str], list[str]]


def two_leaves_of_four(name: str, prefix: str, *, rails: int) -> str:
    """Return a fabric description (YAML) of 8 DGX-class nodes: one spine, two leaves of four.

    Every name starts with ``prefix`` (block ``prefix``, spine ``prefix-su``, leaves
    ``prefix-leaf1/2``, nodes ``prefix-l1-01``...), so a module's nodes never collide with
    another's.
    """
    return f"""
name: {name}
rails: {rails}
railOptimized: true
rdmaResource: rdma/ib
node: {{gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}}
blocks:
- name: {prefix}
  spines:
  - name: {prefix}-su
    leaves:
    - {{name: {prefix}-leaf1, nodes: ["{prefix}-l1-[01-04]"]}}
    - {{name: {prefix}-leaf2, nodes: ["{prefix}-l2-[01-04]"]}}
"""


@pytest.fixture
def fake_nodes(api: client.ApiClient) -> Iterator[FabricFactory]:
    """Return a function that creates Ready kwok nodes from a fabric (object or YAML text).

    Nodes are deleted when the test ends.
    """
    created: list[str] = []

    def make(fabric: FabricDescription | str) -> list[str]:
        if isinstance(fabric, str):
            fabric = parse_fabric_description(fabric)
        names = apply_fake_nodes(api, fabric)
        created.extend(names)
        wait_ready(api, names)
        return names

    yield make
    delete_nodes(api, created)


SMALL_FABRIC = Path(__file__).parents[1] / "examples" / "fabrics" / "small.yaml"


@pytest.fixture(scope="module")
def fabric_nodes(api: client.ApiClient) -> Iterator[dict[str, dict[str, str]]]:
    """Return ``{node: labels}`` of the 64 nodes of examples/fabrics/small.yaml (Ready).

    Module-scoped: a module that uses it has the 64 nodes to itself, and they are gone after.
    """
    fabric = parse_fabric_description(SMALL_FABRIC.read_text())
    names = apply_fake_nodes(api, fabric)
    wait_ready(api, names)
    yield {n.name: fabric.node_labels(n) for n in fabric.nodes}
    delete_nodes(api, names)


@pytest.fixture(scope="session")
def tpfabric_scheduling(local_cluster: LocalCluster) -> LocalCluster:
    """Return the cluster with the CRD, the extender/placer and the tpfabric kube-scheduler."""
    start_scheduling(local_cluster)
    return local_cluster


@pytest.fixture
def scheduling(
    tpfabric_scheduling: LocalCluster, fabric_nodes: dict[str, dict[str, str]]
) -> LocalCluster:
    """Return the cluster with tpfabric scheduling, on the 64 nodes of the small fabric."""
    return tpfabric_scheduling


class Jobs:
    """Creates jobs the way the operator will: a TensorParallelJob and gated worker pods."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace

    def create(
        self,
        name: str,
        workers: int,
        *,
        mode: str = "required",
        level: str = "leaf",
        status: dict[str, Any] | None = None,
        made: int | None = None,
    ) -> None:
        """Create the job and its first ``made`` workers (default all)."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TensorParallelJob",
            "metadata": {"name": name},
            "spec": {
                "workers": workers,
                "tensorParallelSize": 8,
                "topology": {"mode": mode, "level": level},
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        if status is not None:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, name, {"status": status}
            )
        self.make_workers(name, range(workers if made is None else made))

    def make_workers(self, name: str, indices: Iterable[int]) -> None:
        """Create the job's worker pods of ``indices``, gated (no attempt label: another
        controller's pods, which the placer plans only once the whole gang exists)."""
        for index in indices:
            self.core.create_namespaced_pod(self.namespace, worker_pod(name, index))

    def pods(self, name: str) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_LABEL}={name}"
        ).items
        return sorted(pods, key=lambda p: int(p.metadata.labels[WORKER_INDEX_LABEL]))

    def placement(self, name: str) -> dict[str, Any]:
        job = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        return dict((job.get("status") or {}).get("placement") or {})

    def wait_running(self, name: str, timeout: float = 60) -> list[client.V1Pod]:
        def running() -> list[client.V1Pod] | None:
            pods = self.pods(name)
            return pods if pods and all(p.status.phase == "Running" for p in pods) else None

        pods: list[client.V1Pod] = wait_for(
            running, timeout, what=f"job {name} Running", explain=lambda: self.explain(name)
        )
        return pods

    def explain(self, name: str) -> str:
        """Return the job's placement and its pods' state: what a failed wait shows."""
        placement = self.placement(name)
        lines = [f"placement: {placement.get('state')} {placement.get('message', '')}"]
        for pod in self.pods(name):
            gated = "gated" if pod.spec.scheduling_gates else "released"
            lines.append(
                f"  {pod.metadata.name}: {pod.status.phase} {gated} on {pod.spec.node_name}"
            )
        return "\n".join(lines)

    def nodes(self, name: str) -> list[str]:
        return [p.spec.node_name for p in self.pods(name)]


def worker_pod(
    job: str, index: int, *, gpus: int = 8, gates: tuple[str, ...] = (GANG_GATE,), **spec: Any
) -> dict[str, Any]:
    """Return worker ``index`` of ``job`` as another controller makes it: gated (``gates``),
    ``gpus`` GPUs and as many RDMA devices, ``spec`` added (priorityClassName, affinity...)."""
    return {
        "metadata": {
            "name": f"{job}-worker-{index}",
            "labels": {JOB_LABEL: job, WORKER_INDEX_LABEL: str(index)},
        },
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "schedulingGates": [{"name": gate} for gate in gates],
            **spec,
            "containers": [
                {
                    "name": "w",
                    "image": "registry.invalid/w:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus), "rdma/ib": str(gpus)}},
                }
            ],
        },
    }


# -- the chart's identities ----------------------------------------------------------------------

CHART = Path(__file__).parents[1] / "charts" / "tpfabric"
#: Namespace and release of the chart's RBAC on the session cluster (fullname ``tpfabric``).
CHART_NAMESPACE = "tpfabric-system"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
#: what confines the chart's accounts: RBAC and the admission policies that narrow it
CONFINEMENT_KINDS = RBAC_KINDS | {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def render_chart(
    tmp_path_factory: pytest.TempPathFactory,
    *settings: str,
    namespace: str = CHART_NAMESPACE,
    kube_version: str | None = None,
) -> list[dict[str, Any]]:
    """Return the objects ``helm template tpfabric`` renders with ``--set`` ``settings``."""
    helm = find_toolchain(("helm",)).path("helm")
    home = tmp_path_factory.mktemp("helm-home")
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k) for k in ("CACHE", "CONFIG", "DATA")}}
    flags = [flag for setting in settings for flag in ("--set", setting)]
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "tpfabric",
            str(CHART),
            "-n",
            namespace,
            "--kube-version",
            kube_version or pinned_versions()["kubernetes"],
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    ).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


def apply_confinement(
    cluster: LocalCluster, objects: list[dict[str, Any]], namespaces: Iterable[str]
) -> list[dict[str, Any]]:
    """Create ``namespaces`` (if missing) and apply exactly the RBAC and admission policies of
    ``objects``; return what was applied."""
    confinement = [d for d in objects if d.get("kind") in CONFINEMENT_KINDS]
    with api_client(cluster.kubeconfig) as api:
        core = client.CoreV1Api(api)
        present = {n.metadata.name for n in core.list_namespace().items}
        for name in set(namespaces) - present:
            core.create_namespace({"metadata": {"name": name}})
    applied = run_kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(confinement))
    assert applied.returncode == 0, applied.stderr
    return confinement


@pytest.fixture(scope="session")
def chart_identities(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, RunAs]:
    """Return ``{"operator": RunAs, "scheduler": RunAs, "fabric-agent": RunAs, "gang-webhook":
    RunAs}``: the chart's ServiceAccounts.

    Exactly the RBAC objects and admission policies ``helm template`` renders with default
    values and the fabric agent and the gang webhook enabled are applied (nothing added), a
    TokenRequest token of each ServiceAccount makes its kubeconfig, and the process runs as a uid
    without a passwd entry when the tests run as root -- as the chart's pods do. (The fabric
    agent's policy takes only a token bound to an agent pod: its tests make one with
    :func:`agent_pod`.)
    """
    objects = render_chart(tmp_path_factory, "fabricAgent.enabled=true", "gangWebhook.enabled=true")
    rbac = apply_confinement(local_cluster, objects, [CHART_NAMESPACE])
    uid = unused_uid() if os.geteuid() == 0 else None
    folder = tmp_path_factory.mktemp("identities")
    identities = {}
    for component in ("operator", "scheduler", "fabric-agent", "gang-webhook"):
        account = chart_account(rbac, component)
        kubeconfig = service_account_kubeconfig(
            local_cluster, CHART_NAMESPACE, account, folder / f"{component}.kubeconfig"
        )
        identities[component] = RunAs(kubeconfig, uid)
    return identities


def chart_account(objects: list[dict[str, Any]], component: str) -> str:
    """Return the name of the ServiceAccount ``objects`` make for ``component``."""
    return str(
        next(
            d["metadata"]["name"]
            for d in objects
            if d["kind"] == "ServiceAccount"
            and d["metadata"]["labels"].get("app.kubernetes.io/component") == component
        )
    )


def agent_pod(
    cluster: LocalCluster, namespace: str, account: str, node: str, name: str
) -> dict[str, Any]:
    """Create a pod of the fabric agent's account bound to ``node`` (as its DaemonSet would);
    return it. A token bound to it names the node."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "containers": [{"name": "fabric-agent", "image": "tpfabric/tpfabric:dev"}],
        },
    }
    with api_client(cluster.kubeconfig) as api:
        response = client.CoreV1Api(api).create_namespaced_pod(
            namespace, pod, _preload_content=False
        )
        created: dict[str, Any] = json.loads(response.data)
    return created


def gang_pod(name: str, labels: dict[str, str], *, cpu: str | None = None) -> dict[str, Any]:
    """A pod of 8 GPUs that another controller would make, opted into a gang by ``labels``."""
    limits = {"nvidia.com/gpu": "8", **({"cpu": cpu} if cpu else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {"name": "main", "image": "registry.local/train:1", "resources": {"limits": limits}}
            ]
        },
    }


@contextmanager
def configured_gang_webhook(cluster: LocalCluster, api: client.ApiClient) -> Iterator[GangWebhook]:
    """Run the gang webhook with its configuration applied; remove both afterwards."""
    hook = start_gang_webhook(cluster)
    registrations = client.AdmissionregistrationV1Api(api)
    config = hook.configuration()
    registrations.create_mutating_webhook_configuration(config)
    try:
        yield hook
    finally:
        registrations.delete_mutating_webhook_configuration(config["metadata"]["name"])
        hook.stop()


@contextmanager
def operator_and_gang_webhook(
    cluster: LocalCluster, api: client.ApiClient
) -> Iterator[GangWebhook]:
    """Run the operator and the gang webhook (configured) beside the placer; stop both after."""
    start_operator(cluster)
    try:
        with configured_gang_webhook(cluster, api) as hook:
            yield hook
    finally:
        cluster.stop_component(OPERATOR)


def opt_in(api: client.ApiClient, namespace: str) -> str:
    """Label ``namespace`` so that the gang webhook takes its gang pods in; return it."""
    client.CoreV1Api(api).patch_namespace(
        namespace, {"metadata": {"labels": {NAMESPACE_LABEL: "enabled"}}}
    )
    return namespace


def spec_writes(pod: client.V1Pod) -> list[str]:
    """Return the managers that wrote the pod's object itself (its creation, a release patch),
    not its status or its binding."""
    return [
        f"{entry.manager}/{entry.operation}"
        for entry in pod.metadata.managed_fields or []
        if not entry.subresource
    ]
