"""Judge, the second stage of link health: a node's links from a series of samples, ``ok``,
``degraded`` (and why) or ``down``.

The samples are :mod:`.link_samples`' records (read from sysfs by the fabric agent); the verdict
goes to :mod:`.link_publish`.

:class:`LinkJudge` is fed one :class:`NodeSample` per interval and returns a :class:`NodeVerdict`.
It keeps, per port, the samples of the sliding window (``window_seconds``) and turns counter
deltas into rates per minute; a rate over its limit, a port that runs below the expected rate or
width, and a PCIe link trained below what it can do make the port (or the node) ``degraded``; a
port that is not ACTIVE/LinkUp is ``down``. A port up below the expected rate also carries the
fraction of that rate it keeps (:attr:`PortVerdict.bandwidth`, 0.5 for 4X NDR retrained to 2X).

Retransmissions are link faults like errors: the driver's counts of packets sent again
(:data:`~.link_samples.RETRANSMISSION_COUNTERS`) are judged on the same window with the same
hysteresis, so a burst of them (a transceiver with bit errors, the link's loss hidden by
retransmission) degrades the port at once, and a burst every few minutes keeps it degraded: each
one stays in the window for ``window_seconds``. Congestion counters are read and kept
(:mod:`.link_timeline`) but never judged.

Counters, as the IBTA defines PortCounters, *saturate* at all ones (a 16-bit symbol_error stops at
65535) and are cleared by ``perfquery -R`` or a driver reload; counters read through 64-bit
extended paths *wrap*. A decrease from the top sixteenth of a power-of-two range to a value in its
bottom sixteenth is read as a wrap; any other decrease is a clear and counts the new value as the
events since. A saturated counter cannot show new errors: it is named in the verdict's notes,
never judged on its own.

Hysteresis: a port turns bad at the first bad sample (so a label flips within two intervals of the
errors starting) but turns ``ok`` again only after ``recover_seconds`` without a bad sample, so a
flapping link keeps one ``degraded`` verdict instead of flapping the node label. The reason text
of a bad port is fixed when it turns bad and changes only when the *kind* of problem changes (a
rate that moves from 1,180/min to 1,230/min does not rewrite the node's condition): the live
numbers are for metrics, not for API writes.

Pure: data in, data out, time passed in. No file, clock or network access here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from tpfabric_core.fabric.link_samples import (
    CONGESTION_HW_COUNTERS,
    ERROR_COUNTERS,
    HW_COUNTERS,
    NETDEV_COUNTERS,
    RETRANSMISSION_COUNTERS,
    PcieLink,
    PortSample,
)

__all__ = [
    "COUNTER_BITS",
    "DEFAULT_COUNTER_LIMITS",
    "JUDGED_COUNTERS",
    "LinkJudge",
    "LinkJudgeConfig",
    "NodeSample",
    "NodeVerdict",
    "PcieVerdict",
    "PortState",
    "PortVerdict",
    "counter_delta",
]

PortState = Literal["ok", "degraded", "down"]
_N = TypeVar("_N", int, float)
_SEVERITY: dict[PortState, int] = {"ok": 0, "degraded": 1, "down": 2}

#: Widths of the IBTA PortCounters attribute (IBA spec vol. 1, 16.1.3.5): where they saturate.
COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "port_xmit_discards": 16,
    # driver and netdev counters are 64-bit (carrier_changes 32): they wrap, never saturate
    "rnr_nak_retry_err": 64,
    "local_ack_timeout_err": 64,
    "roce_slow_restart": 64,
    "carrier_changes": 32,
    "rx_crc_errors": 64,
    # PortXmitWait is 32 bits in PortCounters; the driver's counters are 64-bit
    "port_xmit_wait": 32,
    **dict.fromkeys((*RETRANSMISSION_COUNTERS, *CONGESTION_HW_COUNTERS), 64),
}
#: The counters judged against a limit; congestion counters are recorded, never judged.
JUDGED_COUNTERS = (*ERROR_COUNTERS, *HW_COUNTERS, *RETRANSMISSION_COUNTERS, *NETDEV_COUNTERS)
_JUDGED = JUDGED_COUNTERS

#: Limits in events per minute over the window; 0 means any increment is too many. Sources:
#: NVIDIA NVSentinel's NIC health monitor defaults (docs/nic-health-monitor/
#: link-counter-detection.md, Appendix A): link_downed, local_link_integrity_errors,
#: excessive_buffer_overrun_errors and rnr_nak_retry_err: any increment is fatal;
#: link_error_recovery > 5/min; port_rcv_errors > 10/s; port_xmit_discards > 100/s;
#: local_ack_timeout_err > 1/s; roce_slow_restart > 10/s. port_rcv_remote_physical_errors (a
#: packet marked bad upstream) and rx_crc_errors (Ethernet FCS errors of a RoCE port's netdev)
#: are held to the port_rcv_errors limit; carrier_changes (a link down and up between two reads,
#: the Ethernet side of link_downed) to link_downed's. symbol_error is absent on purpose: its
#: limit is per hour (``symbol_errors_per_hour``). The retransmission counters (a NAK sequence
#: error, an out-of-sequence packet, an implied NAK, a duplicate request, an adaptive
#: retransmission: each a packet sent again) have no published limit; they are held to
#: local_ack_timeout_err's 1/s, the closest cited one: a healthy lossless link counts none, and a
#: link that drops packets in bursts (a transceiver with bit errors) crosses it in one burst.
DEFAULT_COUNTER_LIMITS: dict[str, float] = {
    "link_error_recovery": 5.0,
    "link_downed": 0.0,
    "port_rcv_errors": 600.0,
    "port_rcv_remote_physical_errors": 600.0,
    "local_link_integrity_errors": 0.0,
    "excessive_buffer_overrun_errors": 0.0,
    "port_xmit_discards": 6000.0,
    "rnr_nak_retry_err": 0.0,
    "local_ack_timeout_err": 60.0,
    "roce_slow_restart": 600.0,
    "carrier_changes": 0.0,
    "rx_crc_errors": 600.0,
    **dict.fromkeys(RETRANSMISSION_COUNTERS, 60.0),
}

_WORDS = {
    "symbol_error": "symbol errors",
    "link_error_recovery": "link error recoveries",
    "link_downed": "link downed",
    "port_rcv_errors": "receive errors",
    "port_rcv_remote_physical_errors": "remote physical receive errors",
    "local_link_integrity_errors": "local link integrity errors",
    "excessive_buffer_overrun_errors": "buffer overrun errors",
    "port_xmit_discards": "transmit discards",
    "rnr_nak_retry_err": "RNR NAK retries exhausted",
    "local_ack_timeout_err": "ACK timeouts",
    "roce_slow_restart": "RoCE slow restarts",
    "carrier_changes": "carrier changes",
    "rx_crc_errors": "Ethernet CRC errors",
    "packet_seq_err": "retransmissions (NAK sequence errors)",
    "out_of_sequence": "retransmissions (out-of-sequence packets)",
    "implied_nak_seq_err": "retransmissions (implied NAKs)",
    "duplicate_request": "retransmissions (duplicate requests)",
    "roce_adp_retrans": "retransmissions (RoCE adaptive)",
}


class LinkJudgeConfig(BaseModel):
    """Thresholds and timing of the judgement; every field has a cited or explained default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_seconds: float = Field(
        300.0, gt=0, description="rates are taken over the samples of this sliding window"
    )
    recover_seconds: float = Field(
        120.0, ge=0, description="a bad port turns ok only after this long without a bad sample"
    )
    symbol_errors_per_hour: float = Field(
        120.0,
        ge=0,
        description="symbol_error limit per port, judged on the window's worth of time (a "
        "window of 300 s allows 10): the IBTA link limit NVIDIA NVSentinel cites and offers as "
        "its fatal setting (120/hour; its non-fatal default is 10/s)",
    )
    symbol_error_ber: float | None = Field(
        None,
        gt=0,
        description="instead of the per-hour limit, a bit error ratio the limit follows: rate x "
        "BER per second (1e-12: 24/min at 400 Gb/s)",
    )
    counter_limits: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_COUNTER_LIMITS),
        description="per-minute limits by sysfs counter name (0: any increment); an entry for "
        "symbol_error overrides the BER-derived one",
    )
    expected_rate_gbps: float | None = Field(
        None, gt=0, description="the fabric's link rate; default: the node's fastest active port"
    )
    expected_width: int | None = Field(
        None, gt=0, description="lanes per port (4 for 4X); default: the node's widest port"
    )
    rate_tolerance: float = Field(
        0.0, ge=0, lt=1, description="fraction of the expected rate a port may fall short by"
    )
    check_pcie: bool = Field(True, description="judge HCA/GPU PCIe links (current vs max)")


