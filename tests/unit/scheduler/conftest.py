"""The placer's test world as a fixture (see placer_world.py)."""

from __future__ import annotations

import pytest
from placer_world import Clock, RecordingWriter

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
