"""The agent's loop: every interval read the node's sysfs, judge it, publish what changed.

One :meth:`FabricAgent.step` is a read of ``ports x (4 + counters)`` small files plus the PCIe
link files, one :class:`~tpfabric_core.fabric.link_judge.LinkJudge` observation, one
:class:`~tpfabric_core.fabric.link_timeline.TimelineRecorder` observation (the bursts the node's
``topology.tpfabric.io/link-timeline`` annotation keeps for ``tpfabric diagnose``), on a RoCE
fabric whose profile declares a lossless priority a read of each port's ECN, trust and PFC
(:mod:`.roce_qos`, judged by :mod:`tpfabric_core.fabric.roce_contract`: the node's
``FabricContractMet`` condition), and API writes only when the publication changed (none on a
quiet fabric). The clocks are injected.

Which ports are judged is decided once, at start, by the rule the RDMA init container pairs GPUs
with (:mod:`tpfabric_rdma_init.compute_rails`): the ports of the NICs on a GPU's PCIe switch,
never a storage/frontend NIC, a BlueField DPU, an SR-IOV VF or the uncabled port of a dual-port
card. Their rails are the fabric's (:func:`numbered_rails`): the node's rail map
(``topology.tpfabric.io/rail-ports``, rail -> port GUID, written from a dump) numbers each port
by its GUID, so the published detail and ``SuspectRailSwitch`` name the leaf the port is cabled
to whatever the device names; without a usable map (absent, malformed, or not covering a judged
port: a log line says which and how to fix it) they are numbered in GPU order. A node
override names the compute NICs by PCI address or node GUID (``--compute-nics``, or
``compute_nics`` per node in the config file); ``--hcas`` names them by device name. The
static parts of the reads (which ports, their netdevs and GUIDs, the PCIe slots' maxima) are
resolved once; an interval lists no folder.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from tpfabric_core.fabric.link_judge import (
    LinkJudge,
    LinkJudgeConfig,
    NodeSample,
    NodeVerdict,
)
from tpfabric_core.fabric.link_publish import FabricPublication, publication_of
from tpfabric_core.fabric.link_timeline import TimelineConfig, TimelineRecorder
from tpfabric_core.fabric.roce_contract import ContractVerdict, judge_contract
from tpfabric_core.fabric_profile import FabricProfile
from tpfabric_core.rail_ports import RAIL_PORTS_ANNOTATION, parse_rail_ports
from tpfabric_fabric_agent.link_read import (
    SysfsNic,
    find_gpus,
    port_netdevs,
    read_gpu_places,
    read_nics,
    read_pcie_links,
    read_ports,
)
from tpfabric_fabric_agent.metrics import AgentMetrics
from tpfabric_fabric_agent.roce_qos import DcbNetlink, PfcReader, read_netdev_qos
from tpfabric_rdma_init.compute_rails import (
    compute_nic_roles,
    matches_override,
    pair_gpus_with_hcas,
    uncabled_ports,
)

__all__ = [
    "AgentSettings",
    "FabricAgent",
    "Publisher",
    "fabric_ports",
    "fabric_rails",
    "numbered_rails",
]

log = logging.getLogger("tpfabric.fabric_agent")


class Publisher(Protocol):
    """Where a publication goes (the node through the API, or a test's list)."""

    def publish(self, publication: FabricPublication) -> int:
        """Publish; return the number of API writes it took."""
        ...


@dataclass(frozen=True)
class AgentSettings:
    """What one agent watches and how often."""

    node: str
    sys_root: Path = Path("/sys")
    interval_seconds: float = 10.0
    #: the fabric HCAs in rail order (rail i is hcas[i]); empty: the compute NICs' ports
    hcas: tuple[str, ...] = ()
    judge: LinkJudgeConfig = field(default_factory=LinkJudgeConfig)
    #: this node's compute NICs by PCI address or node GUID, in rail order (the node override)
    compute_nics: tuple[str, ...] = ()
    #: how much of the link timeline the node's annotation keeps
    timeline: TimelineConfig = field(default_factory=TimelineConfig)
    #: the fabric's contract (the chart's fabric.profile): RoCE's lossless priority checked
    profile: FabricProfile = field(default_factory=FabricProfile)


def fabric_ports(
    sys_root: Path, hcas: tuple[str, ...] = (), compute_nics: tuple[str, ...] = ()
) -> list[tuple[str, int]]:
    """Return the ``(hca, port)`` the agent judges, in rail order.

    ``hcas`` (names): every port of those HCAs, in that order. Else the compute NICs (named by
    ``compute_nics``, or on a GPU's PCIe switch) without their uncabled ports: paired with the
    GPUs as the init container pairs them (GPU order), in ``compute_nics`` order when named, and
    on a node without GPUs in natural order, InfiniBand ones only when there are any.
    """
    nics = read_nics(sys_root)
    if hcas:
        by_name = {nic.name: nic for nic in nics}
        return [
            (name, port.number)
            for name in hcas
            for port in (by_name[name].ports if name in by_name else ())
        ] or [(name, 1) for name in hcas]
    gpus = read_gpu_places(sys_root)
    roles = compute_nic_roles(nics, gpus, compute_nics)
    pool = [nic for nic in nics if roles[nic.name] == "compute"]
    uncabled = uncabled_ports(pool)
    ports = [
        (nic.name, port.number, port.link_layer)
        for nic in pool
        for port in nic.ports
        if (nic.name, port.number) not in {(u.hca, u.port) for u in uncabled}
    ]
    if compute_nics:
        order = {nic.name: compute_nics.index(_named(nic, compute_nics)) for nic in pool}
        return [(h, p) for h, p, _ in sorted(ports, key=lambda i: (order[i[0]], i[1]))]
    if gpus:
        exclude = frozenset(str(port) for port in uncabled)
        pairs = pair_gpus_with_hcas(gpus, pool, roles, exclude)
        return list(dict.fromkeys((pair.hca, pair.port) for pair in pairs))
    infiniband = [(h, p) for h, p, layer in ports if layer == "InfiniBand"]
    return infiniband or [(h, p) for h, p, _ in ports]


def _named(nic: SysfsNic, names: tuple[str, ...]) -> str:
    """Return the entry of ``names`` that names ``nic``."""
    return next(name for name in names if matches_override(nic, (name,)))


def fabric_rails(
    sys_root: Path, hcas: tuple[str, ...] = (), compute_nics: tuple[str, ...] = ()
) -> dict[str, int]:
    """Return ``{hca: rail}`` of the HCAs of :func:`fabric_ports`, in GPU order."""
    names = dict.fromkeys(hca for hca, _ in fabric_ports(sys_root, hcas, compute_nics))
    return {name: rail for rail, name in enumerate(names)}


def numbered_rails(
    ports: list[tuple[str, int]],
    guids: Mapping[tuple[str, int], str | None],
    rail_map: str | None,
    node: str,
) -> tuple[dict[str, int], str | None]:
    """Return ``{hca: rail}`` of the judged ``ports`` and, when the node's rail map could not
    number them, why (naming the node, the annotation and the fix): they are then in GPU order.
    ``guids``: each port's GUID as sysfs shows it."""
    dense = {name: rail for rail, name in enumerate(dict.fromkeys(h for h, _ in ports))}
    fix = "label the node from a dump (tpfabric topology label --ibnetdiscover DUMP --apply)"
    if rail_map is None:
        return dense, (
            f"node {node} has no annotation {RAIL_PORTS_ANNOTATION}: rails numbered in GPU "
            f"order, which may not be the fabric's; {fix}"
        )
    by_rail, problem = parse_rail_ports(rail_map)
    if problem is not None:
        return dense, f"node {node}: {problem}; rails numbered in GPU order meanwhile"
    by_guid = {guid: rail for rail, guid in by_rail.items()}
    rails: dict[str, int] = {}
    for hca, port in ports:
        guid = guids.get((hca, port))
        rail = by_guid.get(guid) if guid is not None else None
        if rail is None:
            return dense, (
                f"node {node}: annotation {RAIL_PORTS_ANNOTATION} does not cover {hca} port "
                f"{port} (port GUID {f'0x{guid}' if guid else 'unknown'}), a compute port of "
                f"this node; {fix}; rails numbered in GPU order meanwhile"
            )
        rails.setdefault(hca, rail)
    if len(set(rails.values())) != len(rails):
        return dense, (
            f"node {node}: annotation {RAIL_PORTS_ANNOTATION} puts two compute HCAs on one rail; "
            f"{fix}; rails numbered in GPU order meanwhile"
        )
    return rails, None


class FabricAgent:
    """Watches one node; :meth:`step` once per interval, or :meth:`run` until stopped."""

    def __init__(
        self,
        settings: AgentSettings,
        publisher: Publisher,
        metrics: AgentMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rail_map: Callable[[], str | None] | None = None,
        pfc: PfcReader | None = None,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        """``rail_map``: the node's ``topology.tpfabric.io/rail-ports`` as last read (the
        publisher's view of its node); None: no map, rails in GPU order. ``clock`` times the
        judge's windows, ``wall`` (Unix seconds) the timeline's bursts. ``pfc``: how a RoCE
        netdev's PFC priorities are read (default: DCB netlink). ``heartbeat``: called after
        every step that read, judged and published (the agent's Lease, :mod:`.heartbeat`)."""
        self.settings = settings
        self._heartbeat = heartbeat
        #: clock time the loop last turned, and the last step that succeeded (the probes)
        self.turned_at: float | None = None
        self.succeeded_at: float | None = None
        self.publisher = publisher
        self.metrics = metrics or AgentMetrics()
        self._clock = clock
        self._wall = wall
        self._pfc: PfcReader = pfc if pfc is not None else DcbNetlink()
        self.timeline = TimelineRecorder(
            settings.node, settings.interval_seconds, settings.timeline
        )
        self.ports = fabric_ports(settings.sys_root, settings.hcas, settings.compute_nics)
        names = dict.fromkeys(hca for hca, _ in self.ports)
        self.rails = {name: rail for rail, name in enumerate(names)}
        self.gpus = find_gpus(settings.sys_root) if settings.judge.check_pcie else []
        self.judge = LinkJudge(settings.judge, self.rails)
        self.last: NodeVerdict | None = None
        self._judged: tuple[str | None, str] | None = None
        self._netdevs = port_netdevs(settings.sys_root, self.ports)
        self._slots: dict[str, tuple[float | None, int | None]] = {}
        self._guids = {
            (nic.name, port.number): port.guid
            for nic in read_nics(settings.sys_root)
            for port in nic.ports
        }
        self._rail_map = rail_map
        self._map_seen: tuple[str | None] | None = None
        self.renumber()

    def renumber(self) -> None:
        """Number the judged ports by the node's rail map when it came or changed (a log line
        says when it cannot be used, and why)."""
        text = self._rail_map() if self._rail_map is not None else None
        if self._map_seen == (text,):
            return
        self._map_seen = (text,)
        rails, problem = numbered_rails(self.ports, self._guids, text, self.settings.node)
        if problem is not None:
            (log.warning if text is not None else log.info)("%s", problem)
        else:
            log.info("node %s: rails numbered by its rail map: %s", self.settings.node, rails)
        if rails != self.rails:
            self.rails = rails
            self.judge.renumber(rails)

    def read(self) -> NodeSample:
        """Return what sysfs shows now (fabric HCAs' ports, their PCIe links and the GPUs')."""
        root = self.settings.sys_root
        ports = tuple(read_ports(root, self.ports, self._netdevs, self._guids))
        pcie = (
            tuple(read_pcie_links(root, list(self.rails), self.gpus, self._slots))
            if self.settings.judge.check_pcie
            else ()
        )
        return NodeSample(self._clock(), ports, pcie)

    def step(self) -> NodeVerdict:
        """Read, judge, record metrics and the timeline, and publish once; return the verdict."""
        self.renumber()
        sample = self.read()
        verdict = self.judge.observe(sample)
        wall = self._wall()
        changed = self.timeline.observe(wall, sample.ports, self.rails)
        self.metrics.record(verdict, sample.ports, self.rails)
        publication = publication_of(verdict)
        judged = (publication.label, publication.annotation)
        if judged != self._judged and not changed:
            self.timeline.touch(wall)  # the metadata write carries the agent's clock
        self._judged = judged
        self.publisher.publish(
            replace(
                publication, timeline=self.timeline.annotation(), contract=self.contract(sample)
            )
        )
        self.metrics.read_done(self.settings.node)
        if self._heartbeat is not None:
            self._heartbeat()
        self.last = verdict
        self.succeeded_at = self._clock()
        return verdict

    def contract(self, sample: NodeSample) -> ContractVerdict | None:
        """Return the node's RoCE settings against the profile (None when it declares nothing
        to check): ECN and trust of each RoCE fabric port's netdev from sysfs, PFC as ``pfc``
        reads it."""
        if self.settings.profile.link_layer != "roce":
            return None
        netdevs = [
            read_netdev_qos(self._netdevs[(port.hca, port.port)], self._pfc)
            for port in sample.ports
            if port.link_layer == "Ethernet" and (port.hca, port.port) in self._netdevs
        ]
        return judge_contract(self.settings.profile, netdevs)

    def run(self, stop: threading.Event) -> None:
        """Step every interval until ``stop`` is set; a failed step is logged and retried."""
        while not stop.is_set():
            started = self.turned_at = self._clock()
            try:
                self.step()
            except Exception:  # the agent outlives a bad read or an API hiccup
                self.metrics.read_errors.labels("step").inc()
                log.exception("node %s: fabric health step failed", self.settings.node)
            stop.wait(max(0.0, self.settings.interval_seconds - (self._clock() - started)))
