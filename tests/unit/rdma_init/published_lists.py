"""The published lists the fabric contract is checked against (data/published/README.md)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

PUBLISHED = Path(__file__).parent / "data" / "published"


@cache
def names(file: str) -> frozenset[str]:
    """Return the variable names of a published list (one a line, ``#`` comments skipped)."""
    lines = (PUBLISHED / file).read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def nccl_keys(tag: str) -> frozenset[str]:
    """Return the environment variables NCCL ``tag`` (``v2.27.3-1``) reads."""
    return names(f"nccl-env-{tag}.txt")


NCCL_TAGS = ("v2.21.5-1", "v2.22.3-1", "v2.27.3-1", "v2.27.7-1", "v2.30.7-1")
"""The NCCL releases stored: the floor, FIFO_TC's first, the shipped cu12 and cu13, rail/plane."""

LIBRARY_LISTS = {
    "UCX_": "ucx-v1.20.0-config.txt",
    "NVSHMEM_": "nvshmem-v3.4.5-env.txt",
    "VLLM_": "vllm-envs.txt",
    "GLOO_": "pytorch-env.txt",
    "TP_": "pytorch-env.txt",
}
"""The published list each ``fabric.env`` variable is checked in, by its prefix."""


def tag_of(version: tuple[int, int, int]) -> str:
    """Return the stored tag of an NCCL version (``(2, 27, 3)`` -> ``v2.27.3-1``)."""
    return "v{}.{}.{}-1".format(*version)
