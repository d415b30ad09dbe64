"""One run of the init program: discover, judge under the policy, write the pod's NCCL files.

Policies (``--policy``, from the job):

- ``required``: any problem -> exit 1, one line per problem (a fabric port's problem names its
  rail), no ``nccl.conf`` (a stale one is removed so the main container cannot start on it);
- ``preferred``: a problem of some fabric ports only -> those rails are dropped and the healthy
  ones kept (``NCCL_CROSS_NIC`` is then left to NCCL: the GPU of a dropped rail reaches the
  fabric through a neighbour's NIC and its traffic crosses rails above the leaves); any other
  RDMA problem, or no healthy rail -> TCP sockets (``NCCL_IB_DISABLE=1``); a GPUDirect-only
  problem -> IB without GPUDirect (``NCCL_NET_GDR_LEVEL=LOC``); each with a warning; exit 0;
- ``disabled``: TCP sockets, nothing checked; exit 0. The report says why (``transport_reason``,
  from the pod's ``tpfabric.io/rdma`` annotation: the pod got no RDMA devices, and whether it
  asked none or its nodes offer none);
- whatever the policy, NCCL on a net plugin (``NCCL_NET``/``NCCL_NET_PLUGIN`` in spec.nccl or
  the main container's env: EFA, TCPX/TCPXO, gIB) -> outcome ``net-plugin``: the plugin's
  devices are not checked and no ``NCCL_NET``/``NCCL_IB_*`` is written (they would switch it
  off); exit 0 with a warning.

Files in the shared volume (``--shared-dir``; paths inside them use ``--mount-path``, where the
main container mounts the same volume):

- ``rdma-init-report.json`` — always, even on failure;
- ``nccl.conf`` — the NCCL settings; the operator sets ``NCCL_CONF_FILE`` to it (read by NCCL
  >= 2.23.4) and mounts it as ``/root/.nccl.conf`` (the user file older NCCL reads instead),
  never over the image's ``/etc/nccl.conf``, which NCCL reads after it for the keys still unset;
- ``nccl.env`` — the same env for images that source it;
- ``fabric.env`` — the transports that are not NCCL (UCX, NVSHMEM, Gloo, TensorPipe, vLLM's host
  and NIXL side channel; :mod:`~tpfabric_rdma_init.fabric_env`), sourced through ``BASH_ENV``;
- ``nccl-topo.xml`` — on Hyper-V VMs (VMBus) always, from the pairing
  (:mod:`~tpfabric_rdma_init.vm_topology`: GPUDirect RDMA needs it there); elsewhere with
  ``--topology-xml`` only; ``NCCL_TOPO_FILE`` points to it; never when a GPU or NIC has no PCI
  path at all;
- ``nccl-topo-dump.xml`` — written by NCCL itself (``NCCL_TOPO_DUMP_FILE``): what it detected,
  which ``tpfabric explain --nccl`` puts beside the pairing.

The fabric profile (``--fabric-profile``, :mod:`~tpfabric_rdma_init.fabric_contract`) adds the
fabric's service level, traffic classes and ECMP spreading; every key written has its reason in
the report (``nccl.reasons``, ``fabric_contract``), and a key the pod's NCCL does not read
(:mod:`~tpfabric_rdma_init.nccl_versions`) is never written.
- ``lib/libnccl.so.2`` and ``lib/libnccl-net*.so`` — with ``--nccl-library=shipped`` when a
  library of the main container's CUDA major that the driver can run is in the image.

``--report-only`` runs every check and prints the pairing, the NCCL config it would write and
every check, and changes nothing: no file is written or removed, no library copied; it always
exits 0 (the report's ``exit_code`` says what a real run would have returned). This module must
never write outside the shared directory nor below the discovery root.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tpfabric_rdma_init import affinity
from tpfabric_rdma_init.affinity import (
    FabricSelection,
    NicPort,
    RailAssignment,
    RailsAnnotationError,
)
from tpfabric_rdma_init.checks import (
    GPUDIRECT,
    RDMA,
    UNLIMITED,
    MainContainer,
    Problem,
    check_host,
    port_of,
)
from tpfabric_rdma_init.discovery import HostInventory, MemlockProbe, discover_host
from tpfabric_rdma_init.discovery import read_memlock_limit as _read_memlock_limit
from tpfabric_rdma_init.fabric_contract import (
    PLAN_LEVEL_ANNOTATION,
    TRAFFIC_CLASS_ANNOTATION,
    ContractSettings,
    FabricContract,
    ProfileError,
    apply_contract,
    read_profile,
)
from tpfabric_rdma_init.fabric_env import (
    FabricEnv,
    build_fabric_env,
    reasons_with_pod_ip,
    render_fabric_env,
)
from tpfabric_rdma_init.nccl_config import (
    OverridesError,
    apply_overrides,
    build_nccl_settings,
    check_traffic_class,
    gid_index_override,
    net_plugin_in_use,
    parse_overrides,
    render_nccl_conf,
    render_topology_xml,
    roce_gid_index,
    socket_interface,
)
from tpfabric_rdma_init.nccl_library import (
    InstalledLibrary,
    NcclLibrary,
    driver_cuda_major,
    find_nccl_library,
    find_net_plugins,
    install_libraries,
    net_plugin_name,
)
from tpfabric_rdma_init.nccl_versions import NcclVersion, parse_version, version_text
from tpfabric_rdma_init.termination import pairing_summary
from tpfabric_rdma_init.vm_topology import render_vm_topology

__all__ = [
    "CONF_FILE",
    "ENV_FILE",
    "FABRIC_ENV_FILE",
    "NETWORK_STATUS_ANNOTATION",
    "POLICIES",
    "RAILS_ANNOTATION",
    "REPORT_FILE",
    "TOPO_DUMP_FILE",
    "TOPO_FILE",
    "InitOptions",
    "InitResult",
    "UsageError",
    "parse_main_container",
    "prepare_pod",
    "primary_interface",
    "read_annotation",
]

POLICIES = ("required", "preferred", "disabled")
LIBRARY_MODES = ("image", "shipped")
RAILS_ANNOTATION = "tpfabric.io/rails"
#: the RDMA devices the pod was given and why (JSON: resource, count, reason, message)
RDMA_DECISION_ANNOTATION = "tpfabric.io/rdma"
NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
REPORT_FILE = "rdma-init-report.json"
CONF_FILE = "nccl.conf"
ENV_FILE = "nccl.env"
TOPO_FILE = "nccl-topo.xml"
TOPO_DUMP_FILE = "nccl-topo-dump.xml"
FABRIC_ENV_FILE = "fabric.env"
REPORT_SCHEMA = "tpfabric.io/rdma-init-report/v2"
NCCL_CONF_FILE_SINCE = (2, 23)
NCCL_GID_AUTO_SINCE = (2, 21)


class UsageError(ValueError):
    """The init program was configured wrongly (exit 2); ``str()`` is one actionable line."""


@dataclass(frozen=True)
class InitOptions:
    """Everything one run needs; the CLI fills it from flags and environment variables."""

    shared_dir: Path
    root: Path = Path("/")
    process_root: Path | None = None
    """Where capabilities, limits, routes and interfaces are read; defaults to ``root``."""
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
    """Where to look for the NCCL wheels (``sys.path`` when None); tests point it at fakes."""
    main_container: str | None = None
    """JSON the operator derives from the main container (user, capabilities, CUDA major)."""
    visible_devices: str | None = None
    """``NVIDIA_VISIBLE_DEVICES`` of this container: the pod's GPUs."""
    nccl_library: str = "shipped"
    """``shipped``: copy NCCL into the shared volume; ``image``: the container's own NCCL."""
    fabric_profile: str | None = None
    """The chart's ``fabric.profile`` as JSON (the operator's or webhook's canonical form)."""


