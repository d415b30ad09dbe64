"""Judge an inventory: what stops RDMA or GPUDirect in this pod, one actionable line per problem.

Two kinds of problem, because they fall back differently under the ``preferred`` policy:

- ``rdma``: no HCA, no ``/dev/infiniband``, no uverbs device, a fabric port not ACTIVE, a RoCE
  port without a GID of the pod's own addresses, memory the *main* container cannot pin -> that
  rail is dropped (a problem naming a port), or the job falls back to TCP (any other);
- ``gpudirect``: GPUs present but no peer-memory module and no dma-buf, or GPUs and NICs on
  Hyper-V VMBus without a topology file (NCCL would not use GPUDirect across the host bridge)
  -> IB stays, GPUDirect is switched off (``NCCL_NET_GDR_LEVEL=LOC``, staging through host
  memory).

Pinning is judged for the main container, not for this init container: ``ibv_reg_mr`` succeeds
when the memlock limit is high enough *or* CAP_IPC_LOCK is in the main process's *effective* set.
The memlock limit is the runtime's, the same for every container of the pod (read here); the
effective set follows from the main container's user and securityContext (the operator passes
them): root gets what ``capabilities.add`` grants, a non-root user gets nothing in its effective
set (kubernetes#56374, no ambient capabilities), whatever the pod spec adds.

Pure: takes the inventory and the fabric ports, returns problems and warnings. It must never
read files or exit; the policy decides what a problem means.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, field

from tpfabric_rdma_init.affinity import NicPort
from tpfabric_rdma_init.discovery import Gid, Hca, HostInventory, IbPort

__all__ = [
    "GPUDIRECT",
    "RDMA",
    "MainContainer",
    "Problem",
    "check_host",
    "fabric_port",
    "format_bytes",
    "pod_gid",
    "pod_gid_of",
    "port_of",
]

RDMA = "rdma"
GPUDIRECT = "gpudirect"
UNLIMITED = resource.RLIM_INFINITY


@dataclass(frozen=True)
class Problem:
    """One reason RDMA or GPUDirect cannot be used: a stable code and one line for the user."""

    code: str
    kind: str
    """``rdma``, ``gpudirect`` or ``rails``."""
    message: str
    hca: str | None = None
    port: int | None = None
    """Set when the problem is one fabric port's: that rail can be dropped alone."""


@dataclass(frozen=True)
class MainContainer:
    """What the operator knows of the main container: its user and security context."""

    run_as_user: int | None = None
    run_as_non_root: bool = False
    privileged: bool = False
    capabilities_add: tuple[str, ...] = ()
    cuda_major: int | None = None
    nccl_env: dict[str, str] = field(default_factory=dict)
    """The template's ``NCCL_NET``/``NCCL_NET_PLUGIN`` env: they win over any config file."""
    nccl_version: str | None = None
    """The image's NCCL as the job declares it (annotation ``tpfabric.io/nccl-version`` or env
    ``NCCL_VERSION``); None: unknown."""

    def ipc_lock_effective(self) -> bool | None:
        """Return whether CAP_IPC_LOCK lands in the main process's effective set (None unknown)."""
        non_root = (self.run_as_user is not None and self.run_as_user != 0) or (
            self.run_as_user is None and self.run_as_non_root
        )
        if non_root:
            return False  # added capabilities only reach the bounding set of a non-root user
        if self.run_as_user is None:
            return None  # the image's USER decides, which the pod spec does not say
        added = {cap.upper().removeprefix("CAP_") for cap in self.capabilities_add}
        return self.privileged or "IPC_LOCK" in added or "ALL" in added


def format_bytes(value: int) -> str:
    """Return a memlock value the way ``ulimit -l`` users read it (``64 KiB``, ``unlimited``)."""
    if value == UNLIMITED or value < 0:
        return "unlimited"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} B"


def fabric_port(hca: Hca) -> IbPort | None:
    """Return the port NCCL should use on an HCA: its first ACTIVE port, else its first port."""
    for port in hca.ports:
        if port.active:
            return port
    return hca.ports[0] if hca.ports else None


