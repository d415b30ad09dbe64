"""The trace ``tpfabric bench serve --trace FILE`` writes: when each chunk of each streamed answer
arrived, in Unix seconds of the client's clock, and what the endpoint's clock said.

One JSON document::

    {"format": "tpfabric-serve-trace", "version": 1, "client": "bench-host",
     "targets": [{"label": "endpoint", "endpoint": "http://serve:8000/v1", "model": "m",
                  "requests": [{"sent": 1718000000.123, "answered": 1718000000.180,
                                "date": 1718000000, "chunks": [1718000000.25, ...],
                                "error": null}, ...]}]}

``sent``/``answered``: when the request left and its response headers came back; ``date``: the
response's HTTP ``Date`` header (whole seconds of the endpoint's clock), null when the server
sent none. From them :func:`endpoint_offset` bounds the endpoint's clock minus the client's:
the endpoint stamped ``date`` at some moment between ``sent`` and ``answered``, in the second
``[date, date + 1)``, so each response bounds the offset to ``[date - answered, date + 1 -
sent]``; the bound of the trace is the intersection over its responses.

Pure: :func:`trace_document` builds the document the bench writes, :func:`parse_serve_trace`
reads it back (errors name the file and the request), :func:`itl_samples` gives the
inter-token waits for :mod:`.spikes`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.diagnose.json_documents import json_documents
from tpfabric_core.errors import InputError

__all__ = [
    "FORMAT",
    "ServeTarget",
    "ServeTrace",
    "TracedRequest",
    "endpoint_offset",
    "itl_samples",
    "parse_serve_trace",
    "trace_document",
]

FORMAT = "tpfabric-serve-trace"
_VERSION = 1
_WHAT = "trace of tpfabric bench serve --trace"


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """One streamed request, in Unix seconds of the client's clock."""

    sent: float
    answered: float | None
    date: float | None
    chunks: tuple[float, ...]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ServeTarget:
    """One endpoint of the trace and its requests."""

    label: str
    endpoint: str
    model: str
    requests: tuple[TracedRequest, ...]

    @property
    def span(self) -> tuple[float, float] | None:
        """Return (first send, last chunk), None without a request."""
        if not self.requests:
            return None
        last = max((r.chunks[-1] if r.chunks else r.sent) for r in self.requests)
        return min(r.sent for r in self.requests), last


@dataclass(frozen=True, slots=True)
class ServeTrace:
    """A whole trace file."""

    source: str
    client: str
    targets: tuple[ServeTarget, ...]


def trace_document(client: str, targets: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Return the trace document of ``targets`` (each: label, endpoint, model, requests as
    :class:`TracedRequest` fields), times rounded to the microsecond."""

    def stamp(value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    return {
        "format": FORMAT,
        "version": _VERSION,
        "client": client,
        "targets": [
            {
                "label": target["label"],
                "endpoint": target["endpoint"],
                "model": target["model"],
                "requests": [
                    {
                        "sent": stamp(r.sent),
                        "answered": stamp(r.answered),
                        "date": r.date,
                        "chunks": [stamp(t) for t in r.chunks],
                        "error": r.error,
                    }
                    for r in target["requests"]
                ],
            }
            for target in targets
        ],
    }


def _time(value: object, where: str, path: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e11:
        raise InputError(where, f"{path}: {value!r:.40} is not a Unix time", f"give the {_WHAT}")
    return float(value)


def _request(raw: object, where: str, path: str) -> TracedRequest:
    if not isinstance(raw, dict):
        raise InputError(where, f"{path}: expected an object")
    chunks_raw = raw.get("chunks")
    if not isinstance(chunks_raw, list):
        raise InputError(where, f"{path}.chunks: expected a list of times")
    chunks = tuple(_time(t, where, f"{path}.chunks[{i}]") or 0.0 for i, t in enumerate(chunks_raw))
    if any(b < a for a, b in itertools.pairwise(chunks)):
        raise InputError(where, f"{path}.chunks: times go backwards", f"give the {_WHAT}")
    error = raw.get("error")
    return TracedRequest(
        sent=_time(raw.get("sent"), where, f"{path}.sent") or 0.0,
        answered=_time(raw.get("answered"), where, f"{path}.answered", optional=True),
        date=_time(raw.get("date"), where, f"{path}.date", optional=True),
        chunks=chunks,
        error=str(error)[:80] if error is not None else None,
    )


def parse_serve_trace(text: str, source: str) -> ServeTrace:
    """Return the trace in ``text``; InputError naming ``source``, the line and the request of
    anything it cannot read."""
    documents = json_documents(text, source, _WHAT)
    if len(documents) != 1:
        raise InputError(
            source,
            f"{len(documents)} JSON documents, a trace is one",
            f"give one {_WHAT} per --serve-trace",
        )
    line, value = documents[0]
    where = f"{source}:{line}"
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise InputError(
            where,
            f'not a {_WHAT} (no "format": "{FORMAT}"; the summary of --json is another file)',
            "write one with tpfabric bench serve --trace FILE",
        )
    if value.get("version") != _VERSION:
        raise InputError(
            where,
            f"trace version {str(value.get('version'))[:10]}, this tpfabric reads {_VERSION}",
            "take the trace with the same tpfabric version",
        )
    targets_raw = value.get("targets")
    if not isinstance(targets_raw, list) or not targets_raw:
        raise InputError(where, "targets: expected a non-empty list")
    targets = []
    for index, raw in enumerate(targets_raw):
        if not isinstance(raw, dict) or not isinstance(raw.get("requests"), list):
            raise InputError(where, f"targets[{index}]: expected an object with requests")
        targets.append(
            ServeTarget(
                label=str(raw.get("label") or f"target {index}")[:80],
                endpoint=str(raw.get("endpoint") or "")[:400],
                model=str(raw.get("model") or "")[:200],
                requests=tuple(
                    _request(r, where, f"targets[{index}].requests[{i}]")
                    for i, r in enumerate(raw["requests"])
                ),
            )
        )
    return ServeTrace(source, str(value.get("client") or "")[:253], tuple(targets))


def itl_samples(target: ServeTarget) -> list[tuple[float, float]]:
    """Return ``(arrival, wait)`` of every inter-token wait of the target's answers."""
    return [
        (b, b - a)
        for request in target.requests
        for a, b in zip(request.chunks, request.chunks[1:], strict=False)
    ]


def endpoint_offset(target: ServeTarget) -> tuple[float, float] | str | None:
    """Return the bound ``(low, high)`` on the endpoint's clock minus the client's, from the
    responses' ``Date`` headers; None when no response carried one; a sentence when the
    responses disagree (no offset fits them all: several servers with different clocks, or a
    clock that jumped during the run)."""
    low, high = float("-inf"), float("inf")
    used = 0
    for request in target.requests:
        if request.date is None or request.answered is None:
            continue
        used += 1
        low = max(low, request.date - request.answered)
        high = min(high, request.date + 1 - request.sent)
    if not used:
        return None
    if low > high:
        return (
            f"the Date headers of {used} responses fit no single clock offset (servers with "
            "different clocks behind the endpoint, or a clock that jumped)"
        )
    return low, high
