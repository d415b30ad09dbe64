"""Find or build the binaries of the local control plane, cached per version outside the repo.

Versions are pinned in one place each: the ``require`` lines of the wrapper modules under
``e2e/toolchain/`` (Kubernetes, etcd, and on demand the LWS and JobSet controllers) and
:data:`GO_INSTALL_TOOLS` (kwok, helm, kind, and on demand Kueue and Prometheus's promtool).

Lookup order for every binary: ``$KUBEBUILDER_ASSETS`` (taken as the user's explicit choice), the
cache (``$TPFABRIC_CACHE``, else ``$XDG_CACHE_HOME/tpfabric``, else ``~/.cache/tpfabric``), then
``$PATH`` when that binary reports a compatible version. Nothing is built implicitly by lookup;
:func:`ensure_toolchain` builds what is missing, printing progress (minutes on 2 cores).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BINARIES",
    "BUILD_REVISIONS",
    "GO_INSTALL_TOOLS",
    "KUEUE_BINARIES",
    "PROMTOOL_BINARIES",
    "MissingBinaryError",
    "Toolchain",
    "cache_dir",
    "ensure_minimum_toolchain",
    "ensure_toolchain",
    "find_toolchain",
    "helm_ldflags",
    "pinned_versions",
    "promtool_ldflags",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
WRAPPERS = REPO_ROOT / "e2e" / "toolchain"

KUBERNETES_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
#: The control plane at the oldest Kubernetes the chart supports (wrapper kubernetes-minimum/),
#: built only on demand by :func:`ensure_minimum_toolchain` for the version-skew check.
MINIMUM_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
#: tool -> (Go package, version) installed with ``go install PACKAGE@VERSION``.
GO_INSTALL_TOOLS: dict[str, tuple[str, str]] = {
    "kwok": ("sigs.k8s.io/kwok/cmd/kwok", "v0.8.0"),
    "helm": ("helm.sh/helm/v3/cmd/helm", "v3.22.0"),
    "kind": ("sigs.k8s.io/kind", "v0.33.0"),
    "kueue": ("sigs.k8s.io/kueue/cmd/kueue", "v0.17.0"),
    # Prometheus v3.16.0 (its Go module numbers a release 3.N.M as v0.3NN.M)
    "promtool": ("github.com/prometheus/prometheus/cmd/promtool", "v0.316.0"),
}
#: Bumped when the way a group is built changes (not its version), so that a cache built the old
#: way is not found and gets rebuilt: helm 2 = stamped with its client-go's Kubernetes version.
BUILD_REVISIONS: dict[str, int] = {"helm": 2}
#: Kueue's manifests the local control plane installs (CRDs and webhook configurations), copied
#: out of the Kueue module beside the binary: the binary carries none of them.
KUEUE_MANIFESTS = ("config/components/crd/bases", "config/components/webhook")
#: Binaries the local control plane needs: what `make demo` builds on a fresh machine (kind only
#: for the Docker e2e).
BINARIES = (*KUBERNETES_BINARIES, "etcd", "kwok", "helm")
#: Kueue, for the queueing tests only: built on demand by ``tpfabric toolchain build --kueue``
#: (the integration tier), ~5 min more on a cold cache.
KUEUE_BINARIES = ("kueue",)
#: Prometheus's promtool, for the alert rules' tests (``promtool check rules``, ``test rules``)
#: and the lint of the components' scrapes (``check metrics``): built only on demand by
#: ``tpfabric toolchain build --promtool`` (the integration tier).
PROMTOOL_BINARIES = ("promtool",)
#: The workload controllers whose gangs tpfabric places (LWS, JobSet): built only on demand by
#: ``tpfabric toolchain build --controllers`` for the integration tier (minutes on 2 cores).
CONTROLLER_BINARIES = ("lws", "jobset")
#: Built together from the wrapper e2e/toolchain/controllers (one compile of the client-go and
#: controller-runtime they share): binary -> (its main package, its module).
CONTROLLER_PACKAGES = {
    "lws": ("sigs.k8s.io/lws/cmd", "sigs.k8s.io/lws"),
    "jobset": ("sigs.k8s.io/jobset", "sigs.k8s.io/jobset"),
}
#: Their manifests the local control plane installs (CRDs and webhook configurations), copied
#: out of each module beside its binary: binary -> folders of the module.
CONTROLLER_MANIFESTS = {
    "lws": ("config/crd/bases", "config/webhook"),
    "jobset": ("config/components/crd/bases", "config/components/webhook"),
}
#: kwok's own default stages (node-fast, node heartbeat with lease, pod-fast), copied from the
#: kwok module next to the binary at build time: the kwok binary has none built in.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

INSTALL_HINT = (
    "run `make toolchain` (builds from the Go module proxy into the cache; needs Go >= 1.26) "
    "or point KUBEBUILDER_ASSETS at a folder holding it"
)


class MissingBinaryError(RuntimeError):
    """A binary of the local control plane is not available; the message says how to get it."""


def cache_dir() -> Path:
    """Return the root of tpfabric's binary cache (created on demand, never inside the repo)."""
    if env := os.environ.get("TPFABRIC_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpfabric"


def _require_version(go_mod: Path, module: str) -> str:
    match = re.search(
        rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.MULTILINE
    )
    if not match:
        raise MissingBinaryError(f"{go_mod}: no require line for {module}")
    return match.group(1)


def pinned_versions() -> dict[str, str]:
    """Return ``{component: version}`` for every pinned binary group."""
    versions = {
        "kubernetes": _require_version(WRAPPERS / "kubernetes" / "go.mod", "k8s.io/kubernetes"),
        "kubernetes-minimum": _require_version(
            WRAPPERS / "kubernetes-minimum" / "go.mod", "k8s.io/kubernetes"
        ),
        "etcd": _require_version(WRAPPERS / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3"),
        "controllers": "-".join(
            _require_version(WRAPPERS / "controllers" / "go.mod", module)
            for _, module in CONTROLLER_PACKAGES.values()
        ),
    }
    versions.update({tool: version for tool, (_, version) in GO_INSTALL_TOOLS.items()})
    return versions


def _group_of(binary: str) -> str:
    if binary in KUBERNETES_BINARIES:
        return "kubernetes"
    return "controllers" if binary in CONTROLLER_PACKAGES else binary


def _group_folder(group: str, versions: dict[str, str]) -> Path:
    """Return the cache folder of a binary group: ``bin/<group>-<version>[-r<revision>]``."""
    revision = BUILD_REVISIONS.get(group)
    suffix = f"-r{revision}" if revision is not None else ""
    return cache_dir() / "bin" / f"{group}-{versions[group]}{suffix}"


def _cached_path(binary: str, versions: dict[str, str]) -> Path:
    return _group_folder(_group_of(binary), versions) / binary


def _version_output(path: str) -> str:
    name = Path(path).name
    args = {"kubectl": ["version", "--client"], "helm": ["version", "--short"]}.get(
        name, ["--version"]
    )
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=20, check=False
        )
        return done.stdout + done.stderr
    return ""


def _compatible(binary: str, path: str, versions: dict[str, str]) -> bool:
    """Return whether a binary found on PATH reports a version we can use."""
    output = _version_output(path)
    found = re.search(r"v?(\d+)\.(\d+)\.(\d+)", output)
    if not found:
        return False
    got = tuple(int(x) for x in found.groups())
    if binary in KUBERNETES_BINARIES:
        want = re.match(r"v(\d+)\.(\d+)", versions["kubernetes"])
        return want is not None and got[:2] == (int(want.group(1)), int(want.group(2)))
    if binary == "etcd":
        return got >= (3, 5, 24)
    return True


@dataclass(frozen=True)
class Toolchain:
    """Resolved paths of the binaries; a missing one is ``None``."""

    paths: dict[str, Path | None]
    versions: dict[str, str]

    def path(self, binary: str) -> Path:
        """Return the path of ``binary`` or raise MissingBinaryError with the install hint."""
        found = self.paths.get(binary)
        if found is None:
            raise MissingBinaryError(f"{binary} not found: {INSTALL_HINT}")
        return found

    def kwok_stages(self) -> list[Path]:
        """Return kwok's stage files (beside the kwok binary, else in the cache)."""
        candidates = [self.path("kwok").parent / "stages"]
        candidates.append(_cached_path("kwok", self.versions).parent / "stages")
        for folder in candidates:
            files = sorted(folder.glob("*.yaml"))
            if len(files) == len(KWOK_STAGES):
                return files
        raise MissingBinaryError(f"kwok stage files not found in {candidates[-1]}: {INSTALL_HINT}")

    @property
    def missing(self) -> list[str]:
        """Return the binaries that were not found."""
        return [name for name, path in self.paths.items() if path is None]


def find_toolchain(binaries: tuple[str, ...] = BINARIES) -> Toolchain:
    """Return where each binary is, without building anything."""
    versions = pinned_versions()
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    paths: dict[str, Path | None] = {}
    for binary in binaries:
        candidates = []
        if assets:
            candidates.append(Path(assets) / binary)
        cached = _cached_path(binary, versions)
        if binary != "kwok" or (cached.parent / "stages").is_dir():
            candidates.append(cached)
        found = next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
        if found is None:
            on_path = shutil.which(binary)
            if on_path and _compatible(binary, on_path, versions):
                found = Path(on_path)
        paths[binary] = found
    return Toolchain(paths=paths, versions=versions)


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    """Hold an exclusive lock on the cache so that two builds never race on one folder."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise MissingBinaryError(
            "go not found: install Go >= 1.26 to build the local control plane, "
            "or point KUBEBUILDER_ASSETS at prebuilt binaries"
        )
    return go


def _run_with_progress(
    label: str, argv: list[str], cwd: Path | None, env: dict[str, str], log: Callable[[str], None]
) -> None:
    """Run a Go build, printing a progress line every 20 s; raise with the output tail on failure.

    ``go build -v`` prints one line per package it compiles; counting them is the progress.
    """
    started = time.monotonic()
    lines: list[str] = []
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(20):
            log(f"  {label}: {len(lines)} packages, {time.monotonic() - started:.0f}s elapsed")

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    assert proc.stdout is not None
    lines.extend(line.rstrip() for line in proc.stdout)
    code = proc.wait()
    done.set()
    thread.join()
    if code != 0:
        tail = "\n".join(lines[-25:])
        raise MissingBinaryError(f"building {label} failed (exit {code}):\n{tail}")
    log(f"  {label}: done in {time.monotonic() - started:.0f}s")


def _ldflags(version: str) -> str:
    major, minor = re.match(r"v(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def helm_ldflags(version: str, client_go_version: str) -> str:
    """Return the ``-ldflags`` of helm's own Makefile for a release build: the version, and the
    Kubernetes version ``helm template``/``lint`` assume without ``--kube-version`` (client-go
    v0.N.M means 1.N; unstamped, helm assumes 1.20 and refuses charts needing newer)."""
    found = re.match(r"v(\d+)\.(\d+)\.", client_go_version)
    if found is None:
        raise MissingBinaryError(f"helm {version}: not a client-go version: {client_go_version}")
    # As helm's Makefile: Kubernetes 1.N ships client-go v0.N.
    major, minor = int(found.group(1)) + 1, int(found.group(2))
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor={major}", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def promtool_ldflags(module_version: str) -> str:
    """Return the ``-ldflags`` that stamp promtool with its Prometheus release, as Prometheus's
    own build does (``promtool --version``): module v0.3NN.M is Prometheus 3.NN.M."""
    found = re.fullmatch(r"v0\.(\d)(\d\d)\.(\d+)", module_version)
    if found is None:
        raise MissingBinaryError(f"promtool: not a Prometheus 3.x module version: {module_version}")
    release = f"{found.group(1)}.{int(found.group(2))}.{found.group(3)}"
    return f"-s -w -X github.com/prometheus/common/version.Version={release}"


def _module_info(go: str, module: str, env: dict[str, str]) -> dict[str, str]:
    """Return ``go mod download -json MODULE`` (``Dir``, ``GoMod``, ...): fetched when missing."""
    done = subprocess.run(
        [go, "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise MissingBinaryError(f"cannot download the module {module}: {done.stderr}")
    info: dict[str, str] = json.loads(done.stdout)
    return info


def _client_go_version(go_mod: str) -> str:
    """Return the ``k8s.io/client-go`` version a ``go.mod`` requires."""
    found = re.search(r"^\s*(?:require\s+)?k8s\.io/client-go\s+(v\S+)", go_mod, re.MULTILINE)
    if found is None:
        raise MissingBinaryError("helm's go.mod requires no k8s.io/client-go")
    return found.group(1)


def _copy_kwok_stages(go: str, version: str, target: Path, env: dict[str, str]) -> None:
    """Copy kwok's default stage files out of the kwok module (already in the module cache)."""
    source = Path(_module_info(go, f"sigs.k8s.io/kwok@{version}", env)["Dir"])
    target.mkdir(parents=True, exist_ok=True)
    for stage in KWOK_STAGES:
        shutil.copyfile(source / stage, target / Path(stage).name)


def _copy_kueue_manifests(go: str, version: str, target: Path, env: dict[str, str]) -> None:
    """Copy Kueue's CRDs and webhook manifests out of the Kueue module (in the module cache)."""
    source = Path(_module_info(go, f"sigs.k8s.io/kueue@{version}", env)["Dir"])
    for folder in KUEUE_MANIFESTS:
        shutil.copytree(source / folder, target / Path(folder).name, dirs_exist_ok=True)


def _build_group(group: str, versions: dict[str, str], log: Callable[[str], None]) -> None:
    version = versions[group]
    final = _group_folder(group, versions)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    env = {**os.environ, "CGO_ENABLED": "0"}
    go = _go()
    log(f"building {group} {version} into {final}")
    if group in ("kubernetes", "kubernetes-minimum"):
        binaries = KUBERNETES_BINARIES if group == "kubernetes" else MINIMUM_BINARIES
        packages = [f"k8s.io/kubernetes/cmd/{b}" for b in binaries]
        argv = [go, "build", "-v", "-trimpath", "-ldflags", _ldflags(version), "-o", f"{partial}/"]
        _run_with_progress(group, [*argv, *packages], WRAPPERS / group, env, log)
    elif group == "controllers":
        packages = [package for package, _ in CONTROLLER_PACKAGES.values()]
        argv = [go, "build", "-v", "-trimpath", "-ldflags=-s -w", "-o", f"{partial}/"]
        _run_with_progress(group, [*argv, *packages], WRAPPERS / group, env, log)
        go_mod = WRAPPERS / group / "go.mod"
        for binary, (package, module) in CONTROLLER_PACKAGES.items():
            built = partial / Path(package).name  # go build names it after the package
            if built.name != binary:
                built.rename(partial / binary)
            source = Path(
                _module_info(go, f"{module}@{_require_version(go_mod, module)}", env)["Dir"]
            )
            for folder in CONTROLLER_MANIFESTS[binary]:
                target = partial / "config" / binary / Path(folder).name
                shutil.copytree(source / folder, target, dirs_exist_ok=True)
    elif group == "etcd":
        argv = [go, "build", "-v", "-trimpath", "-ldflags=-s -w", "-o", str(partial / "etcd"), "."]
        _run_with_progress(group, argv, WRAPPERS / "etcd", env, log)
    else:
        package, _ = GO_INSTALL_TOOLS[group]
        env["GOBIN"] = str(partial)
        ldflags = "-s -w"
        if group == "helm":
            go_mod = Path(_module_info(go, f"{package.split('/cmd/')[0]}@{version}", env)["GoMod"])
            ldflags = helm_ldflags(version, _client_go_version(go_mod.read_text()))
        if group == "promtool":
            ldflags = promtool_ldflags(version)
        argv = [go, "install", "-v", "-trimpath", f"-ldflags={ldflags}"]
        if group == "promtool":
            # Prometheus's own build tag: no service-discovery plugin (AWS, Azure, GCE, Consul...)
            # is compiled in; promtool's rule and metric checks need none of them
            argv.append("-tags=remove_all_sd")
        argv.append(f"{package}@{version}")
        _run_with_progress(group, argv, None, env, log)
        if group == "kwok":
            _copy_kwok_stages(go, version, partial / "stages", env)
        if group == "kueue":
            _copy_kueue_manifests(go, version, partial / "config", env)

    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)