def port_of(inventory: HostInventory, endpoint: NicPort) -> IbPort | None:
    """Return the sysfs port of a fabric endpoint."""
    for hca in inventory.hcas:
        if hca.name == endpoint.hca:
            return next((p for p in hca.ports if p.number == endpoint.port), None)
    return None


def pod_gid(
    port: IbPort, pod_netdevs: set[str], pod_addresses: frozenset[str] | None = None
) -> tuple[Gid | None, Gid | None]:
    """Return (the RoCE v2 GID of this pod, the one NCCL would pick unpinned for its family).

    The pod's GID is the one whose address is one of the pod's own (every macvlan pod names its
    interface ``net1``, so the netdev name cannot tell two pods apart); only when the pod's
    addresses are unknown is it told by netdev name (a GID without one, old kernels, counts).
    IPv4 is preferred, as NCCL's default ``NCCL_IB_ADDR_FAMILY`` AF_INET; an IPv6-only fabric
    gives an IPv6 GID (NCCL then needs AF_INET6). NCCL (>= 2.21, unpinned) takes the first
    RoCE v2 GID of the family that is not link-local; in a pod that shares the HCA, that may
    belong to the host's netdev (another namespace), which MLNX_OFED rejects at MODIFY_QP.
    """
    v2 = [g for g in port.gids if g.type == "RoCE v2" and not g.link_local]
    if pod_addresses is not None:
        mine = [g for g in v2 if g.address in pod_addresses]
    else:
        mine = [g for g in v2 if g.netdev is None or g.netdev in pod_netdevs]
    own = next((g for g in mine if g.ipv4_mapped), mine[0] if mine else None)
    ipv4 = own is None or own.ipv4_mapped
    return own, next((g for g in v2 if g.ipv4_mapped == ipv4), None)


def pod_gid_of(inventory: HostInventory, port: IbPort) -> tuple[Gid | None, Gid | None]:
    """Return :func:`pod_gid` with the pod's interfaces and addresses of ``inventory``."""
    netdevs = {iface.name for iface in inventory.interfaces}
    return pod_gid(port, netdevs, inventory.pod_addresses)


def _memlock_problem(
    inventory: HostInventory, min_memlock: int, main: MainContainer | None
) -> tuple[Problem | None, str | None]:
    soft = inventory.memlock_soft
    enough = soft == UNLIMITED or (min_memlock != UNLIMITED and soft >= min_memlock)
    if enough:
        return None, None
    if main is None:
        granted, whose = inventory.cap_ipc_lock, "this container"
    else:
        granted, whose = main.ipc_lock_effective(), "the main container"
    if granted:
        return None, None
    limit = f"memlock limit is {format_bytes(soft)} (needs {format_bytes(min_memlock)})"
    fix = (
        "set the container runtime's memlock limit to unlimited (containerd/CRI-O: "
        "LimitMEMLOCK=infinity), or run the main container as root (securityContext.runAsUser: "
        "0) with capabilities.add: [IPC_LOCK]"
    )
    if granted is None:
        return None, (
            f"{limit} and whether CAP_IPC_LOCK is effective in {whose} is unknown (no "
            f"runAsUser in the pod spec: the image's USER decides; a non-root user cannot pin); "
            f"{fix}"
        )
    reason = (
        f"{whose} runs as non-root user {main.run_as_user} (IPC_LOCK stays in its bounding set)"
        if main is not None and main.run_as_user not in (None, 0)
        else f"CAP_IPC_LOCK is not in the effective set of {whose}"
    )
    return Problem(
        code="memlock",
        kind=RDMA,
        message=f"{limit} and {reason}, so the HCA cannot pin NCCL's buffers; {fix}",
    ), None


