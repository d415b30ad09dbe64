"""One run of the init program: discover, judge under the policy, write the pod's NCCL files.

Policies (``--policy``, from the job):

- ``required``: any problem -> exit 1, one line per problem, no ``nccl.conf`` (a stale one is
  removed so the main container cannot start on it);
- ``preferred``: an RDMA problem -> TCP sockets (``NCCL_IB_DISABLE=1``), a GPUDirect-only problem
  -> IB without GPUDirect (``NCCL_NET_GDR_LEVEL=LOC``), each with a warning; exit 0;
- ``disabled``: TCP sockets, nothing checked; exit 0.

Files in the shared volume (``--shared-dir``; paths inside them use ``--mount-path``, where the
main container mounts the same volume):

- ``rdma-init-report.json`` — always, even on failure;
- ``nccl.conf`` — the NCCL settings (the main container sets ``NCCL_CONF_FILE`` to it);
- ``nccl.env`` — ``export NCCL_CONF_FILE=...`` and ``LD_LIBRARY_PATH`` for images that source it;
- ``nccl-topo.xml`` — with ``--topology-xml`` only (``NCCL_TOPO_FILE`` then points to it);
- ``lib/libnccl.so.2`` and ``lib/libnccl-net*.so`` — unless ``--report-only``.

``--report-only`` runs everything, writes the report and config, copies no library and always
exits 0 (the report's ``exit_code`` says what a real run would have returned). This module must
never write outside the shared directory nor below the discovery root.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tpfabric_rdma_init import affinity
from tpfabric_rdma_init.affinity import FabricSelection, RailAssignment, RailsAnnotationError
from tpfabric_rdma_init.checks import GPUDIRECT, RDMA, UNLIMITED, Problem, check_host
from tpfabric_rdma_init.discovery import HostInventory, MemlockProbe, discover_host
from tpfabric_rdma_init.discovery import read_memlock_limit as _read_memlock_limit
from tpfabric_rdma_init.nccl_config import (
    apply_overrides,
    build_nccl_settings,
    parse_overrides,
    render_nccl_conf,
    render_topology_xml,
    socket_interface,
)
from tpfabric_rdma_init.nccl_library import (
    InstalledLibrary,
    find_nccl_library,
    find_net_plugins,
    install_libraries,
    net_plugin_name,
)

__all__ = [
    "CONF_FILE",
    "ENV_FILE",
    "POLICIES",
    "RAILS_ANNOTATION",
    "REPORT_FILE",
    "TOPO_FILE",
    "InitOptions",
    "InitResult",
    "UsageError",
    "prepare_pod",
    "read_annotation",
]

POLICIES = ("required", "preferred", "disabled")
RAILS_ANNOTATION = "tpfabric.io/rails"
REPORT_FILE = "rdma-init-report.json"
CONF_FILE = "nccl.conf"
ENV_FILE = "nccl.env"
TOPO_FILE = "nccl-topo.xml"
REPORT_SCHEMA = "tpfabric.io/rdma-init-report/v1"


class UsageError(ValueError):
    """The init program was configured wrongly (exit 2); ``str()`` is one actionable line."""


@dataclass(frozen=True)
class InitOptions:
    """Everything one run needs; the CLI fills it from flags and environment variables."""

    shared_dir: Path
    root: Path = Path("/")
    process_root: Path | None = None
    """Where capabilities, routes and interfaces are read; defaults to ``root``."""
    mount_path: str | None = None
    """Where the main container mounts the shared volume; defaults to ``shared_dir``."""
    policy: str = "preferred"
    annotations_file: Path | None = None
    nccl_overrides: str | None = None
    exclude_hcas: frozenset[str] = frozenset()
    socket_ifname: str | None = None
    min_memlock: int = UNLIMITED
    topology_xml: bool = False
    nccl_lib: Path | None = None
    net_plugin_dir: Path | None = None
    report_only: bool = False
    library_search_path: list[str] | None = None
    """Where to look for the NCCL wheel (``sys.path`` when None); tests point it at a fake."""


@dataclass(frozen=True)
class InitResult:
    """The outcome of one run: exit code, problems and warnings as printed, and the report."""

    exit_code: int
    outcome: str
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...]
    settings: dict[str, str]
    report: dict[str, Any] = field(repr=False)


def read_annotation(path: Path | None, key: str) -> str | None:
    """Return one annotation from a downward-API file (``key="value"`` lines), None if absent."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the pod annotations ({err.strerror})") from err
    for line in text.splitlines():
        name, sep, raw = line.partition("=")
        if sep and name.strip() == key:
            raw = raw.strip()
            try:
                value = json.loads(raw)  # the kubelet writes Go-quoted strings
            except json.JSONDecodeError:
                value = raw.strip('"')
            return str(value)
    return None


