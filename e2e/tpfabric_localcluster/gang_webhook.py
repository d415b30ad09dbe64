"""tpfabric's gang webhook on the local control plane: the process and its configuration.

As Kueue's webhooks here (:mod:`.kueue`), the webhook is served on ``https://127.0.0.1:<port>``
with the API server's own serving certificate (SAN 127.0.0.1, issued by the cluster's CA), and
the configuration's ``caBundle`` is that CA. The configuration is the one a cluster gets: one
webhook per way of opting in, each limited to namespaces labelled ``tpfabric.io/gangs=enabled``
and to pods that carry the opt-in label, so that no other pod ever reaches the webhook.
"""

from __future__ import annotations

import base64
import shutil
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Any

from tpfabric_core.gangs import NAMESPACE_OPT_IN_LABEL
from tpfabric_localcluster.cluster import LocalCluster, free_ports
from tpfabric_localcluster.tpfabric import metrics_url
from tpfabric_operator.webhook.__main__ import command_line

__all__ = [
    "GANG_WEBHOOK",
    "NAMESPACE_LABEL",
    "OPT_IN_LABELS",
    "GangWebhook",
    "start_gang_webhook",
    "webhook_configuration",
]

GANG_WEBHOOK = "tpfabric-gang-webhook"
CONFIGURATION = "tpfabric-gangs"
#: the namespace label that opts a namespace in
NAMESPACE_LABEL = NAMESPACE_OPT_IN_LABEL
#: (webhook name, the pod label whose presence opts a pod in)
OPT_IN_LABELS = (
    ("gang-pods.tpfabric.io", "tpfabric.io/gang-name"),
    ("kueue-pod-groups.tpfabric.io", "kueue.x-k8s.io/pod-group-name"),
    ("leaderworkerset-pods.tpfabric.io", "leaderworkerset.sigs.k8s.io/name"),
    ("jobset-pods.tpfabric.io", "jobset.sigs.k8s.io/jobset-name"),
)
#: pods that name a scheduling.k8s.io PodGroup carry no label to select: a CEL match condition
#: (the API server evaluates it; only matching pods cost a call)
WORKLOAD_HOOK = "workload-pod-groups.tpfabric.io"
WORKLOAD_CONDITION = {
    "name": "names-a-pod-group",
    "expression": (
        "has(object.spec.schedulingGroup) && has(object.spec.schedulingGroup.podGroupName)"
    ),
}


def webhook_configuration(
    client_config: dict[str, Any], *, failure_policy: str = "Fail", timeout_seconds: int = 3
) -> dict[str, Any]:
    """Return the MutatingWebhookConfiguration of the gang webhook.

    ``failurePolicy: Fail`` applies to opted-in pods only (the selectors keep every other pod
    away): while tpfabric is down a gang's pods are not created (their controller retries), which
    is better than pods without the gate and the RDMA wiring placed by another scheduler.
    """
    hooks = [
        {
            "name": name,
            "clientConfig": client_config,
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: "enabled"}},
            "objectSelector": {"matchExpressions": [{"key": label, "operator": "Exists"}]},
            "failurePolicy": failure_policy,
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "admissionReviewVersions": ["v1"],
            # never called twice: what another webhook (LWS's own) adds after ours, the pod's
            # name already says (gangs.py reads it); IfNeeded made every gang pod two calls, as
            # the API server's ServiceAccount admission runs again after ours adds rdma-init
            "reinvocationPolicy": "Never",
        }
        for name, label in OPT_IN_LABELS
    ]
    workload = {**hooks[0], "name": WORKLOAD_HOOK, "matchConditions": [WORKLOAD_CONDITION]}
    del workload["objectSelector"]
    hooks.append(workload)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION},
        "webhooks": hooks,
    }


class GangWebhook:
    """The running webhook: its URL, the CA that signs its certificate, its process name."""

    def __init__(self, cluster: LocalCluster, port: int, ca: Path, argv: list[str]) -> None:
        self.cluster = cluster
        self.port = port
        self.ca = ca
        self.argv = argv
        self.url = f"https://127.0.0.1:{port}"
        #: its /metrics (plain HTTP on loopback, no check: ``command_line``'s ``metrics_port``)
        self.metrics_url = metrics_url(argv)

    def start(self, timeout: float = 30.0) -> None:
        """Start the process (again, after a stop) and wait until it serves TLS."""
        self.cluster.add_component(GANG_WEBHOOK, self.argv)
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gang webhook did not serve on {self.url} in {timeout} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the process (an outage of the webhook)."""
        self.cluster.stop_component(GANG_WEBHOOK)

    def healthy(self) -> bool:
        """Return whether the webhook answers ``/healthz`` over TLS (verified with the CA)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2, context=context) as r:  # noqa: S310 - our own https URL
                return bool(r.status == 200)
        except OSError:
            return False

    def configuration(self, **kwargs: Any) -> dict[str, Any]:
        """Return the webhook configuration pointing at this process."""
        ca = base64.b64encode(self.ca.read_bytes()).decode()
        return webhook_configuration({"url": f"{self.url}/mutate-pods", "caBundle": ca}, **kwargs)


def start_gang_webhook(
    cluster: LocalCluster,
    *,
    init_image: str = "tpfabric/rdma-init:dev",
    timeout: float = 30.0,
    extra: tuple[str, ...] = (),
) -> GangWebhook:
    """Start the gang webhook (``GANG_WEBHOOK``) on loopback and wait until it serves TLS.

    It reads the nodes with the cluster's admin kubeconfig (the default RDMA devices of a gang
    pod are what the nodes offer); ``extra``: more flags (``--rdma-resource=...``). The
    configuration is not applied: the caller applies :meth:`GangWebhook.configuration`.
    """
    folder = cluster.folder / "gang-webhook"
    certs = folder / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    pki = cluster.folder / "pki"
    shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
    shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
    port, metrics_port = free_ports(2)
    argv = command_line(
        certs,
        port,
        init_image,
        f"--kubeconfig={cluster.kubeconfig}",
        *extra,
        metrics_port=metrics_port,
    )
    webhook = GangWebhook(cluster, port, pki / "ca.crt", argv)
    webhook.start(timeout)
    return webhook
