"""``python -m tpfabric_scheduler``: the extender HTTP server and the gang placer, one process.

Informers feed the store; the HTTP server answers kube-scheduler on every replica. The placer runs
a cycle after every batch of changes (and every few seconds, so bounded waits can relax), on the
replica holding the placer Lease only (``--leader-elect``, on by default): plans are written by one
placer at a time, so replicas can be rolled one by one. Ready once every informer has listed once;
live while the placer loop keeps turning. SIGTERM stops it cleanly and hands the lease over.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable

from aiohttp import web
from kubernetes import client, config

from tpfabric_core.errors import InputError
from tpfabric_core.placement.cost_flags import cost_model
from tpfabric_core.placement.topology import DEFAULT_LEVELS, LevelSpec, parse_levels
from tpfabric_kube.leader_election import add_timing_flags, check_timing_flags
from tpfabric_kube.metrics_server import (
    add_metrics_flags,
    check_metrics_flags,
    is_loopback,
    start_metrics_server,
)
from tpfabric_kube.request_timeouts import with_default_timeout
from tpfabric_kube.structured_logs import add_log_flags, configure_logging
from tpfabric_scheduler.agent_silence import SilenceWatch
from tpfabric_scheduler.kube import Informer, KubeWriter, start_informers
from tpfabric_scheduler.leader import LeaseElector
from tpfabric_scheduler.loop import PlacerLoop
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.policy.bind_bound import BIND_TIMEOUT_SECONDS
from tpfabric_scheduler.policy.holds import HEAD_OF_LINE_SECONDS
from tpfabric_scheduler.server import health_checks, make_app
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.store_metrics import DEFAULT_GANG_WAIT_ALERT_SECONDS, StoreMetrics

log = logging.getLogger("tpfabric.scheduler")
#: the metrics and health port (kube-scheduler's own is 10259 in the same pod)
METRICS_PORT = 8443
DEFAULT_LEVELS_TEXT = ",".join(f"{spec.name}={spec.label_key}" for spec in DEFAULT_LEVELS)


def _api(kubeconfig: str | None) -> client.ApiClient:
    settings = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=settings)
    else:
        config.load_incluster_config(client_configuration=settings)
    # a gang's release writes go out RELEASE_CONCURRENCY at a time over this pool; the client's
    # default (5 x CPUs) would open and discard connections under a burst
    settings.connection_pool_maxsize = max(settings.connection_pool_maxsize, 32)
    api = client.ApiClient(settings)
    # no call may hold the planning loop or a release thread forever on a half-open connection
    api.rest_client.request = with_default_timeout(api.rest_client.request)
    return api


def _elector(
    args: argparse.Namespace, api: client.ApiClient, metrics: Metrics, wake: Callable[[], None]
) -> LeaseElector | None:
    """Return the placer's lease elector (None without ``--leader-elect``)."""
    if not args.leader_elect:
        metrics.placer_leader.set(1)
        return None

    def on_transition(leading: bool) -> None:
        metrics.placer_leader.set(1 if leading else 0)
        wake()

    return LeaseElector(
        api,
        args.lease_namespace,
        args.lease_name,
        args.identity,
        lease_seconds=args.lease_seconds,
        renew_seconds=args.renew_seconds,
        retry_seconds=args.retry_seconds,
        on_transition=on_transition,
    )


def _start_elector(elector: LeaseElector | None) -> tuple[threading.Event, threading.Thread | None]:
    stop = threading.Event()
    if elector is None:
        return stop, None
    thread = threading.Thread(target=elector.run, args=(stop,), name="lease-elector", daemon=True)
    thread.start()
    return stop, thread


