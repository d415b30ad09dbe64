"""``python -m tpfabric_scheduler``: the extender HTTP server and the gang placer, one process.

Informers feed the store; the placer runs a cycle after every batch of changes (and every few
seconds, so bounded waits can relax); the HTTP server answers kube-scheduler. Ready once every
informer has listed once. SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import threading

from aiohttp import web
from kubernetes import client, config

from tpfabric_scheduler.kube import Informer, KubeWriter, start_informers
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.server import make_app
from tpfabric_scheduler.store import ClusterStore

log = logging.getLogger("tpfabric.scheduler")
RESYNC_SECONDS = 5.0


def _api(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


async def serve(args: argparse.Namespace) -> None:
    """Run until SIGTERM/SIGINT."""
    api = _api(args.kubeconfig)
    store = ClusterStore()
    metrics = Metrics()
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    stop = asyncio.Event()

    def on_change() -> None:
        loop.call_soon_threadsafe(changed.set)

    informers: list[Informer] = start_informers(api, store, on_change)
    placer = GangPlacer(store, KubeWriter(api), metrics)
    cycle_lock = threading.Lock()

    def ready() -> bool:
        return all(i.synced.is_set() for i in informers)

    async def placer_loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=RESYNC_SECONDS)
            changed.clear()
            if not ready():
                continue
            await asyncio.sleep(0.05)  # let a burst of watch events land before planning
            with cycle_lock:
                await loop.run_in_executor(None, placer.run_cycle)

    runner = web.AppRunner(make_app(store, metrics, ready), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    log.info("extender listening on http://%s:%s", args.host, args.port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(placer_loop())
    await stop.wait()
    task.cancel()
    for informer in informers:
        informer.stop()
    await runner.cleanup()
    log.info("stopped")


def main(argv: list[str] | None = None) -> None:
    """Parse flags and serve."""
    parser = argparse.ArgumentParser(prog="tpfabric-scheduler", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8888, help="port to listen on")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("TPFABRIC_LOG_LEVEL", "INFO"),
        help="DEBUG logs every filter/prioritize decision (env TPFABRIC_LOG_LEVEL)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format='{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s",'
        '"message":"%(message)s"}',
    )
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
