"""The LeaderWorkerSet and JobSet controllers on the local control plane: their CRDs, their
webhooks on loopback, the processes.

Both are built from the Go module proxy by ``tpfabric toolchain build --controllers`` (the wrapper
e2e/toolchain/controllers); their CRDs and webhook manifests are copied out of the modules beside
the binaries. As for Kueue (:mod:`.kueue`), the API server reaches their webhooks at
``https://127.0.0.1:<port>``, served with its own serving certificate, and every ``caBundle`` is
the cluster's CA. Their pod webhooks get the object selectors their kustomize patches give them
(only their own pods), so that they never see another pod.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tpfabric_localcluster.cluster import LocalCluster, free_ports
from tpfabric_localcluster.toolchain import find_toolchain

__all__ = [
    "JOBSET",
    "LWS",
    "WorkloadController",
    "crds_on_loopback",
    "loopback",
    "start_workload_controller",
]


@dataclass(frozen=True, slots=True)
class WorkloadController:
    """One controller: its binary, config API, manifests and the label its pod webhooks select."""

    binary: str
    config_api: str
    crd_folder: str
    webhook_folder: str
    pod_label: str

    @property
    def component(self) -> str:
        """Return the name of its process on the local cluster."""
        return f"{self.binary}-controller"


LWS = WorkloadController(
    "lws", "config.lws.x-k8s.io/v1alpha1", "bases", "webhook", "leaderworkerset.sigs.k8s.io/name"
)
JOBSET = WorkloadController(
    "jobset",
    "config.jobset.x-k8s.io/v1alpha1",
    "bases",
    "webhook",
    "jobset.sigs.k8s.io/jobset-name",
)


def loopback(config: dict[str, Any], port: int, ca: str) -> None:
    """Point a webhook ``clientConfig`` at ``https://127.0.0.1:port`` (its path kept) instead of
    the controller's Service, trusted by the cluster's CA ``ca`` (base64)."""
    path = (config.get("service") or {}).get("path", "/")
    config.pop("service", None)
    config["url"] = f"https://127.0.0.1:{port}{path}"
    config["caBundle"] = ca


def crds_on_loopback(folder: Path, port: int, ca: str) -> list[dict[str, Any]]:
    """Return the CRDs of ``folder``, their conversion webhooks (if any) on loopback."""
    crds = []
    for file in sorted(folder.glob("*.yaml")):
        crd = yaml.safe_load(file.read_text())
        conversion = crd["spec"].get("conversion") or {}
        if conversion.get("strategy") == "Webhook":
            loopback(conversion["webhook"]["clientConfig"], port, ca)
        crds.append(crd)
    return crds


def _webhooks(
    controller: WorkloadController, manifest: Path, port: int, ca: str
) -> list[dict[str, Any]]:
    configs = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        for hook in doc.get("webhooks") or []:
            loopback(hook["clientConfig"], port, ca)
            if "pods" in hook["rules"][0]["resources"]:  # their kustomize patches do this
                hook["objectSelector"] = {
                    "matchExpressions": [{"key": controller.pod_label, "operator": "Exists"}]
                }
        doc["metadata"]["name"] = f"{controller.binary}-{doc['metadata']['name']}"
        configs.append(doc)
    return configs


def _apply(cluster: LocalCluster, objects: list[dict[str, Any]], *wait: str) -> None:
    kubectl = str(find_toolchain(("kubectl",)).path("kubectl"))
    base = [kubectl, f"--kubeconfig={cluster.kubeconfig}"]
    steps: list[tuple[list[str], str | None]] = [
        (["apply", "--server-side", "--force-conflicts", "-f", "-"], yaml.safe_dump_all(objects))
    ]
    if wait:
        steps.append((["wait", "--for=condition=Established", "--timeout=60s", *wait], None))
    for args, stdin in steps:
        for _ in range(20):
            done = subprocess.run(
                [*base, *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            # a CRD just made has no status yet: `kubectl wait` fails on it instead of waiting
            if done.returncode == 0 or "accessor error" not in done.stderr:
                break
            time.sleep(0.5)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {args[0]} failed: {done.stderr}")


def start_workload_controller(cluster: LocalCluster, controller: WorkloadController) -> None:
    """Install the controller's CRDs and webhooks and start it on ``cluster``."""
    binary = find_toolchain((controller.binary,)).path(controller.binary)
    manifests = binary.parent / "config" / controller.binary
    folder = cluster.folder / controller.binary
    certs = folder / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    pki = cluster.folder / "pki"
    shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
    shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
    ca = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
    webhook_port, probe_port = free_ports(2)
    crds = crds_on_loopback(manifests / controller.crd_folder, webhook_port, ca)
    _apply(cluster, crds, *(f"crd/{crd['metadata']['name']}" for crd in crds))
    config = folder / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": controller.config_api,
                "kind": "Configuration",
                "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
                "metrics": {"bindAddress": "0"},
                "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
            }
        )
    )
    cluster.add_component(
        controller.component,
        [str(binary), f"--config={config}", "--zap-log-level=2"],
        f"http://127.0.0.1:{probe_port}/readyz",
        timeout=120,
        env={"KUBECONFIG": str(cluster.kubeconfig)},
    )
    manifest = manifests / controller.webhook_folder / "manifests.yaml"
    _apply(cluster, _webhooks(controller, manifest, webhook_port, ca))
