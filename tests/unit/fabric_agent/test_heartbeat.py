"""The agent's heartbeat (one Lease write per read that succeeded, owned by its Node), the node
read again after a gap, and the probes that restart a hung agent."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tpfabric_core.fabric.agent_heartbeat import AGENT_SILENT_REASON, HEARTBEAT_LABEL
from tpfabric_fabric_agent.__main__ import probes
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.heartbeat import LeaseHeartbeat
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_fabric_agent.memory_node import MemoryNode
from tpfabric_fabric_agent.metrics import AgentMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class MemoryLeases:
    """The two CoordinationV1Api calls of the heartbeat, on leases kept in memory."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.calls: list[str] = []

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.calls.append("create")
        name = body["metadata"]["name"]
        if name in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        self.created.append(copy.deepcopy(body))
        self.leases[name] = body

    def patch_namespaced_lease(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> Any:
        self.calls.append("patch")
        if name not in self.leases:
            raise ApiException(status=404, reason="NotFound")
        self.leases[name]["spec"].update(body["spec"])
        return io.BytesIO(b"{}")


def heartbeat(
    leases: MemoryLeases, clock: Clock, lapses: list[int] | None = None
) -> LeaseHeartbeat:
    return LeaseHeartbeat(
        "gpu-1",
        "agents",
        leases,
        grace_seconds=40,
        node_uid=lambda: "uid-1",
        on_lapse=(lambda: lapses.append(1)) if lapses is not None else None,
        clock=clock,
        wall=lambda: 1_800_000_000.0 + clock.now,
    )


def test_the_first_beat_creates_the_lease_owned_by_the_node_and_later_beats_renew_it() -> None:
    leases, clock = MemoryLeases(), Clock()
    beats = heartbeat(leases, clock)
    beats.beat()
    lease = leases.leases["fabric-agent-gpu-1"]
    assert lease["metadata"]["labels"] == {HEARTBEAT_LABEL: "fabric-agent"}
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "uid-1"}
    ]
    assert lease["spec"]["leaseDurationSeconds"] == 40
    first = lease["spec"]["renewTime"]
    clock.now += 10
    beats.beat()
    assert lease["spec"]["renewTime"] != first
    assert leases.calls == ["create", "patch", "patch"], "one write per beat after the first"
    assert "renewTime" not in leases.created[0]["spec"], (
        "created without a time: the client's models would rewrite a whole second's MicroTime"
    )


def test_a_lease_left_by_an_earlier_run_or_deleted_meanwhile_is_taken_over() -> None:
    leases, clock = MemoryLeases(), Clock()
    leases.leases["fabric-agent-gpu-1"] = {"metadata": {}, "spec": {"leaseDurationSeconds": 9}}
    beats = heartbeat(leases, clock)
    beats.beat()
    assert leases.calls == ["create", "patch"]
    assert leases.leases["fabric-agent-gpu-1"]["spec"]["leaseDurationSeconds"] == 40
    del leases.leases["fabric-agent-gpu-1"]
    beats.beat()
    assert leases.calls[-3:] == ["patch", "create", "patch"]
    assert "fabric-agent-gpu-1" in leases.leases


def test_a_beat_after_a_gap_has_the_node_read_again_before_the_next_publish() -> None:
    leases, clock, lapses = MemoryLeases(), Clock(), []
    beats = heartbeat(leases, clock, lapses)
    for _ in range(5):
        beats.beat()
        clock.now += 10
    assert lapses == []
    clock.now += 60  # the agent hung: the placer may have said its node silent meanwhile
    beats.beat()
    assert lapses == [1]


def test_an_agent_says_its_own_condition_again_after_the_placer_said_it_silent(
    tmp_path: Path,
) -> None:
    FakeSysfs(tmp_path, hcas=2, ports=1, gpus=2)
    core, clock, leases = MemoryNode(), Clock(), MemoryLeases()
    publisher = NodePublisher("gpu-1", core, resync_seconds=300, clock=clock)
    beats = LeaseHeartbeat(
        "gpu-1",
        "agents",
        leases,
        grace_seconds=40,
        node_uid=publisher.node_uid,
        on_lapse=publisher.expire,
        clock=clock,
    )
    agent = FabricAgent(
        AgentSettings(node="gpu-1", sys_root=tmp_path), publisher, clock=clock, heartbeat=beats.beat
    )
    agent.step()
    assert core.conditions[0]["status"] == "True"
    clock.now += 90  # hung; meanwhile the placer marks the node
    core.conditions = [
        {"type": "FabricHealthy", "status": "Unknown", "reason": AGENT_SILENT_REASON, "message": ""}
    ]
    agent.step()  # the beat after the gap expires what the publisher knew of its node
    clock.now += 10
    agent.step()
    assert core.conditions[0]["status"] == "True"


def test_a_failed_read_renews_no_heartbeat_and_the_last_read_time_stays(tmp_path: Path) -> None:
    FakeSysfs(tmp_path, hcas=2, ports=1, gpus=2)
    beats: list[int] = []
    metrics = AgentMetrics()

    class Failing:
        def publish(self, publication: object) -> int:
            raise ApiException(status=500, reason="boom")

    agent = FabricAgent(
        AgentSettings(node="gpu-1", sys_root=tmp_path),
        Failing(),
        metrics,
        heartbeat=lambda: beats.append(1),
    )
    with pytest.raises(ApiException):
        agent.step()
    assert beats == []
    assert agent.succeeded_at is None


def test_a_successful_read_sets_the_last_read_time_of_the_node(tmp_path: Path) -> None:
    FakeSysfs(tmp_path, hcas=2, ports=1, gpus=2)
    metrics = AgentMetrics()

    class Quiet:
        def publish(self, publication: object) -> int:
            return 0

    FabricAgent(AgentSettings(node="gpu-1", sys_root=tmp_path), Quiet(), metrics).step()
    value = metrics.registry.get_sample_value(
        "tpfabric_fabric_agent_last_read_timestamp_seconds", {"node": "gpu-1"}
    )
    assert value is not None
    assert value > 1_700_000_000


def test_the_probes_fail_a_loop_that_stopped_turning_and_an_agent_that_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeSysfs(tmp_path, hcas=2, ports=1, gpus=2)

    class Quiet:
        def publish(self, publication: object) -> int:
            return 0

    now = [1000.0]
    monkeypatch.setattr("tpfabric_fabric_agent.__main__.time.monotonic", lambda: now[0])
    agent = FabricAgent(
        AgentSettings(node="gpu-1", sys_root=tmp_path), Quiet(), clock=lambda: now[0]
    )
    checks = probes(agent, grace_seconds=40)
    assert checks["/healthz"]() == (True, "starting")
    assert checks["/readyz"]()[0] is False
    agent.turned_at = now[0]
    agent.step()
    assert checks["/healthz"]() == (True, "ok")
    assert checks["/readyz"]() == (True, "ok")
    now[0] += 41  # the loop hangs in a read
    assert checks["/healthz"]() == (False, "the agent loop has not turned for 41 s")
    assert checks["/readyz"]() == (False, "no read of the node's links has succeeded for 41 s")