@dataclass(frozen=True)
class InitResult:
    """The outcome of one run: exit code, problems and warnings as printed, and the report."""

    exit_code: int
    outcome: str
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...]
    settings: dict[str, str]
    report: dict[str, Any] = field(repr=False)
    conf_text: str = ""
    #: the pairing in one line for the termination message (:mod:`.termination`)
    summary: str = ""


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


def primary_interface(network_status: str | None) -> str | None:
    """Return the interface Multus marks ``default`` in its network-status annotation."""
    if not network_status:
        return None
    try:
        entries = json.loads(network_status)
    except json.JSONDecodeError:
        return None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("default") and entry.get("interface"):
            return str(entry["interface"])
    return None


def parse_main_container(text: str | None) -> MainContainer | None:
    """Return the main container's facts from the operator's JSON, None when not given."""
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"--main-container: not JSON ({err.msg})") from err
    if not isinstance(data, dict):
        raise UsageError("--main-container: expected a JSON object")
    user = data.get("runAsUser")
    cuda = data.get("cudaMajor")
    return MainContainer(
        run_as_user=int(user) if isinstance(user, int) else None,
        run_as_non_root=bool(data.get("runAsNonRoot", False)),
        privileged=bool(data.get("privileged", False)),
        capabilities_add=tuple(str(c) for c in data.get("capabilitiesAdd") or ()),
        cuda_major=int(cuda) if isinstance(cuda, int) else None,
        nccl_env={str(k): str(v) for k, v in (data.get("ncclEnv") or {}).items()},
        nccl_version=str(data["ncclVersion"]) if data.get("ncclVersion") else None,
    )


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = text.split("+")[0].split(".")
    return tuple(int(p) for p in parts if p.isdigit()) or None


