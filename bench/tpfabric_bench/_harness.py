"""What the live-cluster benchmarks share: bring-up, waits, process sampling, summaries, watches.

``local_cluster`` brings up a local control plane with kwok nodes of a fabric and a namespace
(always torn down; the components' logs are kept when the body raised). ``ProcessSampler``
samples the RSS and reads the CPU seconds of the components. ``EventClock`` follows a watch of
one resource with raw JSON lines (no client models: 10,000 pods are parsed in milliseconds) and
stamps, per object, the first time a predicate held -- the breakdown of a gang's time comes from
it. Nothing here asserts on timings; it only measures.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

from tpfabric_bench.placement import percentile
from tpfabric_core.fabric_description import FabricDescription

__all__ = [
    "EventClock",
    "ProcessSampler",
    "apiserver_metrics",
    "apiserver_requests",
    "environment",
    "grown",
    "histogram_totals",
    "local_cluster",
    "mean_ms_grown",
    "metric_labels",
    "placer_metrics_url",
    "request_counts",
    "request_seconds",
    "scheduler_metrics",
    "scheduling_seconds",
    "start_components",
    "start_gang_components",
    "start_placer",
    "summary",
    "tail",
    "vm_hwm_mib",
    "wait",
]

SAMPLE_SECONDS = 0.2


def wait(condition: Callable[[], bool], timeout: float, what: str, step: float = 0.25) -> None:
    """Return once ``condition()`` holds; TimeoutError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)


def summary(
    values: Sequence[float], quantiles: Sequence[float] = (0.5, 0.9), digits: int = 2
) -> dict[str, float]:
    """Return ``count``, ``p<q>`` for each quantile and ``max`` of ``values`` (zeros when empty)."""
    keys = [f"p{round(q * 100)}" for q in quantiles]
    if not values:
        return {"count": 0, **dict.fromkeys(keys, 0.0), "max": 0.0}
    result: dict[str, float] = {"count": len(values)}
    for key, q in zip(keys, quantiles, strict=True):
        result[key] = round(percentile(values, q), digits)
    result["max"] = round(max(values), digits)
    return result


