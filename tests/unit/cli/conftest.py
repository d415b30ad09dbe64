"""Fixtures of the CLI tests: the topograph dumps and the example fabric description."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import EXAMPLES, TOPOGRAPH


@pytest.fixture(scope="session")
def example_out() -> Path:
    return TOPOGRAPH / "example.out"


@pytest.fixture(scope="session")
def example_bad_out() -> Path:
    return TOPOGRAPH / "example-bad.out"


@pytest.fixture(scope="session")
def small_fabric() -> Path:
    return EXAMPLES / "small.yaml"
