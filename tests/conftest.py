"""Test tiers follow the folders: tests/unit -> unit, tests/integration -> integration,
tests/soak -> soak, tests/e2e -> e2e."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(item.fspath).relative_to(TESTS).parts[0]
        if tier in {"unit", "integration", "soak", "e2e"}:
            item.add_marker(getattr(pytest.mark, tier))
