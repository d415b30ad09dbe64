"""Start tpfabric's own components on a local cluster: the CRD, the extender/placer process and
the second kube-scheduler (profile ``tpfabric-scheduler``) wired to it."""

from __future__ import annotations

import base64
import os
import pwd
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from tpfabric_core.api.crd import gang_crd, tensor_parallel_job_crd
from tpfabric_localcluster.cluster import LocalCluster, api_client, free_ports
from tpfabric_scheduler.kube_scheduler_config import SCHEDULER_NAME, scheduler_configuration

__all__ = [
    "EXTENDER",
    "LOCAL_OPERATOR_ARGS",
    "OPERATOR",
    "SCHEDULER_NAME",
    "TPFABRIC_SCHEDULER",
    "RunAs",
    "install_crd",
    "metrics_url",
    "service_account_kubeconfig",
    "service_account_token",
    "start_extender",
    "start_operator",
    "start_scheduling",
    "unused_uid",
]

EXTENDER = "tpfabric-extender"
TPFABRIC_SCHEDULER = "kube-scheduler-tpfabric"


def install_crd(cluster: LocalCluster) -> None:
    """Create or update the CRDs (TensorParallelJob, Gang); wait until they are established."""
    for crd in (tensor_parallel_job_crd(), gang_crd()):
        _install_one(cluster, crd)


def _install_one(cluster: LocalCluster, crd: dict[str, Any]) -> None:
    with api_client(cluster.kubeconfig) as api:
        ext = client.ApiextensionsV1Api(api)
        try:
            utils.create_from_dict(api, crd)
        except utils.FailToCreateError as err:
            if not all(isinstance(e, ApiException) and e.status == 409 for e in err.api_exceptions):
                raise
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            conditions = {c.type: c.status for c in current.status.conditions or []}
            if conditions.get("Established") == "True":
                return
            time.sleep(0.2)
    raise TimeoutError(f"the CRD {crd['metadata']['name']} was not established in 30s")


@dataclass(frozen=True)
class RunAs:
    """Who a component process is: whose credentials it uses and which uid it runs as.

    By default components run as the caller with the admin kubeconfig. A ``RunAs`` runs one with
    ``kubeconfig`` (e.g. a ServiceAccount's, :func:`service_account_kubeconfig`) and, when the
    caller is root, as ``uid`` -- a uid without a passwd entry, as in the chart's containers
    (65532), with an environment that names no user (getpass falls back to the passwd database).
    """

    kubeconfig: Path
    uid: int | None = None

    def wrap(self, argv: list[str]) -> list[str]:
        """Return ``argv`` run as this uid (unchanged when no uid is asked for)."""
        if self.uid is None:
            return argv
        setpriv = shutil.which("setpriv")
        if os.geteuid() != 0 or setpriv is None:
            raise RuntimeError(f"running as uid {self.uid} needs root and setpriv (util-linux)")
        # CAP_DAC_READ_SEARCH only lets the process read the interpreter and repo wherever they
        # live (a pyenv under a 0700 home); it is still uid N with no passwd entry.
        return [
            "env",
            *(f"--unset={var}" for var in ("USER", "LOGNAME", "LNAME", "USERNAME")),
            f"HOME={self.kubeconfig.parent}",
            setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.uid}",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            *argv,
        ]


def unused_uid(start: int = 65532) -> int:
    """Return the first uid from ``start`` on that has no passwd entry."""
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def service_account_token(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    *,
    pod: str | None = None,
    seconds: int = 86400,
) -> str:
    """Return a token of ServiceAccount ``namespace/name`` from the TokenRequest API.

    ``pod``: bind it to that pod of ``namespace``, as the kubelet binds a pod's projected token;
    the API server then names the pod's node in it (``authentication.kubernetes.io/node-name``,
    ServiceAccountTokenPodNodeInfo), by which a per-node policy tells the agents apart.
    """
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    with api_client(cluster.kubeconfig) as api:
        core = client.CoreV1Api(api)
        if pod is not None:
            uid = core.read_namespaced_pod(pod, namespace).metadata.uid
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}
        token: str = core.create_namespaced_service_account_token(
            name, namespace, {"spec": spec}
        ).status.token
    return token


def service_account_kubeconfig(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    path: Path,
    seconds: int = 86400,
    *,
    pod: str | None = None,
) -> Path:
    """Write a kubeconfig at ``path`` that authenticates as ServiceAccount ``namespace/name``.

    The token comes from the API server's TokenRequest API, as a pod's projected token does
    (bound to ``pod`` when given: :func:`service_account_token`); the file is world-readable so
    that a component under another uid can read it.
    """
    token = service_account_token(cluster, namespace, name, pod=pod, seconds=seconds)
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = dict(admin["clusters"][0]["cluster"])
    user = f"system:serviceaccount:{namespace}:{name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    if "certificate-authority" in server:  # inline the CA file: the other uid may not read it
        server["certificate-authority-data"] = base64.b64encode(
            Path(server.pop("certificate-authority")).read_bytes()
        ).decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o755)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o644)
    return path