def _transport(policy: str, problems: list[Problem]) -> tuple[str, str]:
    """Return (outcome, transport) for a policy and the problems left after dropping rails."""
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


def rdma_decision(text: str | None) -> dict[str, Any] | None:
    """Return the pod's RDMA decision (``tpfabric.io/rdma``) as a dict, None when absent or
    unreadable (written by the operator or the gang webhook; never trusted to be well-formed)."""
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("count"), int):
        return None
    keys = ("resource", "count", "reason", "message")
    return {key: data[key] for key in keys if isinstance(data.get(key), str | int)}


def transport_reason(policy: str, decision: dict[str, Any] | None) -> str | None:
    """Return why the pod runs over TCP by its policy (None: its policy is not ``disabled``)."""
    if policy != "disabled":
        return None
    if decision is not None and decision.get("count") == 0 and decision.get("message"):
        return (
            f"policy disabled: the pod got no RDMA devices ({decision.get('reason')}: "
            f"{decision['message']})"
        )
    return "policy disabled: the pod got no RDMA devices (its job or gang asks none)"


def _port_guids(inventory: HostInventory) -> dict[str, NicPort]:
    """Return every InfiniBand port the pod sees by its port GUID (the plan's pins)."""
    return {
        port.guid: NicPort(hca.name, port.number)
        for hca in inventory.hcas
        for port in hca.ports
        if port.guid is not None
    }


def _inventory_report(inventory: HostInventory) -> dict[str, Any]:
    data = asdict(inventory)
    for key in ("memlock_soft", "memlock_hard"):
        if data[key] == UNLIMITED:
            data[key] = "unlimited"
    data["gpudirect"]["available"] = inventory.gpudirect.available
    if inventory.pod_addresses is not None:
        data["pod_addresses"] = sorted(inventory.pod_addresses)
    return data


_PATH_WORDS = {
    "LOC": "same PCI device",
    "PIX": "same PCIe switch",
    "PXB": "PCIe switches, no host bridge",
    "PHB": "through the CPU's host bridge",
    "SYS": "across the CPU interconnect",
}


def _pair_reports(inventory: HostInventory, selection: FabricSelection) -> list[dict[str, Any]]:
    """Return each GPU's port with why it was paired: path type, NUMA nodes, the NIC's role."""
    gpus = {gpu.bdf: gpu for gpu in inventory.gpus}
    hcas = {hca.name: hca for hca in inventory.hcas}
    roles = affinity.nic_roles(inventory.hcas, inventory.gpus)
    sharing = {
        (p.hca, p.port): sum(1 for q in selection.pairs if (q.hca, q.port) == (p.hca, p.port))
        for p in selection.pairs
    }
    reports = []
    for pair in selection.pairs:
        gpu_pci = gpus[pair.gpu].pci if pair.gpu in gpus else None
        nic_pci = hcas[pair.hca].pci if pair.hca in hcas else None
        gpu_numa = gpu_pci.numa_node if gpu_pci else None
        nic_numa = nic_pci.numa_node if nic_pci else None
        words = _PATH_WORDS[pair.path.name]
        if gpu_pci is None or nic_pci is None:
            words = "no PCI path in sysfs: paired by name order"
        elif gpu_pci.vmbus or nic_pci.vmbus:
            words = "Hyper-V VMBus: no PCIe switch visible, paired by NUMA node and bus order"
        numa = (
            f"same NUMA node {gpu_numa}"
            if gpu_numa is not None and gpu_numa == nic_numa
            else f"GPU on NUMA node {gpu_numa}, NIC on {nic_numa}"
        )
        role = roles.get(pair.hca, "unknown")
        why = f"{pair.path.name} ({words}), {numa}, {role} NIC"
        if sharing[(pair.hca, pair.port)] > 1:
            why += f", shared by {sharing[(pair.hca, pair.port)]} GPUs"
        reports.append(
            {
                "gpu": pair.gpu,
                "hca": pair.hca,
                "port": pair.port,
                "path": pair.path.name,
                "gpu_numa": gpu_numa,
                "nic_numa": nic_numa,
                "role": role,
                "why": why,
            }
        )
    return reports


def _fabric_report(
    inventory: HostInventory,
    selection: FabricSelection,
    rails: RailAssignment | None,
    settings: dict[str, str],
    dropped: dict[NicPort, int | None],
) -> dict[str, Any]:
    return {
        "hcas": list(selection.hcas),
        "endpoints": [str(e) for e in selection.endpoints],
        "rails": [{"rail": rail, "hca": p.hca, "port": p.port} for rail, p in rails.rails]
        if rails
        else [],
        "rail_source": rails.source if rails else None,
        "rail_aligned": settings.get("NCCL_CROSS_NIC") == "0",
        "dropped_rails": [{"rail": r, "endpoint": str(e)} for e, r in dropped.items()],
        "pairs": _pair_reports(inventory, selection),
        "excluded": selection.excluded,
    }


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def _remove_stale(shared_dir: Path) -> None:
    for name in (CONF_FILE, ENV_FILE, TOPO_FILE, FABRIC_ENV_FILE):
        (shared_dir / name).unlink(missing_ok=True)


