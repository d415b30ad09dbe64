"""This process's memory as the kernel counts it: resident set, its high-water mark, and the C
allocator's free memory handed back.

Linux only (``/proc/self``, glibc); every reading says when it could not be taken. It must never
be imported by the product.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["malloc_trim", "proc_status_kib", "reset_peak_rss"]


def proc_status_kib() -> dict[str, int]:
    """Return ``VmRSS`` and ``VmHWM`` of this process in KiB (empty where /proc is missing)."""
    result: dict[str, int] = {}
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return result
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            result[key] = int(rest.split()[0])
    return result


def reset_peak_rss() -> bool:
    """Reset the kernel's ``VmHWM`` of this process to its ``VmRSS``; return whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def malloc_trim() -> bool:
    """Hand the C allocator's free memory back to the kernel (glibc); return whether it could.

    Only after everything else is measured: the RSS it leaves tells the store's live memory from
    freed memory the allocator keeps (the product never calls it).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    libc.malloc_trim(0)
    return True