#: placer flags of the local cluster: bounds short enough for tests and the demo to show them
LOCAL_PLACER_ARGS = (
    "--lease-namespace=kube-system",
    "--lease-seconds=6",
    "--renew-seconds=4",
    "--retry-seconds=1",
    "--bind-timeout-seconds=30",
    "--head-of-line-seconds=60",
    # the fabric agents' heartbeat Leases, as the chart's --fabric-agent-namespace (an agent run
    # by hand or by a test renews its node's there; no Lease, no silence)
    "--fabric-agent-namespace=kube-system",
)


def start_extender(
    cluster: LocalCluster,
    port: int | None = None,
    *,
    name: str = EXTENDER,
    extra_args: Sequence[str] = (),
    run_as: RunAs | None = None,
    metrics_auth: str = "none",
) -> int:
    """Start an extender/placer process (``name``) against ``cluster``; return its port.

    A restart reuses the port and flags of the previous run of ``name``: the scheduler's
    configuration points there. Several replicas (different names) elect one placer by Lease.
    Its metrics and health port listens on loopback: ``metrics_auth`` ``none`` (plain HTTP, no
    check) or ``kubernetes`` (HTTPS, every scrape reviewed by the API server, as in the chart);
    :func:`metrics_url` says where.
    """
    state = cluster.state()
    previous = state.components.get(name) if state else None
    if previous is not None and port is None and not extra_args and run_as is None:
        argv = list(previous.argv)
        port = previous.port()
    else:
        port = port or free_ports(1)[0]
        metrics_port = next(p for p in free_ports(2) if p != port)
        argv = [
            sys.executable,
            "-m",
            "tpfabric_scheduler",
            f"--kubeconfig={run_as.kubeconfig if run_as else cluster.kubeconfig}",
            "--host=127.0.0.1",
            f"--port={port}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            f"--metrics-auth={metrics_auth}",
            f"--identity={name}",
            *LOCAL_PLACER_ARGS,
            *extra_args,
        ]
        argv = run_as.wrap(argv) if run_as else argv
    cluster.add_component(
        name, argv, metrics_url(argv, "/readyz"), env={"TPFABRIC_LOG_LEVEL": "DEBUG"}
    )
    return port


def metrics_url(argv: Sequence[str], path: str = "/metrics") -> str:
    """Return the URL of ``path`` on the metrics and health port of a component started with
    ``argv`` (its ``--metrics-port`` on loopback; https unless ``--metrics-auth=none``)."""
    flags = dict(a.split("=", 1) for a in argv if a.startswith("--metrics-"))
    scheme = "http" if flags.get("--metrics-auth") == "none" else "https"
    return f"{scheme}://127.0.0.1:{flags['--metrics-port']}{path}"


def start_scheduling(cluster: LocalCluster) -> int:
    """Install the CRD, start the extender and the tpfabric kube-scheduler; return the port."""
    install_crd(cluster)
    port = start_extender(cluster)
    cluster.start_scheduler(TPFABRIC_SCHEDULER, scheduler_configuration(f"http://127.0.0.1:{port}"))
    return port


OPERATOR = "tpfabric-operator"
#: operator flags of the local cluster: its lease (``tpfabric-operator``) beside the placer's,
#: with bounds short enough for tests to see a take-over
LOCAL_OPERATOR_ARGS = (
    "--metrics-port=0",
    "--lease-namespace=kube-system",
    "--lease-seconds=6",
    "--renew-seconds=4",
    "--retry-seconds=1",
)


def start_operator(
    cluster: LocalCluster,
    *,
    reconcile_seconds: float = 1.0,
    name: str = OPERATOR,
    run_as: RunAs | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> None:
    """Start the operator (kopf) against ``cluster``, with its liveness endpoint on loopback.

    ``run_as`` runs it with other credentials and uid (default: the admin kubeconfig, as the
    caller). Several operators (different names) elect the one that acts by a Lease;
    ``extra_args`` come after :data:`LOCAL_OPERATOR_ARGS` (a later flag wins); ``env``: more
    ``TPFABRIC_*`` settings (they win over the local ones).
    """
    (port,) = free_ports(1)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_operator",
        f"--kubeconfig={run_as.kubeconfig if run_as else cluster.kubeconfig}",
        f"--liveness=http://127.0.0.1:{port}/healthz",
        *LOCAL_OPERATOR_ARGS,
        *extra_args,
    ]
    cluster.add_component(
        name,
        run_as.wrap(argv) if run_as else argv,
        f"http://127.0.0.1:{port}/healthz",
        env={
            "TPFABRIC_RECONCILE_SECONDS": str(reconcile_seconds),
            # gang records looked at every 2 s, deleted 5 s after their pods (tests see it)
            "TPFABRIC_GANG_SYNC_SECONDS": "2",
            "TPFABRIC_GANG_IDLE_SECONDS": "5",
            # a gang short of pods tells them after 4 s
            "TPFABRIC_GANG_SHORT_NOTICE_SECONDS": "4",
            **(env or {}),
        },
    )
