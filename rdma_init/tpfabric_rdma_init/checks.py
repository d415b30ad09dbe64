"""Judge an inventory: what stops RDMA or GPUDirect in this pod, one actionable line per problem.

Two kinds of problem, because they fall back differently under the ``preferred`` policy:

- ``rdma``: no HCA, no ``/dev/infiniband``, no uverbs device, a fabric port not ACTIVE, memory
  that cannot be pinned (memlock below the minimum *and* no CAP_IPC_LOCK; either one suffices for
  ``ibv_reg_mr``, so one line names both fixes) -> the job falls back to TCP sockets;
- ``gpudirect``: GPUs present but no peer-memory module and no dma-buf -> IB stays, GPUDirect is
  switched off (``NCCL_NET_GDR_LEVEL=LOC``, staging through host memory).

Pure: takes the inventory and the fabric selection, returns problems and warnings. It must never
read files or exit; the policy decides what a problem means.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from tpfabric_rdma_init.discovery import Hca, HostInventory, IbPort

__all__ = [
    "GPUDIRECT",
    "RDMA",
    "Problem",
    "check_host",
    "fabric_port",
    "format_bytes",
]

RDMA = "rdma"
GPUDIRECT = "gpudirect"
UNLIMITED = resource.RLIM_INFINITY


@dataclass(frozen=True)
class Problem:
    """One reason RDMA or GPUDirect cannot be used: a stable code and one line for the user."""

    code: str
    kind: str
    """``rdma`` or ``gpudirect``."""
    message: str
    hca: str | None = None


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


def _memlock_problem(inventory: HostInventory, min_memlock: int) -> Problem | None:
    soft = inventory.memlock_soft
    enough = soft == UNLIMITED or (min_memlock != UNLIMITED and soft >= min_memlock)
    if enough or inventory.cap_ipc_lock:
        return None
    capability = (
        "CAP_IPC_LOCK is missing" if inventory.cap_ipc_lock is False else "CAP_IPC_LOCK is unknown"
    )
    return Problem(
        code="memlock",
        kind=RDMA,
        message=(
            f"memlock limit is {format_bytes(soft)} (needs {format_bytes(min_memlock)}) and "
            f"{capability}, so the HCA cannot pin NCCL's buffers; set the container runtime's "
            "memlock limit to unlimited (containerd/CRI-O: LimitMEMLOCK=infinity) or add "
            "securityContext.capabilities.add: [IPC_LOCK] to the pod"
        ),
    )


def _hca_problems(hca: Hca, inventory: HostInventory) -> list[Problem]:
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
                message=(
                    f"{hca.name}: {device} is not in this pod; request the RDMA resource for every "
                    "fabric HCA (e.g. resources.limits rdma/ib: 8) or exclude it with --exclude-hca"
                ),
            )
        )
    port = fabric_port(hca)
    if port is None:
        problems.append(
            Problem(code="no-port", kind=RDMA, hca=hca.name, message=f"{hca.name}: has no ports")
        )
    elif not port.active:
        problems.append(
            Problem(
                code="port-down",
                kind=RDMA,
                hca=hca.name,
                message=(
                    f"{hca.name} port {port.number} is {port.state} (physical state "
                    f"{port.phys_state}); check the cable and the switch port "
                    f"(ibstat {hca.name}) or cordon the node"
                ),
            )
        )
    return problems


def check_host(
    inventory: HostInventory, fabric_hcas: tuple[str, ...], min_memlock: int = UNLIMITED
) -> tuple[list[Problem], list[str]]:
    """Return (problems, warnings) for using ``fabric_hcas`` with GPUDirect RDMA in this pod."""
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
    elif not fabric_hcas:
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
    for name in fabric_hcas:
        problems.extend(_hca_problems(by_name[name], inventory))
    link_layers = {
        port.link_layer for name in fabric_hcas if (port := fabric_port(by_name[name])) is not None
    }
    if len(link_layers) > 1:
        warnings.append(f"fabric HCAs mix link layers ({', '.join(sorted(link_layers))})")
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
    if not inventory.gpus:
        warnings.append("no NVIDIA GPU visible: GPUDirect RDMA not checked")
    memlock = _memlock_problem(inventory, min_memlock)
    if memlock is not None:
        problems.append(memlock)
    elif inventory.cap_ipc_lock is False and inventory.memlock_soft != UNLIMITED:
        warnings.append(
            f"CAP_IPC_LOCK missing; pinning relies on the memlock limit "
            f"({format_bytes(inventory.memlock_soft)})"
        )
    if inventory.dev_infiniband_present and not inventory.rdma_cm_present:
        warnings.append("/dev/infiniband/rdma_cm missing (NCCL does not need it; ucx/mpi may)")
    return problems, warnings
