"""Latency spikes: how far the tail sits from the median, when it spikes, and whether on a period.

Input: ``(end, duration)`` samples, each a wait that ended at Unix time ``end`` and lasted
``duration`` seconds (an inter-token gap of a streamed answer, a slow collective). A *spike* is a
sample longer than ``factor`` times the median (default 5: a 18 ms median makes a spike of 90
ms or more); spikes whose waits overlap or lie within ``merge_seconds`` of each other are one
*event* (eight streams stalled by one network hiccup are one event, not eight). Events are
*periodic* when there are at least three and every gap between consecutive starts lies within
half to one and a half times the median gap (the war story's "every four to six minutes").

Pure: numbers in, numbers and words out. The same code serves ``tpfabric bench serve``'s table
and ``tpfabric diagnose``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "SPIKE_FACTOR",
    "Period",
    "Spike",
    "SpikeReport",
    "find_spikes",
    "format_duration",
    "period_of",
]

#: a wait this many times the median is a spike
SPIKE_FACTOR = 5.0
#: waits a stretch needs for its own p99
_MIN_BUCKET = 20
_MIN_EVENTS_FOR_PERIOD = 3


@dataclass(frozen=True, slots=True)
class Spike:
    """One event: the waits that spiked together, from the start of the first to the end of
    the last (Unix seconds), the longest of them and how many there were."""

    start: float
    end: float
    peak: float
    samples: int


@dataclass(frozen=True, slots=True)
class Period:
    """The gaps between consecutive spike starts: least, most and median (seconds)."""

    low: float
    high: float
    median: float

    @property
    def words(self) -> str:
        """Return ``every 4.0-6.0 min`` (or ``every 180 s`` when the gaps agree to the unit)."""
        low, high = format_duration(self.low), format_duration(self.high)
        if low == high:
            return f"every {low}"
        unit = high.rsplit(" ", 1)[-1]
        if low.endswith(f" {unit}"):
            low = low.rsplit(" ", 1)[0]
        return f"every {low}-{high}"


@dataclass(frozen=True, slots=True)
class SpikeReport:
    """The spikes of one series: median and p99 of the waits (seconds), the ratio, the
    threshold a spike crossed, the events and their period (None when not periodic)."""

    samples: int
    median: float
    p99: float
    threshold: float
    spikes: tuple[Spike, ...]
    period: Period | None
    #: the worst short stretch: (its start, p99 of its waits), over buckets of ``bucket``
    #: seconds with at least :data:`_MIN_BUCKET` waits (None when none has that many)
    worst: tuple[float, float] | None = None
    bucket: float = 10.0

    @property
    def worst_ratio(self) -> float | None:
        """Return the worst stretch's p99 over the whole run's median."""
        if self.worst is None or self.median <= 0:
            return None
        return self.worst[1] / self.median

    @property
    def ratio(self) -> float | None:
        """Return p99 / median, None for a zero median."""
        return self.p99 / self.median if self.median > 0 else None

    def document(self) -> dict[str, object]:
        """Return the report as JSON (milliseconds, Unix seconds)."""
        return {
            "samples": self.samples,
            "median_ms": round(self.median * 1000, 3),
            "p99_ms": round(self.p99 * 1000, 3),
            "p99_over_median": round(self.ratio, 2) if self.ratio is not None else None,
            "worst_stretch": None
            if self.worst is None
            else {
                "start": round(self.worst[0], 3),
                "seconds": self.bucket,
                "p99_ms": round(self.worst[1] * 1000, 3),
                "p99_over_median": round(self.worst_ratio, 2)
                if self.worst_ratio is not None
                else None,
            },
            "spike_threshold_ms": round(self.threshold * 1000, 3),
            "spikes": [
                {
                    "start": round(s.start, 3),
                    "end": round(s.end, 3),
                    "peak_ms": round(s.peak * 1000, 3),
                    "waits": s.samples,
                }
                for s in self.spikes
            ],
            "periodic": self.period is not None,
            "period_s": None
            if self.period is None
            else {
                "low": round(self.period.low, 3),
                "high": round(self.period.high, 3),
                "median": round(self.period.median, 3),
            },
            "period_words": None if self.period is None else self.period.words,
        }


def format_duration(seconds: float) -> str:
    """Return ``180 ms``, ``2.9 s``, ``180 s`` or ``4.5 min``: two or three figures."""
    if seconds < 0.9995:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 239.5:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    position = 0.99 * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def find_spikes(
    samples: Sequence[tuple[float, float]],
    *,
    factor: float = SPIKE_FACTOR,
    merge_seconds: float | None = None,
    bucket: float = 10.0,
) -> SpikeReport | None:
    """Return the spikes of ``samples`` (``(end, duration)``), None without samples.

    ``merge_seconds``: spikes closer than this are one event (default: one second, or twice
    the median wait when that is longer); ``bucket``: the stretch, in seconds, whose p99 is
    reported for the worst one."""
    if not samples:
        return None
    waits = [duration for _, duration in samples]
    median = statistics.median(waits)
    threshold = factor * median
    merge = merge_seconds if merge_seconds is not None else max(1.0, 2 * median)
    events: list[Spike] = []
    for end, duration in sorted(samples, key=lambda s: s[0] - s[1]):
        if duration <= threshold or duration <= 0:
            continue
        start = end - duration
        if events and start <= events[-1].end + merge:
            last = events[-1]
            events[-1] = Spike(
                last.start, max(last.end, end), max(last.peak, duration), last.samples + 1
            )
        else:
            events.append(Spike(start, end, duration, 1))
    period = period_of([event.start for event in events])
    worst = _worst(samples, bucket)
    return SpikeReport(
        len(waits), median, _p99(waits), threshold, tuple(events), period, worst, bucket
    )


def _worst(samples: Sequence[tuple[float, float]], bucket: float) -> tuple[float, float] | None:
    """Return (start, p99) of the stretch of ``bucket`` seconds whose waits' p99 is highest:
    a tail that spikes for seconds every few minutes hides in a whole run's p99."""
    origin = min(end for end, _ in samples)
    buckets: dict[int, list[float]] = {}
    for end, wait in samples:
        buckets.setdefault(int((end - origin) // bucket), []).append(wait)
    worst = max(
        ((index, _p99(waits)) for index, waits in buckets.items() if len(waits) >= _MIN_BUCKET),
        key=lambda item: item[1],
        default=None,
    )
    return None if worst is None else (origin + worst[0] * bucket, worst[1])


def period_of(starts: Sequence[float]) -> Period | None:
    """Return the period of events starting at ``starts`` (sorted), None unless there are at
    least three and every gap lies within half to one and a half times the median gap."""
    if len(starts) < _MIN_EVENTS_FOR_PERIOD:
        return None
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    middle = statistics.median(gaps)
    if middle <= 0 or any(not 0.5 * middle <= gap <= 1.5 * middle for gap in gaps):
        return None
    return Period(min(gaps), max(gaps), middle)
