from __future__ import annotations

import http.server
import os
import re
import stat
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from tpfabric_localcluster import toolchain

GO_MOD = toolchain.WRAPPERS / "kubernetes" / "go.mod"


def test_every_staging_replace_matches_the_pinned_kubernetes_version() -> None:
    version = toolchain.pinned_versions()["kubernetes"]  # e.g. v1.37.2 -> staging v0.37.2
    staging = "v0." + version.removeprefix("v1.")
    replaces = re.findall(r"^\s+(k8s\.io/\S+) => (\S+) (\S+)$", GO_MOD.read_text(), re.MULTILINE)
    assert len(replaces) > 20
    for module, target, target_version in replaces:
        assert target == module
        assert target_version == staging, module


def test_pinned_versions_name_every_binary_group() -> None:
    versions = toolchain.pinned_versions()
    assert set(versions) >= {"kubernetes", "etcd", "kwok", "helm"}
    assert all(v.startswith("v") for v in versions.values())


def _fake_binary(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_kubebuilder_assets_win_over_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    apiserver = _fake_binary(assets, "kube-apiserver")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("TPFABRIC_CACHE", str(tmp_path / "cache"))
    found = toolchain.find_toolchain(("kube-apiserver",))
    assert found.path("kube-apiserver") == apiserver


def test_cached_binaries_are_found_per_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("TPFABRIC_CACHE", str(tmp_path))
    version = toolchain.pinned_versions()["etcd"]
    folder = tmp_path / "bin" / f"etcd-{version}"
    folder.mkdir(parents=True)
    etcd = _fake_binary(folder, "etcd")
    assert toolchain.find_toolchain(("etcd",)).path("etcd") == etcd


def test_a_missing_binary_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.setenv("TPFABRIC_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    found = toolchain.find_toolchain(("kwok",))
    assert found.missing == ["kwok"]
    with pytest.raises(toolchain.MissingBinaryError, match="make toolchain"):
        found.path("kwok")


def test_a_binary_on_path_with_another_minor_version_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kube-scheduler"
    fake.write_text("#!/bin/sh\necho 'Kubernetes v1.20.0'\n")
    fake.chmod(0o755)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("TPFABRIC_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert toolchain.find_toolchain(("kube-scheduler",)).missing == ["kube-scheduler"]
    version = toolchain.pinned_versions()["kubernetes"]
    fake.write_text(f"#!/bin/sh\necho 'Kubernetes {version}'\n")
    assert toolchain.find_toolchain(("kube-scheduler",)).path("kube-scheduler") == fake


def test_the_minimum_wrapper_pins_the_charts_oldest_kubernetes() -> None:
    # tests/integration/test_minimum_kubernetes.py runs the chart on this version
    version = toolchain.pinned_versions()["kubernetes-minimum"]
    chart = (toolchain.REPO_ROOT / "charts" / "tpfabric" / "Chart.yaml").read_text()
    minimum = re.search(r'^kubeVersion: ">=\s*(\d+\.\d+)\.', chart, re.MULTILINE)
    assert minimum, "Chart.yaml: kubeVersion '>=X.Y.Z-0' expected"
    assert version.startswith(f"v{minimum.group(1)}.")
    staging = "v0." + version.removeprefix("v1.")
    go_mod = (toolchain.WRAPPERS / "kubernetes-minimum" / "go.mod").read_text()
    replaces = re.findall(r"^\s+(k8s\.io/\S+) => (\S+) (\S+)$", go_mod, re.MULTILINE)
    assert len(replaces) > 20
    assert all(target == module and v == staging for module, target, v in replaces)


def test_helm_is_stamped_like_an_official_build_with_its_client_gos_kubernetes() -> None:
    # helm's Makefile: client-go v0.N.M -> Kubernetes 1.N for `helm template` and `helm lint`
    flags = toolchain.helm_ldflags("v3.22.0", "v0.37.0").split(" -X ")
    assert "helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        assert f"{pkg}.k8sVersionMajor=1" in flags
        assert f"{pkg}.k8sVersionMinor=37" in flags


def test_helms_client_go_version_is_read_from_its_go_mod() -> None:
    go_mod = (
        "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/api v0.37.0\n\tk8s.io/client-go v0.36.2\n)\n"
    )
    assert toolchain._client_go_version(go_mod) == "v0.36.2"
    with pytest.raises(toolchain.MissingBinaryError, match="client-go"):
        toolchain._client_go_version("module example.com/x\n")


def test_a_helm_cached_by_an_older_build_recipe_is_rebuilt_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("TPFABRIC_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    version = toolchain.pinned_versions()["helm"]
    unstamped = tmp_path / "bin" / f"helm-{version}"  # where the unstamped build was cached
    unstamped.mkdir(parents=True)
    _fake_binary(unstamped, "helm")
    assert toolchain.find_toolchain(("helm",)).missing == ["helm"]
    current = tmp_path / "bin" / f"helm-{version}-r{toolchain.BUILD_REVISIONS['helm']}"
    current.mkdir(parents=True)
    helm = _fake_binary(current, "helm")
    assert toolchain.find_toolchain(("helm",)).path("helm") == helm


BOOTSTRAP_GO = toolchain.WRAPPERS / "bootstrap-go.sh"


def test_the_go_bootstrap_unpacks_nothing_whose_checksum_is_not_the_pinned_one(
    tmp_path: Path,
) -> None:
    """A toolchain zip from the proxy (here: a made-up one on loopback) that is not the pinned
    go release is refused before anything of it is unpacked."""
    want = re.search(r'^want="([\d.]+)"', BOOTSTRAP_GO.read_text(), re.MULTILINE)
    assert want is not None
    proxy = tmp_path / "proxy" / "golang.org" / "toolchain" / "@v"
    proxy.mkdir(parents=True)
    for arch in ("amd64", "arm64"):
        module = f"golang.org/toolchain@v0.0.1-go{want[1]}.linux-{arch}"
        with zipfile.ZipFile(proxy / f"v0.0.1-go{want[1]}.linux-{arch}.zip", "w") as fake:
            fake.writestr(f"{module}/bin/go", "#!/bin/sh\necho not go\n")

    def handler(*args: object) -> http.server.SimpleHTTPRequestHandler:
        return http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path / "proxy"))  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = subprocess.run(
            ["bash", str(BOOTSTRAP_GO)],
            env={
                "HOME": str(tmp_path),
                "PATH": "/usr/bin:/bin",  # no go on PATH: it must bootstrap one
                "TPFABRIC_CACHE": str(tmp_path / "cache"),
                "GOPROXY": f"http://127.0.0.1:{server.server_address[1]}",
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
    if "fetching" not in done.stderr:
        pytest.skip(f"a go >= the wanted one is on /usr/bin: {done.stdout}")
    assert done.returncode != 0
    assert "pinned h1:" in done.stderr
    assert "not unpacked" in done.stderr
    assert not (tmp_path / "cache" / "go").exists()
