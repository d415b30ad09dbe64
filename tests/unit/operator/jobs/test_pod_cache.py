"""The operator's pod view: which job a pod counts for, as a worker or as a kept failure."""

from __future__ import annotations

from typing import Any

import orjson

from tpfabric_operator.jobs.children import (
    ATTEMPT_LABEL,
    FAILED_WORKER_LABEL,
    JOB_LABEL,
    WORKER_INDEX_LABEL,
)
from tpfabric_operator.jobs.job_state import WorkerPod
from tpfabric_operator.jobs.pod_cache import PodCache, entry_of, keyed_entry, shows_at_once


def pod(
    name: str, labels: dict[str, str], phase: str = "Running", uid: str = "u1"
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "labels": labels,
            "ownerReferences": [{"kind": "TensorParallelJob", "uid": uid}],
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def worker(name: str, index: int, attempt: int = 0) -> dict[str, Any]:
    return pod(name, {JOB_LABEL: "j", WORKER_INDEX_LABEL: str(index), ATTEMPT_LABEL: str(attempt)})


def test_a_pod_without_job_labels_is_no_ones_worker() -> None:
    assert entry_of(pod("other", {ATTEMPT_LABEL: "0"})) is None


def test_a_worker_kept_as_failed_moves_from_the_workers_to_the_kept_pods() -> None:
    cache = PodCache(core=None)  # type: ignore[arg-type]  # no API calls in this test
    cache._replace([keyed_entry(worker("j-worker-0", 0)), keyed_entry(worker("j-worker-1", 1))])
    assert sorted(w.name for _, w in cache.workers(("ns", "j"))) == ["j-worker-0", "j-worker-1"]
    owner, first = cache.workers(("ns", "j"))[0]
    assert owner == "u1"
    assert first.ready
    assert first.node == "n1"

    kept = pod("j-worker-1", {FAILED_WORKER_LABEL: "j", ATTEMPT_LABEL: "2"}, phase="Failed")
    kept["metadata"]["uid"] = "pod-1"
    # out of the gang: the job's status shows that at once (the kept pod's own label change)
    assert cache._put("ns/j-worker-1", kept) == (("ns", "j"), True)
    assert [w.name for _, w in cache.workers(("ns", "j"))] == ["j-worker-0"]
    assert cache.failed(("ns", "j")) == [("u1", "j-worker-1", 2, "pod-1")]  # deleted by uid

    assert cache._put("ns/j-worker-1", None) == (("ns", "j"), False)  # a kept pod deleted
    assert cache.failed(("ns", "j")) == []
    assert cache._put("ns/j-worker-0", None) == (("ns", "j"), True)  # a worker gone
    assert cache.workers(("ns", "j")) == []
    assert cache._pods.keys == {}  # nothing left behind for a job that has no pods
    assert cache._put("ns/never-seen", None) == (None, False)


class _Response:
    """The body of a watch as urllib3 hands it over: chunks that split lines anywhere."""

    def __init__(self, body: bytes, size: int) -> None:
        self.chunks = [body[i : i + size] for i in range(0, len(body), size)]
        self.released = False

    def stream(self, *_: Any, **__: Any) -> Any:
        return iter(self.chunks)

    def release_conn(self) -> None:
        self.released = True


class _Core:
    def __init__(self, response: _Response) -> None:
        self.response = response

    def list_pod_for_all_namespaces(self, **_: Any) -> _Response:
        return self.response


def test_watch_events_split_across_chunks_are_applied_in_order() -> None:
    events = [
        {"type": "ADDED", "object": worker("j-worker-0", 0)},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
        {"type": "DELETED", "object": worker("j-worker-0", 0)},
        {"type": "ADDED", "object": worker("j-worker-0-a1", 0, attempt=1)},
    ]
    events[3]["object"]["metadata"]["resourceVersion"] = "9"
    body = b"".join(orjson.dumps(e) + b"\n" for e in events)
    response = _Response(body, size=37)
    changed: list[tuple[str, str]] = []
    cache = PodCache(_Core(response), on_change=changed.append)  # type: ignore[arg-type]
    assert cache._watch_from("1") == "9"
    assert [w.name for _, w in cache.workers(("ns", "j"))] == ["j-worker-0-a1"]
    # the deletion only: a worker created (twice) is its own reconcile's doing, and a bookmark
    # is no change
    assert changed == [("ns", "j")]
    assert response.released


def _w(phase: str = "Running", ready: bool = True, deleting: bool = False) -> WorkerPod:
    return WorkerPod("w", 0, phase, ready, "n1", deleting=deleting)


def test_what_a_jobs_status_shows_at_once_and_what_waits_for_its_tick() -> None:
    pending, running, ready = _w("Pending", False), _w(ready=False), _w()
    # a worker created, scheduled or started: the tick reports it
    assert not shows_at_once(None, pending, [])
    assert not shows_at_once(pending, running, [])
    # ready, but another worker is not yet: only the count changes, the tick reports it
    assert not shows_at_once(running, ready, [ready, running])
    # the last one ready (a worker that finished first counts, one being deleted does not
    # hold the job back): the job runs now
    assert shows_at_once(running, ready, [ready, _w("Succeeded", False)])
    assert shows_at_once(running, ready, [ready, _w(ready=False, deleting=True)])
    assert not shows_at_once(ready, ready, [ready])  # no change
    # a loss or an end: charged or recorded now
    assert shows_at_once(running, _w("Failed", False), [ready])
    assert shows_at_once(ready, _w("Succeeded", False), [ready])
    assert shows_at_once(ready, _w(deleting=True), [ready])
    assert not shows_at_once(_w(deleting=True), _w(ready=False, deleting=True), [ready])
    assert shows_at_once(_w(deleting=True), None, [ready])  # gone: the next attempt may start
    assert not shows_at_once(_w("Failed", False), _w("Failed", False), [])
