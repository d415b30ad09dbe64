"""A node's recent link timeline: when each port's counters rose, kept where ``diagnose`` reads it.

The judge (:mod:`.link_judge`) says *whether* a port is sick now; a straggler hunt needs *when*
it was: the times a counter rose, to line them up with a job's slow steps. The fabric agent
feeds :class:`TimelineRecorder` every sample with its wall-clock time; the recorder keeps, per
port, the *bursts* of each watched counter (:data:`~.link_samples.WATCHED_COUNTERS`): a run of
consecutive intervals in which the counter rose faster than its floor
(:attr:`TimelineConfig.floors`, per second; 0: any rise), with when it began (the sample before
the first rise) and ended (the sample of the last rise), how many events it held and its peak
rate. Error and retransmission counters have floor 0 (a healthy link counts none); congestion
counters a floor, since a loaded fabric always counts some (defaults below, a starting point to
tune per fabric).

Where it is kept: the node annotation ``topology.tpfabric.io/link-timeline``, written by the
agent (whose admission policy allows exactly that key, size-capped), readable by anyone who may
read nodes. A metrics endpoint would not do: it sits behind the metrics port's authorization
and is not reachable through the API server's proxy with a user's identity. The annotation is
compact JSON::

    {"v": 1, "node": "dgx-07", "at": 1718000180.0, "since": 1717996000.0, "interval": 10.0,
     "ports": [{"hca": "mlx5_5", "port": 1, "guid": "b83fd20300050001", "rail": 5,
                "netdev": "ibp15s0", "unread": ["roce_adp_retrans"],
                "bursts": [[1717999820.0, 1717999830.0, "packet_seq_err", 400, 40.0],
                           [1718000000.0, 1718000010.0, "packet_seq_err", 410, 41.0, 1]]}]}

``at`` is the agent's clock when it wrote (the API server's write time of the same field gives
the agent's clock offset), ``since`` when the recorded history begins (the agent's start, or the
end of the oldest burst trimmed for size): before it nothing is known, after it a port without a
burst counted none above its floor. A burst is ``[start, end, counter, events, peak per second]``
and a sixth element ``1`` while it is still open. ``unread`` names the watched counters the
driver does not expose there: unknown, never zero.

Written only on change: a burst that opens or closes, a port whose unread counters changed, the
first sample. A burst still open for ``max_open_seconds`` is closed and a new one opened (one
write per that many seconds while a counter never rests). Bursts older than ``keep_seconds`` or
beyond ``max_bursts_per_port`` are dropped at the next write, oldest first, and so are the
oldest bursts of the node while the text is longer than ``max_characters``.

Pure: samples in, text out; :func:`read_timeline` reads the annotation back and never raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tpfabric_core import labels
from tpfabric_core.fabric.link_judge import counter_delta
from tpfabric_core.fabric.link_samples import (
    CONGESTION_COUNTERS,
    WATCHED_COUNTERS,
    PortSample,
)
from tpfabric_core.input_limits import bounded_json

__all__ = [
    "DEFAULT_FLOORS",
    "TIMELINE_ANNOTATION",
    "Burst",
    "NodeTimeline",
    "PortTimeline",
    "TimelineConfig",
    "TimelineRecorder",
    "format_timeline",
    "read_timeline",
]

TIMELINE_ANNOTATION = labels.PREFIX + "link-timeline"
_VERSION = 1
#: the most ports and bursts a reader takes from one annotation (a node has 8-16 ports)
_MAX_PORTS = 64
_MAX_BURSTS = 4096

#: Per-second floors a counter must rise faster than to make a burst. Congestion counters only:
#: every other watched counter counts nothing on a healthy link, so any rise is a burst. A loaded
#: RoCE port marks and answers some ECN all the time; 1,000 CNPs or marked packets a second is
#: heavy congestion at 400 Gb/s. port_xmit_wait counts ticks (of a few ns) without credit:
#: 10**7 a second is several percent of the time stalled.
DEFAULT_FLOORS: dict[str, float] = {
    "np_cnp_sent": 1000.0,
    "rp_cnp_handled": 1000.0,
    "np_ecn_marked_roce_packets": 1000.0,
    "port_xmit_wait": 1e7,
}


class TimelineConfig(BaseModel):
    """How much of the timeline is kept; every field has an explained default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_seconds: float = Field(
        3600.0, gt=0, description="bursts that ended longer ago than this are dropped"
    )
    max_bursts_per_port: int = Field(32, ge=1, le=1024, description="newest bursts kept per port")
    max_characters: int = Field(
        16384,
        ge=512,
        description="the annotation's size cap (the agent's admission policy allows "
        "fabricAgent.maxTimelineCharacters); oldest bursts go first",
    )
    max_open_seconds: float = Field(
        300.0, gt=0, description="a burst open this long is closed and a new one opened"
    )
    floors: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_FLOORS),
        description="per-second rise a counter must exceed to make a burst, by sysfs name; "
        "an entry overrides that counter's default (DEFAULT_FLOORS; others: 0, any rise)",
    )

    @field_validator("floors")
    @classmethod
    def _over_the_defaults(cls, floors: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(floors) - set(WATCHED_COUNTERS))
        if unknown:
            raise ValueError(
                f"no counter named {', '.join(unknown)}; name one of {', '.join(WATCHED_COUNTERS)}"
            )
        negative = sorted(name for name, floor in floors.items() if not floor >= 0)
        if negative:
            raise ValueError(f"floor of {', '.join(negative)} below 0; give 0 (any rise) or more")
        return {**DEFAULT_FLOORS, **floors}


