"""The join: each slow rank's path into the fabric, what every hop of it counted in the window,
and what that says.

The path of a rank: worker pod -> node -> GPU -> HCA port (``rdma-init``'s pairing, by port
GUID) -> the leaf switch port at the other end of its cable -> that leaf's uplinks
(:mod:`.fabric_path`, when a dump is given). What each hop counted: the host port's bursts from
its node's link timeline (:mod:`tpfabric_core.fabric.link_timeline`), its rail's health
(``topology.tpfabric.io/fabric-health``) and the node's ``FabricContractMet`` condition; the
switch side is not counted by tpfabric (its counters are the subnet manager's or UFM's), and the
findings say so rather than guess.

Which ranks are slow: those a job-side input names (NCCL RAS, NCCL Inspector, nvidia-resiliency-
ext); with only a serving trace (whose latency is the whole group's) or no input, every rank is
looked at. The findings, each with the facts it rests on:

- ``link``: a port the job uses counted faults (errors or retransmissions) in the window; with
  the job's slow times (the trace's spikes, Inspector's slow collectives) it says how many fall
  in the bursts and how many chance alone would put there, and calls them lined up only when at
  least 60% do and at least twice as many as chance;
- ``uplink``: several slow ranks on different nodes, and not all of the job's, share a leaf
  switch while their own links counted no fault: the leaf's uplinks are the common part (tpfabric
  does not count switch ports: check them there);
- ``congestion``: a slow rank's port counted congestion above its floors, no fault;
- ``not-the-network``: the slow ranks' ports (all the job's, with a serving trace only) were
  watched over the whole window, counted nothing, and their nodes are healthy and within the
  fabric's contract: the finding names what was read and what is unknown (a counter the driver
  does not expose);
- ``unknown``: a rank whose port or counters cannot be known for the window (no pairing, no
  agent, history that begins after the window's start).

Clocks: bursts are stamped by each node's agent, the trace by its client; they are lined up only
when they are shown to agree within ``max_skew`` seconds (the agents' stamps against the API
server's write times, the trace's against its endpoint's HTTP ``Date`` headers), or said to be
lined up on that assumption when nothing shows it. Beyond it nothing is lined up, and the
finding says by how much the clocks disagree.

Pure: the job's objects, its nodes' and the parsed inputs in; :class:`Diagnosis` out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tpfabric_core import labels
from tpfabric_core.diagnose import nccl_inspector, nccl_ras
from tpfabric_core.diagnose.fabric_path import CablePath, FabricPaths
from tpfabric_core.diagnose.nccl_inspector import InspectorRecord
from tpfabric_core.diagnose.nccl_ras import RasReport
from tpfabric_core.diagnose.rank_map import GpuRank, JobRanks
from tpfabric_core.diagnose.serve_trace import ServeTarget, endpoint_offset, itl_samples
from tpfabric_core.diagnose.spikes import SpikeReport, find_spikes, format_duration, period_of
from tpfabric_core.diagnose.straggler_report import StragglerReport
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.link_publish import CONDITION_TYPE, read_detail
from tpfabric_core.fabric.link_samples import WATCHED_COUNTERS
from tpfabric_core.fabric.link_timeline import (
    TIMELINE_ANNOTATION,
    Burst,
    NodeTimeline,
    PortTimeline,
    read_timeline,
)
from tpfabric_core.fabric.model import Fabric
from tpfabric_core.fabric.roce_contract import CONTRACT_CONDITION

__all__ = [
    "DiagnoseOptions",
    "Diagnosis",
    "Finding",
    "JobInputs",
    "NodeFacts",
    "RankPath",
    "diagnose",
]

_LINED_UP_SHARE = 0.6
_RESOLUTION_S = 1.0  # the API server's write times are whole seconds


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as diagnose reads it: labels, annotations, conditions (type -> status, reason,
    message) and when the API server recorded the agent's last write of its metadata."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    conditions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    agent_written: float | None = None


@dataclass(frozen=True, slots=True)
class JobInputs:
    """What the job said, parsed."""

    ras: tuple[RasReport, ...] = ()
    inspector: tuple[InspectorRecord, ...] = ()
    inspector_source: str = ""
    stragglers: tuple[StragglerReport, ...] = ()
    trace: ServeTarget | None = None
    trace_source: str = ""


@dataclass(frozen=True, slots=True)
class DiagnoseOptions:
    """``now`` (Unix seconds), the window looked at without a trace, the clock disagreement
    allowed, and an offset the user declares for the trace's clock (added to its times)."""

    now: float
    window_seconds: float = 900.0
    max_skew: float = 2.0
    trace_offset: float | None = None


