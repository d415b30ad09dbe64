"""Command line of the init program: flags (each with an environment variable), output, exit code.

Exit codes: 0 ready (or fallen back under ``preferred``), 1 the ``required`` policy is not met
(one ``error:`` line per problem on stderr), 2 misconfiguration (bad flag, overrides, annotation
file). Every flag also reads ``TPFABRIC_<NAME>`` so the operator can set them as container env.
This module only parses and prints; :func:`tpfabric_rdma_init.prepare.prepare_pod` runs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tpfabric_rdma_init.checks import UNLIMITED, format_bytes
from tpfabric_rdma_init.discovery import MemlockProbe, read_memlock_limit
from tpfabric_rdma_init.prepare import POLICIES, InitOptions, InitResult, UsageError, prepare_pod
from tpfabric_rdma_init.termination import write_termination_message

__all__ = ["build_parser", "main", "options_from_args", "parse_size"]

PROG = "tpfabric-rdma-init"
#: the kubelet's default terminationMessagePath (absent outside Kubernetes: nothing is written)
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Return bytes for ``unlimited``, ``65536``, ``64Ki``, ``512M`` (binary units, as ulimit)."""
    if text.strip().lower() in ("unlimited", "infinity", "-1"):
        return UNLIMITED
    match = _SIZE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; write 'unlimited' or a number with K/M/G/T, e.g. 8G"
        )
    unit = (match.group(2) or "B")[0].upper()
    return int(match.group(1)) << {"B": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"TPFABRIC_{name}", default)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser; defaults come from ``TPFABRIC_*`` environment variables."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check RDMA and GPUDirect in a worker pod and write its NCCL config, library and "
            "a JSON report to a shared volume."
        ),
    )
    parser.add_argument("--root", default=_env("HOST_ROOT", "/"), help="root to discover below")
    parser.add_argument(
        "--process-root",
        default=_env("PROCESS_ROOT"),
        help="root for this process's capabilities, routes and interfaces (default: --root)",
    )
    parser.add_argument(
        "--shared-dir",
        default=_env("SHARED_DIR", "/tpfabric"),
        help="shared volume to write to (env TPFABRIC_SHARED_DIR)",
    )
    parser.add_argument(
        "--mount-path",
        default=_env("MOUNT_PATH"),
        help="where the main container mounts the shared volume (default: --shared-dir)",
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default=_env("RDMA_POLICY", "preferred"),
        help="required: fail on any problem; preferred: fall back to TCP; disabled: TCP",
    )
    parser.add_argument(
        "--annotations-file",
        default=_env("ANNOTATIONS_FILE", "/etc/podinfo/annotations"),
        help="downward-API annotations file holding tpfabric.io/rails (missing is fine)",
    )
    parser.add_argument(
        "--nccl-overrides",
        default=_env("NCCL_OVERRIDES"),
        help='JSON object of NCCL_* settings from the job, e.g. \'{"NCCL_DEBUG": "INFO"}\'',
    )
    parser.add_argument(
        "--exclude-hca",
        action="append",
        default=[h for h in (_env("EXCLUDE_HCAS") or "").split(",") if h.strip()],
        help="HCA never used for collectives (repeatable; env: comma-separated)",
    )
    parser.add_argument("--socket-ifname", default=_env("SOCKET_IFNAME"))
    parser.add_argument(
        "--min-memlock",
        type=parse_size,
        default=parse_size(_env("MIN_MEMLOCK", "unlimited") or "unlimited"),
        help="lowest memlock limit accepted without CAP_IPC_LOCK (default unlimited)",
    )
    parser.add_argument(
        "--topology-xml",
        action="store_true",
        default=_env("TOPOLOGY_XML", "") in ("1", "true"),
        help="also write an NCCL topology XML and point NCCL_TOPO_FILE to it",
    )
    parser.add_argument("--nccl-lib", default=_env("NCCL_LIB"), help="libnccl.so.2 to ship")
    parser.add_argument("--net-plugin-dir", default=_env("NET_PLUGIN_DIR"))
    parser.add_argument(
        "--nccl-wheel-path",
        default=_env("NCCL_WHEEL_PATH"),
        help="colon-separated folders holding nvidia-nccl-cu<major> wheels (default: sys.path)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        default=_env("REPORT_ONLY", "") in ("1", "true"),
        help="print pairing, NCCL config and every check; write nothing, always exit 0",
    )
    parser.add_argument(
        "--main-container",
        default=_env("MAIN_CONTAINER"),
        help="JSON facts of the main container (runAsUser, capabilitiesAdd, cudaMajor, ...)",
    )
    parser.add_argument(
        "--visible-gpus",
        default=os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        help="the pod's GPUs (default: NVIDIA_VISIBLE_DEVICES): UUIDs or indices",
    )
    parser.add_argument(
        "--nccl-library",
        choices=("image", "shipped"),
        default=_env("NCCL_LIBRARY", "shipped"),
        help="shipped: copy NCCL into the shared volume; image: the container's own NCCL",
    )
    parser.add_argument(
        "--termination-log",
        default=_env("TERMINATION_LOG", DEFAULT_TERMINATION_LOG),
        help="where the pairing summary goes (the container's terminationMessagePath, read "
        "by tpfabric diagnose through the API); empty: nowhere",
    )
    parser.add_argument(
        "--fabric-profile",
        default=_env("FABRIC_PROFILE"),
        help="the fabric's contract as JSON (the chart's fabric.profile): service levels, "
        "traffic classes, ECMP levels",
    )
    return parser


