"""The numbers of ``tpfabric bench serve``: what one streamed request saw, and the percentiles of
a run, per endpoint and between two (pure: no I/O, no clock, no client library).

A request's times are seconds from when it was sent, taken by the client as each chunk arrives:
the first chunk with content (time to first token, TTFT), the gaps between content chunks
(inter-token latency, ITL: a chunk may carry more than one token) and the last one. Each chunk's
arrival is kept in Unix seconds as well (``chunk_times``), so the run's spikes have dates: the
ITL waits longer than five times their median, when they came and whether on a period
(:mod:`tpfabric_core.diagnose.spikes`), and the p99 of the worst ten seconds. Its decode
rate is ``(tokens - 1) / (last - first)``: the tokens after the first over the time they took to
stream, what a reader of the answer feels as its speed; its inverse, time per output token
(TPOT), is reported too, since the slow tail of a rate is its low percentiles, of TPOT its high.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core.diagnose.spikes import find_spikes

__all__ = [
    "QUANTILES",
    "RequestResult",
    "endpoint_summary",
    "itl_spikes",
    "percentile",
    "percentiles",
    "ratios",
]

#: the percentiles reported for every latency and rate
QUANTILES = (0.5, 0.95, 0.99)
#: how the output tokens were counted: the server's usage chunk, or one token a content chunk
COUNTED_BY_USAGE = "usage"
COUNTED_BY_CHUNKS = "content chunks"


@dataclass(frozen=True)
class RequestResult:
    """One streamed request: its times in seconds from the send, its output tokens, or why it
    failed (``error``: a short kind such as ``timeout`` or ``HTTP 500``, None when it worked)."""

    error: str | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    total_s: float | None = None
    tokens: int = 0
    #: True when ``tokens`` is the server's ``usage.completion_tokens``, else content chunks
    tokens_from_usage: bool = False
    chunk_gaps_s: tuple[float, ...] = field(default=())
    #: Unix seconds (the client's clock): sent, response headers in, each content chunk in
    sent_at: float | None = None
    answered_at: float | None = None
    chunk_times: tuple[float, ...] = field(default=())
    #: the response's HTTP Date header in Unix seconds (the endpoint's clock), None if absent
    date: float | None = None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Return the tokens after the first over the time they took, None under two tokens."""
        if self.first_token_s is None or self.last_token_s is None or self.tokens < 2:
            return None
        spent = self.last_token_s - self.first_token_s
        return (self.tokens - 1) / spent if spent > 0 else None

    @property
    def time_per_output_token_s(self) -> float | None:
        """Return the time the tokens after the first took, per token (TPOT: the inverse of the
        decode rate, whose high percentiles are the slow tail), None under two tokens."""
        if self.first_token_s is None or self.last_token_s is None or self.tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (self.tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values`` by linear interpolation between the two
    nearest ranks (as numpy's default, Hyndman and Fan's type 7): position ``q * (n - 1)`` in
    the sorted values. One value is every percentile of itself; empty input raises ValueError.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not within 0..1")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def percentiles(
    values: Sequence[float], scale: float = 1.0, digits: int = 2
) -> dict[str, float] | None:
    """Return ``p50``, ``p95``, ``p99`` and ``mean`` of ``values`` times ``scale`` (1000: seconds
    to ms), rounded; None when there are no values."""
    if not values:
        return None
    result = {f"p{round(q * 100)}": round(percentile(values, q) * scale, digits) for q in QUANTILES}
    result["mean"] = round(sum(values) / len(values) * scale, digits)
    return result


def endpoint_summary(results: Iterable[RequestResult], wall_s: float) -> dict[str, Any]:
    """Return one endpoint's numbers over a run of ``wall_s`` seconds: the requests sent, worked
    and failed (by kind), output tokens, how they were counted, the percentiles of TTFT, ITL
    TPOT and end-to-end latency (ms) and of each request's decode rate (tokens/s), and the output
    throughput of the run (all tokens over the wall time)."""
    done = list(results)
    worked = [r for r in done if r.error is None]
    tokens = sum(r.tokens for r in worked)
    by_usage = sum(1 for r in worked if r.tokens_from_usage)
    counted_by = (
        COUNTED_BY_USAGE
        if worked and by_usage == len(worked)
        else COUNTED_BY_CHUNKS
        if by_usage == 0
        else f"{COUNTED_BY_USAGE} ({by_usage} requests), {COUNTED_BY_CHUNKS} (the rest)"
    )
    rates = [rate for r in worked if (rate := r.decode_tokens_per_s) is not None]
    per_token = [t for r in worked if (t := r.time_per_output_token_s) is not None]
    return {
        "requests": len(done),
        "ok": len(worked),
        "failed": len(done) - len(worked),
        "errors": dict(Counter(r.error for r in done if r.error is not None).most_common()),
        "output_tokens": tokens,
        "tokens_counted_by": counted_by,
        "wall_s": round(wall_s, 3),
        "output_tokens_per_s": round(tokens / wall_s, 1) if wall_s > 0 else None,
        "ttft_ms": percentiles(
            [r.first_token_s for r in worked if r.first_token_s is not None], 1000
        ),
        "itl_ms": percentiles([gap for r in worked for gap in r.chunk_gaps_s], 1000),
        "tpot_ms": percentiles(per_token, 1000),
        "e2e_ms": percentiles([r.total_s for r in worked if r.total_s is not None], 1000),
        "decode_tokens_per_s": percentiles(rates, digits=1),
        "itl_spikes": itl_spikes(worked),
    }


def itl_spikes(results: Iterable[RequestResult]) -> dict[str, Any] | None:
    """Return the ITL spikes of ``results`` as JSON (:class:`SpikeReport`), None without any
    two chunks."""
    samples = [
        (b, b - a) for r in results for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)
    ]
    report = find_spikes(samples)
    return report.document() if report is not None else None


#: the summary's percentile groups and its single figures that the ratio covers
RATIO_GROUPS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s")
RATIO_FIGURES = ("output_tokens_per_s",)


def ratios(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``second / first`` for each percentile of the latency and rate groups and for the
    output throughput (``ttft_ms.p50`` 2.0: the second endpoint's median TTFT is twice the
    first's); a figure missing or zero on either side is None."""

    def ratio(a: Any, b: Any) -> float | None:
        return round(b / a, 3) if a and b is not None else None

    result: dict[str, Any] = {}
    for group in RATIO_GROUPS:
        a, b = first.get(group) or {}, second.get(group) or {}
        result[group] = {key: ratio(a.get(key), b.get(key)) for key in (a or b)}
    for key in RATIO_FIGURES:
        result[key] = ratio(first.get(key), second.get(key))
    return result
