"""Start tpfabric's own components on a local cluster: the CRD, the extender/placer process and
the second kube-scheduler (profile ``tpfabric-scheduler``) wired to it."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

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


#: placer flags of the local cluster: bounds short enough for tests and the demo to show them
LOCAL_PLACER_ARGS = (
    "--lease-namespace=kube-system",
    "--lease-seconds=6",
    "--renew-seconds=4",
    "--retry-seconds=1",
    "--bind-timeout-seconds=30",
    "--head-of-line-seconds=60",
)


def start_extender(
    cluster: LocalCluster,
    port: int | None = None,
    *,
    name: str = EXTENDER,
    extra_args: Sequence[str] = (),
) -> int:
    """Start an extender/placer process (``name``) against ``cluster``; return its port.

    A restart reuses the port and flags of the previous run of ``name``: the scheduler's
    configuration points there. Several replicas (different names) elect one placer by Lease.
    """
    state = cluster.state()
    previous = state.components.get(name) if state else None
    if previous is not None and port is None and not extra_args:
        argv = list(previous.argv)
        port = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--port="))
    else:
        (port,) = (port,) if port else free_ports(1)
        argv = [
            sys.executable,
            "-m",
            "tpfabric_scheduler",
            f"--kubeconfig={cluster.kubeconfig}",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--identity={name}",
            *LOCAL_PLACER_ARGS,
            *extra_args,
        ]
    cluster.add_component(
        name, argv, f"http://127.0.0.1:{port}/readyz", env={"TPFABRIC_LOG_LEVEL": "DEBUG"}
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
