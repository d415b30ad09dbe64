"""Benchmark of the gang webhook: admission latency as kube-apiserver sees it.

``tpfabric bench webhook --reviews 2000`` starts the real webhook process
(``python -m tpfabric_operator.webhook``) on loopback with a throwaway certificate, and sends it
AdmissionReviews over one keep-alive HTTPS connection, as the API server's webhook client does:
pods of LeaderWorkerSet groups (wired: the answer carries a JSON patch), pods that name no gang
(passed untouched) and pods with a bad gang label (a warning). It reports, per kind and for all,
the round trip from the request's first byte to the answer's last (p50, p99, max), and the
webhook's own histogram from ``/metrics``. The target is p99 <= 10 ms.

It measures; it never asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import socket
import ssl
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tpfabric_operator.webhook.__main__ import command_line
from tpfabric_operator.webhook.certs import issue_ca, issue_serving

__all__ = ["main", "run"]


def _certificate(folder: Path) -> None:
    """Write a serving pair for ``localhost`` and its CA into ``folder`` (the webhook's own)."""
    now = dt.datetime.now(dt.UTC)
    ca = issue_ca(now)
    serving = issue_serving(ca, ["localhost"], now)
    (folder / "ca.crt").write_bytes(ca.cert)
    (folder / "tls.crt").write_bytes(serving.cert)
    (folder / "tls.key").write_bytes(serving.key)


def _pod(kind: str, index: int) -> dict[str, Any]:
    """An LWS worker as its StatefulSet creates it, a plain pod, or one with a bad gang label."""
    labels: dict[str, str] = {"app": "bench"}
    annotations: dict[str, str] = {}
    if kind == "wired":
        group = index // 8
        labels |= {
            "leaderworkerset.sigs.k8s.io/name": "vllm",
            "leaderworkerset.sigs.k8s.io/group-index": str(group),
            "leaderworkerset.sigs.k8s.io/worker-index": str(index % 8),
        }
        annotations["leaderworkerset.sigs.k8s.io/size"] = "8"
    elif kind == "warned":
        labels["tpfabric.io/gang-name"] = "no-size"
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:latest",
        "env": [{"name": f"VAR_{i}", "value": "x" * 16} for i in range(10)],
        "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "512Gi"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"vllm-{index // 8}-{index % 8}",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"containers": [container]},
    }


def _review(kind: str, index: int) -> bytes:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"bench-{index}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "serving",
            "object": _pod(kind, index),
        },
    }
    return json.dumps(body).encode()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(reviews: int = 2000, warmup: int = 200) -> dict[str, Any]:
    """Return the benchmark's numbers (see the module docstring)."""
    kinds = ["wired"] * 8 + ["unchanged", "warned"]  # mostly gang pods, as a burst would be
    with tempfile.TemporaryDirectory() as folder:
        certs = Path(folder)
        _certificate(certs)
        port = _free_port()
        metrics_port = next(p for p in iter(_free_port, None) if p != port)
        process = subprocess.Popen(
            # a set count: the benchmark runs without a cluster whose nodes the default reads
            command_line(
                certs,
                port,
                "tpfabric/rdma-init:dev",
                "--log-level=WARNING",
                "--rdma-count=8",
                metrics_port=metrics_port,
            )
        )
        try:
            context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            context.check_hostname = False  # 127.0.0.1, the certificate names localhost
            deadline = time.monotonic() + 30
            while True:
                try:
                    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context)
                    conn.request("GET", "/healthz")
                    conn.getresponse().read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            times: dict[str, list[float]] = {kind: [] for kind in set(kinds)}
            bodies = [
                (kinds[i % len(kinds)], _review(kinds[i % len(kinds)], i))
                for i in range(reviews + warmup)
            ]
            for number, (kind, body) in enumerate(bodies):
                started = time.perf_counter()
                conn.request("POST", "/mutate-pods", body, {"Content-Type": "application/json"})
                answer = conn.getresponse().read()
                elapsed = time.perf_counter() - started
                if number >= warmup:
                    times[kind].append(elapsed)
                if number >= warmup and kind == "wired" and b'"patch"' not in answer:
                    raise RuntimeError(f"a gang pod was not wired: {answer[:300]!r}")
            scrape = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
            scrape.request("GET", "/metrics")  # plain HTTP on loopback (command_line's)
            metrics = scrape.getresponse().read().decode()
        finally:
            process.terminate()
            process.wait(10)
    everything = [t for values in times.values() for t in values]
    rows = dict(sorted(times.items())) | {"all": everything}
    return {
        "reviews": reviews,
        "warmup": warmup,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "answers": {
            line.split('"')[1]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("tpfabric_webhook_answers_total{")
        },
        "latency_ms": {
            kind: {
                "count": len(values),
                "p50": round(statistics.median(values) * 1000, 3),
                "p99": round(_percentile(values, 0.99) * 1000, 3),
                "max": round(max(values) * 1000, 3),
            }
            for kind, values in rows.items()
        },
        "server_histogram": [
            line
            for line in metrics.splitlines()
            if line.startswith("tpfabric_webhook_admission_seconds_bucket")
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table, write JSON on request."""
    parser = argparse.ArgumentParser(prog="tpfabric bench webhook", description=__doc__)
    parser.add_argument("--reviews", type=int, default=2000, help="timed AdmissionReviews")
    parser.add_argument("--warmup", type=int, default=200, help="untimed ones first")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)
    result = run(args.reviews, args.warmup)
    table = Table(title=f"gang webhook: {args.reviews} AdmissionReviews over one HTTPS connection")
    for column in ("pods", "count", "p50 ms", "p99 ms", "max ms"):
        table.add_column(column, justify="right" if column != "pods" else "left")
    for kind, row in result["latency_ms"].items():
        table.add_row(
            kind, str(row["count"]), f"{row['p50']:.2f}", f"{row['p99']:.2f}", f"{row['max']:.2f}"
        )
    Console().print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
