"""Fixtures of the init program's tests: host trees, a fake NCCL wheel, a memlock probe."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    return tmp_path / "host"


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    return tmp_path / "shared"


@pytest.fixture
def fake_nccl_wheel(tmp_path: Path) -> Path:
    """A site-packages folder holding an installed nvidia-nccl-cu12 2.27.3 with a fake library."""
    site = tmp_path / "site-packages"
    library = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF fake libnccl 2.27.3")
    dist_info = site / "nvidia_nccl_cu12-2.27.3.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.27.3\n"
    )
    (dist_info / "RECORD").write_text("nvidia/nccl/lib/libnccl.so.2,,\n")
    return site
