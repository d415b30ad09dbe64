"""The fabric agent on the local control plane: live link health from sysfs to placement.

A small rail-optimized fabric (2 leaves x 4 kwok nodes, 4 rails). Every node has its own agent
loop (a thread with its own API client, as its own DaemonSet pod would have) reading its own fake
``/sys`` tree in the kernel's layout, which the tests mutate. The real extender/placer, the
kube-scheduler and the operator (its own process) react to what the agents publish.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import watch as kube_watch
from test_explain import explain
from test_operator import Tpj, small_job

from control_plane_fixtures import two_leaves_of_four, wait_for
from tpfabric_core import labels
from tpfabric_core.api import ATTEMPT_LABEL, GROUP, JOB_LABEL, PLURAL, VERSION
from tpfabric_core.fabric.link_judge import LinkJudgeConfig
from tpfabric_core.fabric.link_publish import CONDITION_TYPE, DETAIL_ANNOTATION, parse_detail
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_fabric_agent.agent import AgentSettings, FabricAgent
from tpfabric_fabric_agent.fake_sysfs import FakeSysfs
from tpfabric_fabric_agent.kube import NodePublisher
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.nodes import apply_fake_nodes, delete_nodes, wait_ready
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator

INTERVAL = 1.0
WINDOW = 4.0
RECOVER = 3.0
FABRIC = two_leaves_of_four("agents", "fa", rails=4)
FULL_RATE = "400 Gb/sec (4X NDR)"


@dataclass
class NodeAgent:
    sysfs: FakeSysfs
    agent: FabricAgent
    publisher: NodePublisher
    api: client.ApiClient


class Fleet:
    """One agent loop per node, and climbing error counters on request."""

    def __init__(self, cluster: LocalCluster, names: list[str], root: Path) -> None:
        self.agents: dict[str, NodeAgent] = {}
        self.stop = threading.Event()
        self._climbing: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        judge = LinkJudgeConfig(window_seconds=WINDOW, recover_seconds=RECOVER)
        for name in names:
            sysfs = FakeSysfs(root / name, hcas=4, ports=1, gpus=2)
            api = api_client(cluster.kubeconfig)
            publisher = NodePublisher(name, client.CoreV1Api(api))
            settings = AgentSettings(
                node=name, sys_root=root / name, interval_seconds=INTERVAL, judge=judge
            )
            self.agents[name] = NodeAgent(sysfs, FabricAgent(settings, publisher), publisher, api)
        self.threads = [
            threading.Thread(target=a.agent.run, args=(self.stop,), name=f"agent-{n}", daemon=True)
            for n, a in self.agents.items()
        ]
        self.threads.append(threading.Thread(target=self._climb, name="climber", daemon=True))
        for thread in self.threads:
            thread.start()

    def _climb(self) -> None:
        while not self.stop.wait(INTERVAL / 2):
            with self._lock:
                climbing = dict(self._climbing)
            for (node, hca), per_interval in climbing.items():
                self.agents[node].sysfs.add_errors(hca, 1, "symbol_error", per_interval // 2)

    def climb(self, node: str, hca: str, per_interval: int = 200) -> None:
        """Make ``hca`` port 1 of ``node`` throw symbol errors until :meth:`calm`."""
        with self._lock:
            self._climbing[(node, hca)] = per_interval

    def calm(self) -> None:
        """Stop every climbing counter and bring every port up."""
        with self._lock:
            self._climbing.clear()
        for each in self.agents.values():
            for hca in each.sysfs.hcas:
                each.sysfs.set_up(hca, 1, up=True)
                each.sysfs.set_rate(hca, 1, FULL_RATE)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        for each in self.agents.values():
            each.api.close()


@pytest.fixture(scope="module")
def fleet(
    tpfabric_scheduling: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    with api_client(tpfabric_scheduling.kubeconfig) as api:
        names = apply_fake_nodes(api, parse_fabric_description(FABRIC))
        wait_ready(api, names)
        fleet = Fleet(tpfabric_scheduling, names, tmp_path_factory.mktemp("sysfs"))
        start_operator(tpfabric_scheduling)
        try:
            yield fleet
        finally:
            tpfabric_scheduling.stop_component(OPERATOR)
            fleet.close()
            delete_nodes(api, names)


def node_health(api: client.ApiClient, name: str) -> tuple[str, str, str, str]:
    """Return (label, condition status, reason, message) of a node as the API has them."""
    node = client.CoreV1Api(api).read_node(name)
    condition = next((c for c in node.status.conditions or [] if c.type == CONDITION_TYPE), None)
    return (
        (node.metadata.labels or {}).get(labels.HEALTH, ""),
        condition.status if condition else "",
        condition.reason if condition else "",
        condition.message if condition else "",
    )


@pytest.fixture
def calm_fabric(api: client.ApiClient, fleet: Fleet) -> Iterator[Fleet]:
    """Return the fleet with every node ok; calm it again (and wait for ok) afterwards."""
    fleet.calm()
    wait_all_ok(api, fleet)
    yield fleet
    fleet.calm()
    wait_all_ok(api, fleet)


def wait_all_ok(api: client.ApiClient, fleet: Fleet) -> None:
    wait_for(
        lambda: all(node_health(api, n)[:2] == ("ok", "True") for n in fleet.agents),
        timeout=WINDOW + RECOVER + 20,
        interval=0.3,
        what="every node FabricHealthy=True and labelled ok",
    )


def wait_degraded(api: client.ApiClient, name: str, timeout: float) -> tuple[str, str, str, str]:
    health: tuple[str, str, str, str] = wait_for(
        lambda: (h := node_health(api, name))[:2] == ("degraded", "False") and h,
        timeout=timeout,
        interval=0.1,
        what=f"{name} FabricHealthy=False and labelled degraded",
    )
    return health


def test_every_node_reports_healthy_and_a_quiet_fabric_costs_no_writes(
    api: client.ApiClient, calm_fabric: Fleet
) -> None:
    for name in calm_fabric.agents:
        node = client.CoreV1Api(api).read_node(name)
        condition = next(c for c in node.status.conditions if c.type == CONDITION_TYPE)
        assert (condition.status, condition.reason) == ("True", "LinksHealthy")
        assert node.metadata.labels[labels.HEALTH] == "ok"
        rails = parse_detail(node.metadata.annotations[DETAIL_ANNOTATION])
        assert [(r.rail, r.hca, r.state) for r in rails] == [
            (i, f"mlx5_{i}", "ok") for i in range(4)
        ]
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    writes = {n: a.publisher.writes for n, a in calm_fabric.agents.items()}
    time.sleep(5 * INTERVAL)
    assert {n: a.publisher.writes for n, a in calm_fabric.agents.items()} == writes


def test_climbing_symbol_errors_flip_the_node_within_two_intervals_and_clear_after_hysteresis(
    api: client.ApiClient, calm_fabric: Fleet
) -> None:
    target = "fa-l1-02"
    started = time.monotonic()
    calm_fabric.climb(target, "mlx5_2")
    _, _, reason, message = wait_degraded(api, target, timeout=2 * INTERVAL + 1.0)
    assert time.monotonic() - started <= 2 * INTERVAL + 1.0
    assert reason == "LinkDegraded"
    assert message.startswith("symbol errors ")
    assert message.endswith("/h on mlx5_2 port 1 (limit 120/h, IBTA)")
    others = [n for n in calm_fabric.agents if n != target]
    assert all(node_health(api, n)[0] == "ok" for n in others)
    detail = parse_detail(
        client.CoreV1Api(api).read_node(target).metadata.annotations[DETAIL_ANNOTATION]
    )
    assert [(r.rail, r.state) for r in detail if r.state != "ok"] == [(2, "degraded")]

    time.sleep(3 * INTERVAL)  # still climbing: the node stays degraded, with the same words
    assert node_health(api, target)[3] == message
    calm_fabric.calm()
    calmed = time.monotonic()
    wait_for(
        lambda: node_health(api, target)[:2] == ("ok", "True"),
        timeout=WINDOW + RECOVER + 4 * INTERVAL,
        interval=0.2,
        what=f"{target} ok again after the hysteresis",
    )
    assert time.monotonic() - calmed >= RECOVER  # not before the hysteresis


@pytest.fixture
def tpj(
    api: client.ApiClient, tpfabric_scheduling: LocalCluster, calm_fabric: Fleet, namespace: str
) -> Iterator[Tpj]:
    yield Tpj(api, tpfabric_scheduling, namespace)
    custom = client.CustomObjectsApi(api)
    for job in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"]
        )
    wait_for(
        lambda: not client.CoreV1Api(api).list_namespaced_pod(namespace).items,
        timeout=60,
        what="the test's pods to be garbage-collected",
    )


def create_job(jobs: Tpj, name: str, workers: int, **topology: Any) -> None:
    manifest = small_job(name, workers)
    manifest["spec"]["topology"].update(topology)
    jobs.custom.create_namespaced_custom_object(GROUP, VERSION, jobs.namespace, PLURAL, manifest)


def events(api: client.ApiClient, namespace: str, reason: str) -> list[client.CoreV1Event]:
    found = client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [e for e in found if e.reason == reason]


def test_a_running_job_on_a_node_turning_degraded_gets_degraded_naming_the_rank(
    api: client.ApiClient, calm_fabric: Fleet, tpj: Tpj
) -> None:
    create_job(tpj, "trainer", 4)
    status = tpj.wait_phase("trainer", "Running")
    nodes = status["placement"]["nodes"]
    calm_fabric.climb(nodes[1], "mlx5_3")

    degraded = wait_for(
        lambda: (c := tpj.condition("trainer", "Degraded")).get("status") == "True" and c,
        timeout=15,
        what="the job's Degraded condition",
    )
    assert degraded["reason"] == "DegradedLink"
    assert degraded["message"].startswith(f"straggler risk: rank 1 on node {nodes[1]}: ")
    assert "on mlx5_3 port 1" in degraded["message"]
    warned = wait_for(lambda: events(api, tpj.namespace, "DegradedLink"), what="Event")
    assert warned[0].type == "Warning"
    assert f"rank 1 on node {nodes[1]}" in warned[0].message
    assert tpj.status("trainer")["phase"] == "Running"  # report only: the job keeps running

    calm_fabric.calm()
    wait_for(
        lambda: tpj.condition("trainer", "Degraded").get("status") == "False",
        timeout=WINDOW + RECOVER + 15,
        what="Degraded False once the node is ok again",
    )


def test_the_placer_avoids_a_degraded_node_live_and_uses_it_again_once_ok(
    api: client.ApiClient, calm_fabric: Fleet, tpj: Tpj
) -> None:
    create_job(tpj, "first", 4)
    first = tpj.wait_phase("first", "Running")["placement"]["nodes"]
    free = sorted(n for n in calm_fabric.agents if n not in first)
    assert len(free) == 4  # the other leaf
    sick = free[0]
    calm_fabric.climb(sick, "mlx5_0")
    wait_degraded(api, sick, timeout=2 * INTERVAL + 1.0)

    create_job(tpj, "second", 4, mode="required", level="leaf")
    waiting = wait_for(
        lambda: (p := tpj.status("second").get("placement") or {}).get("state") == "Waiting" and p,
        timeout=20,
        what="the second job Waiting (3 healthy nodes left in the free leaf)",
    )
    assert "degraded" in waiting["message"], waiting
    time.sleep(2 * INTERVAL)
    assert all(p.spec.node_name is None for p in tpj.pods("second"))

    calm_fabric.calm()
    status = tpj.wait_phase("second", "Running", timeout=WINDOW + RECOVER + 30)
    assert sorted(status["placement"]["nodes"]) == free


def test_restart_elsewhere_moves_the_rank_off_the_degraded_node(
    api: client.ApiClient, calm_fabric: Fleet, tpj: Tpj
) -> None:
    create_job(tpj, "mover", 2, onDegradedLink="restart-elsewhere")
    before = tpj.wait_phase("mover", "Running")["placement"]["nodes"]
    calm_fabric.climb(before[0], "mlx5_1")

    def moved() -> list[str] | None:
        pods = tpj.pods("mover")
        nodes = [p.spec.node_name for p in pods if p.status.phase == "Running"]
        return nodes if len(nodes) == 2 and before[0] not in nodes else None

    after = wait_for(moved, timeout=60, what="the gang running again off the degraded node")
    assert before[0] not in after
    status = tpj.status("mover")
    assert status["restarts"] == 0  # a move is not charged
    assert status["lastFailure"]["reason"] == "DegradedLink"


def test_restart_when_it_pays_weighs_the_measured_rate_against_the_restart(
    api: client.ApiClient, calm_fabric: Fleet, tpj: Tpj
) -> None:
    """The operator's restart-when-it-pays, the rule the simulator's tpfabric-weighed
    measures. One rail of each job's rank-0 node retrains to 2X (half its rate, which the agent
    publishes as the rail's bandwidth): over the default 4 h expected repair, a job spending 5%
    of a step across nodes loses 11.4 min running slow, less than its restart's 25 min (10 min
    restore, half of a 30 min checkpoint interval), and keeps running; one spending 50% loses
    80 min and moves."""
    cost = {"checkpointIntervalSeconds": 1800, "restoreSeconds": 600}
    for name, share in (("keeper", 0.05), ("payer", 0.5)):
        create_job(
            tpj,
            name,
            2,
            onDegradedLink="restart-when-it-pays",
            restartCost={**cost, "interNodeCommShare": share},
        )
    kept = tpj.wait_phase("keeper", "Running")["placement"]["nodes"]
    paid = tpj.wait_phase("payer", "Running")["placement"]["nodes"]
    for node in (kept[0], paid[0]):
        calm_fabric.agents[node].sysfs.set_rate("mlx5_2", 1, "200 Gb/sec (2X NDR)")
    degraded = wait_for(
        lambda: (c := tpj.condition("keeper", "Degraded")).get("status") == "True" and c,
        timeout=15,
        what="the keeper's Degraded condition",
    )
    assert degraded["message"].startswith(f"straggler risk: rank 0 on node {kept[0]}: rate 200")
    assert degraded["message"].endswith(
        "; kept running: running slow (steps 5.0% slower) is expected to lose 11.4 min, a "
        "restart costs 25.0 min (10.0 min restore + 15.0 min redone since the last checkpoint)"
    )
    shown = explain(tpj.cluster, "keeper", "-n", tpj.namespace, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["degraded"] == degraded["message"]

    def moved() -> list[str] | None:
        pods = tpj.pods("payer")
        nodes = [p.spec.node_name for p in pods if p.status.phase == "Running"]
        return nodes if len(nodes) == 2 and paid[0] not in nodes else None

    wait_for(moved, timeout=60, what="the payer running again off the slow node")
    failure = tpj.status("payer")["lastFailure"]
    assert failure["reason"] == "DegradedLink"
    assert (
        "restart pays: running slow (steps 50.0% slower) is expected to lose 80.0 min"
        in (failure["message"])
    )
    assert tpj.status("payer")["restarts"] == 0  # a move is not charged
    # the keeper stays where it was, on the slow node, and was never restarted
    keeper = tpj.status("keeper")
    assert keeper["placement"]["nodes"] == kept
    assert keeper.get("attempt", 0) == 0
    assert "lastFailure" not in keeper
    # the placer found room for it anyway, faster than the link the agent measured at half rate
    room = wait_for(
        lambda: tpj.status("keeper")["placement"].get("healthyRoom"),
        timeout=15,
        what="the placer's answer for the keeper",
    )
    assert room["found"] is True, room
    assert room["degradedNodes"] == [kept[0]]
    assert "where it runs, its degraded links keeping 0.5 of their rate" in room["message"], room


def test_a_job_is_restarted_off_a_degraded_node_only_once_healthy_room_is_free(
    api: client.ApiClient, calm_fabric: Fleet, tpj: Tpj
) -> None:
    """With the other leaf full, a gang asking to restart elsewhere has nowhere healthy to go:
    the placer says so (``status.placement.healthyRoom``) and the operator keeps it running on
    the degraded node, where it used to restart it every backoff, uncharged, landing it back
    on the node (``avoidDegraded: penalize``) or leaving it waiting (``avoid``). Once the other
    leaf frees, the placer finds room and the gang moves there, once; the node it left stays
    in ``status.movedOffNodes`` until it heals."""
    create_job(tpj, "filler", 4)
    tpj.wait_phase("filler", "Running")
    create_job(tpj, "cramped", 4, avoidDegraded="penalize", onDegradedLink="restart-elsewhere")
    nodes = tpj.wait_phase("cramped", "Running")["placement"]["nodes"]
    sick = nodes[1]
    calm_fabric.climb(sick, "mlx5_1")

    words = wait_for(
        lambda: (
            "no healthy room" in (m := tpj.condition("cramped", "Degraded").get("message", ""))
            and m
        ),
        timeout=20,
        what="the Degraded condition saying there is no healthy room",
    )
    assert words.startswith(f"straggler risk: rank 1 on node {sick}: ")
    assert "; kept running: no healthy room for the whole gang: " in words
    room = tpj.status("cramped")["placement"]["healthyRoom"]
    assert (room["found"], room["degradedNodes"]) == (False, [sick])
    time.sleep(15)  # the backoff is 10 s: it restarted at least once in that time before
    status = tpj.status("cramped")
    assert (status.get("attempt", 0), status["phase"]) == (0, "Running"), status
    assert "lastFailure" not in status

    tpj.custom.delete_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, "filler")

    def moved() -> list[str] | None:
        pods = tpj.pods("cramped")
        running = [p.spec.node_name for p in pods if p.status.phase == "Running"]
        return running if len(running) == 4 and sick not in running else None

    after = wait_for(moved, timeout=90, what="the gang moved into the freed leaf")
    assert not set(after) & set(nodes)
    status = tpj.status("cramped")
    assert status["attempt"] == 1
    assert status["restarts"] == 0  # a move is not charged
    assert status["lastFailure"]["reason"] == "DegradedLink"
    assert status["movedOffNodes"] == [sick]
    assert status["placement"].get("healthyRoom") is None  # a new plan: no answer left

    calm_fabric.calm()
    wait_for(
        lambda: "movedOffNodes" not in tpj.status("cramped"),
        timeout=WINDOW + RECOVER + 15,
        what="the healed node forgotten",
    )
    assert tpj.status("cramped")["attempt"] == 1


def test_a_move_is_written_down_before_its_workers_stop_and_survives_an_operator_crash(
    calm_fabric: Fleet, tpj: Tpj
) -> None:
    """The operator writes a move down (``attempt``, ``restartingWorkers``) before it stops a
    worker: stopped first, an operator that died before writing it down found the workers lost
    for no reason it could see and charged the move (with ``maxRestarts: 0``, it failed the
    job). Here it is killed (SIGKILL) the moment the move shows in the status; the next operator
    finishes the move, uncharged, and keeps ``movedOffNodes``. The order is read off the API
    server's resourceVersions, which one etcd orders across objects."""
    manifest = small_job("steady", 4)
    manifest["spec"]["topology"]["onDegradedLink"] = "restart-elsewhere"
    manifest["spec"]["failurePolicy"] = {"maxRestarts": 0, "backoffSeconds": 1}
    tpj.custom.create_namespaced_custom_object(GROUP, VERSION, tpj.namespace, PLURAL, manifest)
    nodes = tpj.wait_phase("steady", "Running")["placement"]["nodes"]
    sick = nodes[2]
    version = tpj.core.list_namespaced_pod(tpj.namespace).metadata.resource_version
    recorded: list[int] = []  # where the job's status first shows the move
    stopped: list[int] = []  # where a worker of attempt 0 first carries a deletionTimestamp
    job_watch, pod_watch = kube_watch.Watch(), kube_watch.Watch()

    def the_record() -> None:
        for event in job_watch.stream(
            tpj.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            tpj.namespace,
            PLURAL,
            field_selector="metadata.name=steady",
            resource_version=version,
            timeout_seconds=60,
        ):
            job = event["object"]
            if (job.get("status") or {}).get("restartingWorkers"):
                tpj.cluster.kill_component(OPERATOR)  # at once: before it stops the workers
                recorded.append(int(job["metadata"]["resourceVersion"]))
                return

    def the_stop() -> None:
        for event in pod_watch.stream(
            tpj.core.list_namespaced_pod,
            tpj.namespace,
            label_selector=f"{JOB_LABEL}=steady",
            resource_version=version,
            timeout_seconds=90,
        ):
            meta = event["object"].metadata
            if meta.deletion_timestamp and (meta.labels or {}).get(ATTEMPT_LABEL, "0") == "0":
                stopped.append(int(meta.resource_version))
                return

    watchers = [threading.Thread(target=f, daemon=True) for f in (the_record, the_stop)]
    for watcher in watchers:
        watcher.start()
    try:
        calm_fabric.climb(sick, "mlx5_0")
        watchers[0].join(60)
        assert recorded, "the move never showed in the job's status"
        start_operator(tpj.cluster)  # takes the Lease once the dead one's expires
        watchers[1].join(90)
    finally:
        job_watch.stop()
        pod_watch.stop()
        state = tpj.cluster.state()
        if state is not None and not state.components[OPERATOR].alive():
            start_operator(tpj.cluster)  # the module's operator, for the tests after this one
    assert stopped, "no worker of the first attempt was stopped"
    assert recorded[0] < stopped[0], "a worker was stopped before the move was written down"

    def moved() -> list[str] | None:
        pods = tpj.pods("steady")
        running = [p.spec.node_name for p in pods if p.status.phase == "Running"]
        return running if len(running) == 4 and sick not in running else None

    wait_for(moved, timeout=90, what="the gang running off the degraded node")
    status = tpj.wait_phase("steady", "Running")
    assert (status["attempt"], status["restarts"]) == (1, 0)  # the move, not a loss: uncharged
    assert status["lastFailure"]["reason"] == "DegradedLink"
    assert status["movedOffNodes"] == [sick]


