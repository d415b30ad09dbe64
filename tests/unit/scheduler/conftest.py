"""The placer's test world as a fixture (see placer_world.py)."""

from __future__ import annotations

from typing import Any

import pytest
from placer_world import Clock, RecordingWriter

from tpfabric_scheduler import plan_inputs as plan_inputs_module
from tpfabric_scheduler.capacity import Snapshots
from tpfabric_scheduler.metrics import Metrics
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.store import ClusterStore


@pytest.fixture
def world() -> tuple[ClusterStore, RecordingWriter, GangPlacer, Clock]:
    store = ClusterStore()
    writer = RecordingWriter(store)
    clock = Clock()
    placer = GangPlacer(store, writer, Metrics(), clock=clock, bind_timeout=60)  # type: ignore[arg-type]
    return store, writer, placer, clock


@pytest.fixture
def snapshots(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the placer's snapshot builds (one entry per build)."""
    built: list[int] = []
    real = Snapshots.build

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(Snapshots, "build", counting)
    return built


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the gang of every plan attempt of the placer."""
    made: list[str] = []
    real = plan_inputs_module.plan_gang

    def recording(snapshot: Any, request: Any, **kwargs: Any) -> Any:
        made.append(request.name)
        return real(snapshot, request, **kwargs)

    monkeypatch.setattr(plan_inputs_module, "plan_gang", recording)
    return made