@dataclass(frozen=True, slots=True)
class NodeSample:
    """What the agent read at ``time`` (seconds, any monotonic origin)."""

    time: float
    ports: tuple[PortSample, ...]
    pcie: tuple[PcieLink, ...] = ()


@dataclass(frozen=True, slots=True)
class PortVerdict:
    """How one port stands: the published (hysteresis) state and the live numbers."""

    hca: str
    port: int
    rail: int | None
    state: PortState
    reasons: tuple[str, ...] = ()
    #: live error rates per minute over the window (for metrics; not part of any API write)
    rates: Mapping[str, float] = field(default_factory=dict)
    rate_gbps: float | None = None
    width: int | None = None
    notes: tuple[str, ...] = ()  # e.g. a saturated counter
    #: the fraction of the expected rate the port keeps (``rate_gbps / expected``) when it is up
    #: and below the rate floor (``expected x (1 - rate_tolerance)``); None otherwise. Live, like
    #: ``rate_gbps``: a held verdict whose port is back at full rate has None.
    bandwidth: float | None = None

    @property
    def where(self) -> str:
        """Return ``mlx5_3 port 1``."""
        return f"{self.hca} port {self.port}"


@dataclass(frozen=True, slots=True)
class PcieVerdict:
    """A PCIe link trained below what it can do."""

    link: PcieLink
    reason: str


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """Every port's verdict and the degraded PCIe links of one node at one moment."""

    ports: tuple[PortVerdict, ...]
    pcie: tuple[PcieVerdict, ...] = ()

    @property
    def state(self) -> PortState:
        """Return the worst port state; degraded PCIe makes an ok node degraded."""
        worst: PortState = max(
            (p.state for p in self.ports), key=_SEVERITY.__getitem__, default="ok"
        )
        return "degraded" if worst == "ok" and self.pcie else worst

    @property
    def reasons(self) -> tuple[str, ...]:
        """Return every reason, ports first (down, then degraded), then PCIe."""
        bad = sorted((p for p in self.ports if p.state != "ok"), key=lambda p: -_SEVERITY[p.state])
        return tuple(r for p in bad for r in p.reasons) + tuple(v.reason for v in self.pcie)


