"""Start tpfabric's own components on a local cluster: the CRD, the extender/placer process and
the second kube-scheduler (profile ``tpfabric-scheduler``) wired to it."""

from __future__ import annotations

import sys
import time

from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from tpfabric_core.api.crd import tensor_parallel_job_crd
from tpfabric_localcluster.cluster import LocalCluster, api_client, free_ports
from tpfabric_scheduler.config import SCHEDULER_NAME, scheduler_configuration

__all__ = [
    "EXTENDER",
    "OPERATOR",
    "SCHEDULER_NAME",
    "TPFABRIC_SCHEDULER",
    "install_crd",
    "start_extender",
    "start_operator",
    "start_scheduling",
]

EXTENDER = "tpfabric-extender"
TPFABRIC_SCHEDULER = "kube-scheduler-tpfabric"


def install_crd(cluster: LocalCluster) -> None:
    """Create or update the TensorParallelJob CRD and wait until it is established."""
    crd = tensor_parallel_job_crd()
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
    raise TimeoutError("the TensorParallelJob CRD was not established in 30s")


def start_extender(cluster: LocalCluster, port: int | None = None) -> int:
    """Start the extender/placer process against ``cluster``; return its port.

    A restart reuses the port of the previous run: the scheduler's configuration points there.
    """
    state = cluster.state()
    previous = state.components.get(EXTENDER) if state else None
    if port is None and previous is not None:
        port = next(int(a.split("=", 1)[1]) for a in previous.argv if a.startswith("--port="))
    (port,) = (port,) if port else free_ports(1)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_scheduler",
        f"--kubeconfig={cluster.kubeconfig}",
        "--host=127.0.0.1",
        f"--port={port}",
    ]
    cluster.add_component(
        EXTENDER, argv, f"http://127.0.0.1:{port}/readyz", env={"TPFABRIC_LOG_LEVEL": "DEBUG"}
    )
    return port


def start_scheduling(cluster: LocalCluster) -> int:
    """Install the CRD, start the extender and the tpfabric kube-scheduler; return the port."""
    install_crd(cluster)
    port = start_extender(cluster)
    cluster.start_scheduler(TPFABRIC_SCHEDULER, scheduler_configuration(f"http://127.0.0.1:{port}"))
    return port


OPERATOR = "tpfabric-operator"


def start_operator(cluster: LocalCluster, *, reconcile_seconds: float = 1.0) -> None:
    """Start the operator (kopf) against ``cluster``, with its liveness endpoint on loopback."""
    (port,) = free_ports(1)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_operator",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--liveness=http://127.0.0.1:{port}/healthz",
    ]
    cluster.add_component(
        OPERATOR,
        argv,
        f"http://127.0.0.1:{port}/healthz",
        env={"TPFABRIC_RECONCILE_SECONDS": str(reconcile_seconds)},
    )
