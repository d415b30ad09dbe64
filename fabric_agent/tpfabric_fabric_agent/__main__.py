"""``tpfabric-fabric-agent`` / ``python -m tpfabric_fabric_agent``: watch this node's fabric links.

Run by the chart's DaemonSet with ``NODE_NAME`` from the downward API and the host's ``/sys``
mounted read-only. ``--once`` prints one verdict as JSON and publishes nothing (a check by hand).
Its metrics are served on ``--metrics-port`` (HTTPS, only to a caller the API server authorizes:
:mod:`tpfabric_kube.metrics_server`), with ``/healthz`` (live: its loop keeps turning) and
``/readyz`` (ready: it read its node within its heartbeat's grace) for the kubelet's probes.
With ``--heartbeat-namespace`` (the chart: the agent's own namespace) it renews its node's
heartbeat Lease after every read (:mod:`.heartbeat`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TypeVar

import yaml
from kubernetes import client
from pydantic import ValidationError

from tpfabric_core.fabric.agent_heartbeat import default_grace_seconds
from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.link_publish import FabricPublication, publication_of
from tpfabric_core.fabric.link_timeline import TimelineConfig
from tpfabric_core.fabric_profile import parse_fabric_profile
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.heartbeat import LeaseHeartbeat
from tpfabric_fabric_agent.kube import NodePublisher, api_client
from tpfabric_fabric_agent.metrics import AgentMetrics
from tpfabric_kube.metrics_server import (
    HealthCheck,
    add_metrics_flags,
    check_metrics_flags,
    start_metrics_server,
)
from tpfabric_kube.structured_logs import add_log_flags, configure_logging

__all__ = ["METRICS_PORT", "build_parser", "main", "settings_from_args"]

#: the agent's metrics port
METRICS_PORT = 9402


class _Printer:
    def publish(self, publication: FabricPublication) -> int:
        return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the agent's argument parser."""
    parser = argparse.ArgumentParser(prog="tpfabric-fabric-agent", description=__doc__)
    parser.add_argument("--node", default=os.environ.get("NODE_NAME"), help="default $NODE_NAME")
    parser.add_argument("--sys-root", type=Path, default=Path("/sys"), help="default /sys")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument(
        "--hcas",
        default="",
        help="fabric HCAs in rail order, comma-separated (default: the compute NICs' ports, "
        "the ones the RDMA init container pairs with GPUs)",
    )
    parser.add_argument(
        "--compute-nics",
        default="",
        help="this node's compute NICs in rail order by PCI address or node GUID, "
        "comma-separated (overrides discovery; per node: compute_nics in --config)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML/JSON file of judgement settings (window_seconds, recover_seconds, "
        "symbol_errors_per_hour, symbol_error_ber, counter_limits, expected_rate_gbps, "
        "expected_width, rate_tolerance, check_pcie), compute_nics: a list of PCI addresses "
        "or node GUIDs, or a mapping of node name to such a list, and timeline: the link "
        "timeline's keep_seconds, max_bursts_per_port, max_characters, max_open_seconds, floors",
    )
    parser.add_argument("--window-seconds", type=float, help="sliding window of the rates")
    parser.add_argument("--recover-seconds", type=float, help="clean time before ok again")
    parser.add_argument("--expected-rate-gbps", type=float, help="the fabric's link rate")
    parser.add_argument("--resync-seconds", type=float, default=300.0, help="re-read the node")
    parser.add_argument(
        "--fabric-profile",
        default=os.environ.get("TPFABRIC_FABRIC_PROFILE", ""),
        help="the fabric's contract as JSON (the chart's fabric.profile; default "
        "$TPFABRIC_FABRIC_PROFILE): on RoCE, each node's PFC, ECN and trust are checked against it",
    )
    parser.add_argument("--kubeconfig", help="default: in-cluster service account")
    parser.add_argument("--once", action="store_true", help="print one verdict, publish nothing")
    parser.add_argument(
        "--heartbeat-namespace",
        default=os.environ.get("POD_NAMESPACE", ""),
        help="namespace of this node's heartbeat Lease, renewed after every read (default env "
        "POD_NAMESPACE; empty: no heartbeat, and the placer cannot tell this agent silent)",
    )
    parser.add_argument(
        "--heartbeat-grace-seconds",
        type=float,
        help="silence after which the placer counts this node's link health unknown (the "
        "Lease's duration; default 4 intervals, at least 40)",
    )
    add_log_flags(parser)
    add_metrics_flags(parser, default_port=METRICS_PORT)
    return parser


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    """Return the agent's settings; ValueError says which option is wrong and why."""
    if not args.node:
        raise ValueError("--node (or $NODE_NAME) is required: the agent publishes for one node")
    data: dict[str, object] = {}
    if args.config is not None:
        loaded = yaml.safe_load(args.config.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config}: expected a mapping of judgement settings")
        data.update(loaded)
    compute_nics = _compute_nics(data.pop("compute_nics", None), args.node, args.config)
    timeline = _validated(TimelineConfig, data.pop("timeline", None) or {}, args, "timeline.")
    if args.compute_nics:
        compute_nics = tuple(n.strip() for n in args.compute_nics.split(",") if n.strip())
    for key in ("window_seconds", "recover_seconds", "expected_rate_gbps"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    judge = _validated(LinkJudgeConfig, data, args)
    return AgentSettings(
        node=args.node,
        sys_root=args.sys_root,
        interval_seconds=args.interval,
        hcas=tuple(h for h in args.hcas.split(",") if h),
        judge=judge,
        compute_nics=compute_nics,
        timeline=timeline,
        profile=parse_fabric_profile(args.fabric_profile, "--fabric-profile"),
    )


_Config = TypeVar("_Config", LinkJudgeConfig, TimelineConfig)


def _validated(
    model: type[_Config], data: object, args: argparse.Namespace, prefix: str = ""
) -> _Config:
    """Return ``data`` as ``model``; ValueError naming the file (or the options) and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = prefix + ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{args.config or 'options'}: {where}: {first['msg']}") from err


def _compute_nics(value: object, node: str, source: Path | None) -> tuple[str, ...]:
    """Return this node's compute NICs of a config's ``compute_nics`` (a list, or a mapping of
    node name to a list; a node not in the mapping has none)."""
    if value is None:
        return ()
    if isinstance(value, dict):
        value = value.get(node, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"{source}: compute_nics: expected a list of PCI addresses or node GUIDs, or a "
            "mapping of node name to such a list"
        )
    return tuple(value)


def main(argv: list[str] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_metrics_flags(parser, args)
    if args.heartbeat_grace_seconds is not None and args.heartbeat_grace_seconds < args.interval:
        parser.error(
            f"--heartbeat-grace-seconds={args.heartbeat_grace_seconds:g} is shorter than "
            f"--interval={args.interval:g}: every node would count as silent between two reads"
        )
    configure_logging("fabric-agent", args.log_level, args.log_format)
    if args.once and not args.node:
        args.node = "this-node"  # --once publishes nothing: no node to name
    try:
        settings = settings_from_args(args)
    except (ValueError, OSError) as err:
        print(f"tpfabric-fabric-agent: {err}", file=sys.stderr)  # noqa: T201
        return 2
    if args.once:
        verdict = FabricAgent(settings, _Printer()).step()
        publication = publication_of(verdict)
        print(  # noqa: T201
            json.dumps(
                {
                    "status": publication.status,
                    "reason": publication.reason,
                    "message": publication.message,
                    "label": publication.label,
                    "detail": json.loads(publication.annotation),
                },
                indent=2,
            )
        )
        return 0
    metrics = AgentMetrics()
    api = api_client(args.kubeconfig)
    publisher = NodePublisher(
        settings.node,
        client.CoreV1Api(api),
        resync_seconds=args.resync_seconds,
        on_write=lambda target: metrics.api_writes.labels(target).inc(),
    )
    grace = args.heartbeat_grace_seconds or default_grace_seconds(settings.interval_seconds)
    heartbeat = (
        LeaseHeartbeat(
            settings.node,
            args.heartbeat_namespace,
            client.CoordinationV1Api(api),
            grace_seconds=grace,
            node_uid=publisher.node_uid,
            on_lapse=publisher.expire,
            on_write=lambda: metrics.api_writes.labels("lease").inc(),
        )
        if args.heartbeat_namespace
        else None
    )
    agent = FabricAgent(
        settings,
        publisher,
        metrics,
        rail_map=publisher.rail_map,
        heartbeat=heartbeat.beat if heartbeat is not None else None,
    )
    start_metrics_server(
        args,
        lambda: api,
        component="fabric-agent",
        registries=[metrics.registry],
        health=probes(agent, grace),
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.run(stop)
    return 0


def probes(agent: FabricAgent, grace_seconds: float) -> dict[str, HealthCheck]:
    """Return the agent's ``/healthz`` and ``/readyz``: live while its loop turned within
    ``grace_seconds`` (a hung read or API call past that is restarted by the kubelet), ready once
    a read, judgement and publish succeeded within ``grace_seconds``."""

    def live() -> tuple[bool, str]:
        turned = agent.turned_at
        if turned is None:
            return True, "starting"
        quiet = time.monotonic() - turned
        if quiet > grace_seconds:
            return False, f"the agent loop has not turned for {quiet:.0f} s"
        return True, "ok"

    def ready() -> tuple[bool, str]:
        done = agent.succeeded_at
        if done is None:
            return False, "no read of the node's links has succeeded yet"
        quiet = time.monotonic() - done
        if quiet > grace_seconds:
            return False, f"no read of the node's links has succeeded for {quiet:.0f} s"
        return True, "ok"

    return {"/healthz": live, "/readyz": ready}


if __name__ == "__main__":
    raise SystemExit(main())