def options_from_args(args: argparse.Namespace) -> InitOptions:
    """Return the run options of parsed arguments."""
    return InitOptions(
        shared_dir=Path(args.shared_dir),
        root=Path(args.root),
        process_root=Path(args.process_root) if args.process_root else None,
        mount_path=args.mount_path,
        policy=args.policy,
        annotations_file=Path(args.annotations_file) if args.annotations_file else None,
        nccl_overrides=args.nccl_overrides,
        exclude_hcas=frozenset(h.strip() for h in args.exclude_hca if h.strip()),
        socket_ifname=args.socket_ifname,
        min_memlock=args.min_memlock,
        topology_xml=args.topology_xml,
        nccl_lib=Path(args.nccl_lib) if args.nccl_lib else None,
        net_plugin_dir=Path(args.net_plugin_dir) if args.net_plugin_dir else None,
        report_only=args.report_only,
        library_search_path=[p for p in (args.nccl_wheel_path or "").split(":") if p] or None,
        main_container=args.main_container,
        visible_devices=args.visible_gpus,
        nccl_library=args.nccl_library,
        fabric_profile=args.fabric_profile,
    )


def _summary(result: InitResult, options: InitOptions) -> str:
    report = result.report
    host = report["host"]
    fabric = report["fabric"]
    memlock = host["memlock_soft"]
    gpudirect = host["gpudirect"]["peer_memory"] or (
        "dma-buf" if host["gpudirect"]["dma_buf"] else "none"
    )
    lines = [
        f"{PROG}: {result.outcome} (policy {options.policy})",
        f"  HCAs: {len(host['hcas'])} found, fabric: {', '.join(fabric['hcas']) or 'none'}",
        (
            f"  GPUs: {len(host['gpus'])} of {host['gpus_on_node']} on the node "
            f"(by {host['gpu_allocation']}), GPUDirect: {gpudirect}"
        ),
        (
            f"  memlock: {memlock if isinstance(memlock, str) else format_bytes(memlock)} "
            f"({host['memlock_source']}), CAP_IPC_LOCK effective here: {host['cap_ipc_lock']}"
        ),
    ]
    contract = report["fabric_contract"]
    if contract["declared"]:
        lines.append(
            f"  fabric profile: {contract['link_layer'] or 'no link layer'}, plan level "
            f"{contract['plan_level'] or 'unknown'}, NCCL {contract['nccl_version']}"
        )
        lines += [f"    {key}: {why}" for key, why in contract["written"].items()]
        lines += [f"    not {key}: {why}" for key, why in contract["not_written"].items()]
    if report.get("transport_reason"):
        lines.insert(1, f"  why tcp: {report['transport_reason']}")
    if fabric["pairs"]:
        lines.append("  pairing (GPU -> NIC port: NCCL path type, NUMA, role):")
        lines += [f"    {p['gpu']} -> {p['hca']}:{p['port']}: {p['why']}" for p in fabric["pairs"]]
    if options.report_only:
        lines.append(
            "  rails: " + ", ".join(f"{r['rail']}={r['hca']}:{r['port']}" for r in fabric["rails"])
        )
        lines += [f"  excluded {name}: {why}" for name, why in fabric["excluded"].items()]
        lines.append("  checks:")
        lines += [
            f"    {c['check']}: {c['result']}" + (f" ({c['detail']})" if c.get("detail") else "")
            for c in report["checks"]
        ]
        lines.append("  nccl.conf it would write:")
        lines += [f"    {line}" for line in result.conf_text.splitlines()] or [
            "    none: a real run fails and removes any stale nccl.conf"
        ]
        lines.append("  fabric.env it would write:")
        lines += [f"    {k}={v}" for k, v in report["fabric_env"]["values"].items()] or ["    none"]
        lines.append(f"  exit code of a real run: {report['exit_code']}")
    else:
        lines += [f"  {key}={value}" for key, value in result.settings.items()]
        lines.append(f"  report: {options.shared_dir / 'rdma-init-report.json'}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None, memlock: MemlockProbe = read_memlock_limit) -> int:
    """Return the exit code of one run of the init program with ``argv``."""
    args = build_parser().parse_args(argv)
    options = options_from_args(args)
    try:
        result = prepare_pod(options, memlock)
    except UsageError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 2
    for warning in result.warnings:
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    if result.outcome == "failed":
        for problem in result.problems:
            sys.stderr.write(f"{PROG}: error: {problem.message}\n")
    sys.stdout.write(_summary(result, options))
    if args.termination_log and not options.report_only and result.summary:
        unwritten = write_termination_message(Path(args.termination_log), result.summary)
        if unwritten is not None and args.termination_log != DEFAULT_TERMINATION_LOG:
            sys.stderr.write(f"{PROG}: warning: termination message not written: {unwritten}\n")
    return result.exit_code
