"""Bring a local Kubernetes control plane up and down: etcd, kube-apiserver (TLS, RBAC, service
account keys), kube-controller-manager, kube-scheduler and kwok, as processes on 127.0.0.1.

State of a cluster lives in one folder (``state.json``, PKI, kubeconfigs, logs, etcd data); ``up``
records exactly what it started there and ``down`` stops exactly that and removes the folder. The
scheduler takes a ``KubeSchedulerConfiguration`` file so that the extender can be wired in.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tpfabric_localcluster.pki import Pki, create_pki
from tpfabric_localcluster.processes import (
    ComponentCrashedError,
    ComponentProcess,
    start_component,
)
from tpfabric_localcluster.toolchain import Toolchain, find_toolchain

__all__ = ["ClusterState", "LocalCluster", "api_client", "default_state_root", "free_ports"]

SERVICE_CIDR = "10.96.0.0/16"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: kwok plays every fake kubelet's pod and node stages 4 at a time by default: a gang of 256
#: pods bound at once would queue for seconds behind one process, where 256 real kubelets start
#: their pods side by side. 32 keeps a burst's pods starting together on 2 cores. Node leases
#: likewise: 4 at a time renewed 1,000 leases too slowly under a burst, nodes blinked NotReady,
#: the node lifecycle controller marked their pods not Ready and kwok (unlike a kubelet) never
#: marked them Ready again, so jobs sat at 7/11 ready for good. A configuration file is not
#: defaulted field by field: every parallelism is spelled out.
KWOK_OPTIONS = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 16
  nodeLeaseParallelism: 16
  podsOnNodeSyncParallelism: 1
"""


