"""Which NCCL reads what: the version of the pod's NCCL and the first NCCL that knows each key.

``rdma-init`` never writes a key the pod's NCCL does not read. The pod's NCCL is the library it
ships (its wheel's version), else the version the job declares for its image (annotation
``tpfabric.io/nccl-version`` or env ``NCCL_VERSION`` in the template, passed by the operator as
``ncclVersion``), else unknown: then the keys are those of :data:`FLOOR`, the oldest NCCL this
program targets, and nothing newer is written.

The versions below are where each key first appears in NCCL's source (``NCCL_PARAM`` names and
``ncclGetEnv`` literals of each release tag, github.com/NVIDIA/nccl); the unit tests check them
against the lists stored from those tags. Standard library only; never reads a file.
"""

from __future__ import annotations

__all__ = [
    "FLOOR",
    "KEY_SINCE",
    "RAIL_PLANE_SINCE",
    "NcclVersion",
    "knows",
    "parse_version",
    "version_text",
]

NcclVersion = tuple[int, int, int]

FLOOR: NcclVersion = (2, 21, 5)
"""The oldest NCCL targeted: per-device RoCE GID selection (``NCCL_IB_ADDR_FAMILY``)."""

RAIL_PLANE_SINCE: NcclVersion = (2, 30, 7)
"""The first public NCCL whose ``NCCL_IB_HCA`` parser reads ``<hca>:<port>:<rail>:<plane>``
(``parseStringList`` in ``src/misc/utils.cc``; 2.30.4 reads ``<hca>:<port>`` only)."""

KEY_SINCE: dict[str, NcclVersion] = {"NCCL_IB_FIFO_TC": (2, 22, 3)}
"""Keys newer than :data:`FLOOR`; every other key written is known to the floor."""


def parse_version(text: str | None) -> NcclVersion | None:
    """Return ``(2, 27, 3)`` for ``2.27.3``, ``2.27.3-1``, ``2.27.3+cuda12.9``; None unreadable."""
    if not text:
        return None
    parts = text.strip().split("+")[0].split("-")[0].split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts[:3]):
        return None
    numbers = [int(part) for part in parts[:3]]
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


def version_text(version: NcclVersion | None) -> str:
    """Return ``2.27.3``, or ``unknown``."""
    return ".".join(str(part) for part in version) if version else "unknown"


def knows(version: NcclVersion | None, key: str) -> bool:
    """Return whether the NCCL of ``version`` (None: unknown, taken as :data:`FLOOR`) reads
    ``key``."""
    return (version or FLOOR) >= KEY_SINCE.get(key, FLOOR)