def counter_delta(name: str, old: int, new: int) -> int:
    """Return how many events happened between two reads of counter ``name``.

    ``new < old`` is a wrap when ``old`` sat in the top sixteenth of the smallest power-of-two
    range (at least the counter's IBTA width) holding it and ``new`` in its bottom sixteenth, else
    a clear (the new value counts as the events since).
    """
    if new >= old:
        return new - old
    bits = COUNTER_BITS.get(name, 16)
    while (1 << bits) <= old:
        bits *= 2
    span = 1 << bits
    if old >= span - span // 16 and new < span // 16:
        return span - old + new
    return new


def _saturated(name: str, value: int) -> bool:
    bits = COUNTER_BITS.get(name)
    return bits is not None and value == (1 << bits) - 1


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.1f}".removesuffix(".0")


def _pcie_text(width: int | None, speed: float | None) -> str:
    lanes = f"x{width}" if width is not None else "x?"
    return f"{lanes} at {speed:g} GT/s" if speed is not None else lanes


@dataclass(slots=True)
class _PortMemory:
    #: (time, events since the sample before) of the window, oldest first
    samples: deque[tuple[float, dict[str, int]]] = field(default_factory=deque)
    last: dict[str, int] = field(default_factory=dict)  # the counters of the newest sample
    totals: dict[str, int] = field(default_factory=dict)  # events of samples[1:]
    published: PortVerdict | None = None
    kinds: frozenset[str] = frozenset()
    downs: deque[float] = field(default_factory=deque)  # when the port went down, in the window
    was_up: bool = True
    last_bad: float | None = None
    span: float = 0.0  # seconds between the window's base sample and the newest