@dataclass(frozen=True, slots=True)
class RankPath:
    """One rank, why it is looked at, its port and cable, and what its port counted."""

    rank: GpuRank
    why: tuple[str, ...]
    port: PortTimeline | None
    cable: CablePath | None
    faults: tuple[Burst, ...] = ()
    congestion: tuple[Burst, ...] = ()
    problem: str = ""
    health: str = ""
    contract: str = ""

    @property
    def guid(self) -> str | None:
        """Return the port GUID the rank uses, where known."""
        pair = self.rank.pair
        return (pair.guid if pair is not None else None) or (self.port.guid if self.port else None)

    @property
    def where(self) -> str:
        """Return ``mlx5_5 port 1 (0x...)``, or what is known of it."""
        pair = self.rank.pair
        if pair is not None:
            text = f"{pair.hca} port {pair.port}"
        elif self.port is not None:
            text = self.port.where
        else:
            return "its port unknown"
        return f"{text} (0x{self.guid})" if self.guid else text

    def hops(self) -> str:
        """Return the path in one line: ``rank 13 = ... -> mlx5_5 port 1 -> leaf ... port 17``."""
        parts = [self.rank.words, self.where]
        if self.cable is not None:
            parts.append(self.cable.leaf.words)
            if self.cable.uplinks:
                ports = sorted(u.leaf_port for u in self.cable.uplinks)
                parts.append(f"{len(ports)} uplinks (leaf ports {_ranges(ports)})")
        return " → ".join(parts)


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion and the ranks it is about."""

    kind: str
    text: str
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Everything ``tpfabric diagnose`` says of one job."""

    job: str
    window: tuple[float, float]
    window_source: str
    inputs: tuple[str, ...]
    clocks: tuple[str, ...]
    paths: tuple[RankPath, ...]
    findings: tuple[Finding, ...]
    spikes: SpikeReport | None = None

    def document(self) -> dict[str, Any]:
        """Return the ``--json`` document: the same facts the text shows."""
        return {
            "job": self.job,
            "window": {
                "start": round(self.window[0], 3),
                "end": round(self.window[1], 3),
                "source": self.window_source,
            },
            "inputs": list(self.inputs),
            "clocks": list(self.clocks),
            "spikes": self.spikes.document() if self.spikes is not None else None,
            "findings": [
                {"kind": f.kind, "text": f.text, "ranks": list(f.ranks)} for f in self.findings
            ],
            "ranks": [_path_document(path) for path in self.paths],
        }


