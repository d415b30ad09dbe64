"""``python -m tpfabric_operator.webhook``: the gang webhook, a small HTTPS server of its own.

``POST /mutate-pods`` answers kube-apiserver's AdmissionReviews (:mod:`.admission`, served by
:mod:`.server`), and ``/healthz`` on the same port says it serves TLS (the readiness probe).
``/metrics`` (admission latency, answers by outcome) has a port of its own, where only a caller
the API server authorizes may read it (:mod:`tpfabric_kube.metrics_server`). A body that is not
an AdmissionReview gets a 400 with the reason, one over :data:`.server.MAX_BODY` a 413 before it
is read whole; an unexpected error inside a decision admits the pod unchanged with a warning,
never a refusal and never a crash.

Why a component of its own, not a part of the operator: the webhook is in the path of every
opted-in pod creation, so it must answer in milliseconds from any replica. It decides alone and
writes nothing to the API server; what it reads is one list+watch of the nodes
(:class:`.node_offers.NodeOffers`), kept in memory for the default RDMA devices of a gang pod
(``--rdma-count auto``), and one each of the Gang records' plans, of the gang pods' ranks and
of the JobSets' replicated Jobs (:class:`.gang_plans.GangPlans`: a JobSet's pod is ranked at
admission, its JobSet read once by name if the watch has not shown it yet, and a pod admitted
after its gang's plan is created released onto it; ``--no-born-released`` leaves every gang
pod gated), and it serves only once those views are listed (the JobSets' at once where the
cluster has no JobSet CRD). So it runs as many replicas as wanted without leader election, and
an operator's leader change, a long reconcile or a kopf restart never slows an admission. It
ships in the operator's image.

TLS: ``--cert-dir`` holds ``tls.crt`` and ``tls.key``; the files are read again when they change
(checked every ``--reload-seconds``), so a rotated certificate is served without a restart. With
``--manage-certs`` the webhook makes them itself, without cert-manager (:mod:`.certs`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tpfabric_core.api import SCHEDULER_NAME
from tpfabric_core.errors import InputError
from tpfabric_core.fabric_profile import init_argument, parse_fabric_profile
from tpfabric_core.gangs import GangSettings
from tpfabric_kube.metrics_server import (
    add_metrics_flags,
    check_metrics_flags,
    start_metrics_server,
)
from tpfabric_kube.request_timeouts import with_default_timeout
from tpfabric_kube.structured_logs import add_log_flags, configure_logging
from tpfabric_operator.webhook.admission import WebhookSettings, default_levels
from tpfabric_operator.webhook.certs import CertKeeper
from tpfabric_operator.webhook.gang_plans import GangPlans
from tpfabric_operator.webhook.node_offers import NodeOffers
from tpfabric_operator.webhook.server import WebhookMetrics, serve

__all__ = ["command_line", "main", "parse_args"]

log = logging.getLogger("tpfabric.webhook")
#: the metrics port (the webhook's own is 9443)
METRICS_PORT = 8443


def command_line(
    cert_dir: Path, port: int, init_image: str, *extra: str, metrics_port: int = 0
) -> list[str]:
    """Return the command that runs the webhook on loopback (the local cluster, the benchmark);
    ``metrics_port``: serve /metrics there, plain HTTP on loopback without a check (0: none)."""
    metrics = (
        ["--metrics-address=127.0.0.1", f"--metrics-port={metrics_port}", "--metrics-auth=none"]
        if metrics_port
        else ["--metrics-port=0"]
    )
    return [
        sys.executable,
        "-m",
        "tpfabric_operator.webhook",
        f"--cert-dir={cert_dir}",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--init-image={init_image}",
        *metrics,
        *extra,
    ]


def _level(text: str) -> tuple[str, str]:
    name, sep, key = text.partition("=")
    if not sep or not name or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=NODE_LABEL_KEY")
    return name, key


def _rdma_count(text: str) -> int | None:
    if text == "auto":
        return None
    if not text.isdigit() or int(text) > 64:
        raise argparse.ArgumentTypeError(f"{text!r}: expected auto or a whole number up to 64")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the webhook's flags (exits with the reason on a bad one)."""
    parser = argparse.ArgumentParser(prog="tpfabric-webhook", description=__doc__)
    parser.add_argument("--cert-dir", type=Path, required=True, help="holds tls.crt and tls.key")
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104
    parser.add_argument("--port", type=int, default=9443)
    parser.add_argument("--reload-seconds", type=float, default=60.0)
    parser.add_argument("--init-image", required=True, help="the rdma-init image")
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME)
    parser.add_argument(
        "--rdma-resource",
        default="rdma/ib",
        help="the extended resource the nodes' RDMA device plugin advertises",
    )
    parser.add_argument(
        "--rdma-count",
        type=_rdma_count,
        default=None,
        help="RDMA devices a gang pod is given when it names none: auto (default: what the "
        "nodes that could hold it offer, for a GPU pod of a gang of several pods) or a number",
    )
    parser.add_argument(
        "--gpu-direct", choices=("required", "preferred", "disabled"), default="preferred"
    )
    parser.add_argument(
        "--fabric-profile",
        default="",
        help="the fabric's contract as JSON (the chart's fabric.profile), passed to every gang "
        "pod's rdma-init; a bad field stops the webhook with the field and the fix",
    )
    parser.add_argument(
        "--level",
        type=_level,
        action="append",
        default=[],
        help="a topology level and its node label key, NAME=KEY (repeatable; default: leaf, "
        "spine and block under topology.tpfabric.io/)",
    )
    parser.add_argument(
        "--owner",
        action="append",
        choices=("LeaderWorkerSet", "JobSet", "WorkloadPodGroup"),
        help="owner kinds taken in without a tpfabric label (repeatable; default: all three; "
        "WorkloadPodGroup: pods naming a scheduling.k8s.io PodGroup in spec.schedulingGroup)",
    )
    parser.add_argument("--max-gang-size", type=int, default=1024)
    parser.add_argument(
        "--born-released",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="number each gang pod whose rank is known at admission and whose owner makes it "
        "again (a LeaderWorkerSet group's; a JobSet's, ranked from its JobSet; a pod group's "
        "with a controller and tpfabric.io/rank or an Indexed Job's completion index) with its "
        "gang attempt, and create the pods admitted after their gang's plan released onto it "
        "(reads the Gang records, the gang pods and the JobSets: list and watch)",
    )
    certs = parser.add_argument_group(
        "certificate management (without cert-manager): a CA and a serving certificate kept in a "
        "Secret, rotated, and trusted by the webhook configuration"
    )
    certs.add_argument("--manage-certs", action="store_true", help="make and rotate them")
    certs.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: in-cluster config); also for the nodes' view",
    )
    certs.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "tpfabric-system"))
    certs.add_argument("--secret", default="tpfabric-gang-webhook-tls")
    certs.add_argument("--service", default="tpfabric-gang-webhook")
    certs.add_argument("--webhook-configuration", default="tpfabric-gangs")
    certs.add_argument("--renew-check-seconds", type=float, default=3600.0)
    add_log_flags(parser)
    add_metrics_flags(parser, default_port=METRICS_PORT)
    args = parser.parse_args(argv)
    check_metrics_flags(parser, args)
    try:
        args.fabric_profile = init_argument(
            parse_fabric_profile(args.fabric_profile, "--fabric-profile")
        )
    except InputError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve until SIGTERM."""
    args = parse_args(argv)
    configure_logging("gang-webhook", args.log_level, args.log_format)
    nodes, plans = None, None
    if args.rdma_count is None or args.born_released:
        try:
            api = _api_client(args.kubeconfig)
        except config.ConfigException as err:
            raise SystemExit(
                f"tpfabric-webhook: --rdma-count auto and --born-released read the API server, "
                f"but none is configured ({err}): give --kubeconfig, run it in a pod, or set "
                f"--rdma-count N and --no-born-released"
            ) from err
        if args.rdma_count is None:
            nodes = NodeOffers(client.CoreV1Api(api))
            nodes.start()
        if args.born_released:
            plans = GangPlans()
            plans.start(client.CoreV1Api(api), client.CustomObjectsApi(api))
    settings = WebhookSettings(
        init_image=args.init_image,
        gangs=GangSettings(
            levels=dict(args.level) or default_levels(),
            owners=frozenset(args.owner) if args.owner else GangSettings(levels={}).owners,
            max_size=args.max_gang_size,
        ),
        scheduler_name=args.scheduler_name,
        rdma_resource=args.rdma_resource,
        rdma_count=args.rdma_count,
        gpu_direct=args.gpu_direct,
        fabric_profile=args.fabric_profile,
        nodes=nodes,
        plans=plans,
    )
    metrics = WebhookMetrics()
    start_metrics_server(
        args,
        lambda: _api_client(args.kubeconfig),
        component="gang-webhook",
        registries=[metrics.registry],
    )
    keeper = None
    if args.manage_certs:
        keeper = CertKeeper(
            _api_client(args.kubeconfig),
            namespace=args.namespace,
            secret=args.secret,
            service=args.service,
            configuration=args.webhook_configuration,
            cert_dir=args.cert_dir,
        )
    asyncio.run(
        _until_signalled(
            serve(
                settings,
                args.cert_dir,
                host=args.host,
                port=args.port,
                reload_seconds=args.reload_seconds,
                keeper=keeper,
                renew_seconds=args.renew_check_seconds,
                metrics=metrics,
                nodes=nodes,
                plans=plans,
            )
        )
    )


async def _until_signalled(server: Coroutine[Any, Any, None]) -> None:
    """Run ``server`` until SIGTERM or SIGINT cancels it (its cleanup closes the listener and
    lets answers in flight finish). In a container the webhook is PID 1, for which the kernel
    ignores a signal without a handler: SIGTERM would wait out the pod's grace period."""
    task = asyncio.ensure_future(server)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    log.info("gang webhook stopped")


def _api_client(kubeconfig: str | None) -> client.ApiClient:
    settings = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=settings)
    else:
        config.load_incluster_config(client_configuration=settings)
    api = client.ApiClient(settings)
    api.rest_client.request = with_default_timeout(api.rest_client.request)
    return api


if __name__ == "__main__":
    main()