def _choose_library(
    options: InitOptions,
    inventory: HostInventory,
    main: MainContainer | None,
    warnings: list[str],
) -> NcclLibrary | None:
    """Return the library to ship, None (with a warning) when none fits the container."""
    if options.nccl_library != "shipped":
        return None
    driver_major = driver_cuda_major(inventory.gpudirect.driver_version)
    wanted = main.cuda_major if main and main.cuda_major else None
    library = find_nccl_library(options.nccl_lib, options.library_search_path, wanted)
    if library is None:
        if options.nccl_lib is not None:
            raise UsageError(f"--nccl-lib {options.nccl_lib}: no such file")
        what = f"for CUDA {wanted}" if wanted else "(no nvidia-nccl-cu* wheel installed)"
        warnings.append(
            f"no NCCL library {what} in the init image; the main container uses its own NCCL"
        )
        return None
    if wanted is None and library.cuda_major is not None:
        warnings.append(
            f"the main container's CUDA major is unknown (set annotation tpfabric.io/cuda-major "
            f"or env CUDA_VERSION in the template); shipping the CUDA {library.cuda_major} build"
        )
    if driver_major is not None and (library.cuda_major or 0) > driver_major:
        warnings.append(
            f"NCCL {library.version} is built for CUDA {library.cuda_major} but driver "
            f"{inventory.gpudirect.driver_version} runs CUDA <= {driver_major}; not shipped, "
            "the main container uses its own NCCL"
        )
        return None
    return library


def _library_report(
    library: NcclLibrary | None, installed: InstalledLibrary | None
) -> dict[str, Any] | None:
    if library is None:
        return None
    data: dict[str, Any] = {
        "version": library.version,
        "cuda_major": library.cuda_major,
        "source": library.source,
        "installed": asdict(installed) if installed else None,
        "reads_nccl_conf_file": None,
    }
    version = _version(library.version)
    if version is not None:
        data["reads_nccl_conf_file"] = version[:2] >= NCCL_CONF_FILE_SINCE
    return data


def _rail_label(problem: Problem, rails: RailAssignment) -> str:
    endpoint = NicPort(problem.hca or "", problem.port or 0)
    rail = rails.rail_of(endpoint)
    return f"rail {rail} ({endpoint})" if rail is not None else str(endpoint)


def _split_rail_problems(
    problems: list[Problem], rails: RailAssignment
) -> tuple[list[Problem], dict[NicPort, int | None]]:
    """Return (problems not scoped to a port, failed port -> rail)."""
    failed: dict[NicPort, int | None] = {}
    rest = []
    for problem in problems:
        if problem.kind == RDMA and problem.hca is not None and problem.port is not None:
            endpoint = NicPort(problem.hca, problem.port)
            failed[endpoint] = rails.rail_of(endpoint)
        else:
            rest.append(problem)
    return rest, failed


def _checks_report(
    problems: list[Problem], policy: str, skipped: bool = False
) -> list[dict[str, str]]:
    names = {
        "devices": ("no-hca", "no-fabric-hca", "no-dev-infiniband", "no-uverbs"),
        "ports": ("no-port", "port-down"),
        "roce-gid": ("no-pod-gid", "foreign-gid", "gid-index"),
        "memlock": ("memlock",),
        "gpudirect": ("no-peermem", "no-pci-topology"),
        "rails-annotation": ("rails",),
    }
    if policy == "disabled" or skipped:
        return [{"check": name, "result": "skipped"} for name in names]
    report = []
    for name, codes in names.items():
        found = [p.message for p in problems if p.code in codes]
        report.append(
            {"check": name, "result": "fail" if found else "pass", "detail": "; ".join(found)}
        )
    return report


@dataclass
class _Verdict:
    """What the policy made of the problems: rails kept, outcome and transport."""

    problems: list[Problem]
    found: list[Problem]
    rails: RailAssignment
    dropped: dict[NicPort, int | None]
    outcome: str
    transport: str