def ensure_minimum_toolchain(log: Callable[[str], None] | None = None) -> Toolchain:
    """Return the toolchain with the control plane at the oldest supported Kubernetes.

    kube-apiserver, kube-controller-manager and kube-scheduler are those of the
    ``kubernetes-minimum`` wrapper (built into the cache when missing, minutes on 2 cores);
    etcd, kwok, kubectl and helm are the usual ones.
    """
    emit = log or (lambda line: print(line, file=sys.stderr, flush=True))  # noqa: T201
    toolchain = ensure_toolchain(log=emit)
    versions = toolchain.versions
    folder = _group_folder("kubernetes-minimum", versions)
    if not all((folder / b).is_file() for b in MINIMUM_BINARIES):
        with _cache_lock():
            if not all((folder / b).is_file() for b in MINIMUM_BINARIES):
                _build_group("kubernetes-minimum", versions, emit)
    paths = {**toolchain.paths, **{b: folder / b for b in MINIMUM_BINARIES}}
    return Toolchain(paths=paths, versions=versions)


def ensure_toolchain(
    binaries: tuple[str, ...] = BINARIES, log: Callable[[str], None] | None = None
) -> Toolchain:
    """Return the toolchain with every binary in ``binaries``, building the missing ones."""
    emit = log or (lambda line: print(line, file=sys.stderr, flush=True))  # noqa: T201
    toolchain = find_toolchain(binaries)
    if not toolchain.missing:
        return toolchain
    with _cache_lock():
        toolchain = find_toolchain(binaries)  # another process may have built it meanwhile
        groups = list(dict.fromkeys(_group_of(b) for b in toolchain.missing))
        started = time.monotonic()
        for group in groups:
            _build_group(group, toolchain.versions, emit)
        emit(f"toolchain ready in {time.monotonic() - started:.0f}s")
    toolchain = find_toolchain(binaries)
    if toolchain.missing:
        raise MissingBinaryError(f"still missing after the build: {', '.join(toolchain.missing)}")
    return toolchain
