"""The pod's GPU -> HCA pairing in a few hundred bytes, for the init container's termination
message: readable through the API (``status.initContainerStatuses[].state.terminated.message``)
by anyone who may read pods, with no exec right and no volume to mount.

The kubelet keeps at most 4096 bytes of a container's termination message (and 12 KiB for all
containers of a pod), so the summary is one line of compact JSON kept under
:data:`MAX_BYTES`::

    {"v": 1, "outcome": "ready", "rails": "annotation",
     "pairs": [[0, "0000:18:00.0", "mlx5_0", 1, "b83fd20300000001", 0], ...]}

``pairs`` holds one entry per GPU of the pod, in the pod's GPU order (PCI bus order: CUDA's
device index with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and the order NCCL's ``cuda_dev`` follows
on identical GPUs): ``[index, bus id, HCA, port, port GUID or null, rail or null]``. A rail is
null for a port the pod does not use as a fabric rail (a dropped one). ``more`` counts the pairs
left out to stay under the cap. ``outcome`` is the run's (``ready``, ``fallback-tcp``, ...).

The reader is ``tpfabric_core.diagnose.rdma_summary``; this module only writes (standard library,
like the rest of the init program).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MAX_BYTES", "SCHEMA_VERSION", "pairing_summary", "write_termination_message"]

#: the kubelet's cap on one container's termination message is 4096 bytes; keep a margin
MAX_BYTES = 3900
SCHEMA_VERSION = 1


def pairing_summary(
    outcome: str,
    pairs: Sequence[Mapping[str, Any]],
    *,
    gpu_order: Sequence[str],
    guids: Mapping[tuple[str, int], str],
    rails: Mapping[tuple[str, int], int],
    rail_source: str | None,
) -> str:
    """Return the summary line: ``pairs`` as the report lists them (``gpu``, ``hca``, ``port``),
    each GPU's index in ``gpu_order`` (the pod's GPUs' bus ids in order), the port's GUID and
    rail; at most :data:`MAX_BYTES` bytes, pairs dropped from the end (counted in ``more``)."""
    entries = [
        [
            gpu_order.index(pair["gpu"]) if pair["gpu"] in gpu_order else None,
            pair["gpu"],
            pair["hca"],
            pair["port"],
            guids.get((pair["hca"], pair["port"])),
            rails.get((pair["hca"], pair["port"])),
        ]
        for pair in pairs
    ]
    document: dict[str, Any] = {"v": SCHEMA_VERSION, "outcome": outcome, "rails": rail_source}
    kept = len(entries)
    while True:
        document["pairs"] = entries[:kept]
        if kept < len(entries):
            document["more"] = len(entries) - kept
        text = json.dumps(document, separators=(",", ":"))
        if len(text.encode()) <= MAX_BYTES or kept == 0:
            return text
        kept -= 1


def write_termination_message(path: Path, text: str) -> str | None:
    """Write ``text`` into the container's termination-message file, which the kubelet creates
    (never created here: outside Kubernetes ``/dev/termination-log`` does not exist and must not
    appear); return why it could not be written (None when it was)."""
    try:
        with path.open("r+", encoding="utf-8") as handle:
            handle.truncate()
            handle.write(text)
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    return None
