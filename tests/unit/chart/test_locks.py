"""The hashed locks the images install from (``make locks``; no network here): each holds what its
input asks for, at the versions CI tests, every file by its sha256, and images/build.sh fetches
exactly the locks the Dockerfiles install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from chart_files import DOCKERFILES, REPO, dockerfile_instructions

IMAGE_LOCK = REPO / "requirements" / "image.txt"
#: each lock made from an input file of its own, and the build context that copies it
LOCKS_FROM_INPUTS = {
    REPO / "requirements" / "build.txt": REPO,
    REPO / "rdma_init" / "requirements" / "nccl-cu12.txt": REPO / "rdma_init",
    REPO / "rdma_init" / "requirements" / "nccl-cu13.txt": REPO / "rdma_init",
    REPO / "e2e" / "requirements" / "fake-rdma-device-plugin.txt": REPO / "e2e",
}
ENTRY = re.compile(
    r"^([A-Za-z0-9_.-]+)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.MULTILINE
)


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """Return ``{name: (version, hashes)}`` of a pip-compile lock with hashes."""
    text = path.read_text()
    entries = {normal(m[1]): (m[2], len(re.findall("--hash=", m[3]))) for m in ENTRY.finditer(text)}
    pins = re.findall(r"^[A-Za-z0-9_.-]+==", text, re.MULTILINE)
    assert len(pins) == len(entries), f"{path}: a pin without its hashes"
    return entries


def pinned(path: Path) -> dict[str, str]:
    """Return ``{name: version}`` of the ``name==version`` lines of a requirements file."""
    found = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.MULTILINE)
    return {normal(name): version for name, version in found}


def test_the_image_lock_holds_the_ci_versions_of_every_runtime_dependency() -> None:
    lock = locked(IMAGE_LOCK)
    constraints = pinned(REPO / "requirements" / "constraints.txt")
    assert {name: version for name, (version, _) in lock.items()} == {
        name: constraints[name] for name in lock
    }, "requirements/image.txt and constraints.txt differ: run `make locks`"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = normal(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        assert name in lock, f"{name} is a dependency but not in requirements/image.txt"
    assert all(hashes for _, hashes in lock.values())


@pytest.mark.parametrize("lock", sorted(LOCKS_FROM_INPUTS), ids=lambda p: p.name)
def test_a_lock_holds_exactly_the_versions_its_input_asks_for(lock: Path) -> None:
    asked = pinned(lock.with_suffix(".in"))
    got = locked(lock)
    assert asked, f"{lock.with_suffix('.in')} pins nothing"
    assert {name: got[name][0] for name in asked} == asked, f"{lock}: run `make locks`"
    assert all(hashes for _, hashes in got.values())


def test_the_nccl_wheels_are_locked_for_both_architectures() -> None:
    for cuda in ("cu12", "cu13"):
        lock = locked(REPO / "rdma_init" / "requirements" / f"nccl-{cuda}.txt")
        assert lock[f"nvidia-nccl-{cuda}"][1] >= 2, "x86_64 and aarch64 wheels"


def test_the_host_wheelhouse_fetches_exactly_the_locks_the_dockerfiles_install() -> None:
    script = (REPO / "images" / "build.sh").read_text()
    listed = re.search(r"^LOCKS=\(\n(.*?)^\)", script, re.MULTILINE | re.DOTALL)
    assert listed is not None
    fetched = {REPO / line.strip() for line in listed[1].splitlines() if line.strip()}
    contexts = {
        "tpfabric": REPO,
        "rdma-init": REPO / "rdma_init",
        "fake-rdma-device-plugin": REPO / "e2e",
    }
    copied = set()
    for name, dockerfile in DOCKERFILES.items():
        for instruction, arguments in dockerfile_instructions(dockerfile):
            if instruction == "COPY" and not arguments.startswith("--from"):
                *sources, _ = arguments.split()
                copied |= {contexts[name] / s for s in sources if s.endswith(".txt")}
    assert fetched == copied
    assert fetched == {IMAGE_LOCK, *LOCKS_FROM_INPUTS}


def test_make_locks_makes_every_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "--output-file requirements/image.txt" in makefile
    for lock in LOCKS_FROM_INPUTS:
        assert str(lock.relative_to(REPO).with_suffix("")) in makefile, lock