def default_state_root() -> Path:
    """Return where cluster state folders live unless told otherwise."""
    if env := os.environ.get("TPFABRIC_STATE"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tpfabric" / "clusters"


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class ClusterState:
    """What ``up`` started; persisted as ``state.json`` in the cluster folder."""

    name: str
    folder: Path
    ports: dict[str, int] = field(default_factory=dict)
    components: dict[str, ComponentProcess] = field(default_factory=dict)
    scheduler_config: str = ""
    #: components stopped on purpose (not crashes); ``add_component`` clears the mark
    stopped: set[str] = field(default_factory=set)

    @property
    def state_file(self) -> Path:
        """Return the path of ``state.json``."""
        return self.folder / "state.json"

    def save(self) -> None:
        """Write ``state.json`` atomically."""
        data = {
            "name": self.name,
            "ports": self.ports,
            "components": {k: v.to_json() for k, v in self.components.items()},
            "schedulerConfig": self.scheduler_config,
            "stopped": sorted(self.stopped),
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, folder: Path) -> ClusterState | None:
        """Return the saved state of the cluster in ``folder``, or None if there is none."""
        try:
            data = json.loads((folder / "state.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(
            name=data["name"],
            folder=folder,
            ports={k: int(v) for k, v in data["ports"].items()},
            components={k: ComponentProcess.from_json(v) for k, v in data["components"].items()},
            scheduler_config=data.get("schedulerConfig", ""),
            stopped=set(data.get("stopped", [])),
        )


def _kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tpfabric-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [
            {"name": "tpfabric-local", "context": {"cluster": "tpfabric-local", "user": user}}
        ],
        "current-context": "tpfabric-local",
    }


class LocalCluster:
    """One local cluster, addressed by name under a state root."""

    def __init__(
        self,
        name: str = "tpfabric",
        state_root: Path | None = None,
        toolchain: Toolchain | None = None,
        log: Callable[[str], None] | None = None,
        *,
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Sequence[str] = (),
        admission_config: Mapping[str, Any] | None = None,
    ) -> None:
        """``feature_gates``: given to the API server, controller manager and every scheduler
        (e.g. ``{"GenericWorkload": True}``); ``runtime_config``: API versions the API server
        serves beyond its defaults (e.g. ``scheduling.k8s.io/v1beta1=true``);
        ``admission_config``: an ``AdmissionConfiguration`` for the API server's admission
        plugins (e.g. ResourceQuota's ``limitedResources``, as managed clusters set it)."""
        self.name = name
        self.folder = (state_root or default_state_root()) / name
        self._toolchain = toolchain
        self._log = log or (lambda _line: None)
        self.feature_gates = dict(feature_gates or {})
        self.runtime_config = tuple(runtime_config)
        self.admission_config = dict(admission_config) if admission_config else None

    def _gates(self) -> list[str]:
        if not self.feature_gates:
            return []
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
        return [f"--feature-gates={gates}"]

    @property
    def toolchain(self) -> Toolchain:
        """Return the binaries this cluster runs (looked up once, never built here)."""
        if self._toolchain is None:
            self._toolchain = find_toolchain()
        return self._toolchain

    @property
    def kubeconfig(self) -> Path:
        """Return the admin kubeconfig path (system:masters)."""
        return self.folder / "kubeconfig"

    def state(self) -> ClusterState | None:
        """Return the saved state, or None when this cluster is not up."""
        return ClusterState.load(self.folder)

    # -- up ----------------------------------------------------------------------------------

    def up(self, scheduler_config: Path | None = None, timeout: float = 120.0) -> ClusterState:
        """Start every component and wait until each is healthy; return the recorded state.

        On any failure everything already started is stopped again and the error says which
        component failed, with its log tail.
        """
        existing = self.state()
        if existing is not None and any(c.alive() for c in existing.components.values()):
            raise RuntimeError(
                f"cluster {self.name!r} is already up (state in {self.folder}); "
                f"run `tpfabric cluster down --name {self.name}` first"
            )
        tools = self.toolchain
        for binary in (
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ):
            tools.path(binary)  # raises MissingBinaryError with the install hint
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        names = ["etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"]
        state = ClusterState(
            self.name, self.folder, ports=dict(zip(names, free_ports(6), strict=True))
        )
        pki = create_pki(
            self.folder / "pki",
            {
                "admin": ("tpfabric-admin", "system:masters"),
                "scheduler": ("system:kube-scheduler", None),
                "controller-manager": ("system:kube-controller-manager", None),
            },
        )
        self._write_kubeconfigs(state, pki)
        state.scheduler_config = str(self._write_scheduler_config(scheduler_config))
        state.save()
        deadline = time.monotonic() + timeout
        try:
            self._start(state, "etcd", self._etcd_argv(state))
            self._wait(state, "etcd", f"http://127.0.0.1:{state.ports['etcd']}/health", deadline)
            self._start(state, "kube-apiserver", self._apiserver_argv(state, pki))
            self._wait(state, "kube-apiserver", self._api_url(state) + "/readyz", deadline)
            self._start(state, "kube-controller-manager", self._kcm_argv(state, pki))
            self._start(
                state,
                "kube-scheduler",
                self._scheduler_argv(state.scheduler_config, state.ports["scheduler"], "scheduler"),
            )
            self._start(state, "kwok", self._kwok_argv(state))
            for name, port in (
                ("kube-controller-manager", state.ports["controller-manager"]),
                ("kube-scheduler", state.ports["scheduler"]),
            ):
                self._wait(state, name, f"https://127.0.0.1:{port}/healthz", deadline)
            self._wait(state, "kwok", f"http://127.0.0.1:{state.ports['kwok']}/healthz", deadline)
        except BaseException:
            self._stop_components(state)
            # nothing runs any more: forget the state, keep the logs for the error's reader
            state.state_file.unlink(missing_ok=True)
            raise
        self._log(f"cluster {self.name!r} up: kubeconfig {self.kubeconfig}")
        return state

    def _start(self, state: ClusterState, name: str, argv: list[str]) -> None:
        self._log(f"starting {name}")
        state.components[name] = start_component(
            name, argv, self.folder / "logs" / f"{name}.log", self.folder
        )
        state.save()

    def _api_url(self, state: ClusterState) -> str:
        return f"https://127.0.0.1:{state.ports['apiserver']}"

    def _ssl_context(self) -> ssl.SSLContext:
        pki = self.folder / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return context

    def _probe(self, url: str) -> bool:
        """Return whether ``url`` answers 200 (API server: verified TLS with the admin cert;
        controller-manager and scheduler serve a self-signed cert on loopback, so unverified)."""
        if url.startswith("https://") and self.folder.joinpath("state.json").exists():
            port = int(url.split(":")[2].split("/", maxsplit=1)[0])
            state = self.state()
            api = state is not None and port == state.ports.get("apiserver")
            context = self._ssl_context() if api else ssl._create_unverified_context()  # noqa: S323
        else:
            context = None
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait(self, state: ClusterState, name: str, url: str, deadline: float) -> None:
        component = state.components[name]
        while time.monotonic() < deadline:
            if not component.alive():
                raise ComponentCrashedError(component.crash_report())
            if self._probe(url):
                self._log(f"{name} healthy")
                return
            time.sleep(0.25)
        raise ComponentCrashedError(
            f"{name} did not become healthy at {url} in time; " + component.crash_report()
        )

    def _write_kubeconfigs(self, state: ClusterState, pki: Pki) -> None:
        server = self._api_url(state)
        for stem, path in (
            ("admin", self.kubeconfig),
            ("scheduler", self.folder / "scheduler.kubeconfig"),
            ("controller-manager", self.folder / "controller-manager.kubeconfig"),
        ):
            client = pki.clients[stem]
            config = _kubeconfig(server, pki.ca_cert, client.cert, client.key, stem)
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            path.chmod(0o600)

    def _write_scheduler_config(self, user_config: Path | None) -> Path:
        """Return the scheduler config to run: the user's, with our connection settings."""
        if user_config is not None:
            try:
                config = yaml.safe_load(user_config.read_text())
            except (OSError, yaml.YAMLError) as err:
                raise ValueError(
                    f"{user_config}: cannot read scheduler configuration: {err}"
                ) from err
            if not isinstance(config, dict) or config.get("kind") != "KubeSchedulerConfiguration":
                raise ValueError(f"{user_config}: kind must be KubeSchedulerConfiguration")
        else:
            config = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": "default-scheduler"}],
            }
        config["clientConnection"] = {
            **config.get("clientConnection", {}),
            "kubeconfig": str(self.folder / "scheduler.kubeconfig"),
        }
        config.setdefault("leaderElection", {"leaderElect": False})
        path = self.folder / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _etcd_argv(self, state: ClusterState) -> list[str]:
        client = f"http://127.0.0.1:{state.ports['etcd']}"
        peer = f"http://127.0.0.1:{state.ports['etcd-peer']}"
        return [
            str(self.toolchain.path("etcd")),
            "--name=local",
            f"--data-dir={self.folder / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}",
            "--unsafe-no-fsync=true",  # throwaway test data: fsync only costs time
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ]

    def _apiserver_argv(self, state: ClusterState, pki: Pki) -> list[str]:
        return [
            str(self.toolchain.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{state.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={state.ports['apiserver']}",
            f"--cert-dir={self.folder / 'pki'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-key-file={pki.sa_public_key}",
            f"--service-account-signing-key-file={pki.sa_private_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            *self._gates(),
            *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
            *self._admission(),
            "--v=1",
        ]

    def _admission(self) -> list[str]:
        if self.admission_config is None:
            return []
        path = self.folder / "admission-config.yaml"
        path.write_text(yaml.safe_dump(self.admission_config))
        return [f"--admission-control-config-file={path}"]

    def _kcm_argv(self, state: ClusterState, pki: Pki) -> list[str]:
        kubeconfig = str(self.folder / "controller-manager.kubeconfig")
        return [
            str(self.toolchain.path("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={state.ports['controller-manager']}",
            f"--cert-dir={self.folder / 'pki' / 'controller-manager'}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_private_key}",
            f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # react to node readiness within a second (the default 5 s only slows tests down)
            "--node-monitor-period=1s",
            # a node whose heartbeat stops turns Unknown after these, and the controller marks its
            # pods not Ready, which kwok (unlike a kubelet) never undoes. kwok's lease loop can
            # drop nodes deleted and made again under the same name (seen in a CI run: 63 of 64
            # leases unrenewed after a test's fabric was made again; 50 s later every pod on
            # them was not Ready for good). No test here stops a heartbeat on purpose: a node
            # that must fail reports NotReady itself, which the controller acts on at once.
            "--node-monitor-grace-period=10m",
            "--node-startup-grace-period=10m",
            # the default 20 QPS untaints new nodes at ~5/s: 1,000 kwok nodes would take minutes
            "--kube-api-qps=300",
            "--kube-api-burst=600",
            # kwok nodes need no pod CIDRs
            "--controllers=*,-node-ipam-controller",
            *self._gates(),
            "--v=1",
        ]

    def _scheduler_argv(self, config: str, port: int, cert_dir: str) -> list[str]:
        kubeconfig = str(self.folder / "scheduler.kubeconfig")
        return [
            str(self.toolchain.path("kube-scheduler")),
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.folder / 'pki' / cert_dir}",
            *self._gates(),
            "--v=1",
        ]

    def _kwok_argv(self, state: ClusterState) -> list[str]:
        key, value = KWOK_NODE_ANNOTATION
        options = self.folder / "kwok-options.yaml"
        options.write_text(KWOK_OPTIONS)
        # only the stage files and our options: an explicit --config also keeps a user's
        # ~/.kwok/kwok.yaml out
        return [
            str(self.toolchain.path("kwok")),
            f"--config={options}",
            *(f"--config={stage}" for stage in self.toolchain.kwok_stages()),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--server-address=127.0.0.1:{state.ports['kwok']}",
            "--cidr=10.128.0.1/12",  # pod IPs are only written into pod status, never used
            "--node-ip=10.127.0.1",
            "--node-lease-duration-seconds=40",
        ]

    # -- components added after up ----------------------------------------------------------

    def add_component(
        self,
        name: str,
        argv: list[str],
        health_url: str | None = None,
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> ComponentProcess:
        """Start one more recorded process (stopped by ``down``) and wait for its health."""
        state = self.state()
        if state is None:
            raise RuntimeError(f"cluster {self.name!r} is not up")
        existing = state.components.get(name)
        if existing is not None and existing.alive():
            raise RuntimeError(f"{name} is already running (pid {existing.pid})")
        self._log(f"starting {name}")
        state.components[name] = start_component(
            name, argv, self.folder / "logs" / f"{name}.log", self.folder, env=env
        )
        state.stopped.discard(name)
        state.save()
        if health_url is not None:
            self._wait(state, name, health_url, time.monotonic() + timeout)
        return state.components[name]

    def kill_component(self, name: str) -> None:
        """Kill one recorded process with SIGKILL (a crash, for tests); it stays recorded."""
        state = self.state()
        if state is not None and name in state.components:
            state.components[name].kill()

    def stop_component(self, name: str) -> None:
        """Stop one recorded process on purpose (not a crash); it stays recorded for a restart."""
        state = self.state()
        if state is not None and name in state.components:
            state.components[name].stop()
            state.stopped.add(name)
            state.save()

    def restart_api_server(self, outage_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """Stop kube-apiserver, keep it down ``outage_seconds``, start it again with the same
        arguments and wait until it is ready: an upgrade or a crash of a one-replica control
        plane, as every client sees it (connections reset, watches end, requests refused)."""
        state = self.state()
        if state is None:
            raise RuntimeError(f"cluster {self.name!r} is not up")
        name = "kube-apiserver"
        argv = state.components[name].argv
        state.components[name].stop()
        time.sleep(outage_seconds)
        self._start(state, name, argv)
        self._wait(state, name, self._api_url(state) + "/readyz", time.monotonic() + timeout)

    def start_scheduler(self, name: str, config: dict[str, Any], timeout: float = 60.0) -> None:
        """Start another kube-scheduler (e.g. the tpfabric profile) with ``config``."""
        state = self.state()
        if state is None:
            raise RuntimeError(f"cluster {self.name!r} is not up")
        config = {**config, "leaderElection": {"leaderElect": False}}
        config["clientConnection"] = {
            **config.get("clientConnection", {}),
            "kubeconfig": str(self.folder / "scheduler.kubeconfig"),
        }
        path = self.folder / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        (port,) = free_ports(1)
        argv = self._scheduler_argv(str(path), port, name)
        self.add_component(name, argv, f"https://127.0.0.1:{port}/healthz", timeout)

    # -- status / down -----------------------------------------------------------------------

    def status(self) -> dict[str, str]:
        """Return ``{component: "running (pid N)" | "stopped" | "NOT RUNNING"}``."""
        state = self.state()
        if state is None:
            return {}
        return {
            name: f"running (pid {proc.pid})"
            if proc.alive()
            else ("stopped" if name in state.stopped else "NOT RUNNING")
            for name, proc in state.components.items()
        }

    def crashed(self) -> list[str]:
        """Return a crash report for every recorded component that is no longer running."""
        state = self.state()
        if state is None:
            return []
        return [
            proc.crash_report()
            for name, proc in state.components.items()
            if name not in state.stopped and not proc.alive()
        ]

    def _stop_components(self, state: ClusterState) -> None:
        # reverse start order: clients first, etcd last
        for name in reversed(list(state.components)):
            state.components[name].stop()

    def down(self, keep_logs: Path | None = None) -> bool:
        """Stop exactly the recorded processes and remove the state folder.

        Returns False when there was no cluster. ``keep_logs`` copies the logs there first.
        """
        state = self.state()
        if state is None:
            existed = self.folder.exists()
            shutil.rmtree(self.folder, ignore_errors=True)
            return existed
        self._stop_components(state)
        if keep_logs is not None:
            with contextlib.suppress(OSError):
                shutil.copytree(self.folder / "logs", keep_logs, dirs_exist_ok=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        return True


def api_client(kubeconfig: Path) -> Any:
    """Return a ``kubernetes.client.ApiClient`` for ``kubeconfig``."""
    from kubernetes import config  # noqa: PLC0415 - keeps `tpfabric cluster status` fast

    return config.new_client_from_config(config_file=str(kubeconfig))