class LinkJudge:
    """The stateful judge of one node's links; feed it samples in time order.

    Memory is O(ports x samples per window); each :meth:`observe` is O(ports x counters).
    """

    def __init__(
        self, config: LinkJudgeConfig | None = None, rails: Mapping[str, int] | None = None
    ):
        self.config = config or LinkJudgeConfig()
        self._rails = dict(rails or {})
        self._ports: dict[tuple[str, int], _PortMemory] = {}

    def rail_of(self, hca: str) -> int | None:
        """Return the rail of ``hca`` as configured, None when not a fabric HCA."""
        return self._rails.get(hca)

    def renumber(self, rails: Mapping[str, int]) -> None:
        """Number the same fabric HCAs' rails anew (the node's rail map came or changed); what
        the judge remembers of each port stays."""
        if set(rails) != set(self._rails):
            raise ValueError("renumber keeps the fabric HCAs; give a rail to each of them")
        self._rails = dict(rails)

    def observe(self, sample: NodeSample) -> NodeVerdict:
        """Return the verdict of the node after ``sample``."""
        fabric = [p for p in sample.ports if not self._rails or p.hca in self._rails]
        present = {p.hca for p in fabric}
        # a fabric HCA that vanished from sysfs (driver reset, dead card) is a rail that is down
        fabric += [
            PortSample(hca, 1, "ABSENT", "gone from /sys/class/infiniband", None, None)
            for hca in self._rails
            if hca not in present
        ]
        expected_rate = self.config.expected_rate_gbps or max(
            (p.rate_gbps or 0.0 for p in fabric if p.up), default=0.0
        )
        expected_width = self.config.expected_width or max(
            (p.width or 0 for p in fabric if p.up), default=0
        )
        verdicts = tuple(
            self._observe_port(sample.time, port, expected_rate, expected_width) for port in fabric
        )
        seen = {(p.hca, p.port) for p in fabric}
        for gone in [key for key in self._ports if key not in seen]:
            del self._ports[gone]
        pcie = tuple(self._judge_pcie(sample.pcie)) if self.config.check_pcie else ()
        return NodeVerdict(verdicts, pcie)

    def _rates(
        self, memory: _PortMemory, now: float, counters: Mapping[str, int]
    ) -> tuple[dict[str, float], dict[str, int]]:
        """Add a sample; return (events per minute, events) per counter over the window.

        Each sample keeps its events since the one before, and the window keeps their running
        sum: O(counters) per sample, however long the window.
        """
        samples, totals, older = memory.samples, memory.totals, memory.last
        steps = {  # only counters that moved: a quiet port keeps empty dicts
            name: moved
            for name, value in counters.items()
            if name in older and (moved := counter_delta(name, older[name], value))
        }
        samples.append((now, steps))
        memory.last = dict(counters)
        for name, count in steps.items():
            totals[name] = totals.get(name, 0) + count
        while len(samples) > 2 and samples[1][0] <= now - self.config.window_seconds:
            samples.popleft()  # keep one sample at or before the window's start as the base
            for name, count in samples[0][1].items():  # the new base's events are before it
                totals[name] -= count
        if len(samples) < 2:
            return {}, {}
        span = samples[-1][0] - samples[0][0]
        memory.span = span
        minutes = span / 60.0 if span > 0 else 1.0
        events = {name: totals.get(name, 0) for name in counters if name in older}
        return {name: count / minutes for name, count in events.items()}, events

    def _symbol_limit(self, rate_gbps: float) -> float | None:
        """Return the per-minute symbol_error limit when one is configured (an entry of
        ``counter_limits`` or ``symbol_error_ber``), None for the per-hour default."""
        limits = self.config.counter_limits
        if "symbol_error" in limits:
            return limits["symbol_error"]
        if self.config.symbol_error_ber is not None:
            return rate_gbps * 1e9 * self.config.symbol_error_ber * 60.0
        return None

    def _symbols_per_hour(self, events: int, span: float) -> str | None:
        """Return the reason when ``events`` symbol errors over ``span`` seconds break the
        per-hour limit. Judged on at least the window's worth of time: one error ten seconds
        after the start is not 360 an hour."""
        hours = max(span, self.config.window_seconds) / 3600.0
        per_hour = events / hours
        limit = self.config.symbol_errors_per_hour
        if per_hour <= limit and not (limit == 0 and events):
            return None
        return f"{_count(per_hour)}/h"

    def _raw(
        self,
        port: PortSample,
        rates: Mapping[str, float],
        events: Mapping[str, int],
        expected_rate: float,
        expected_width: int,
        *,
        span: float = 0.0,
    ) -> tuple[PortState, dict[str, str]]:
        """Return (state, {kind: reason}) of one sample, before hysteresis."""
        where = port.where
        found: dict[str, str] = {}
        if not port.up:
            found["down"] = f"link {port.state} ({port.phys_state}) on {where}"
        for name in _JUDGED:
            if name not in rates:
                continue
            limit = (
                self._symbol_limit(port.rate_gbps or expected_rate or 400.0)
                if name == "symbol_error"
                else self.config.counter_limits.get(name)
            )
            if limit is None and name == "symbol_error":
                per_hour = self._symbols_per_hour(events.get(name, 0), span)
                if per_hour is not None:
                    found[name] = (
                        f"{_WORDS[name]} {per_hour} on {where} "
                        f"(limit {self.config.symbol_errors_per_hour:g}/h, IBTA)"
                    )
                continue
            if limit is None:
                continue
            if (limit == 0 and events.get(name, 0) > 0) or (limit > 0 and rates[name] > limit):
                window = self.config.window_seconds
                found[name] = (
                    f"{_WORDS[name]} {_count(events[name])} times in {window:g}s on {where}"
                    if limit == 0
                    else f"{_WORDS[name]} {_count(rates[name])}/min on {where} "
                    f"(limit {_count(limit)}/min)"
                )
        if not port.up:
            return "down", found  # a port that is down has no rate or width to judge
        if self._bandwidth(port, expected_rate) is not None:
            found["rate"] = f"rate {port.rate_gbps:g} Gb/s, expected {expected_rate:g}, on {where}"
        if port.width is not None and expected_width and port.width < expected_width:
            found["width"] = f"width {port.width}X, expected {expected_width}X, on {where}"
        return ("degraded" if found else "ok"), found

    def _bandwidth(self, port: PortSample, expected_rate: float) -> float | None:
        """Return the fraction of ``expected_rate`` that ``port`` keeps when it is up and runs
        below the floor (``expected_rate x (1 - rate_tolerance)``), else None."""
        floor = expected_rate * (1 - self.config.rate_tolerance)
        if port.up and port.rate_gbps is not None and expected_rate and port.rate_gbps < floor:
            return port.rate_gbps / expected_rate
        return None

    def _observe_port(
        self, now: float, port: PortSample, expected_rate: float, expected_width: int
    ) -> PortVerdict:
        memory = self._ports.setdefault((port.hca, port.port), _PortMemory())
        rates, events = self._rates(memory, now, port.counters)
        state, found = self._raw(
            port, rates, events, expected_rate, expected_width, span=memory.span
        )
        if memory.was_up and not port.up:
            memory.downs.append(now)
        memory.was_up = port.up
        while memory.downs and memory.downs[0] <= now - self.config.window_seconds:
            memory.downs.popleft()
        if len(memory.downs) >= 2:
            # a flapping link: one steady verdict, not down/up every other interval
            window = self.config.window_seconds
            found.pop("down", None)
            found["flapping"] = (
                f"link flapping: down {len(memory.downs)} times in {window:g}s on {port.where}"
            )
            state = "degraded"
        notes = tuple(
            f"{name} saturated at {value} on {port.where}: clear it (perfquery -R) to see new "
            "errors"
            for name, value in port.counters.items()
            if _saturated(name, value)
        )
        rail = self._rails.get(port.hca)
        bandwidth = self._bandwidth(port, expected_rate)

        def verdict(state: PortState, reasons: tuple[str, ...]) -> PortVerdict:
            memory.published = PortVerdict(
                port.hca,
                port.port,
                rail,
                state,
                reasons,
                rates,
                port.rate_gbps,
                port.width,
                notes,
                bandwidth,
            )
            return memory.published

        before = memory.published
        if state != "ok":
            memory.last_bad = now
            kinds = frozenset(found)
            if before is None or before.state != state or kinds != memory.kinds:
                memory.kinds = kinds
                return verdict(state, tuple(found.values()))
            return verdict(state, before.reasons)  # same problem: keep the published words
        held = (
            before is not None
            and before.state != "ok"
            and memory.last_bad is not None
            and now - memory.last_bad < self.config.recover_seconds
        )
        if held and before is not None:
            if before.state != "down":
                return verdict(before.state, before.reasons)
            memory.kinds = frozenset({"recovering"})
            held_for = f"held degraded for {self.config.recover_seconds:g}s"
            return verdict("degraded", (f"{port.where} was down, up again; {held_for}",))
        memory.kinds = frozenset()
        return verdict("ok", ())

    def _judge_pcie(self, links: tuple[PcieLink, ...]) -> list[PcieVerdict]:
        """Return the PCIe links trained below their capability.

        GPUs lower their PCIe *speed* when idle (ASPM and the driver's power states), so only a
        GPU's width counts; an HCA is judged on both.
        """
        found = []
        for link in links:
            max_width = _lesser(link.max_width, link.path_max_width)
            max_speed = _lesser(link.max_speed_gts, link.path_max_speed_gts)
            narrow = link.width is not None and max_width and link.width < max_width
            slow = (
                link.role == "hca"
                and link.speed_gts is not None
                and max_speed is not None
                and link.speed_gts < max_speed
            )
            if narrow or slow:
                where = link.name + (f" ({link.bdf})" if link.bdf != link.name else "")
                slot = (max_width, max_speed) != (link.max_width, link.max_speed_gts)
                found.append(
                    PcieVerdict(
                        link,
                        f"PCIe {_pcie_text(link.width, link.speed_gts)}, capable of "
                        f"{_pcie_text(max_width, max_speed)}{' (slot)' if slot else ''}, "
                        f"on {where}",
                    )
                )
        return found


def _lesser(own: _N | None, slot: _N | None) -> _N | None:
    """Return what a link can train at: the lesser of the device's and its upstream port's
    maximum, as the kernel's ``pcie_bandwidth_available`` walks the path (either may be
    unknown)."""
    if own is None or slot is None:
        return own if slot is None else slot
    return min(own, slot)