def _transport(policy: str, problems: list[Problem]) -> tuple[str, str]:
    """Return (outcome, transport) for a policy and the problems found."""
    if policy == "disabled":
        return "tcp", "tcp"
    kinds = {problem.kind for problem in problems if problem.kind in (RDMA, GPUDIRECT)}
    if policy == "required" and problems:
        return "failed", "none"
    if RDMA in kinds:
        return "tcp-fallback", "tcp"
    if GPUDIRECT in kinds:
        return "rdma-without-gpudirect", "ib-no-gdr"
    return "rdma", "ib"


def _inventory_report(inventory: HostInventory) -> dict[str, Any]:
    data = asdict(inventory)
    for key in ("memlock_soft", "memlock_hard"):
        if data[key] == UNLIMITED:
            data[key] = "unlimited"
    data["gpudirect"]["available"] = inventory.gpudirect.available
    return data


def _fabric_report(
    selection: FabricSelection, rails: RailAssignment | None, settings: dict[str, str]
) -> dict[str, Any]:
    return {
        "hcas": list(selection.hcas),
        "rails": [{"rail": rail, "hca": hca} for rail, hca in rails.rails] if rails else [],
        "rail_source": rails.source if rails else None,
        "rail_aligned": settings.get("NCCL_CROSS_NIC") == "0",
        "pairs": [
            {"gpu": pair.gpu, "hca": pair.hca, "path": pair.path.name} for pair in selection.pairs
        ],
        "excluded": selection.excluded,
    }


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def _remove_stale(shared_dir: Path) -> None:
    for name in (CONF_FILE, ENV_FILE, TOPO_FILE):
        (shared_dir / name).unlink(missing_ok=True)


def _install_library(
    options: InitOptions, transport: str, warnings: list[str]
) -> tuple[InstalledLibrary | None, str | None]:
    library = find_nccl_library(options.nccl_lib, options.library_search_path)
    if library is None:
        if options.nccl_lib is not None:
            raise UsageError(f"--nccl-lib {options.nccl_lib}: no such file")
        warnings.append(
            "no NCCL library in the init image (nvidia-nccl-cu12 wheel not installed); "
            "the main container uses its own NCCL"
        )
        return None, None
    plugins = find_net_plugins(options.net_plugin_dir) if transport != "tcp" else ()
    installed = install_libraries(library, plugins, options.shared_dir)
    return installed, net_plugin_name(plugins)


