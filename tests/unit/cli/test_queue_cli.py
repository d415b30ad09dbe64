"""`tpfabric queue`'s pure half: the jobs and Gang records of a namespace and their pods in; the
gangs that wait, in the placer's order, with what each waits for, out."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tpfabric_cli.queue import print_queue, queue_entries, waited
from tpfabric_core.api import JOB_LABEL
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.placement.queue_order import job_key, queue_order
from tpfabric_core.timestamps import parse_rfc3339

NOW = parse_rfc3339("2025-01-02T04:00:00Z") or 0.0


def job(
    name: str, created: str, *, placement: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "kind": "TensorParallelJob",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": created},
        "spec": {"workers": 2, "gpusPerWorker": 8, **spec},
        "status": {"phase": "Waiting", "placement": placement or {}},
    }


def worker(job_name: str, index: int, priority: int = 0) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job_name}-worker-{index}",
            "namespace": "team-a",
            "labels": {JOB_LABEL: job_name},
        },
        "spec": {"priority": priority, "schedulingGates": [{"name": "tpfabric.io/gang"}]},
        "status": {"phase": "Pending"},
    }


WAITING = {
    "state": "Waiting",
    "message": "no leaf domain has 2 nodes with 8 free GPUs",
    "waitingSince": "2025-01-02T03:00:00Z",
}


def test_higher_priority_first_then_the_earlier_arrival_as_the_placer_orders() -> None:
    objects = [
        job("late-high", "2025-01-02T03:30:00Z", placement=WAITING),
        job("early-low", "2025-01-02T03:00:00Z", placement=WAITING),
        job("later-low", "2025-01-02T03:10:00Z", placement=WAITING),
    ]
    pods = [worker("late-high", 0, 1000), worker("early-low", 0), worker("later-low", 0)]
    entries = queue_entries(objects, pods, NOW)
    assert [(e.position, e.name, e.priority) for e in entries] == [
        (1, "late-high", 1000), (2, "early-low", 0), (3, "later-low", 0)
    ]  # fmt: skip
    # the order is the placer's own key, not a copy of it
    keys = sorted(
        (
            queue_order(
                e.priority,
                o["metadata"]["creationTimestamp"],
                job_key("team-a", e.name, gang=False),
            ),
            e.name,
        )
        for e, o in zip(entries, [objects[0], objects[1], objects[2]], strict=True)
    )
    assert [name for _, name in keys] == [e.name for e in entries]
    assert entries[1].waits_for == WAITING["message"]
    assert entries[1].waited_seconds == 3600
    assert entries[1].gpus == 16


def test_planned_and_finished_jobs_do_not_wait_and_suspended_ones_come_last_unnumbered() -> None:
    objects = [
        job("planned", "2025-01-02T03:00:00Z", placement={"state": "Planned"}),
        job("held", "2025-01-02T03:00:00Z", suspend=True),
        job("fresh", "2025-01-02T03:59:00Z"),
    ]
    done = job("done", "2025-01-02T03:00:00Z")
    done["status"]["phase"] = "Succeeded"
    entries = queue_entries([*objects, done], [], NOW)
    assert [(e.position, e.name, e.state) for e in entries] == [
        (1, "fresh", "Pending"), (None, "held", "Suspended")
    ]  # fmt: skip
    assert entries[0].waits_for == "its worker pods are not created yet"
    assert entries[0].waited_seconds == 60


def test_a_gang_short_of_pods_says_how_many_exist_and_which_ranks_are_missing() -> None:
    gang = {
        "kind": "Gang",
        "metadata": {
            "name": "vllm-0",
            "namespace": "team-a",
            "creationTimestamp": "2025-01-02T03:50:00Z",
        },
        "spec": {
            "owner": {"kind": "LeaderWorkerSet", "name": "vllm"},
            "workers": 4,
            "gpusPerWorker": 8,
        },
        "status": {"phase": "Pending", "ready": "0/4"},
    }
    pods = []
    for rank in (0, 1, 3):
        pod = worker("x", rank)
        pod["metadata"]["labels"] = {GANG_LABEL: "vllm-0", RANK_LABEL: str(rank)}
        pods.append(pod)
    (entry,) = queue_entries([gang], pods, NOW)
    assert (entry.kind, entry.state, entry.gpus) == ("Gang", "Pending", 32)
    assert entry.waits_for.startswith("3 of 4 pods exist; missing rank 2: the gang waits until ")
    assert "LeaderWorkerSet vllm" in entry.waits_for


def test_the_table_shows_position_age_and_words() -> None:
    entries = queue_entries([job("a", "2025-01-02T03:00:00Z", placement=WAITING)], [], NOW)
    buffer = io.StringIO()
    print_queue(entries, Console(file=buffer, width=200, no_color=True), namespaces=False)
    line = buffer.getvalue().splitlines()[1]
    assert line.split()[:7] == ["1", "tpj", "a", "0", "16", "1h", "Waiting"]
    assert WAITING["message"] in line


def test_ages_read_as_kubectl_prints_them() -> None:
    assert [waited(s) for s in (5, 119, 600, 5400, 7200, 11000, 200_000)] == [
        "5s", "119s", "10m", "1h30m", "2h", "3h", "2d7h"
    ]  # fmt: skip
