"""Focused Dockerfile checks in place of hadolint (no Docker, no hadolint binary here): bases by
digest, hashed installs, non-root users, multi-stage builds, sources that exist in the build
context, and a production image without benchmark or test code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chart_files import DOCKERFILES, REPO, dockerfile_instructions

# The fake device plugin serves a socket in the kubelet's folder and mknods fake devices.
RUNS_AS_ROOT = {"fake-rdma-device-plugin"}
CONTEXTS = {
    "tpfabric": REPO,
    "rdma-init": REPO / "rdma_init",
    "fake-rdma-device-plugin": REPO / "e2e",
}
PINNED_BASE = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+[\w.-]*@sha256:[0-9a-f]{64}$")


def _stages(name: str) -> list[list[tuple[str, str]]]:
    """Return the stages, each from its FROM on; ``${ARG}`` in FROM is the ARG's default."""
    stages: list[list[tuple[str, str]]] = []
    defaults: dict[str, str] = {}
    for instruction, arguments in dockerfile_instructions(DOCKERFILES[name]):
        if not stages and instruction == "ARG":  # global ARG: only FROM lines may use it
            key, _, value = arguments.partition("=")
            defaults[key] = value
            continue
        if instruction == "FROM":
            stages.append([])
            resolved = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m[1], m[0]), arguments)
            stages[-1].append((instruction, resolved))
            continue
        stages[-1].append((instruction, arguments))
    return stages


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_the_base_image_is_a_build_argument(name: str) -> None:
    # users keep the pinned public base; the kind e2e passes a locally built one
    instructions = dockerfile_instructions(DOCKERFILES[name])
    assert any(i == "ARG" and a.startswith("BASE_IMAGE=") for i, a in instructions)
    froms = [a.split()[0] for i, a in instructions if i == "FROM"]
    assert all(image in {"${BASE_IMAGE}", "build"} for image in froms), froms


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_base_images_are_pinned_to_a_full_version_by_digest(name: str) -> None:
    stage_names = set()
    for stage in _stages(name):
        image, *alias = stage[0][1].split()
        if image in stage_names:
            continue  # FROM an earlier stage
        assert PINNED_BASE.match(image), f"{DOCKERFILES[name]}: pin {image!r} (x.y.z@sha256:...)"
        assert ":latest" not in image
        if alias:
            stage_names.add(alias[-1])


@pytest.mark.parametrize("name", sorted(set(DOCKERFILES) - RUNS_AS_ROOT))
def test_the_final_stage_runs_as_a_numeric_non_root_user(name: str) -> None:
    users = [args for instruction, args in _stages(name)[-1] if instruction == "USER"]
    assert users, f"{DOCKERFILES[name]}: the final stage sets no USER"
    user = users[-1].split(":")[0]
    # numeric, so that the kubelet can enforce runAsNonRoot without a passwd lookup
    assert user.isdigit()
    assert int(user) != 0


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copied_sources_exist_in_the_build_context(name: str) -> None:
    for stage in _stages(name):
        for instruction, arguments in stage:
            if instruction not in {"COPY", "ADD"} or arguments.startswith("--from"):
                continue
            *sources, _ = arguments.split()
            for source in sources:
                assert (CONTEXTS[name] / source).exists(), f"{DOCKERFILES[name]}: {source} missing"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_every_package_is_installed_from_a_hashed_lock(name: str) -> None:
    for stage in _stages(name):
        for instruction, arguments in stage:
            if instruction != "RUN":
                continue
            for install in re.split(r"&&", arguments):
                if "pip install" not in install:
                    continue
                # the one exception: the project's own wheel, built in this stage from source
                if "/tmp/wheel/tpfabric-" in install:
                    assert "--no-deps" in install, install
                    continue
                assert "--require-hashes" in install, f"{DOCKERFILES[name]}: {install.strip()}"
                assert re.search(r"-r \S+\.txt", install), install


def test_the_tpfabric_image_is_multi_stage_with_the_ci_versions() -> None:
    stages = _stages("tpfabric")
    assert len(stages) >= 2
    installs = [a for i, a in stages[0] if i == "RUN" and "pip install" in a]
    assert any("--require-hashes -r requirements/image.txt" in a for a in installs)
    assert any("--no-build-isolation" in a for a in installs), "the locked backend builds it"
    final = " ".join(a for _, a in stages[-1])
    assert "pip install" not in final, "the final stage only copies the built environment"
    assert "COPY --from=build" in " ".join(f"{i} {a}" for i, a in stages[-1])


def test_the_context_root_dockerignore_filters_like_the_buildkit_one() -> None:
    # Docker's legacy builder (no BuildKit) reads only <context>/.dockerignore.
    def rules(path: Path) -> list[str]:
        lines = path.read_text().splitlines()
        return [line for line in lines if line and not line.startswith("#")]

    buildkit = Path(f"{DOCKERFILES['tpfabric']}.dockerignore")
    assert rules(REPO / ".dockerignore") == rules(buildkit)


def test_the_production_image_carries_no_benchmark_or_test_code() -> None:
    ignore = Path(f"{DOCKERFILES['tpfabric']}.dockerignore").read_text().splitlines()
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert not {a for a in allowed if a.startswith(("bench", "e2e", "tests"))}, allowed
    copied = " ".join(a for stage in _stages("tpfabric") for i, a in stage if i == "COPY")
    assert "bench" not in copied
    assert "e2e" not in copied


def test_the_tpfabric_build_context_is_filtered() -> None:
    ignore = Path(f"{DOCKERFILES['tpfabric']}.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("**") :][0] == "**", "exclude everything, then allow the sources"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    for stage in _stages("tpfabric"):
        for instruction, arguments in stage:
            if instruction == "COPY" and not arguments.startswith("--from"):
                *sources, _ = arguments.split()
                assert all(s.rstrip("/") in allowed for s in sources), arguments