def _path_document(path: RankPath) -> dict[str, Any]:
    rank, pair, cable = path.rank, path.rank.pair, path.cable
    return {
        "rank": rank.rank,
        "worker": rank.worker.worker,
        "pod": rank.worker.pod,
        "node": rank.worker.node,
        "gpu": {"index": rank.gpu, "bus": pair.gpu if pair else None},
        "hca": pair.hca if pair else (path.port.hca if path.port else None),
        "port": pair.port if pair else (path.port.port if path.port else None),
        "portGuid": path.guid,
        "rail": pair.rail if pair else (path.port.rail if path.port else None),
        "leaf": None
        if cable is None
        else {"switch": cable.leaf.switch, "name": cable.leaf.name, "port": cable.leaf.port},
        "uplinks": []
        if cable is None
        else [
            {"leafPort": u.leaf_port, "switch": u.peer.switch, "port": u.peer.port}
            for u in cable.uplinks
        ],
        "why": list(path.why),
        "bursts": [
            {
                "counter": b.counter,
                "start": b.start,
                "end": b.end,
                "events": b.events,
                "peakPerSecond": b.peak_per_s,
                "open": b.open,
            }
            for b in (*path.faults, *path.congestion)
        ],
        "unread": list(path.port.unread) if path.port else None,
        "health": path.health or None,
        "contract": path.contract or None,
        "problem": path.problem or None,
    }