def test_three_nodes_of_one_rail_switch_degrading_report_the_switch(
    api: client.ApiClient, calm_fabric: Fleet
) -> None:
    sick = ["fa-l2-01", "fa-l2-02", "fa-l2-03"]
    for name in sick[:2]:
        calm_fabric.climb(name, "mlx5_1")
    for name in sick[:2]:
        wait_degraded(api, name, timeout=2 * INTERVAL + 1.0)
    time.sleep(2 * INTERVAL)
    assert not [
        e for e in events(api, "default", "SuspectRailSwitch") if "fa-leaf2-rail1" in e.message
    ], "two nodes are not enough to blame the switch"
    calm_fabric.climb(sick[2], "mlx5_1")

    def suspect_events() -> list[client.CoreV1Event]:
        return [
            e
            for e in events(api, "default", "SuspectRailSwitch")
            if "rail switch fa-leaf2-rail1 suspect" in e.message
        ]

    # kopf posts the three Events (one per node) in the background: wait for all of them
    reported = wait_for(
        lambda: len(found := suspect_events()) >= 3 and found,
        timeout=15,
        what="the SuspectRailSwitch Event on each of the three nodes",
    )
    assert {e.involved_object.name for e in reported} == set(sick)
    assert "3 nodes degraded on rail 1" in reported[0].message
