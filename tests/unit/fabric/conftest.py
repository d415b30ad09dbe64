"""Fixtures shared by the fabric tests: the topograph dumps, parsed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_core.fabric.ibnetdiscover import IbnetdiscoverReport, parse_ibnetdiscover
from tpfabric_core.fabric.model import Fabric

DATA = Path(__file__).parent / "data"
EXAMPLE = DATA / "topograph" / "example.out"


@pytest.fixture(scope="session")
def example() -> tuple[Fabric, IbnetdiscoverReport]:
    return parse_ibnetdiscover(EXAMPLE.read_text(), "example.out")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA
