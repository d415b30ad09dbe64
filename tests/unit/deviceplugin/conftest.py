"""Fixtures of the device-plugin tests: a short socket folder, a test kubelet, a started plugin."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deviceplugin_harness import FakeKubelet

from tpfabric_deviceplugin.plugin import FakeRdmaDevicePlugin, PluginConfig


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Unix socket paths must stay under 108 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def plugin_dir(workdir: Path) -> Path:
    path = workdir / "device-plugins"
    path.mkdir()
    return path


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    started = FakeKubelet(plugin_dir / "kubelet.sock").start()
    yield started
    started.stop()


@pytest.fixture
def make_plugin(workdir: Path, plugin_dir: Path) -> Iterator[Callable[..., FakeRdmaDevicePlugin]]:
    plugins: list[FakeRdmaDevicePlugin] = []

    def make(**overrides: object) -> FakeRdmaDevicePlugin:
        config = PluginConfig(
            plugin_dir=plugin_dir,
            world_dir=workdir / "world",
            poll_interval_s=0.05,
            **overrides,  # type: ignore[arg-type]
        )
        plugin = FakeRdmaDevicePlugin(config)
        plugins.append(plugin)
        plugin.start()
        return plugin

    yield make
    for plugin in plugins:
        plugin.stop(grace_s=0)