def tail(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Return ``count``, ``p50``, ``p99`` and ``max`` of latencies (zeros when empty)."""
    return summary(values, (0.5, 0.99), digits)


def environment() -> dict[str, Any]:
    """Return what the numbers depend on: CPUs, load, Python, library versions, the commit."""
    from importlib.metadata import version  # noqa: PLC0415

    commit = ""
    git = shutil.which("git")
    if git:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            commit = subprocess.run(
                [git, "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
                cwd=Path(__file__).parent,
            ).stdout.strip()
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "platform": platform.platform(),
        "aiohttp": version("aiohttp"),
        "orjson": version("orjson"),
        "git_commit": commit,
    }


# -- processes ------------------------------------------------------------------------------------


def vm_hwm_mib(pid: int) -> float | None:
    """Return the kernel's peak resident set (``VmHWM``) of ``pid`` in MiB, None if unreadable."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


class ProcessSampler:
    """Samples the RSS of some processes in a thread; reads their CPU seconds on demand."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak_rss: dict[str, int] = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        """Take one RSS sample of every process (a gone process keeps its last peak)."""
        for name, process in self.processes.items():
            with contextlib.suppress(psutil.Error):
                rss = int(process.memory_info().rss)
                self.peak_rss[name] = max(self.peak_rss[name], rss)

    def cpu(self) -> dict[str, float]:
        """Return the CPU seconds (user + system) of every process so far."""
        result = {}
        for name, process in self.processes.items():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                result[name] = float(times.user + times.system)
        return result

    def reset_peaks(self) -> None:
        """Forget the peaks seen so far (start-up is not the burst)."""
        self.peak_rss = dict.fromkeys(self.processes, 0)
        self.sample()

    def __enter__(self) -> ProcessSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


# -- the API server -------------------------------------------------------------------------------

_REQUEST_PREFIX = "apiserver_request_total{"


def apiserver_metrics(api: Any) -> str:
    """Return the API server's /metrics text."""
    response = api.call_api("GET", api.configuration.host + "/metrics")
    text: str = response.read().decode()
    if response.status != 200:
        raise RuntimeError(f"the API server's /metrics answered {response.status}: {text[:200]}")
    return text


def apiserver_requests(api: Any) -> Counter[str]:
    """Return the API server's ``apiserver_request_total`` (see ``request_counts``)."""
    return request_counts(apiserver_metrics(api))


def metric_labels(text: str) -> dict[str, str]:
    """Return the labels of a Prometheus series' ``{...}`` text (quotes dropped) as a dict."""
    return dict(pair.split("=", 1) for pair in text.replace('"', "").split(",") if "=" in pair)


def _kind(found: dict[str, str]) -> str:
    resource = found.get("resource", "")
    if found.get("subresource"):
        resource += "/" + found["subresource"]
    return f"{found.get('verb', '')} {resource}"


def request_counts(metrics: str) -> Counter[str]:
    """Return ``apiserver_request_total`` of a /metrics text as ``VERB resource[/sub] code`` ->
    count (summed over the other labels)."""
    counts: Counter[str] = Counter()
    for line in metrics.splitlines():
        if not line.startswith(_REQUEST_PREFIX):
            continue
        labels_text, _, value = line[len(_REQUEST_PREFIX) :].rpartition("} ")
        found = metric_labels(labels_text)
        counts[f"{_kind(found)} {found.get('code', '')}"] += int(float(value))
    return counts


def histogram_totals(
    metrics: str, name: str, key: Callable[[dict[str, str]], str | None]
) -> dict[str, tuple[float, int]]:
    """Return the histogram ``name`` of a /metrics text as ``key(labels)`` -> (sum, count),
    summed over the series that share a key; a series whose key is ``None`` is left out."""
    totals: dict[str, list[float]] = {}
    for line in metrics.splitlines():
        if not line.startswith(name + "_"):
            continue
        series, _, value = line.rpartition(" ")
        head, _, labels_text = series.partition("{")
        part = head[len(name) + 1 :]
        if part not in ("sum", "count"):
            continue
        kind = key(metric_labels(labels_text.removesuffix("}")))
        if kind is None:
            continue
        pair = totals.setdefault(kind, [0.0, 0.0])
        pair[0 if part == "sum" else 1] += float(value)
    return {kind: (total, int(count)) for kind, (total, count) in totals.items()}


def request_seconds(metrics: str) -> dict[str, tuple[float, int]]:
    """Return ``apiserver_request_duration_seconds`` of a /metrics text as ``VERB
    resource[/sub]`` -> (seconds, requests), summed over the other labels; watches left out
    (their duration is the watch's life, not the server's work)."""
    return histogram_totals(
        metrics,
        "apiserver_request_duration_seconds",
        lambda found: None if found.get("verb") in ("WATCH", "CONNECT") else _kind(found),
    )


def scheduler_metrics(cluster: Any, name: str) -> str:
    """Return the /metrics text of the cluster's kube-scheduler ``name`` (its secure port).

    The admin client certificate authenticates the scrape (kube-scheduler delegates to the API
    server); the scheduler's serving certificate is the self-signed one it made for itself on
    127.0.0.1, so it is not verified.
    """
    port = cluster.state().components[name].port("--secure-port")
    pki = Path(cluster.folder) / "pki"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    url = f"https://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, context=context, timeout=30) as response:
        text: str = response.read().decode()
    return text


#: kube-scheduler's extension points whose time the benchmarks show, and their row names
_EXTENSION_POINTS = {
    "Filter": "Filter plugins (every node)",
    "Score": "Score plugins",
    "Bind": "Bind (the binding API call)",
}
SCHEDULING_ALGORITHM = "algorithm: filters, extender, scores"


def scheduling_seconds(metrics: str) -> dict[str, tuple[float, int]]:
    """Return kube-scheduler's own time of a /metrics text as what it timed -> (seconds,
    pods): its scheduling algorithm (the serial part of a pod's cycle: filter plugins over the
    nodes, the extender's filter, scoring) and the Filter, Score and Bind extension points."""
    algorithm = histogram_totals(
        metrics, "scheduler_scheduling_algorithm_duration_seconds", lambda _: SCHEDULING_ALGORITHM
    )
    points = histogram_totals(
        metrics,
        "scheduler_framework_extension_point_duration_seconds",
        lambda found: _EXTENSION_POINTS.get(found.get("extension_point", "")),
    )
    return algorithm | points


def mean_ms_grown(
    after: dict[str, tuple[float, int]], before: dict[str, tuple[float, int]]
) -> dict[str, dict[str, float]]:
    """Return, per request kind that grew, its count and the mean server time of the new ones."""
    out: dict[str, dict[str, float]] = {}
    for kind, (seconds, count) in after.items():
        old_seconds, old_count = before.get(kind, (0.0, 0))
        if count > old_count:
            out[kind] = {
                "requests": count - old_count,
                "mean_ms": round((seconds - old_seconds) / (count - old_count) * 1e3, 2),
            }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["requests"]))