def _judge(
    policy: str, problems: list[Problem], rails: RailAssignment, warnings: list[str]
) -> _Verdict:
    """Return the verdict: rail problems named (required) or their rails dropped (preferred)."""
    found = list(problems)
    rest, failed = _split_rail_problems(problems, rails)
    dropped: dict[NicPort, int | None] = {}
    healthy = [e for e in rails.endpoints if e not in failed]
    if policy == "required":
        problems = [
            replace(p, message=f"{_rail_label(p, rails)}: {p.message}")
            if p.hca is not None and p.port is not None
            else p
            for p in problems
        ]
    elif policy == "preferred" and failed and healthy and RDMA not in {p.kind for p in rest}:
        dropped = failed
        warnings.extend(
            f"dropping {_rail_label(p, rails)} and keeping {len(healthy)} of "
            f"{len(rails.endpoints)} rails (rail alignment off: that GPU's traffic crosses to "
            f"another rail's NIC): {p.message}"
            for p in problems
            if p.hca is not None and p.port is not None
        )
        rails = rails.without(set(failed))
        problems = rest
    outcome, transport = _transport(policy, problems)
    if dropped and transport != "tcp":
        outcome = outcome.replace("rdma", "rdma-degraded", 1)
    if outcome in ("tcp-fallback", "rdma-without-gpudirect", "rdma-degraded-without-gpudirect"):
        warnings.extend(f"falling back ({outcome}): {p.message}" for p in problems)
    return _Verdict(problems, found, rails, dropped, outcome, transport)


@dataclass(frozen=True)
class _PodFacts:
    """What the pod says of itself: main container, primary interface, the job's overrides,
    the fabric's contract and the placer's annotations."""

    main: MainContainer | None
    primary: str | None
    overrides: dict[str, str | None]
    contract: FabricContract
    plan_level: str | None
    traffic_class_mode: str | None


@dataclass
class _Written:
    settings: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    library: NcclLibrary | None = None
    installed: InstalledLibrary | None = None
    conf_text: str = ""
    reasons: dict[str, str] = field(default_factory=dict)
    contract: ContractSettings = field(default_factory=ContractSettings)
    nccl_version: NcclVersion | None = None
    version_source: str = "unknown"
    fabric_env: FabricEnv = field(default_factory=FabricEnv)
    fabric_env_text: str = ""
    topology: str | None = None
    """Where NCCL's topology file came from (``vm-pairing``, ``skeleton``), None: none."""


def _pci_placed(inventory: HostInventory, selection: FabricSelection) -> str | None:
    """Return why the topology skeleton would be wrong (VMBus, no PCI path), None if it is not."""
    fabric = set(selection.hcas)
    locations = [gpu.pci for gpu in inventory.gpus]
    locations += [hca.pci for hca in inventory.hcas if hca.name in fabric]
    if any(pci is None for pci in locations):
        return "a GPU or NIC has no PCI path in sysfs"
    if any(pci is not None and pci.vmbus for pci in locations):
        return "GPUs and NICs on Hyper-V VMBus have no PCIe switch to describe"
    return None


def _vm_topology_wanted(
    inventory: HostInventory, selection: FabricSelection, overrides: dict[str, str | None]
) -> bool:
    """Return whether this pod gets a topology file from the pairing: a Hyper-V VM whose GPUs
    and fabric NICs all have a PCI path, paired, and no NCCL_TOPO_FILE of the job's own."""
    if overrides.get("NCCL_TOPO_FILE") or not selection.pairs:
        return False
    fabric = set(selection.hcas)
    locations = [gpu.pci for gpu in inventory.gpus]
    locations += [hca.pci for hca in inventory.hcas if hca.name in fabric]
    return all(pci is not None for pci in locations) and any(
        pci is not None and pci.vmbus for pci in locations
    )


_BASE_REASONS = {
    "NCCL_SOCKET_IFNAME": "the pod's primary interface: bootstrap and the TCP fallback",
    "NCCL_CROSS_NIC": "rail-aligned: each GPU's traffic stays on its own rail's NIC",
    "NCCL_IB_GID_INDEX": "the pod's own RoCE v2 GID, at the same index on every rail",
    "NCCL_IB_ADDR_FAMILY": "the GID index differs between rails: NCCL (>= 2.21) picks per device "
    "the first RoCE v2 GID of this family, which is the pod's",
    "NCCL_IB_ROCE_VERSION_NUM": "with NCCL_IB_ADDR_FAMILY: RoCE v2 GIDs only",
    "NCCL_NET_GDR_LEVEL": "GPUDirect RDMA is not usable: staging through host memory",
    "NCCL_IB_DISABLE": "TCP sockets: no usable RDMA",
    "NCCL_NET": "TCP sockets: no usable RDMA",
    "NCCL_NET_PLUGIN": "the net plugin shipped beside the library",
    "NCCL_TOPO_DUMP_FILE": "NCCL writes what it detected here; tpfabric explain --nccl puts it "
    "beside the pairing",
}