def _port_problems(
    hca: Hca, port: IbPort | None, number: int, inventory: HostInventory
) -> list[Problem]:
    problems = []
    if inventory.dev_infiniband_present and not hca.uverbs_present:
        device = (
            f"/dev/infiniband/{hca.uverbs}" if hca.uverbs else "a /dev/infiniband/uverbs device"
        )
        problems.append(
            Problem(
                code="no-uverbs",
                kind=RDMA,
                hca=hca.name,
                port=number,
                message=(
                    f"{hca.name}: {device} is not in this pod; request the RDMA resource for every "
                    "fabric HCA (e.g. resources.limits rdma/ib: 8) or exclude it with --exclude-hca"
                ),
            )
        )
    if port is None:
        problems.append(
            Problem(
                code="no-port",
                kind=RDMA,
                hca=hca.name,
                port=number,
                message=f"{hca.name}: has no port {number}",
            )
        )
    elif not port.active:
        problems.append(
            Problem(
                code="port-down",
                kind=RDMA,
                hca=hca.name,
                port=number,
                message=(
                    f"{hca.name} port {port.number} is {port.state} (physical state "
                    f"{port.phys_state}); check the cable and the switch port "
                    f"(ibstat {hca.name} {port.number}) or cordon the node"
                ),
            )
        )
    elif port.link_layer == "Ethernet":
        own, _ = pod_gid_of(inventory, port)
        if own is None:
            owners = sorted({g.netdev for g in port.gids if g.netdev and g.type == "RoCE v2"})
            told = (
                "an address of this pod"
                if inventory.pod_addresses is not None
                else "a network interface of this pod"
            )
            problems.append(
                Problem(
                    code="no-pod-gid",
                    kind=RDMA,
                    hca=hca.name,
                    port=number,
                    message=(
                        f"{hca.name} port {number} has no RoCE v2 GID (IPv4 or IPv6) of {told} "
                        f"(GIDs belong to {', '.join(owners) or 'no netdev'}); attach a secondary "
                        "network on this port (Multus macvlan/SR-IOV, one per rail) with an IP "
                        "address, or run the pod with hostNetwork"
                    ),
                )
            )
    return problems


def _topology_problem(
    inventory: HostInventory, endpoints: tuple[NicPort, ...], topology_file: str | None
) -> tuple[Problem | None, str | None]:
    """Return (the problem, the warning) of GPUs or NICs whose PCI path NCCL cannot read.

    On Hyper-V (VMBus) every device sits alone below its own host bridge: NCCL, reading sysfs
    as this module does, puts GPU and NIC at PHB and by default (``NCCL_NET_GDR_LEVEL`` PXB)
    does not use GPUDirect RDMA between them; the VM image's topology file puts them back under
    their switch. A device with no PCI path at all is paired by name order.
    """
    fabric = {e.hca for e in endpoints}
    devices = [(gpu.bdf, gpu.pci) for gpu in inventory.gpus]
    devices += [(hca.name, hca.pci) for hca in inventory.hcas if hca.name in fabric]
    vmbus = [name for name, pci in devices if pci is not None and pci.vmbus]
    unplaced = [name for name, pci in devices if pci is None]
    warning = (
        f"{', '.join(unplaced)}: no PCI path in sysfs; paired by name order, not by distance"
        if unplaced
        else None
    )
    if not vmbus or topology_file or not inventory.gpus:
        return None, warning
    return Problem(
        code="no-pci-topology",
        kind=GPUDIRECT,
        message=(
            f"GPUs and NICs are on Hyper-V VMBus ({len(vmbus)} devices, paired by NUMA node): "
            "NCCL sees no PCIe switch between a GPU and its NIC and does not use GPUDirect RDMA "
            "across the host bridge; set spec.nccl NCCL_TOPO_FILE to the VM image's topology "
            "file (Azure ND H100 v5: /opt/microsoft/ndv5-topo.xml)"
        ),
    ), warning


def _retrained_port_problems(
    inventory: HostInventory, endpoints: tuple[NicPort, ...]
) -> list[Problem]:
    """Return a ``port-degraded`` problem per ACTIVE fabric port below the others' rate or width.

    A compute port that retrained on fewer lanes or at a lower speed stays a compute port (its
    role comes from what the NIC is); NCCL would run that rail at its rate, so it is a problem
    of that rail (dropped under ``preferred``).
    """
    active = [
        (endpoint, port)
        for endpoint in endpoints
        if (port := port_of(inventory, endpoint)) is not None and port.active
    ]
    best_rate = max((port.rate_gbps or 0.0 for _, port in active), default=0.0)
    best_width = max((port.width or 0 for _, port in active), default=0)
    problems = []
    for endpoint, port in active:
        slow = port.rate_gbps is not None and port.rate_gbps < best_rate
        narrow = port.width is not None and port.width < best_width
        if slow or narrow:
            problems.append(
                Problem(
                    code="port-degraded",
                    kind=RDMA,
                    hca=endpoint.hca,
                    port=endpoint.port,
                    message=(
                        f"{endpoint.hca} port {endpoint.port} runs at {port.rate_gbps or 0:g} "
                        f"Gb/s ({port.rate}), the other fabric ports at {best_rate:g} Gb/s "
                        f"({best_width}X): reseat or replace the cable or transceiver "
                        f"(ibstat {endpoint.hca} {endpoint.port}) or cordon the node"
                    ),
                )
            )
    return problems