@dataclass(frozen=True, slots=True)
class Burst:
    """One run of intervals in which ``counter`` rose above its floor (times: Unix seconds)."""

    counter: str
    start: float
    end: float
    events: int
    peak_per_s: float
    open: bool = False

    def covers(self, when: float, slack: float = 0.0) -> bool:
        """Return whether ``when`` falls in the burst, widened by ``slack`` on each side."""
        return self.start - slack <= when <= self.end + slack

    @property
    def congestion(self) -> bool:
        """Return whether the counter measures congestion (not a fault)."""
        return self.counter in CONGESTION_COUNTERS


@dataclass(frozen=True, slots=True)
class PortTimeline:
    """One port's bursts, oldest first, and the watched counters it cannot read."""

    hca: str
    port: int
    guid: str | None = None
    rail: int | None = None
    netdev: str | None = None
    unread: tuple[str, ...] = ()
    bursts: tuple[Burst, ...] = ()

    @property
    def where(self) -> str:
        """Return ``mlx5_5 port 1``."""
        return f"{self.hca} port {self.port}"

    def bursts_between(self, start: float, end: float) -> tuple[Burst, ...]:
        """Return the bursts that overlap ``[start, end]``."""
        return tuple(b for b in self.bursts if b.end >= start and b.start <= end)


@dataclass(frozen=True, slots=True)
class NodeTimeline:
    """A node's timeline as the agent published it."""

    node: str
    at: float
    since: float
    interval: float
    ports: tuple[PortTimeline, ...] = ()

    def port(
        self, guid: str | None = None, hca: str | None = None, number: int = 1
    ) -> PortTimeline | None:
        """Return the port with ``guid`` (16 hex digits), else the port ``number`` of ``hca``."""
        for port in self.ports:
            if guid is not None and port.guid == guid:
                return port
        if hca is None:
            return None
        return next((p for p in self.ports if p.hca == hca and p.port == number), None)


@dataclass(slots=True)
class _Open:
    start: float
    end: float
    events: int
    peak: float


@dataclass(slots=True)
class _PortState:
    time: float
    counters: dict[str, int]
    meta: PortTimeline
    open: dict[str, _Open] = field(default_factory=dict)
    closed: list[Burst] = field(default_factory=list)


