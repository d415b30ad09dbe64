"""Fixtures of the init program's tests: host trees, a fake NCCL wheel, a memlock probe."""

from __future__ import annotations

from pathlib import Path

import pytest
from rdma_host_builder import make_nccl_wheel


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    return tmp_path / "host"


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    return tmp_path / "shared"


@pytest.fixture
def fake_nccl_wheel(tmp_path: Path) -> Path:
    """A site-packages folder holding an installed nvidia-nccl-cu12 2.27.3 with a fake library."""
    return make_nccl_wheel(tmp_path / "site-packages", 12, "2.27.3")