async def serve(args: argparse.Namespace) -> None:
    """Run until SIGTERM/SIGINT."""
    api = _api(args.kubeconfig)
    store = ClusterStore()
    metrics = Metrics()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    informers: list[Informer] = []
    writer = KubeWriter(api)

    def ready() -> bool:
        return bool(informers) and all(i.synced.is_set() for i in informers)

    def wake() -> None:  # from any thread
        loop.call_soon_threadsafe(placer.changed.set)

    elector = _elector(args, api, metrics, wake)

    def new_placer() -> GangPlacer:
        """Return the placer of the term this replica leads in now: it writes only while that
        term lasts (a replica that lost the lease and took it again starts a new placer)."""
        term = elector.term() if elector is not None else 0
        return GangPlacer(
            store,
            writer,
            metrics,
            levels=args.levels,
            bind_timeout=args.bind_timeout_seconds,
            head_of_line_seconds=args.head_of_line_seconds,
            leading=(lambda: elector.term() == term) if elector is not None else lambda: True,
            term=term or 0,
            cost=args.cost,
        )

    leading = elector.is_leader if elector is not None else lambda: True
    placer = PlacerLoop(store, new_placer, ready, leading)
    elector_stop, elector_thread = _start_elector(elector)
    informers += start_informers(api, store, wake, agent_namespace=args.fabric_agent_namespace)
    metrics.registry.register(StoreMetrics(store, wait_alert_seconds=args.gang_wait_alert_seconds))

    health = health_checks(store, ready, liveness_stall_seconds=args.liveness_stall_seconds)
    metrics_server = start_metrics_server(
        args, lambda: api, component="scheduler", registries=[metrics.registry], health=health
    )
    runner = web.AppRunner(make_app(store, metrics, ready), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port).start()
    log.info("extender listening on http://%s:%s", args.host, args.port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(placer.run(stop))
    silence = (
        asyncio.create_task(
            SilenceWatch(
                store, writer, args.fabric_agent_namespace, leading=leading, wake=wake
            ).run(stop)
        )
        if args.fabric_agent_namespace
        else None
    )
    await stop.wait()
    placer.changed.set()
    if silence is not None:
        await silence
    await task  # the cycle in flight ends before the lease is released: never two placers at work
    elector_stop.set()
    if elector_thread is not None:
        await loop.run_in_executor(None, elector_thread.join, args.retry_seconds + 5)
    for informer in informers:
        informer.stop()
    await runner.cleanup()
    if metrics_server is not None:
        metrics_server.stop()
    log.info("stopped")


def _flag_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in {"true", "1", "yes"}:
        return True
    if lowered in {"false", "0", "no"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _flag_levels(text: str) -> tuple[LevelSpec, ...]:
    try:
        return parse_levels(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the parsed flags; exit with a usage error on bad or inconsistent ones."""
    parser = argparse.ArgumentParser(prog="tpfabric-scheduler", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="loopback address of /filter and /prioritize (default 127.0.0.1; kube-scheduler "
        "calls them from the same pod, and nothing else may)",
    )
    parser.add_argument("--port", type=int, default=8888, help="port of /filter and /prioritize")
    add_log_flags(parser)
    parser.add_argument(
        "--levels",
        type=_flag_levels,
        default=DEFAULT_LEVELS_TEXT,
        help="topology levels as name=label-key pairs, top level first "
        f"(default {DEFAULT_LEVELS_TEXT})",
    )
    parser.add_argument(
        "--bind-timeout-seconds",
        type=float,
        default=BIND_TIMEOUT_SECONDS,
        help="a released gang not bound within this long is planned again "
        f"(default {BIND_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--head-of-line-seconds",
        type=float,
        default=HEAD_OF_LINE_SECONDS,
        help="a gang waiting this long holds the best domain it would take "
        f"(default {HEAD_OF_LINE_SECONDS:g})",
    )
    parser.add_argument(
        "--liveness-stall-seconds",
        type=float,
        default=60.0,
        help="/healthz fails once the placer loop has not turned for this long (default 60)",
    )
    parser.add_argument(
        "--fabric-agent-namespace",
        default="",
        help="namespace of the fabric agents' heartbeat Leases: a node whose agent stops "
        "renewing its Lease has unknown link health (new plans treat it as degraded; its "
        "FabricHealthy condition says so). Empty (the default): no heartbeat is read, nodes "
        "are judged by their health label alone",
    )
    parser.add_argument(
        "--gang-wait-alert-seconds",
        type=float,
        default=DEFAULT_GANG_WAIT_ALERT_SECONDS,
        help="the wait past which a gang without topology.maxWaitSeconds is reported "
        "(tpfabric_placer_gang_wait_limit_seconds, the alert TpfabricGangWaitingTooLong; "
        f"default {DEFAULT_GANG_WAIT_ALERT_SECONDS:g})",
    )
    fabric = parser.add_argument_group(
        "the fabric's figures for the cost model (per level a path crosses; given, a mapping "
        "replaces the default whole: a level left out is non-blocking and idle)"
    )
    fabric.add_argument(
        "--oversubscription",
        help="uplink oversubscription by level, e.g. spine=1,block=2,cluster=4 (the default; "
        "2 is 2:1)",
    )
    fabric.add_argument(
        "--background-load",
        help="share of an uplink other traffic is assumed to take, by level, e.g. "
        "spine=0.1,block=0.25,cluster=0.4 (the default)",
    )
    election = parser.add_argument_group("leader election of the placer (a Lease)")
    election.add_argument(
        "--leader-elect",
        type=_flag_bool,
        nargs="?",
        const=True,
        default=True,
        help="plan only while holding the lease (default true; false: a single replica only)",
    )
    election.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or "tpfabric-system",
        help="namespace of the lease (default env POD_NAMESPACE, else tpfabric-system)",
    )
    election.add_argument("--lease-name", default="tpfabric-placer", help="name of the lease")
    election.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}",
        help="holder identity (default env POD_NAME, else hostname_pid)",
    )
    add_timing_flags(election, "planning")
    add_metrics_flags(parser, default_port=METRICS_PORT)
    args = parser.parse_args(argv)  # a string default goes through ``type`` too
    check_timing_flags(parser, args)
    check_metrics_flags(parser, args)
    if not is_loopback(args.host):
        parser.error(
            f"--host={args.host}: /filter and /prioritize take no credentials, so they listen on "
            "loopback only (127.0.0.1, where kube-scheduler calls them); metrics and health "
            "have their own port (--metrics-address, --metrics-port)"
        )
    try:  # checked against --levels, which names the levels a path can cross
        args.cost = cost_model(
            args.levels,
            oversubscription=args.oversubscription,
            background_load=args.background_load,
        )
    except InputError as err:
        parser.error(str(err))
    return args


#: how long a thread may hold the interpreter before one waiting is let in (CPython's default
#: 5 ms): a relist or a placer cycle runs in its own thread, and each answer to kube-scheduler
#: takes the interpreter several times; 1 ms keeps those answers within a few milliseconds
SWITCH_INTERVAL_S = 0.001


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve."""
    args = parse_args(argv)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    configure_logging("scheduler", args.log_level, args.log_format)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