class TimelineRecorder:
    """Keeps one node's bursts; :meth:`observe` each sample, publish :meth:`annotation` when it
    returns True. O(ports x counters) per sample; memory bounded by the config."""

    def __init__(self, node: str, interval: float, config: TimelineConfig | None = None) -> None:
        self.node = node
        self.interval = interval
        self.config = config or TimelineConfig()
        self._ports: dict[tuple[str, int], _PortState] = {}
        self._since: float | None = None
        self._at = 0.0
        self._text = ""

    def observe(self, wall: float, ports: Sequence[PortSample], rails: Mapping[str, int]) -> bool:
        """Record the samples read at Unix time ``wall``; return whether the published timeline
        changed (a burst opened or closed, a port came or went, or its unread counters changed)."""
        changed = self._since is None
        if self._since is None:
            self._since = wall
        seen = set()
        for sample in ports:
            key = (sample.hca, sample.port)
            seen.add(key)
            meta = PortTimeline(
                sample.hca,
                sample.port,
                sample.guid,
                rails.get(sample.hca),
                sample.netdev,
                tuple(name for name in WATCHED_COUNTERS if name in sample.unread),
            )
            state = self._ports.get(key)
            if state is None:
                self._ports[key] = _PortState(wall, dict(sample.counters), meta)
                changed = True
                continue
            if state.meta != meta:
                state.meta = meta
                changed = True
            changed |= self._step(state, wall, sample.counters)
        for gone in [key for key in self._ports if key not in seen]:
            del self._ports[gone]
            changed = True
        if changed:
            self._at = wall
            self._text = self._render(wall)
        return changed

    def touch(self, wall: float) -> None:
        """Stamp the timeline ``at`` ``wall`` without a burst having changed: the agent does so
        when it writes its node's metadata for another reason, so that ``at`` is always the
        agent's clock at its last metadata write (which the API server records by its own
        clock: how ``diagnose`` checks the agent's clock)."""
        if self._since is not None:
            self._at = wall
            self._text = self._render(wall)

    def _step(self, state: _PortState, wall: float, counters: Mapping[str, int]) -> bool:
        """Advance one port by one sample; return whether a burst opened or closed."""
        changed = False
        span = wall - state.time
        for name, value in counters.items():
            before = state.counters.get(name)
            moved = counter_delta(name, before, value) if before is not None else 0
            rate = moved / span if span > 0 else float(moved)
            floor = self.config.floors.get(name, 0.0)
            current = state.open.get(name)
            if moved > 0 and rate > floor:
                if current is not None and wall - current.start >= self.config.max_open_seconds:
                    state.closed.append(self._burst(name, current))
                    current = None
                if current is None:
                    state.open[name] = _Open(state.time, wall, moved, rate)
                    changed = True
                else:
                    current.end, current.events = wall, current.events + moved
                    current.peak = max(current.peak, rate)
            elif current is not None:
                state.closed.append(self._burst(name, current))
                del state.open[name]
                changed = True
        state.time, state.counters = wall, dict(counters)
        return changed

    @staticmethod
    def _burst(name: str, run: _Open, *, still_open: bool = False) -> Burst:
        return Burst(name, run.start, run.end, run.events, round(run.peak, 3), still_open)

    def timeline(self) -> NodeTimeline:
        """Return the timeline as last published."""
        parsed, _ = read_timeline(self._text)
        return parsed or NodeTimeline(self.node, self._at, self._since or 0.0, self.interval)

    def annotation(self) -> str:
        """Return the annotation text as last published ("" before the first sample)."""
        return self._text

    def _render(self, wall: float) -> str:
        horizon = wall - self.config.keep_seconds
        since = self._since if self._since is not None else wall
        ports = []
        for state in self._ports.values():
            kept = [b for b in state.closed if b.end >= horizon][-self.config.max_bursts_per_port :]
            # what is kept is complete only from the end of the newest burst dropped
            since = max([since, *(b.end for b in state.closed if b not in kept)])
            state.closed = kept
            still = [self._burst(n, run, still_open=True) for n, run in state.open.items()]
            bursts = sorted([*kept, *still], key=lambda b: (b.start, b.counter))
            ports.append(replace(state.meta, bursts=tuple(bursts)))
        self._since = since
        timeline = NodeTimeline(self.node, wall, since, self.interval, tuple(ports))
        return format_timeline(timeline, self.config.max_characters)


def _number(value: float) -> float | int:
    rounded = round(value, 3)
    return int(rounded) if rounded == int(rounded) else rounded


def _document(timeline: NodeTimeline) -> dict[str, Any]:
    ports = []
    for port in timeline.ports:
        entry: dict[str, Any] = {"hca": port.hca, "port": port.port}
        entry.update(
            (key, value)
            for key, value in (("guid", port.guid), ("rail", port.rail), ("netdev", port.netdev))
            if value is not None
        )
        if port.unread:
            entry["unread"] = list(port.unread)
        entry["bursts"] = [
            [_number(b.start), _number(b.end), b.counter, b.events, _number(b.peak_per_s)]
            + ([1] if b.open else [])
            for b in port.bursts
        ]
        ports.append(entry)
    return {
        "v": _VERSION,
        "node": timeline.node,
        "at": _number(timeline.at),
        "since": _number(timeline.since),
        "interval": _number(timeline.interval),
        "ports": ports,
    }


