"""Gangs of other controllers on the local control plane, as a user runs them: ``tpfabric cluster
up --gangs``.

A cluster gets what the chart with ``gangWebhook.enabled=true`` installs on a real one, each as a
local process: tpfabric's CRDs, the placer/extender and tpfabric's kube-scheduler, the operator,
and the gang webhook with its MutatingWebhookConfiguration; and beside them the real
LeaderWorkerSet and JobSet controllers with their CRDs and webhooks (built by ``tpfabric toolchain
build --controllers``). Then ``kubectl apply -f examples/gangs/`` runs as docs/gangs.md shows:
the namespace opts in, the webhook wires the pods, the operator keeps their Gang records and the
placer places each gang whole. The processes are the cluster's: ``tpfabric cluster down`` stops
them with the rest.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.gang_webhook import start_gang_webhook
from tpfabric_localcluster.toolchain import MissingBinaryError, find_toolchain
from tpfabric_localcluster.tpfabric import start_operator, start_scheduling
from tpfabric_localcluster.workload_controllers import JOBSET, LWS, start_workload_controller

__all__ = ["start_gangs"]


def start_gangs(cluster: LocalCluster) -> None:
    """Start tpfabric (CRDs, placer and scheduler, operator, gang webhook, configured) and the
    LeaderWorkerSet and JobSet controllers on ``cluster``; MissingBinaryError names the build
    that provides a missing controller."""
    missing = find_toolchain((LWS.binary, JOBSET.binary)).missing
    if missing:
        raise MissingBinaryError(
            f"missing {', '.join(missing)}: run `tpfabric toolchain build --controllers` (the "
            "LeaderWorkerSet and JobSet controllers, from the Go module proxy)"
        )
    start_scheduling(cluster)
    start_operator(cluster)
    hook = start_gang_webhook(cluster)
    configuration = hook.configuration()
    with api_client(cluster.kubeconfig) as api:
        registrations = client.AdmissionregistrationV1Api(api)
        try:
            registrations.create_mutating_webhook_configuration(configuration)
        except ApiException as err:
            if err.status != 409:
                raise
            name = configuration["metadata"]["name"]
            registrations.patch_mutating_webhook_configuration(name, configuration)
    for controller in (LWS, JOBSET):
        start_workload_controller(cluster, controller)