def _reasons(
    settings: dict[str, str], rails: RailAssignment, written: _Written, overridden: set[str]
) -> dict[str, str]:
    """Return a reason for every key of ``settings``."""
    reasons: dict[str, str] = {}
    for key in settings:
        if key in overridden:
            reasons[key] = "spec.nccl (the job's own value)"
        elif key in written.contract.written:
            reasons[key] = written.contract.written[key]
        elif key == "NCCL_IB_HCA":
            reasons[key] = (
                f"the pod's {len(rails.endpoints)} fabric port(s) in rail order (rails from the "
                f"{rails.source}); '=' matches names exactly"
            )
        elif key == "NCCL_TOPO_FILE":
            reasons[key] = (
                "Hyper-V VM: each GPU and its paired NIC below one virtual switch, so NCCL uses "
                "GPUDirect RDMA between them"
                if written.topology == "vm-pairing"
                else "the PCIe switches and fabric NICs this pod sees (--topology-xml)"
            )
        else:
            reasons[key] = _BASE_REASONS.get(key, "set by tpfabric-rdma-init")
    return reasons


def _nccl_version(
    library: NcclLibrary | None, main: MainContainer | None
) -> tuple[NcclVersion | None, str]:
    """Return the pod's NCCL version and where it comes from."""
    if library is not None:
        return parse_version(library.version), f"the shipped library ({library.source})"
    if main is not None and main.nccl_version:
        return parse_version(main.nccl_version), (
            "the job (tpfabric.io/nccl-version or env NCCL_VERSION)"
        )
    return None, "unknown: the image's own NCCL (set annotation tpfabric.io/nccl-version)"


def _link_layers(inventory: HostInventory, rails: RailAssignment) -> list[str]:
    return sorted(
        {port.link_layer for e in rails.endpoints if (port := port_of(inventory, e)) is not None}
    )


def _topology_file(
    options: InitOptions,
    *,
    inventory: HostInventory,
    selection: FabricSelection,
    facts: _PodFacts,
    transport: str,
    out: _Written,
    warnings: list[str],
) -> None:
    """Write the pod's NCCL topology file where one is due and point NCCL_TOPO_FILE to it."""
    mount = (options.mount_path or str(options.shared_dir)).rstrip("/") or "/"
    if transport not in ("ib", "ib-no-gdr"):
        return
    if _vm_topology_wanted(inventory, selection, facts.overrides):
        if not options.report_only:
            _write(options.shared_dir / TOPO_FILE, render_vm_topology(inventory, selection))
        out.settings["NCCL_TOPO_FILE"] = f"{mount}/{TOPO_FILE}"
        out.topology = "vm-pairing"
        return
    if not options.topology_xml:
        return
    placed = _pci_placed(inventory, selection)
    if placed is not None:
        warnings.append(
            f"{placed}: no NCCL topology file written (NCCL reads the PCI paths itself); give "
            "the VM image's topology file as spec.nccl NCCL_TOPO_FILE"
        )
        return
    if not options.report_only:
        xml = render_topology_xml(inventory, selection, gdr=transport == "ib")
        _write(options.shared_dir / TOPO_FILE, xml)
    out.settings["NCCL_TOPO_FILE"] = f"{mount}/{TOPO_FILE}"
    out.topology = "skeleton"


