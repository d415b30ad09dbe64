"""``fabric.env``: the transports that are not NCCL, wired from the same pairing and contract.

Serving traffic rides libraries that never read ``nccl.conf``: vLLM's KV transfer (NIXL over
UCX), DeepEP and NVSHMEM, Gloo and TensorPipe bootstrap. The file sets, for this pod:

- ``UCX_NET_DEVICES`` (the fabric ports in rail order, ``mlx5_0:1,...``; the primary interface
  on a TCP fallback), ``UCX_IB_GID_INDEX`` (the pod's RoCE GID, as NCCL's), ``UCX_IB_SL`` /
  ``UCX_IB_TRAFFIC_CLASS`` (the fabric profile's service level / lossless class);
- ``NVSHMEM_HCA_PE_MAPPING`` (each GPU's first port, in GPU order, as ``hca:port:count``),
  ``NVSHMEM_IB_GID_INDEX``, ``NVSHMEM_IB_SL``, ``NVSHMEM_IB_TRAFFIC_CLASS`` and the bootstrap
  interface ``NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME``;
- ``GLOO_SOCKET_IFNAME`` and ``TP_SOCKET_IFNAME``: the pod's primary interface, NCCL's socket
  interface (``NCCL_SOCKET_IFNAME`` itself is in ``nccl.conf``, where NCCL reads it);
- ``VLLM_HOST_IP`` and ``VLLM_NIXL_SIDE_CHANNEL_HOST``: the pod's IP, from ``TPFABRIC_POD_IP``
  (the downward API's ``status.podIP``, set on every container by the wiring).

The wiring sets ``BASH_ENV`` and ``ENV`` to this file (GCP gIB's way), so every ``bash -c`` (and
an interactive ``sh``) sources it; a container started without a shell gets only its own env.
The user's env wins: each line is ``: "${NAME:=value}"; export NAME``, which keeps a value the
container already has. A net plugin (EFA, TCPX, gIB) gets no UCX/NVSHMEM device names: those are
the plugin's to choose. Pure: builds text, never writes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tpfabric_rdma_init.affinity import FabricSelection, NicPort, RailAssignment
from tpfabric_rdma_init.fabric_contract import FabricContract

__all__ = [
    "POD_IP_ENV",
    "FabricEnv",
    "build_fabric_env",
    "pe_mapping",
    "reasons_with_pod_ip",
    "render_fabric_env",
]

POD_IP_ENV = "TPFABRIC_POD_IP"
_SAFE = re.compile(r"^[A-Za-z0-9_.:,=/-]*$")


@dataclass
class FabricEnv:
    """The variables of ``fabric.env`` in order, each with why it has that value."""

    values: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    from_pod_ip: tuple[str, ...] = ()
    """Variables set from ``$TPFABRIC_POD_IP`` when the shell has it."""

    def put(self, key: str, value: str, why: str) -> None:
        """Set ``key`` with its reason."""
        self.values[key] = value
        self.reasons[key] = why


def pe_mapping(selection: FabricSelection, rails: RailAssignment) -> str | None:
    """Return ``NVSHMEM_HCA_PE_MAPPING``: PEs in GPU order, each on its GPU's first kept port,
    consecutive PEs of one port merged (``mlx5_0:1:1,mlx5_3:1:1,...``); None without GPUs."""
    kept = set(rails.endpoints)
    first: dict[str, NicPort] = {}
    for pair in selection.pairs:
        port = NicPort(pair.hca, pair.port)
        if pair.gpu not in first and port in kept:
            first[pair.gpu] = port
    entries: list[list[object]] = []
    for gpu in sorted(first):
        port = first[gpu]
        if entries and entries[-1][0] == port:
            entries[-1][1] = int(str(entries[-1][1])) + 1
        else:
            entries.append([port, 1])
    return ",".join(f"{port}:{count}" for port, count in entries) or None


def build_fabric_env(
    *,
    transport: str,
    selection: FabricSelection,
    rails: RailAssignment,
    socket_ifname: str | None,
    gid_index: int | None,
    link_layer: str | None,
    contract: FabricContract,
) -> FabricEnv:
    """Return the variables of ``fabric.env`` for a pod on ``transport``."""
    env = FabricEnv()
    if socket_ifname:
        why = "the pod's primary interface (NCCL_SOCKET_IFNAME's)"
        for key in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"):
            env.put(key, socket_ifname, why)
    if transport in ("ib", "ib-no-gdr") and rails.endpoints:
        devices = ",".join(str(port) for port in rails.endpoints)
        env.put("UCX_NET_DEVICES", devices, "the pod's fabric ports in rail order (NCCL_IB_HCA's)")
        if mapping := pe_mapping(selection, rails):
            env.put("NVSHMEM_HCA_PE_MAPPING", mapping,
                    "each GPU's first fabric port, PEs in GPU order")  # fmt: skip
        if gid_index is not None:
            why = f"the pod's own RoCE v2 GID on every rail (index {gid_index}, NCCL's)"
            env.put("UCX_IB_GID_INDEX", str(gid_index), why)
            env.put("NVSHMEM_IB_GID_INDEX", str(gid_index), why)
        if link_layer == "InfiniBand" and contract.link_layer == "infiniband":
            level = contract.chosen_service_level
            if level is not None:
                why = f"the fabric profile's service level {level}"
                env.put("UCX_IB_SL", str(level), why)
                env.put("NVSHMEM_IB_SL", str(level), why)
        tc = contract.traffic_class
        if link_layer == "Ethernet" and contract.link_layer == "roce" and tc is not None:
            why = f"the fabric profile's lossless class (DSCP {tc >> 2})"
            env.put("UCX_IB_TRAFFIC_CLASS", str(tc), why)
            env.put("NVSHMEM_IB_TRAFFIC_CLASS", str(tc), why)
    elif transport == "tcp" and socket_ifname:
        env.put("UCX_NET_DEVICES", socket_ifname, "TCP fallback: the pod's primary interface")
    env.from_pod_ip = ("VLLM_HOST_IP", "VLLM_NIXL_SIDE_CHANNEL_HOST")
    return env


def _assign(name: str, value: str) -> str:
    if not _SAFE.match(value):
        raise ValueError(f"fabric.env: {name}={value!r} holds characters a shell would expand")
    return f': "${{{name}:={value}}}"\nexport {name}'


def render_fabric_env(env: FabricEnv, comments: tuple[str, ...] = ()) -> str:
    """Return the text of ``fabric.env``: POSIX sh, each variable set only where unset."""
    lines = [f"# {comment}" for comment in comments]
    lines.append("# each value applies only where the container has none of its own")
    lines += [_assign(name, value) for name, value in env.values.items()]
    if env.from_pod_ip:
        lines.append(f'if [ -n "${{{POD_IP_ENV}:-}}" ]; then')
        for name in env.from_pod_ip:
            lines.append(f'  : "${{{name}:=${POD_IP_ENV}}}"')
            lines.append(f"  export {name}")
        lines.append("fi")
    return "\n".join(lines) + "\n"


def reasons_with_pod_ip(env: FabricEnv) -> Mapping[str, str]:
    """Return every variable's reason, the pod-IP ones included (for the report)."""
    reasons = dict(env.reasons)
    for name in env.from_pod_ip:
        reasons[name] = f"the pod's IP (${POD_IP_ENV}, downward API status.podIP)"
    return reasons