def check_host(
    inventory: HostInventory,
    endpoints: tuple[NicPort, ...],
    min_memlock: int = UNLIMITED,
    main: MainContainer | None = None,
    topology_file: str | None = None,
) -> tuple[list[Problem], list[str]]:
    """Return (problems, warnings) for using ``endpoints`` with GPUDirect RDMA in this pod.

    ``topology_file`` is the user's ``NCCL_TOPO_FILE`` (spec.nccl), which NCCL reads instead of
    the PCI paths.
    """
    problems: list[Problem] = []
    warnings: list[str] = []
    if not inventory.hcas:
        problems.append(
            Problem(
                code="no-hca",
                kind=RDMA,
                message=(
                    f"no RDMA device: {inventory.root.rstrip('/')}/sys/class/infiniband is empty "
                    "or missing; schedule the pod on a node with HCAs and load the mlx5_ib driver"
                ),
            )
        )
    elif not endpoints:
        problems.append(
            Problem(
                code="no-fabric-hca",
                kind=RDMA,
                message="no fabric HCA left after exclusions; check --exclude-hca",
            )
        )
    if inventory.hcas and not inventory.dev_infiniband_present:
        problems.append(
            Problem(
                code="no-dev-infiniband",
                kind=RDMA,
                message=(
                    "/dev/infiniband is missing in this pod: no RDMA device was allocated; request "
                    "the RDMA resource (e.g. resources.limits rdma/ib: 8) and check that the RDMA "
                    "device plugin runs on the node"
                ),
            )
        )
    by_name = {hca.name: hca for hca in inventory.hcas}
    for endpoint in endpoints:
        hca = by_name[endpoint.hca]
        problems.extend(_port_problems(hca, port_of(inventory, endpoint), endpoint.port, inventory))
    problems.extend(_retrained_port_problems(inventory, endpoints))
    link_layers = {
        port.link_layer for e in endpoints if (port := port_of(inventory, e)) is not None
    }
    if len(link_layers) > 1:
        warnings.append(f"fabric ports mix link layers ({', '.join(sorted(link_layers))})")
    if inventory.gpus and not inventory.gpudirect.available:
        problems.append(
            Problem(
                code="no-peermem",
                kind=GPUDIRECT,
                message=(
                    "GPUDirect RDMA unavailable: nvidia_peermem is not loaded and the GPU driver "
                    "offers no dma-buf (open kernel module on Linux >= 5.12); run 'modprobe "
                    "nvidia-peermem' on the node (GPU Operator: driver.rdma.enabled=true)"
                ),
            )
        )
    topology, unplaced = _topology_problem(inventory, endpoints, topology_file)
    problems.extend([topology] if topology is not None else [])
    warnings.extend([unplaced] if unplaced is not None else [])
    if not inventory.gpus:
        warnings.append("no NVIDIA GPU visible: GPUDirect RDMA not checked")
    elif inventory.gpu_allocation == "all" and inventory.gpus_on_node > 1:
        warnings.append(
            f"could not tell this pod's GPUs apart (no NVIDIA_VISIBLE_DEVICES, no /dev/nvidiaN): "
            f"pairing all {inventory.gpus_on_node} GPUs of the node"
        )
    memlock, unknown = _memlock_problem(inventory, min_memlock, main)
    if memlock is not None:
        problems.append(memlock)
    if unknown is not None:
        warnings.append(unknown)
    if inventory.dev_infiniband_present and not inventory.rdma_cm_present:
        warnings.append("/dev/infiniband/rdma_cm missing (NCCL does not need it; ucx/mpi may)")
    return problems, warnings