def _nccl_files(
    options: InitOptions,
    *,
    inventory: HostInventory,
    selection: FabricSelection,
    verdict: _Verdict,
    facts: _PodFacts,
    warnings: list[str],
) -> _Written:
    """Return what was (or, with --report-only, would be) written for the pod's NCCL."""
    main, overrides = facts.main, facts.overrides
    out = _Written()
    mount = (options.mount_path or str(options.shared_dir)).rstrip("/") or "/"
    transport = verdict.transport
    ifname = socket_interface(inventory, options.socket_ifname, facts.primary)
    gid_override = gid_index_override(overrides)
    settings, config_warnings = build_nccl_settings(
        inventory,
        selection,
        verdict.rails,
        transport=transport,
        socket_ifname=ifname,
        rails_dropped=bool(verdict.dropped),
        gid_index=gid_override,
    )
    warnings.extend(config_warnings)
    out.library = _choose_library(options, inventory, main, warnings)
    version = _version(out.library.version) if out.library else None
    if version and version[:2] < NCCL_GID_AUTO_SINCE and "NCCL_IB_ADDR_FAMILY" in settings:
        warnings.append(
            f"NCCL {version} predates per-device GID selection (2.21); "
            "set spec.nccl NCCL_IB_GID_INDEX"
        )
    out.nccl_version, out.version_source = _nccl_version(out.library, main)
    if out.library is not None and not options.report_only:
        wanted = transport in ("ib", "ib-no-gdr")  # never over the image's own net plugin
        plugins = find_net_plugins(options.net_plugin_dir) if wanted else ()
        out.installed = install_libraries(out.library, plugins, options.shared_dir)
        if plugin := net_plugin_name(plugins):
            settings["NCCL_NET_PLUGIN"] = plugin
    layers = _link_layers(inventory, verdict.rails)
    out.contract = apply_contract(
        facts.contract,
        link_layers=layers,
        transport=transport,
        plan_level=facts.plan_level,
        traffic_class_mode=facts.traffic_class_mode,
        version=out.nccl_version,
        rails=verdict.rails,
        selection=selection,
    )
    warnings.extend(out.contract.warnings)
    settings.update(out.contract.settings)
    settings["NCCL_TOPO_DUMP_FILE"] = f"{mount}/{TOPO_DUMP_FILE}"
    out.settings = settings
    _topology_file(options, inventory=inventory, selection=selection, facts=facts,
                   transport=transport, out=out, warnings=warnings)  # fmt: skip
    out.settings = apply_overrides(out.settings, overrides)
    out.reasons = _reasons(out.settings, verdict.rails, out, {k for k in overrides if overrides[k]})
    comment = f"written by tpfabric-rdma-init: {verdict.outcome}, policy {options.policy}"
    out.conf_text = render_nccl_conf(out.settings, (comment,))
    out.env = {"NCCL_CONF_FILE": f"{mount}/{CONF_FILE}"}
    lines = [f"export NCCL_CONF_FILE={out.env['NCCL_CONF_FILE']}"]
    if out.library is not None:
        out.env["LD_LIBRARY_PATH"] = f"{mount}/lib"
        lines.append(f"export LD_LIBRARY_PATH={mount}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    gid = out.settings.get("NCCL_IB_GID_INDEX")
    out.fabric_env = build_fabric_env(
        transport=transport,
        selection=selection,
        rails=verdict.rails,
        socket_ifname=ifname,
        gid_index=int(gid) if gid and gid.isdigit() else None,
        link_layer=layers[0] if len(layers) == 1 else None,
        contract=facts.contract,
    )
    out.fabric_env_text = render_fabric_env(out.fabric_env, (comment,))
    if not options.report_only:
        _write(options.shared_dir / CONF_FILE, out.conf_text)
        _write(options.shared_dir / ENV_FILE, "\n".join(lines) + "\n")
        _write(options.shared_dir / FABRIC_ENV_FILE, out.fabric_env_text)
    return out


def _collect_problems(
    options: InitOptions,
    *,
    inventory: HostInventory,
    selection: FabricSelection,
    rails: RailAssignment,
    main: MainContainer | None,
    overrides: dict[str, str | None],
    warnings: list[str],
) -> list[Problem]:
    if options.policy == "disabled":
        return []
    topology = overrides.get("NCCL_TOPO_FILE")
    if topology is None and _vm_topology_wanted(inventory, selection, overrides):
        topology = f"{TOPO_FILE} (from the pairing)"
    problems, check_warnings = check_host(
        inventory, rails.endpoints, options.min_memlock, main, topology_file=topology
    )
    warnings.extend(check_warnings)
    roce = any(
        (port := port_of(inventory, e)) is not None and port.link_layer == "Ethernet"
        for e in rails.endpoints
    )
    if roce:
        _, gid_problems, _ = roce_gid_index(
            inventory, rails.endpoints, gid_index_override(overrides)
        )
        problems.extend(gid_problems)
        if not read_profile(options.fabric_profile).traffic_class:
            warnings.extend(check_traffic_class(overrides, roce=True)[1])
    return problems


def _checked_overrides(
    options: InitOptions,
) -> tuple[dict[str, str | None], dict[str, str], FabricContract]:
    """Return (the user's NCCL overrides, their traffic class, the fabric's contract); raise
    UsageError on bad options."""
    if options.policy not in POLICIES:
        raise UsageError(f"--policy {options.policy!r}: choose one of {', '.join(POLICIES)}")
    if options.nccl_library not in LIBRARY_MODES:
        raise UsageError(f"--nccl-library {options.nccl_library!r}: choose image or shipped")
    try:
        overrides = parse_overrides(options.nccl_overrides)
        traffic, _ = check_traffic_class(overrides, roce=False)
        gid_index_override(overrides)
        contract = read_profile(options.fabric_profile)
    except (OverridesError, ProfileError) as err:
        raise UsageError(str(err)) from err
    return overrides, traffic, contract


def _contract_report(
    contract: FabricContract, facts: _PodFacts, written: _Written
) -> dict[str, Any]:
    return {
        "declared": contract != FabricContract(),
        "link_layer": contract.link_layer or None,
        "sharp": contract.sharp,
        "plan_level": facts.plan_level,
        "traffic_class_mode": facts.traffic_class_mode or "fabric",
        "nccl_version": version_text(written.nccl_version),
        "nccl_version_source": written.version_source,
        "written": written.contract.written,
        "not_written": written.contract.not_written,
    }


def prepare_pod(options: InitOptions, memlock: MemlockProbe = _read_memlock_limit) -> InitResult:
    """Return the result of discovering, checking and writing the pod's NCCL files."""
    overrides, traffic, contract = _checked_overrides(options)
    main = parse_main_container(options.main_container)
    if not options.report_only:
        try:
            options.shared_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(
                f"--shared-dir {options.shared_dir}: cannot create it ({err.strerror}); "
                "mount a writable emptyDir there"
            ) from err
    inventory = discover_host(options.root, memlock, options.process_root, options.visible_devices)
    selection = affinity.select_fabric_hcas(inventory.hcas, inventory.gpus, options.exclude_hcas)
    warnings: list[str] = []
    problems: list[Problem] = []
    annotation = read_annotation(options.annotations_file, RAILS_ANNOTATION)
    network_status = read_annotation(options.annotations_file, NETWORK_STATUS_ANNOTATION)
    try:
        rails = affinity.assign_rails(
            selection.endpoints,
            annotation,
            port_guids=_port_guids(inventory),
            whole_node=len(inventory.gpus) >= inventory.gpus_on_node,
        )
    except RailsAnnotationError as err:
        rails = affinity.assign_rails(selection.endpoints, None)
        if options.policy == "required":
            problems.append(Problem(code="rails", kind="rails", message=str(err)))
        else:
            warnings.append(f"{err}; using the pairing order")
    plugin = net_plugin_in_use(overrides, main.nccl_env if main else {}, inventory.efa_devices)
    if plugin is not None:
        warnings.append(
            f"NCCL runs on a net plugin ({plugin}): its devices, RDMA and GPUDirect are the "
            "plugin's and not checked here; no NCCL_NET or NCCL_IB_* written"
        )
        verdict = _Verdict([], [], rails, {}, "net-plugin", "net-plugin")
    else:
        problems += _collect_problems(
            options,
            inventory=inventory,
            selection=selection,
            rails=rails,
            main=main,
            overrides=overrides,
            warnings=warnings,
        )
        verdict = _judge(options.policy, problems, rails, warnings)
    facts = _PodFacts(
        main=main,
        primary=primary_interface(network_status),
        overrides=overrides,
        contract=contract,
        plan_level=read_annotation(options.annotations_file, PLAN_LEVEL_ANNOTATION),
        traffic_class_mode=read_annotation(options.annotations_file, TRAFFIC_CLASS_ANNOTATION),
    )
    written = _Written()
    if verdict.transport == "none":
        if not options.report_only:
            _remove_stale(options.shared_dir)
    else:
        written = _nccl_files(
            options,
            inventory=inventory,
            selection=selection,
            verdict=verdict,
            facts=facts,
            warnings=warnings,
        )

    exit_code = 1 if verdict.outcome == "failed" else 0
    decision = rdma_decision(read_annotation(options.annotations_file, RDMA_DECISION_ANNOTATION))
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "outcome": verdict.outcome,
        "policy": options.policy,
        "transport_reason": transport_reason(options.policy, decision),
        "rdma_decision": decision,
        "report_only": options.report_only,
        "exit_code": exit_code,
        "problems": [asdict(problem) for problem in verdict.problems],
        "warnings": warnings,
        "checks": _checks_report(verdict.found, options.policy, skipped=plugin is not None),
        "fabric": _fabric_report(
            inventory, selection, verdict.rails, written.settings, verdict.dropped
        ),
        "nccl": {
            "settings": written.settings,
            "reasons": written.reasons,
            "overridden": sorted(overrides),
            "traffic_class": {**traffic, "source": "spec.nccl"} if traffic else None,
            "gdr_level": written.settings.get("NCCL_NET_GDR_LEVEL", "NCCL default"),
            "env": written.env,
            "conf_file": str(options.shared_dir / CONF_FILE) if written.settings else None,
            "topology_file": written.topology,
            "library_mode": options.nccl_library,
            "library": _library_report(written.library, written.installed),
        },
        "fabric_contract": _contract_report(contract, facts, written),
        "fabric_env": {
            "values": written.fabric_env.values,
            "reasons": dict(reasons_with_pod_ip(written.fabric_env))
            if written.fabric_env_text
            else {},
            "file": str(options.shared_dir / FABRIC_ENV_FILE) if written.fabric_env_text else None,
        },
        "main_container": asdict(main) if main else None,
        "host": _inventory_report(inventory),
    }
    if not options.report_only:
        _write(options.shared_dir / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    summary = pairing_summary(
        verdict.outcome,
        report["fabric"]["pairs"],
        gpu_order=[gpu.bdf for gpu in inventory.gpus],
        guids={(hca.name, port.number): port.guid for hca in inventory.hcas
               for port in hca.ports if port.guid is not None},
        rails={(p.hca, p.port): rail for rail, p in verdict.rails.rails},
        rail_source=verdict.rails.source,
    )  # fmt: skip
    return InitResult(
        exit_code=0 if options.report_only else exit_code,
        outcome=verdict.outcome,
        problems=tuple(verdict.problems),
        warnings=tuple(warnings),
        settings=written.settings,
        report=report,
        conf_text=written.conf_text,
        summary=summary,
    )