def grown(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    """Return the counters that grew from ``before`` to ``after``, largest first."""
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    return dict(sorted(delta.items(), key=lambda kv: -kv[1]))


@dataclass
class EventClock:
    """Follows a watch of one collection and stamps when each object first met each predicate.

    ``marks`` maps a name (``"bound"``) to a predicate of the object; ``stamps[key][mark]`` is the
    ``time.perf_counter()`` of the first event in which it held (ms resolution, unlike the API's
    one-second timestamps). ``key`` is ``namespace/name``. The watch starts at the collection's
    current resourceVersion and reconnects after a dropped stream.
    """

    api: Any
    path: str
    marks: dict[str, Callable[[dict[str, Any]], bool]]
    stamps: dict[str, dict[str, float]] = field(default_factory=dict)
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _get(self, query: list[tuple[str, str]], stream: bool) -> Any:
        method, url, headers, _, _ = self.api.param_serialize(
            "GET",
            self.path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        timeout = (10, 60) if stream else 60
        return self.api.call_api(method, url, header_params=headers, _request_timeout=timeout)

    def _record(self, obj: dict[str, Any], now: float) -> None:
        metadata = obj.get("metadata") or {}
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        with self._lock:
            self.latest[key] = obj
            marks = self.stamps.setdefault(key, {})
            for mark, holds in self.marks.items():
                if mark not in marks and holds(obj):
                    marks[mark] = now

    def _run(self, version: str) -> None:
        while not self._stop.is_set():
            query = [("watch", "true"), ("resourceVersion", version), ("timeoutSeconds", "50")]
            try:
                response = self._get(query, stream=True)
                buffer = b""
                for chunk in response.response.stream(65536):
                    if self._stop.is_set():
                        return
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    now = time.perf_counter()
                    for line in lines:
                        if not line.strip():
                            continue
                        event = orjson.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = self._list()  # expired: start again from now
                            break
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._record(obj, now)
            except Exception:  # noqa: BLE001 - a dropped stream is resumed, never fatal
                if self._stop.wait(0.5):
                    return

    def _list(self) -> str:
        response = self._get([], stream=False)
        body = orjson.loads(response.read())
        now = time.perf_counter()
        for obj in body.get("items") or []:
            self._record(obj, now)
        return str(body["metadata"]["resourceVersion"])

    def start(self) -> EventClock:
        """List the collection (stamping what is there) and follow it in a thread."""
        version = self._list()
        self._thread = threading.Thread(target=self._run, args=(version,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (the thread ends at the next chunk or within the stream timeout)."""
        self._stop.set()

    def snapshot(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
        """Return copies of the stamps and of the latest object of every key."""
        with self._lock:
            return {k: dict(v) for k, v in self.stamps.items()}, dict(self.latest)

    def reset(self) -> None:
        """Forget every stamp (the next phase measures from scratch)."""
        with self._lock:
            self.stamps.clear()
            self.latest.clear()


# -- a local cluster ------------------------------------------------------------------------------


@contextlib.contextmanager
def local_cluster(
    fabric: FabricDescription,
    namespace: str,
    log: Callable[[str], None],
    result: dict[str, Any],
    ready_timeout: float = 900,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(cluster, api)``: a local control plane whose kwok nodes are ``fabric``'s, all
    Ready, and ``namespace`` with its default service account. ``result`` gains
    ``cluster_up_s`` and ``nodes_ready_s``. Always torn down; logs are kept on failure."""
    from kubernetes import client  # noqa: PLC0415

    from tpfabric_localcluster.cluster import LocalCluster, api_client  # noqa: PLC0415
    from tpfabric_localcluster.nodes import apply_fake_nodes, wait_ready  # noqa: PLC0415

    state_root = Path(tempfile.mkdtemp(prefix="tpfabric-bench-"))
    cluster = LocalCluster(f"bench-{uuid.uuid4().hex[:6]}", state_root=state_root, log=log)
    kept_logs: Path | None = None
    # a SIGTERM (``timeout``, a CI limit) must tear the cluster down too: without this the
    # interpreter dies at once and leaves etcd, the API server and 1,000 kwok nodes running
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        started = time.perf_counter()
        cluster.up()
        result["cluster_up_s"] = round(time.perf_counter() - started, 1)
        with api_client(cluster.kubeconfig) as api:
            started = time.perf_counter()
            wait_ready(api, apply_fake_nodes(api, fabric), timeout=ready_timeout)
            result["nodes_ready_s"] = round(time.perf_counter() - started, 1)
            log(f"{len(fabric.nodes)} kwok nodes Ready in {result['nodes_ready_s']} s")
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": namespace}})
            wait(
                lambda: bool(core.list_namespaced_service_account(namespace).items),
                60,
                "the default service account",
            )
            yield cluster, api
    except BaseException:
        kept_logs = Path(tempfile.mkdtemp(prefix="tpfabric-bench-logs-"))
        log(f"failed; the components' logs are kept in {kept_logs}")
        raise
    finally:
        cluster.down(keep_logs=kept_logs)
        shutil.rmtree(state_root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def start_placer(cluster: Any, timeout: float = 180) -> int:
    """Install the CRD and start the extender/placer as the chart runs it; return its port.

    INFO logging (the local cluster's DEBUG logs every filter/prioritize decision, which would
    measure the logger), the chart's defaults for the bind bound and head-of-line hold, and its
    placer Lease in ``kube-system`` (the chart's release namespace does not exist here).
    """
    from tpfabric_localcluster.cluster import free_ports  # noqa: PLC0415
    from tpfabric_localcluster.tpfabric import EXTENDER, install_crd, metrics_url  # noqa: PLC0415

    install_crd(cluster)
    port, metrics_port = free_ports(2)
    argv = [
        sys.executable,
        "-m",
        "tpfabric_scheduler",
        f"--kubeconfig={cluster.kubeconfig}",
        "--host=127.0.0.1",
        f"--port={port}",
        # its /metrics read by the benchmark: plain HTTP on loopback, no token
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics_port}",
        "--metrics-auth=none",
        f"--identity={EXTENDER}",
        "--lease-namespace=kube-system",
        "--log-level=INFO",
    ]
    cluster.add_component(EXTENDER, argv, metrics_url(argv, "/readyz"), timeout=timeout)
    return port


def placer_metrics_url(cluster: Any) -> str:
    """Return the /metrics URL of the placer :func:`start_placer` started."""
    from tpfabric_localcluster.tpfabric import EXTENDER, metrics_url  # noqa: PLC0415

    state = cluster.state()
    if state is None:
        raise RuntimeError("the cluster is not up")
    return str(metrics_url(state.components[EXTENDER].argv))


#: the operator's settings the local cluster shortens for its tests, run here at their defaults
#: (the chart's): a gang record looked at every 2 s and a Warning Event on each pod of a gang
#: short of pods for 4 s would measure the test settings, not the product
OPERATOR_DEFAULTS = (
    "TPFABRIC_GANG_SYNC_SECONDS",
    "TPFABRIC_GANG_IDLE_SECONDS",
    "TPFABRIC_GANG_SHORT_NOTICE_SECONDS",
)


def start_components(cluster: Any) -> int:
    """Start the extender/placer, the tpfabric kube-scheduler (the chart's configuration, its
    client QPS/burst included) and the operator (its default reconcile interval and gang
    settings, :data:`OPERATOR_DEFAULTS`); return the extender's port."""
    from tpfabric_localcluster.tpfabric import TPFABRIC_SCHEDULER, start_operator  # noqa: PLC0415
    from tpfabric_operator.settings import KNOBS, RECONCILE_SECONDS  # noqa: PLC0415
    from tpfabric_scheduler.kube_scheduler_config import scheduler_configuration  # noqa: PLC0415

    port = start_placer(cluster)
    cluster.start_scheduler(
        TPFABRIC_SCHEDULER, scheduler_configuration(f"http://127.0.0.1:{port}"), timeout=120
    )
    defaults = {knob.env: knob.default for knob in KNOBS if knob.env in OPERATOR_DEFAULTS}
    start_operator(cluster, reconcile_seconds=RECONCILE_SECONDS, env=defaults)
    return port


def start_gang_components(cluster: Any, api: Any) -> tuple[int, Any]:
    """Start tpfabric (placer, tpfabric-scheduler, operator), the LWS controller and the gang
    webhook with its configuration; return the placer's port and the webhook."""
    from kubernetes import client  # noqa: PLC0415

    from tpfabric_localcluster.gang_webhook import start_gang_webhook  # noqa: PLC0415
    from tpfabric_localcluster.workload_controllers import (  # noqa: PLC0415
        LWS,
        start_workload_controller,
    )

    port = start_components(cluster)
    start_workload_controller(cluster, LWS)
    hook = start_gang_webhook(cluster)
    client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        hook.configuration()
    )
    return port, hook