def _ranges(numbers: Sequence[int]) -> str:
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _clock(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%H:%M:%S")


# -- which ranks, and why ----------------------------------------------------------------------


def _slow_ranks(ranks: JobRanks, inputs: JobInputs) -> dict[int, list[str]]:
    """Return the ranks the inputs name as slow, with each input's words."""
    slow: dict[int, list[str]] = defaultdict(list)
    if inputs.ras:
        found, _ = nccl_ras.slow_ranks(inputs.ras)
        for ras in found:
            rank = ranks.by_host(ras.host, ras.cuda_dev, ras.where, f"NCCL RAS rank {ras.rank}")
            slow[rank.rank].append(ras.words)
    if inputs.inspector:
        first: dict[str, int] = {}
        for record in sorted(inputs.inspector, key=lambda r: r.rank):
            first.setdefault(record.hostname, record.rank)
        for inspected in nccl_inspector.slow_ranks(inputs.inspector):
            where = f"{inputs.inspector_source}:{inspected.line}"
            rank = ranks.by_host(
                inspected.hostname, inspected.rank - first[inspected.hostname], where,
                f"NCCL Inspector rank {inspected.rank}",
            )  # fmt: skip
            slow[rank.rank].append(
                f"{inspected.words} (GPU by local rank: ranks of a host consecutive, one GPU each)"
            )
    for report in inputs.stragglers:
        for item in report.slow_ranks():
            where = f"{report.source}:{item.line}"
            if item.node is not None:
                by_host = ranks.by_host(item.node, None, where, f"straggler rank {item.rank}")
                rank = ranks.by_number(item.rank, where)
                if rank.worker.worker != by_host.worker.worker:
                    raise InputError(
                        where,
                        f"rank {item.rank} on node {item.node}, but the job's worker on "
                        f"{item.node} holds ranks {by_host.rank}-"
                        f"{by_host.rank + ranks.gpus_per_worker - 1}: another job's report",
                        "give the report of this job's current run",
                    )
            else:
                rank = ranks.by_number(item.rank, where)
            slow[rank.rank].append(item.words)
    for words in slow.values():
        words.sort()
    return dict(slow)


# -- clocks --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Clocks:
    words: tuple[str, ...]
    trace_shift: float
    trace_lined_up: bool
    trace_assumed: bool
    refused_nodes: frozenset[str]


def _clocks(
    nodes: Mapping[str, NodeFacts],
    timelines: Mapping[str, NodeTimeline],
    trace: ServeTarget | None,
    trace_source: str,
    options: DiagnoseOptions,
) -> _Clocks:
    words: list[str] = []
    refused = set()
    skew = options.max_skew
    for name, timeline in sorted(timelines.items()):
        written = nodes[name].agent_written if name in nodes else None
        if written is None:
            continue
        # the API server records whole seconds, and the write took up to a second to arrive
        behind = written - timeline.at
        if behind > skew + 2 * _RESOLUTION_S or behind < -skew - _RESOLUTION_S:
            refused.add(name)
            direction = "behind" if behind > 0 else "ahead of"
            words.append(
                f"node {name}: its agent's clock is about {abs(behind):.0f} s {direction} the "
                f"API server's (it stamped its last write {_clock(timeline.at)}, the API server "
                f"recorded {_clock(written)}): its bursts are not lined up with the job's times "
                f"(more than the {skew:g} s allowed; --max-skew)"
            )
    shift, lined_up, assumed = 0.0, trace is not None, False
    if trace is not None:
        bound = endpoint_offset(trace)
        if options.trace_offset is not None:
            shift = options.trace_offset
            words.append(
                f"{trace_source}: its times moved by {shift:+g} s, as --trace-clock-offset says"
            )
        elif bound is None:
            assumed = True
            words.append(
                f"{trace_source}: its responses carried no HTTP Date header, so its clock was not "
                f"checked against the nodes': lined up assuming they agree within {skew:g} s"
            )
        elif isinstance(bound, str):
            lined_up = False
            words.append(f"{trace_source}: {bound}; its times are not lined up")
        else:
            low, high = bound
            if max(abs(low), abs(high)) <= skew:
                words.append(
                    f"{trace_source}: its clock and its endpoint's agree: the endpoint's is "
                    f"{low:+.2f}…{high:+.2f} s off (HTTP Date headers), within the {skew:g} s "
                    "allowed"
                )
            else:
                lined_up = False
                if low > 0 or high < 0:
                    side = "behind" if low > 0 else "ahead of"
                    nearest = min(abs(low), abs(high))
                    words.append(
                        f"{trace_source}: its clock is {nearest:.1f}-{max(abs(low), abs(high)):.1f}"
                        f" s {side} its endpoint's (HTTP Date headers); lining up needs them "
                        f"within {skew:g} s: sync the client's clock (chrony), or pass "
                        f"--trace-clock-offset {(low + high) / 2:+.1f} once you have checked it"
                    )
                else:
                    words.append(
                        f"{trace_source}: the HTTP Date headers bound its clock's offset to "
                        f"{low:+.1f}…{high:+.1f} s of its endpoint's, not within {skew:g} s: "
                        "not lined up"
                    )
    return _Clocks(tuple(words), shift, lined_up, assumed, frozenset(refused))


# -- the paths -----------------------------------------------------------------------------------


def _port_of(rank: GpuRank, timeline: NodeTimeline | None) -> PortTimeline | None:
    if timeline is None:
        return None
    pair = rank.pair
    if pair is not None:
        return timeline.port(guid=pair.guid, hca=pair.hca, number=pair.port)
    return None


def _health(node: NodeFacts | None, rail: int | None) -> str:
    if node is None:
        return ""
    condition = node.conditions.get(CONDITION_TYPE) or {}
    if condition.get("status") == "True" or rail is None:
        return f"FabricHealthy {condition.get('status', 'unknown')}"
    rails, _ = read_detail(node.annotations.get(labels.PREFIX + "fabric-health"))
    mine = next((r for r in rails if r.rail == rail), None)
    if mine is not None and mine.state != "ok":
        return f"rail {rail} {mine.state}: {'; '.join(mine.reasons)}"
    return f"FabricHealthy {condition.get('status', 'unknown')}"


def _contract(node: NodeFacts | None) -> str:
    condition = (node.conditions.get(CONTRACT_CONDITION) if node is not None else None) or {}
    if condition.get("status") == "False":
        return f"{CONTRACT_CONDITION} False: {condition.get('message', '')}"
    return ""


def _path(
    rank: GpuRank,
    why: Sequence[str],
    *,
    nodes: Mapping[str, NodeFacts],
    timelines: Mapping[str, NodeTimeline],
    timeline_problems: Mapping[str, str],
    paths: FabricPaths | None,
    window: tuple[float, float],
) -> RankPath:
    node_name = rank.worker.node
    node = nodes.get(node_name) if node_name else None
    timeline = timelines.get(node_name) if node_name else None
    port = _port_of(rank, timeline)
    pair = rank.pair
    cable = None
    if paths is not None and pair is not None:
        cable = paths.by_guid(pair.guid) if pair.guid else None
        if cable is None and node_name is not None and pair.rail is not None:
            cable = paths.leaf_of_rail(node_name, pair.rail)
    problem = ""
    if node_name is None:
        problem = f"pod {rank.worker.pod} is on no node"
    elif node is None:
        problem = f"node {node_name} no longer exists"
    elif pair is None:
        problem = rank.worker.pairing_problem or f"pod {rank.worker.pod}: no GPU {rank.gpu} paired"
    elif timeline is None:
        problem = timeline_problems.get(node_name) or (
            f"node {node_name} has no {TIMELINE_ANNOTATION} (no fabric agent of this version "
            "runs there)"
        )
    elif port is None:
        problem = f"the fabric agent of {node_name} does not watch {pair.hca} port {pair.port}"
    elif timeline.since > window[0]:
        problem = (
            f"the link timeline of {node_name} begins at {_clock(timeline.since)}, after the "
            f"window's start {_clock(window[0])}"
        )
    bursts = port.bursts_between(*window) if port is not None else ()
    return RankPath(
        rank=rank,
        why=tuple(why),
        port=port,
        cable=cable,
        faults=tuple(b for b in bursts if not b.congestion),
        congestion=tuple(b for b in bursts if b.congestion),
        problem=problem,
        health=_health(node, pair.rail if pair else None),
        contract=_contract(node),
    )


# -- the findings --------------------------------------------------------------------------------


def _bursts_words(bursts: Sequence[Burst]) -> str:
    by_counter: dict[str, list[Burst]] = defaultdict(list)
    for burst in bursts:
        by_counter[burst.counter].append(burst)
    parts = []
    for counter, runs in sorted(by_counter.items(), key=lambda kv: -sum(b.events for b in kv[1])):
        events = sum(b.events for b in runs)
        peak = max(b.peak_per_s for b in runs)
        period = period_of(sorted(b.start for b in runs))
        when = (
            f"in {len(runs)} bursts {period.words}"
            if period is not None
            else f"in {len(runs)} burst{'s' if len(runs) > 1 else ''} "
            f"(from {_clock(runs[0].start)})"
        )
        parts.append(f"{counter} {events:,} {when}, peak {peak:,.0f}/s")
    return "; ".join(parts)


def _lined_up(
    bursts: Sequence[Burst],
    events: Sequence[tuple[float, float]],
    tolerance: float,
    window: tuple[float, float],
    what: str,
) -> tuple[str, bool]:
    """Return how many of the job's slow ``events`` fall in ``bursts`` (widened by
    ``tolerance``), against chance, and whether that lines them up."""
    if not events or not bursts:
        return "", False
    hit = sum(
        1 for start, end in events if any(b.start - tolerance <= end and start <= b.end + tolerance
                                          for b in bursts)
    )  # fmt: skip
    span = max(window[1] - window[0], 1e-9)
    covered = min(1.0, sum(b.end - b.start + 2 * tolerance for b in bursts) / span)
    share = hit / len(events)
    ok = len(events) >= 2 and share >= _LINED_UP_SHARE and share >= 2 * covered
    verdict = "matching" if ok else "not lined up with"
    words = (
        f"{verdict} {what}: {hit} of {len(events)} fall in these bursts (+/-{tolerance:g} s; "
        f"chance alone would put {covered:.0%} there)"
    )
    return words, ok


def _covered(path: RankPath) -> bool:
    return path.port is not None and not path.problem


@dataclass(slots=True)
class _JobTimes:
    """The window, what the inputs say of it, and the job's slow times to line up."""

    window: tuple[float, float]
    source: str
    described: list[str] = field(default_factory=list)
    spikes: SpikeReport | None = None
    events: list[tuple[float, float]] = field(default_factory=list)
    events_what: str = ""


def _trace_times(
    trace: ServeTarget, source: str, ranks: JobRanks, clocks: _Clocks, options: DiagnoseOptions
) -> _JobTimes:
    span = trace.span
    started = [w.started for w in ranks.workers.values() if w.started is not None]
    if span is not None and started and span[1] + clocks.trace_shift < min(started):
        raise InputError(
            source,
            f"its requests ran {_clock(span[0])}-{_clock(span[1])}, before the job's pods "
            f"started ({_clock(min(started))}): a trace of another job, or of an earlier attempt",
            "give a trace taken against this job's current pods",
        )
    window = (
        (span[0] + clocks.trace_shift, span[1] + clocks.trace_shift)
        if span
        else (options.now - options.window_seconds, options.now)
    )
    times = _JobTimes(window, f"the serve trace {source}")
    samples = [(end + clocks.trace_shift, wait) for end, wait in itl_samples(trace)]
    times.spikes = spikes = find_spikes(samples)
    if spikes is not None:
        ratio = f"{spikes.ratio:.1f}x" if spikes.ratio is not None else "-"
        worst = (
            f", worst {spikes.bucket:g} s from {_clock(spikes.worst[0])}: p99 "
            f"{format_duration(spikes.worst[1])} ({spikes.worst_ratio:.1f}x the median)"
            if spikes.worst is not None and spikes.worst_ratio is not None
            else ""
        )
        period = f", {spikes.period.words}" if spikes.period is not None else ""
        times.described.append(
            f"serve trace {source} ({trace.label}, {trace.endpoint}): {len(trace.requests)} "
            f"requests, inter-token latency median {format_duration(spikes.median)}, p99 "
            f"{format_duration(spikes.p99)} (p99/median {ratio}){worst}; {len(spikes.spikes)} "
            f"spikes over {format_duration(spikes.threshold)}{period}"
        )
        if clocks.trace_lined_up:
            times.events = [(s.start, s.end) for s in spikes.spikes]
            times.events_what = "the inter-token latency spikes"
    return times


def _job_times(
    inputs: JobInputs, ranks: JobRanks, clocks: _Clocks, options: DiagnoseOptions
) -> _JobTimes:
    """Return the window (the trace's, else the Inspector records', else the last
    ``window_seconds``), the inputs in words and the job's slow times."""
    if inputs.trace is not None:
        times = _trace_times(inputs.trace, inputs.trace_source, ranks, clocks, options)
    elif inputs.inspector:
        stamps = [r.time for r in inputs.inspector]
        times = _JobTimes(
            (min(stamps), max(stamps)), f"the NCCL Inspector records {inputs.inspector_source}"
        )
    else:
        times = _JobTimes(
            (options.now - options.window_seconds, options.now),
            f"the last {format_duration(options.window_seconds)}",
        )
    if inputs.inspector:
        slow_times = nccl_inspector.slow_collectives(inputs.inspector)
        times.described.append(
            f"NCCL Inspector {inputs.inspector_source}: {len(inputs.inspector)} collective "
            f"records, {len(slow_times)} under half their median bus bandwidth"
        )
        if not times.events and slow_times:
            times.events = [(t, t) for t, _ in slow_times]
            times.events_what = "the slow collectives (NCCL Inspector)"
    if inputs.ras:
        _, seen_only = nccl_ras.slow_ranks(inputs.ras)
        times.described.append(
            f"NCCL RAS {inputs.ras[0].source}: {len(inputs.ras)} quer"
            f"{'y' if len(inputs.ras) == 1 else 'ies'}, NCCL {inputs.ras[0].nccl_version}"
        )
        times.described += seen_only
    times.described += [
        f"straggler report {report.source}: {len(report.scores)} score set(s), "
        f"{len(report.flagged)} rank(s) flagged"
        for report in inputs.stragglers
    ]
    return times


@dataclass(frozen=True, slots=True)
class _Context:
    """What the findings are judged against."""

    ranks: JobRanks
    named: bool
    times: _JobTimes
    clocks: _Clocks
    timelines: Mapping[str, NodeTimeline]
    options: DiagnoseOptions


def diagnose(
    job: str,
    ranks: JobRanks,
    nodes: Mapping[str, NodeFacts],
    inputs: JobInputs,
    options: DiagnoseOptions,
    *,
    fabric: Fabric | None = None,
) -> Diagnosis:
    """Return the diagnosis of ``job`` (its words, e.g. ``TensorParallelJob default/serve``)."""
    timelines: dict[str, NodeTimeline] = {}
    timeline_problems: dict[str, str] = {}
    for name, node in nodes.items():
        parsed, problem = read_timeline(node.annotations.get(TIMELINE_ANNOTATION))
        if parsed is not None:
            timelines[name] = parsed
        elif problem:
            timeline_problems[name] = f"node {name}: {problem}"
    clocks = _clocks(nodes, timelines, inputs.trace, inputs.trace_source, options)
    times = _job_times(inputs, ranks, clocks, options)
    slow = _slow_ranks(ranks, inputs)
    named = bool(inputs.ras or inputs.inspector or inputs.stragglers)
    if named:
        looked_at = [(r, slow.get(r.rank, [])) for r in ranks.all_ranks() if r.rank in slow]
    else:
        reason = "the serving group's latency is every rank's" if inputs.trace else "no input"
        looked_at = [(r, [f"looked at: {reason}"]) for r in ranks.all_ranks()]
    fabric_paths = FabricPaths(fabric) if fabric is not None else None
    paths = [
        _path(
            rank, why, nodes=nodes, timelines=timelines, timeline_problems=timeline_problems,
            paths=fabric_paths, window=times.window,
        )
        for rank, why in looked_at
    ]  # fmt: skip
    context = _Context(ranks, named, times, clocks, timelines, options)
    return Diagnosis(
        job=job,
        window=times.window,
        window_source=times.source,
        inputs=tuple(times.described),
        clocks=clocks.words,
        paths=tuple(paths),
        findings=tuple(_findings(paths, context)),
        spikes=times.spikes,
    )


def _link_findings(paths: Sequence[RankPath], context: _Context) -> list[Finding]:
    """A finding per port of the job that counted faults in the window."""
    by_port: dict[tuple[str | None, str], list[RankPath]] = defaultdict(list)
    for path in paths:
        if path.faults:
            by_port[(path.rank.worker.node, path.where)].append(path)
    times, clocks, options = context.times, context.clocks, context.options
    findings = []
    for (node, _), group in sorted(by_port.items(), key=lambda kv: kv[1][0].rank.rank):
        first = group[0]
        timeline = context.timelines.get(node) if node is not None else None
        interval = timeline.interval if timeline is not None else 0.0
        text = f"{first.hops()}: {_bursts_words(first.faults)}"
        if len(group) > 1:
            text += f" (also ranks {', '.join(str(p.rank.rank) for p in group[1:])} on this port)"
        if times.events and node not in clocks.refused_nodes:
            tolerance = options.max_skew + interval
            lined, _ = _lined_up(
                first.faults, times.events, tolerance, times.window, times.events_what
            )
            text += f", {lined}"
            if clocks.trace_assumed:
                text += " (clocks assumed to agree, not checked)"
        elif times.events:
            text += ", not lined up with the job's times (the node's clock disagrees)"
        if first.health:
            text += f"; {first.health}"
        findings.append(Finding("link", text, tuple(p.rank.rank for p in group)))
    return findings


def _findings(paths: Sequence[RankPath], context: _Context) -> list[Finding]:
    findings = _link_findings(paths, context)
    faulty = {rank for finding in findings for rank in finding.ranks}
    clean = [p for p in paths if p.rank.rank not in faulty and _covered(p)]
    findings += _uplink_findings(clean, context.ranks, context.named)
    for path in clean:
        if path.congestion:
            findings.append(
                Finding(
                    "congestion",
                    f"{path.hops()}: no fault, congestion {_bursts_words(path.congestion)}: the "
                    "path is loaded, not broken",
                    (path.rank.rank,),
                )
            )
        if path.contract:
            words = f"{path.rank.words}: {path.contract}"
            findings.append(Finding("contract", words, (path.rank.rank,)))
        if path.health.startswith("rail ") and not path.congestion:
            # judged degraded or down without a burst in the window: a rate or width fall, a
            # port down, or errors before the window the judge still holds against it
            findings.append(Finding("link", f"{path.hops()}: {path.health}", (path.rank.rank,)))
    quiet = [p for p in clean if not p.congestion and not p.contract and "degraded" not in p.health
             and "down" not in p.health]  # fmt: skip
    unknown = [p for p in paths if not _covered(p)]
    if quiet and not faulty and (context.named or not unknown):
        findings.append(_not_the_network(quiet, unknown, context.times.window))
    findings += [
        Finding("unknown", f"{path.rank.words}: cannot tell: {path.problem}", (path.rank.rank,))
        for path in unknown
    ]
    return findings


def _uplink_findings(clean: Sequence[RankPath], ranks: JobRanks, named: bool) -> list[Finding]:
    """Several slow ranks on different nodes, not all the job's, sharing one leaf."""
    if not named:
        return []
    by_leaf: dict[str, list[RankPath]] = defaultdict(list)
    for path in clean:
        if path.cable is not None:
            by_leaf[path.cable.leaf.switch].append(path)
    findings = []
    for _, group in sorted(by_leaf.items()):
        nodes = {p.rank.worker.node for p in group}
        if len(nodes) < 2 or len(group) >= ranks.size:
            continue
        cable = group[0].cable
        assert cable is not None
        uplinks = sorted(u.leaf_port for u in cable.uplinks)
        degraded = [u for u in cable.uplinks if u.degraded]
        text = (
            f"ranks {', '.join(str(p.rank.rank) for p in group)} on {len(nodes)} nodes are slow "
            f"and share {replace(cable.leaf, port=None).words}, while their own links counted "
            f"no fault: the common part is that leaf's {len(uplinks)} uplinks (leaf ports "
            f"{_ranges(uplinks)}); tpfabric does not count switch ports: read them with "
            "perfquery or UFM"
        )
        if degraded:
            text += (
                f"; the dump shows {len(degraded)} of them trained below their peers' rate "
                f"(leaf ports {_ranges(sorted(u.leaf_port for u in degraded))})"
            )
        findings.append(Finding("uplink", text, tuple(p.rank.rank for p in group)))
    return findings


def _not_the_network(
    quiet: Sequence[RankPath], unknown: Sequence[RankPath], window: tuple[float, float]
) -> Finding:
    ports = {(p.rank.worker.node, p.where) for p in quiet}
    nodes = sorted({p.rank.worker.node or "" for p in quiet})
    unread = sorted({u for p in quiet if p.port is not None for u in p.port.unread})
    read = [c for c in WATCHED_COUNTERS if c not in unread]
    text = (
        f"not the network: {len(ports)} port{'s' if len(ports) != 1 else ''} of ranks "
        f"{_ranges(sorted(p.rank.rank for p in quiet))} on {', '.join(nodes)} counted no "
        f"error, retransmission or congestion burst from {_clock(window[0])} to "
        f"{_clock(window[1])} ({len(read)} counters read each: {', '.join(read)}); their "
        "rails are healthy and within the fabric's contract"
    )
    if unread:
        text += f"; unknown (not exposed by the driver): {', '.join(unread)}"
    if unknown:
        text += f"; {len(unknown)} other rank(s) could not be checked (below)"
    return Finding("not-the-network", text, tuple(p.rank.rank for p in quiet))