def format_timeline(timeline: NodeTimeline, max_characters: int = 16384) -> str:
    """Return the annotation text of ``timeline``, at most ``max_characters`` long: the oldest
    closed bursts of the node are dropped until it fits (then open ones, then the ports' unread
    lists), and ``since`` moves to the end of the last burst dropped (what is kept is complete
    from there on)."""
    ports = list(timeline.ports)
    since = timeline.since
    while True:
        text = json.dumps(
            _document(replace(timeline, since=since, ports=tuple(ports))),
            separators=(",", ":"),
        )
        if len(text) <= max_characters or not ports:
            return text
        bursts = [
            (burst.open, burst.end, index, burst)
            for index, port in enumerate(ports)
            for burst in port.bursts
        ]
        if bursts:
            _, end, index, burst = min(bursts, key=lambda item: item[:3])
            port = ports[index]
            ports[index] = replace(port, bursts=tuple(b for b in port.bursts if b is not burst))
            since = max(since, end)
        elif any(port.unread for port in ports):
            ports = [replace(port, unread=()) for port in ports]
        else:
            ports.pop()


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) < 1e12 else None


def _burst(raw: object) -> Burst | None:
    if not isinstance(raw, list) or len(raw) not in (5, 6):
        return None
    start, end, counter, events, peak = (_float(raw[0]), _float(raw[1]), raw[2], raw[3], raw[4])
    peak_value = _float(peak)
    if (
        start is None
        or end is None
        or end < start
        or not isinstance(counter, str)
        or counter not in WATCHED_COUNTERS
        or isinstance(events, bool)
        or not isinstance(events, int)
        or events < 0
        or peak_value is None
    ):
        return None
    return Burst(counter, start, end, events, peak_value, len(raw) == 6 and raw[5] == 1)


def _port(raw: object) -> tuple[PortTimeline | None, int]:
    """Return the port of one entry and how many of its bursts were unreadable."""
    if not isinstance(raw, dict):
        return None, 0
    hca, number = raw.get("hca"), raw.get("port")
    if not isinstance(hca, str) or isinstance(number, bool) or not isinstance(number, int):
        return None, 0
    guid, rail, netdev = raw.get("guid"), raw.get("rail"), raw.get("netdev")
    unread = raw.get("unread")
    bursts_raw = raw.get("bursts")
    bursts_in = bursts_raw[:_MAX_BURSTS] if isinstance(bursts_raw, list) else []
    bursts = [b for b in map(_burst, bursts_in) if b is not None]
    return (
        PortTimeline(
            hca=hca[:64],
            port=number,
            guid=guid.lower() if isinstance(guid, str) and len(guid) == 16 else None,
            rail=rail if isinstance(rail, int) and not isinstance(rail, bool) else None,
            netdev=netdev[:64] if isinstance(netdev, str) else None,
            unread=tuple(
                u for u in (unread if isinstance(unread, list) else []) if u in WATCHED_COUNTERS
            ),
            bursts=tuple(sorted(bursts, key=lambda b: (b.start, b.counter))),
        ),
        len(bursts_in) - len(bursts),
    )


def read_timeline(text: str | None) -> tuple[NodeTimeline | None, str]:
    """Return the timeline of an annotation and what could not be read of it ("" when all of
    it could). An absent, unreadable or other-version annotation gives None and why. Never
    raises, for any text: bounded like every annotation (:func:`bounded_json`)."""
    if not text:
        return None, ""
    try:
        data = bounded_json(text, TIMELINE_ANNOTATION)
    except ValueError as err:
        return None, str(err)
    if not isinstance(data, dict):
        return None, f"{TIMELINE_ANNOTATION}: not an object, as the fabric agent writes"
    if data.get("v") != _VERSION:
        return None, (
            f"{TIMELINE_ANNOTATION}: version {str(data.get('v'))[:20]!r}, this tpfabric reads "
            f"{_VERSION}: upgrade tpfabric or its fabric agent so both agree"
        )
    at, since, interval = (
        _float(data.get("at")),
        _float(data.get("since")),
        _float(data.get("interval")),
    )
    node = data.get("node")
    if at is None or since is None or interval is None or not isinstance(node, str):
        return None, f"{TIMELINE_ANNOTATION}: 'node', 'at', 'since' or 'interval' unreadable"
    raw_ports = data.get("ports")
    entries = raw_ports[:_MAX_PORTS] if isinstance(raw_ports, list) else []
    ports, bad_ports, bad_bursts = [], 0, 0
    for entry in entries:
        port, bad = _port(entry)
        bad_bursts += bad
        if port is None:
            bad_ports += 1
        else:
            ports.append(port)
    problems = []
    if bad_ports:
        problems.append(f"{bad_ports} unreadable port entr{'y' if bad_ports == 1 else 'ies'}")
    if bad_bursts:
        problems.append(f"{bad_bursts} unreadable burst{'' if bad_bursts == 1 else 's'}")
    problem = f"{TIMELINE_ANNOTATION}: {', '.join(problems)} left out" if problems else ""
    return NodeTimeline(node[:253], at, since, interval, tuple(ports)), problem
