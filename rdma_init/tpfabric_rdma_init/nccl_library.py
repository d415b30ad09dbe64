"""Bring the collective library into the pod: find ``libnccl.so.2`` and net plugins, copy them.

The init image installs NCCL as ``nvidia-nccl-cu<major>`` wheels (one site-packages folder per
CUDA major), which put the library at ``<site-packages>/nvidia/nccl/lib/libnccl.so.2``; its
version and CUDA major are the wheel's. The one whose CUDA major is the main container's is
copied to ``<shared>/lib``; the operator sets ``LD_LIBRARY_PATH=<mount>/lib`` in the main
container (an env it really gets) when the job asks for the shipped library. A library for
another CUDA major than the container's, or newer than the driver supports, is not shipped.

Only this module writes outside the report/config files, and only below ``<shared>/lib``; it must
never load the library (a CUDA-less init container cannot) or touch the host.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = [
    "NCCL_DISTRIBUTIONS",
    "InstalledLibrary",
    "NcclLibrary",
    "driver_cuda_major",
    "find_nccl_libraries",
    "find_nccl_library",
    "find_net_plugins",
    "install_libraries",
    "net_plugin_name",
]

NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11")
_WHEEL_LIBRARY = "nvidia/nccl/lib/libnccl.so.2"
_VERSIONED = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)")
_PLUGIN = re.compile(r"^libnccl-net(?:-([A-Za-z0-9_.]+?))?\.so(?:\.[0-9.]+)?$")


@dataclass(frozen=True)
class NcclLibrary:
    """A ``libnccl.so.2`` to ship: where it is, its version when known, and how it was found."""

    path: Path
    version: str | None
    source: str
    cuda_major: int | None = None


def driver_cuda_major(driver_version: str | None) -> int | None:
    """Return the newest CUDA major a driver runs (580+: 13, 525+: 12, 450+: 11), None unknown."""
    if not driver_version or not driver_version.split(".")[0].isdigit():
        return None
    major = int(driver_version.split(".")[0])
    for floor, cuda in ((580, 13), (525, 12), (450, 11)):
        if major >= floor:
            return cuda
    return 10


@dataclass(frozen=True)
class InstalledLibrary:
    """What was copied into the shared volume."""

    library: str
    version: str | None
    source: str
    net_plugins: tuple[str, ...]
    cuda_major: int | None = None


def find_nccl_libraries(
    explicit: Path | None = None, search_path: list[str] | None = None
) -> list[NcclLibrary]:
    """Return the NCCL libraries on offer: ``explicit`` if given, else every NCCL wheel's."""
    if explicit is not None:
        if not explicit.is_file():
            return []
        match = _VERSIONED.search(os.path.realpath(explicit))
        return [NcclLibrary(explicit, match.group(1) if match else None, "--nccl-lib")]
    found = []
    for name in NCCL_DISTRIBUTIONS:
        for dist in metadata.distributions(name=name, path=search_path or sys.path):
            candidate = Path(str(dist.locate_file(_WHEEL_LIBRARY)))
            if candidate.is_file():
                found.append(
                    NcclLibrary(
                        candidate,
                        dist.version,
                        f"wheel {dist.metadata['Name']}",
                        int(name.rsplit("cu", 1)[1]),
                    )
                )
    return found


def find_nccl_library(
    explicit: Path | None = None,
    search_path: list[str] | None = None,
    cuda_major: int | None = None,
) -> NcclLibrary | None:
    """Return the library for ``cuda_major`` (any when None), ``explicit`` always wins."""
    libraries = find_nccl_libraries(explicit, search_path)
    if explicit is not None or cuda_major is None:
        return libraries[0] if libraries else None
    return next((lib for lib in libraries if lib.cuda_major == cuda_major), None)


def find_net_plugins(directory: Path | None) -> tuple[Path, ...]:
    """Return the NCCL net plugins (``libnccl-net*.so``) in ``directory``, sorted by name."""
    if directory is None or not directory.is_dir():
        return ()
    return tuple(sorted(p for p in directory.iterdir() if _PLUGIN.match(p.name) and p.is_file()))


def net_plugin_name(plugins: tuple[Path, ...]) -> str | None:
    """Return NCCL_NET_PLUGIN for the one named plugin (``ofi`` for ``libnccl-net-ofi.so``)."""
    names = {match.group(1) for p in plugins if (match := _PLUGIN.match(p.name))}
    if len(names) == 1:
        return names.pop()  # None for plain libnccl-net.so: NCCL loads that name by default
    return None


def _copy_atomically(source: Path, target: Path) -> None:
    partial = target.with_name(f".{target.name}.partial")
    shutil.copy2(source, partial)
    partial.replace(target)


def install_libraries(
    library: NcclLibrary, plugins: tuple[Path, ...], shared_dir: Path
) -> InstalledLibrary:
    """Return what was installed after copying NCCL and net plugins into ``<shared_dir>/lib``."""
    lib_dir = shared_dir / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    target = lib_dir / "libnccl.so.2"
    _copy_atomically(library.path, target)
    copied = []
    for plugin in plugins:
        _copy_atomically(plugin, lib_dir / plugin.name)
        copied.append(str(lib_dir / plugin.name))
    return InstalledLibrary(
        library=str(target),
        version=library.version,
        source=library.source,
        net_plugins=tuple(copied),
        cuda_major=library.cuda_major,
    )
