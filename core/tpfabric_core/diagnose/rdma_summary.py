"""The GPU -> HCA pairing ``rdma-init`` leaves in its termination message, read back from a pod.

The init container writes one line of JSON (``tpfabric_rdma_init.termination``)::

    {"v": 1, "outcome": "rdma", "rails": "annotation",
     "pairs": [[0, "0000:18:00.0", "mlx5_0", 1, "b83fd20300000001", 0], ...]}

and the kubelet publishes it as ``status.initContainerStatuses[].state.terminated.message`` of
the ``rdma-init`` container (or ``lastState``, once the pod restarted). :func:`pod_pairing`
finds it in a pod as the API serves it and says why not when it cannot: no such container, it
has not finished, or its message is not the summary (an older rdma-init, a log tail).

Pure and total: any pod object, any message text, returns a pairing or a reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.input_limits import whole_number
from tpfabric_core.pod_wiring import INIT_CONTAINER

__all__ = ["GpuPair", "PodPairing", "parse_summary", "pod_pairing"]

_MAX_PAIRS = 64
_MAX_MESSAGE = 4096  # the kubelet's cap on a container's termination message


@dataclass(frozen=True, slots=True)
class GpuPair:
    """One GPU of a pod and the fabric port it was paired with."""

    index: int | None
    gpu: str
    hca: str
    port: int
    guid: str | None
    rail: int | None


@dataclass(frozen=True, slots=True)
class PodPairing:
    """A pod's pairing as ``rdma-init`` published it."""

    outcome: str
    rails: str | None
    pairs: tuple[GpuPair, ...]
    more: int = 0

    def of_gpu(self, index: int) -> GpuPair | None:
        """Return the pair of the pod's ``index``-th GPU."""
        return next((pair for pair in self.pairs if pair.index == index), None)


def _pair(raw: object) -> GpuPair | None:
    if not isinstance(raw, list) or len(raw) != 6:
        return None
    index, gpu, hca, port, guid, rail = raw
    number = whole_number(port) if isinstance(port, int) else None
    if not isinstance(gpu, str) or not isinstance(hca, str) or number is None:
        return None
    return GpuPair(
        index if isinstance(index, int) and not isinstance(index, bool) else None,
        gpu[:32],
        hca[:64],
        number,
        guid.lower() if isinstance(guid, str) and len(guid) == 16 else None,
        rail if isinstance(rail, int) and not isinstance(rail, bool) else None,
    )


def parse_summary(message: object) -> tuple[PodPairing | None, str]:
    """Return the pairing of a termination message and, when there is none, why."""
    if not isinstance(message, str) or not message.strip():
        return None, "its rdma-init termination message is empty"
    if len(message) > _MAX_MESSAGE:
        return None, "its rdma-init termination message is longer than the kubelet keeps"
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):
        return None, (
            "its rdma-init termination message is not the pairing summary (an rdma-init older "
            "than this tpfabric, or a log tail)"
        )
    if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("pairs"), list):
        return None, "its rdma-init termination message is not a pairing summary of version 1"
    pairs = [pair for pair in map(_pair, data["pairs"][:_MAX_PAIRS]) if pair is not None]
    more = data.get("more")
    return (
        PodPairing(
            str(data.get("outcome") or "")[:40],
            str(data["rails"])[:40] if isinstance(data.get("rails"), str) else None,
            tuple(pairs),
            more if isinstance(more, int) and not isinstance(more, bool) and more > 0 else 0,
        ),
        "",
    )


def pod_pairing(pod: Mapping[str, Any]) -> tuple[PodPairing | None, str]:
    """Return the pairing ``rdma-init`` published in ``pod`` (a Pod as the API serves it, camel
    case) and, when there is none, why (naming the pod)."""
    metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
    name = str((metadata or {}).get("name") or "?") if isinstance(metadata, Mapping) else "?"
    status = pod.get("status") if isinstance(pod, Mapping) else None
    statuses = (status or {}).get("initContainerStatuses") if isinstance(status, Mapping) else None
    entry = next(
        (
            s
            for s in (statuses if isinstance(statuses, list) else [])
            if isinstance(s, Mapping) and s.get("name") == INIT_CONTAINER
        ),
        None,
    )
    if entry is None:
        return None, f"pod {name} has no {INIT_CONTAINER} status (not wired by tpfabric?)"
    for key in ("state", "lastState"):
        state = entry.get(key)
        terminated = state.get("terminated") if isinstance(state, Mapping) else None
        if isinstance(terminated, Mapping):
            pairing, why = parse_summary(terminated.get("message"))
            return pairing, f"pod {name}: {why}" if why else ""
    return None, f"pod {name}: {INIT_CONTAINER} has not finished"