def _write_nccl_files(
    options: InitOptions,
    *,
    inventory: HostInventory,
    selection: FabricSelection,
    rails: RailAssignment,
    outcome: str,
    transport: str,
    overrides: dict[str, str | None],
    warnings: list[str],
) -> tuple[dict[str, str], InstalledLibrary | None, dict[str, str]]:
    """Return (settings, installed library, env) after writing nccl.conf, nccl.env, topology."""
    mount = (options.mount_path or str(options.shared_dir)).rstrip("/") or "/"
    ifname = socket_interface(inventory, options.socket_ifname)
    settings, config_warnings = build_nccl_settings(
        inventory, selection, rails, transport=transport, socket_ifname=ifname
    )
    warnings.extend(config_warnings)
    installed: InstalledLibrary | None = None
    if not options.report_only:
        installed, plugin = _install_library(options, transport, warnings)
        if plugin:
            settings["NCCL_NET_PLUGIN"] = plugin
    if options.topology_xml and transport != "tcp":
        xml = render_topology_xml(inventory, selection, gdr=transport == "ib")
        _write(options.shared_dir / TOPO_FILE, xml)
        settings["NCCL_TOPO_FILE"] = f"{mount}/{TOPO_FILE}"
    settings = apply_overrides(settings, overrides)
    comment = f"written by tpfabric-rdma-init: {outcome}, policy {options.policy}"
    _write(options.shared_dir / CONF_FILE, render_nccl_conf(settings, (comment,)))
    env = {"NCCL_CONF_FILE": f"{mount}/{CONF_FILE}"}
    lines = [f"export NCCL_CONF_FILE={env['NCCL_CONF_FILE']}"]
    if installed is not None:
        env["LD_LIBRARY_PATH"] = f"{mount}/lib"
        lines.append(f"export LD_LIBRARY_PATH={mount}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    _write(options.shared_dir / ENV_FILE, "\n".join(lines) + "\n")
    return settings, installed, env


def prepare_pod(options: InitOptions, memlock: MemlockProbe = _read_memlock_limit) -> InitResult:
    """Return the result of discovering, checking and writing the pod's NCCL files."""
    if options.policy not in POLICIES:
        raise UsageError(f"--policy {options.policy!r}: choose one of {', '.join(POLICIES)}")
    try:
        overrides = parse_overrides(options.nccl_overrides)
    except ValueError as err:
        raise UsageError(str(err)) from err
    try:
        options.shared_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(
            f"--shared-dir {options.shared_dir}: cannot create it ({err.strerror}); "
            "mount a writable emptyDir there"
        ) from err
    inventory = discover_host(options.root, memlock, options.process_root)
    selection = affinity.select_fabric_hcas(inventory.hcas, inventory.gpus, options.exclude_hcas)
    warnings: list[str] = []
    problems: list[Problem] = []
    annotation = read_annotation(options.annotations_file, RAILS_ANNOTATION)
    try:
        rails = affinity.assign_rails(selection.hcas, annotation)
    except RailsAnnotationError as err:
        rails = affinity.assign_rails(selection.hcas, None)
        if options.policy == "required":
            problems.append(Problem(code="rails", kind="rails", message=str(err)))
        else:
            warnings.append(f"{err}; using the HCA order")
    if options.policy != "disabled":
        found, check_warnings = check_host(inventory, rails.hcas, options.min_memlock)
        problems.extend(found)
        warnings.extend(check_warnings)
    outcome, transport = _transport(options.policy, problems)
    if outcome in ("tcp-fallback", "rdma-without-gpudirect"):
        warnings.extend(f"falling back ({outcome}): {p.message}" for p in problems)

    settings: dict[str, str] = {}
    installed: InstalledLibrary | None = None
    env: dict[str, str] = {}
    if transport == "none":
        _remove_stale(options.shared_dir)
    else:
        settings, installed, env = _write_nccl_files(
            options,
            inventory=inventory,
            selection=selection,
            rails=rails,
            outcome=outcome,
            transport=transport,
            overrides=overrides,
            warnings=warnings,
        )

    exit_code = 1 if outcome == "failed" else 0
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "outcome": outcome,
        "policy": options.policy,
        "report_only": options.report_only,
        "exit_code": exit_code,
        "problems": [asdict(problem) for problem in problems],
        "warnings": warnings,
        "fabric": _fabric_report(selection, rails, settings),
        "nccl": {
            "settings": settings,
            "overridden": sorted(overrides),
            "env": env,
            "conf_file": str(options.shared_dir / CONF_FILE) if settings else None,
            "library": asdict(installed) if installed else None,
        },
        "host": _inventory_report(inventory),
    }
    _write(options.shared_dir / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    return InitResult(
        exit_code=0 if options.report_only else exit_code,
        outcome=outcome,
        problems=tuple(problems),
        warnings=tuple(warnings),
        settings=settings,
        report=report,
    )
