"""Kueue's controller on the local control plane: its CRDs, its webhooks on loopback, the process.

Kueue is built from the Go module proxy like the other tools (``toolchain.GO_INSTALL_TOOLS``); its
CRDs and webhook configurations are copied out of the module beside the binary. In a cluster the
API server reaches Kueue's webhooks through a Service; here it calls ``https://127.0.0.1:<port>``,
served with the API server's own serving certificate (SAN 127.0.0.1, issued by the cluster's CA),
and every ``caBundle`` is that CA. Only Kueue's own webhooks (its API objects and the CRD
conversions) are installed: the job-framework webhooks (pods, batch Jobs) stay off, so Kueue
touches nothing but what is queued through it. TensorParallelJobs are an external framework: the
tpfabric operator makes their Workloads (``tpfabric_operator.jobs.kueue.workload``).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tpfabric_localcluster.cluster import LocalCluster, free_ports
from tpfabric_localcluster.toolchain import find_toolchain
from tpfabric_localcluster.workload_controllers import crds_on_loopback, loopback

__all__ = ["KUEUE", "KUEUE_NAMESPACE", "PodsReadyWait", "start_kueue"]

KUEUE = "kueue-controller"
KUEUE_NAMESPACE = "kueue-system"
TPJ_FRAMEWORK = "TensorParallelJob.v1alpha1.tpfabric.io"
METRICS_CERTS = "/etc/kueue/metrics/certs"


def _webhooks(manifest: Path, port: int, ca: str) -> list[dict[str, Any]]:
    """Return Kueue's webhook configurations, only the hooks of Kueue's own API group."""
    configs = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        hooks = [
            h
            for h in doc.get("webhooks") or []
            if "kueue-x-k8s-io" in (h["clientConfig"].get("service") or {}).get("path", "")
        ]
        for hook in hooks:
            loopback(hook["clientConfig"], port, ca)
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        doc["webhooks"] = hooks
        configs.append(doc)
    return configs


def _kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> None:
    kubectl = find_toolchain(("kubectl",)).path("kubectl")
    done = subprocess.run(
        [str(kubectl), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {args[0]} of Kueue's manifests failed: {done.stderr}")


def _kubectl_apply(cluster: LocalCluster, objects: list[dict[str, Any]]) -> None:
    stdin = yaml.safe_dump_all(objects)
    _kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stdin)


@dataclass(frozen=True, slots=True)
class PodsReadyWait:
    """Kueue's ``waitForPodsReady``: an admitted workload whose pods are not all ready within
    ``timeout_seconds`` is evicted and requeued after a backoff (``backoff_base_seconds``
    doubling up to ``backoff_max_seconds``); after ``backoff_limit_count`` requeues (None: no
    limit) it is deactivated instead. Admission of others is never blocked meanwhile."""

    timeout_seconds: int
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600
    backoff_limit_count: int | None = None

    def configuration(self) -> dict[str, Any]:
        """Return the ``waitForPodsReady`` section of Kueue's configuration (v1beta2: its
        presence turns the feature on)."""
        strategy: dict[str, Any] = {
            "timestamp": "Eviction",
            "backoffBaseSeconds": self.backoff_base_seconds,
            "backoffMaxSeconds": self.backoff_max_seconds,
        }
        if self.backoff_limit_count is not None:
            strategy["backoffLimitCount"] = self.backoff_limit_count
        return {
            "timeout": f"{self.timeout_seconds}s",
            "blockAdmission": False,
            "requeuingStrategy": strategy,
        }


def _configuration(
    folder: Path,
    webhook_port: int,
    probe_port: int,
    *,
    pods_ready: PodsReadyWait | None = None,
    finished_retention_seconds: int | None = None,
    managed_namespaces: dict[str, Any] | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(folder / "certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": managed_namespaces is not None,
        "integrations": {"frameworks": ["batch/job"], "externalFrameworks": [TPJ_FRAMEWORK]},
        # the on-demand visibility API is an aggregated API server of its own: not needed here
        "featureGates": {"VisibilityOnDemand": False},
    }
    if managed_namespaces is not None:
        config["managedJobsNamespaceSelector"] = managed_namespaces
    if pods_ready is not None:
        config["waitForPodsReady"] = pods_ready.configuration()
    if finished_retention_seconds is not None:
        config["objectRetentionPolicies"] = {
            "workloads": {"afterFinished": f"{finished_retention_seconds}s"}
        }
    return config


def start_kueue(
    cluster: LocalCluster,
    *,
    pods_ready: PodsReadyWait | None = None,
    finished_retention_seconds: int | None = None,
    managed_namespaces: dict[str, Any] | None = None,
) -> None:
    """Install Kueue's CRDs and webhooks and start its controller (``KUEUE``) on ``cluster``.

    ``pods_ready``: turn on Kueue's ``waitForPodsReady`` (default off);
    ``finished_retention_seconds``: Kueue deletes a finished Workload that long after it
    finished (``objectRetentionPolicies.workloads.afterFinished``; default: kept);
    ``managed_namespaces``: turn on ``manageJobsWithoutQueueName`` with this
    ``managedJobsNamespaceSelector`` (default off).
    """
    binary = find_toolchain(("kueue",)).path("kueue")
    manifests = binary.parent / "config"
    folder = cluster.folder / "kueue"
    (folder / "certs").mkdir(parents=True, exist_ok=True)
    pki = cluster.folder / "pki"
    shutil.copyfile(pki / "apiserver.crt", folder / "certs" / "tls.crt")
    shutil.copyfile(pki / "apiserver.key", folder / "certs" / "tls.key")
    # without internal cert management Kueue reads its metrics certificate from a fixed path
    # (metrics are off, but the watcher must start): the same loopback certificate
    metrics = Path(METRICS_CERTS)
    if not (metrics / "tls.crt").exists():
        try:
            metrics.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pki / "apiserver.crt", metrics / "tls.crt")
            shutil.copyfile(pki / "apiserver.key", metrics / "tls.key")
        except OSError as err:
            raise RuntimeError(
                f"Kueue needs a certificate in {METRICS_CERTS} (a path built into it); "
                f"create it writable or run as root: {err}"
            ) from err
    ca = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
    webhook_port, probe_port = free_ports(2)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}
    crds = crds_on_loopback(manifests / "bases", webhook_port, ca)
    _kubectl_apply(cluster, [namespace, *crds])
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    _kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", *names)
    config = folder / "config.yaml"
    settings = _configuration(
        folder,
        webhook_port,
        probe_port,
        pods_ready=pods_ready,
        finished_retention_seconds=finished_retention_seconds,
        managed_namespaces=managed_namespaces,
    )
    config.write_text(yaml.safe_dump(settings))
    cluster.add_component(
        KUEUE,
        [str(binary), f"--config={config}", "--zap-log-level=2"],
        f"http://127.0.0.1:{probe_port}/readyz",
        timeout=120,
        env={"KUBECONFIG": str(cluster.kubeconfig)},
    )
    _kubectl_apply(cluster, _webhooks(manifests / "webhook" / "manifests.yaml", webhook_port, ca))
