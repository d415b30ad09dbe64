"""The reconciler's own rules: failure reasons read from pod status, one reconcile per job."""

from __future__ import annotations

from typing import Any

from tpfabric_operator.handlers import _Serial, worker_of


def failed_pod(**status: Any) -> tuple[str, Any]:
    labels = {
        "tpfabric.io/job-name": "j",
        "tpfabric.io/worker-index": "1",
        "tpfabric.io/attempt": "2",
    }
    meta = {"ownerReferences": [{"kind": "TensorParallelJob", "uid": "u"}]}
    return worker_of(
        "j-worker-1-a2", labels, meta, {"nodeName": "n"}, {"phase": "Failed", **status}
    )


def terminated(name: str, code: int, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def test_an_oom_kill_is_the_reason_with_its_exit_code() -> None:
    owner, pod = failed_pod(containerStatuses=[terminated("trainer", 137, "OOMKilled")])
    assert (owner, pod.index, pod.attempt) == ("u", 1, 2)
    assert (pod.reason, pod.exit_code) == ("OOMKilled", 137)
    assert pod.message == "container trainer exited 137 (OOMKilled)"


def test_an_init_container_failure_is_found_though_no_main_container_ran() -> None:
    _, pod = failed_pod(initContainerStatuses=[terminated("rdma-init", 3, "Error")])
    assert (pod.reason, pod.exit_code) == ("InitContainerFailed", 3)
    assert "rdma-init exited 3" in pod.message


def test_an_eviction_without_container_states_keeps_the_pods_reason() -> None:
    _, pod = failed_pod(reason="Evicted", message="The node was low on memory.")
    assert (pod.reason, pod.message, pod.exit_code) == (
        "Evicted",
        "The node was low on memory.",
        None,
    )


def test_one_reconcile_at_a_time_and_never_on_a_body_older_than_our_patch() -> None:
    serial = _Serial()
    assert serial.enter("uid", "10")
    assert not serial.enter("uid", "10")  # the timer while the change handler runs
    serial.leave("uid", "10", patched=True)
    assert not serial.enter("uid", "10")  # our patch has not come back yet
    assert serial.enter("uid", "11")
    serial.leave("uid", "11", patched=False)
    assert serial.enter("uid", "11")


def test_the_same_warning_is_posted_once_per_interval(monkeypatch: Any) -> None:
    from types import SimpleNamespace  # noqa: PLC0415

    from tpfabric_operator import handlers  # noqa: PLC0415

    posted: list[str] = []
    monkeypatch.setattr(handlers.kopf, "warn", lambda body, reason, message: posted.append(reason))
    body = SimpleNamespace(meta={"uid": "rate-limited"})
    for _ in range(5):
        handlers._warn(body, "InvalidSpec", "spec.workers: too many")  # type: ignore[arg-type]
    handlers._warn(body, "InvalidSpec", "spec.workers: other")  # type: ignore[arg-type]
    assert posted == ["InvalidSpec", "InvalidSpec"]
