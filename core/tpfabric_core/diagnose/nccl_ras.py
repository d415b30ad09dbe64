"""NCCL RAS JSON (``ncclras -f json``, NCCL >= 2.28.7): which ranks a communicator misses or
leaves behind, with the host, process and GPU of each.

The format, as NCCL's user guide documents it (troubleshooting/ras.rst, "JSON Output")::

    {"nccl_version": "2.29.1", "timestamp": "2025-12-19 13:06:53", "communicators": [
       {"hash": "0xae94...", "size": 2, "ranks": [{"rank": 0, "host": "172.16.64.245",
         "pid": 1524344, "cuda_dev": 0, "nvml_dev": 0, "status": {"init_state": 0,
         "async_error": 0, ...}, "collective_counts": {"AllReduce": 0, ...}}],
        "missing_ranks": [{"rank": 1, "host": ..., "status": {"unresponsive": true,
         "considered_dead": false}}]}], ...}

A file may hold several documents (queries appended one after another): they must come from
one NCCL version, or the file mixes two runs. What is read as a slow rank, and only that:

- a *missing* rank (``missing_ranks``: RAS could not reach it, or considers it dead);
- a rank with an error (``async_error`` not 0, or ``init_state`` neither 0 nor 7);
- a rank *behind* its communicator's other ranks in launched collectives in *every* query of
  the file, with at least two queries. In one query, RAS's guide says, counts differ routinely
  while collectives run; such a rank is reported as seen, never as slow.

Pure: text in, records out; errors name ``<file>:<line>`` and the JSON path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core.diagnose.json_documents import json_documents
from tpfabric_core.errors import InputError

__all__ = ["RasCommunicator", "RasRank", "RasReport", "RasSlowRank", "parse_nccl_ras", "slow_ranks"]

_WHAT = "NCCL RAS JSON output (ncclras -f json, NCCL >= 2.28.7)"
_IN_PROGRESS = 7  # ncclInProgress: initialization still running


@dataclass(frozen=True, slots=True)
class RasRank:
    """One rank of a communicator as one RAS query saw it."""

    rank: int
    host: str
    pid: int | None
    cuda_dev: int | None
    nvml_dev: int | None
    missing: bool = False
    unresponsive: bool = False
    considered_dead: bool = False
    async_error: int = 0
    init_state: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RasCommunicator:
    """One communicator of one query: its hash, size and ranks (present and missing)."""

    hash: str
    size: int
    ranks: tuple[RasRank, ...]


@dataclass(frozen=True, slots=True)
class RasReport:
    """One query (one JSON document) and the line it starts on."""

    source: str
    line: int
    nccl_version: str
    timestamp: str
    communicators: tuple[RasCommunicator, ...]


@dataclass(frozen=True, slots=True)
class RasSlowRank:
    """A rank RAS names as missing, in error, or behind in every query; ``words`` say which."""

    rank: int
    host: str
    cuda_dev: int | None
    nvml_dev: int | None
    communicator: str
    words: str
    where: str


def _int(value: object, path: str, where: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(where, f"{path}: {value!r:.40} is not a whole number", _fix())
    return value


def _fix() -> str:
    return f"give the {_WHAT} unchanged"


def _object(value: object, path: str, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InputError(where, f"{path}: expected an object", _fix())
    return value


def _rank(raw: object, path: str, where: str, *, missing: bool) -> RasRank:
    entry = _object(raw, path, where)
    status = _object(entry.get("status") or {}, f"{path}.status", where)
    host = entry.get("host")
    if not isinstance(host, str) or not host:
        raise InputError(where, f"{path}.host: missing or not text", _fix())
    counts_raw = _object(entry.get("collective_counts") or {}, f"{path}.collective_counts", where)
    counts = {
        str(name): _int(count, f"{path}.collective_counts.{name}", where) or 0
        for name, count in counts_raw.items()
    }
    return RasRank(
        rank=_int(entry.get("rank"), f"{path}.rank", where) or 0,
        host=host[:253],
        pid=_int(entry.get("pid"), f"{path}.pid", where, optional=True),
        cuda_dev=_int(entry.get("cuda_dev"), f"{path}.cuda_dev", where, optional=True),
        nvml_dev=_int(entry.get("nvml_dev"), f"{path}.nvml_dev", where, optional=True),
        missing=missing,
        unresponsive=status.get("unresponsive") is True,
        considered_dead=status.get("considered_dead") is True,
        async_error=_int(status.get("async_error", 0), f"{path}.status.async_error", where) or 0,
        init_state=_int(status.get("init_state", 0), f"{path}.status.init_state", where) or 0,
        counts=counts,
    )


def _communicator(raw: object, path: str, where: str) -> RasCommunicator:
    entry = _object(raw, path, where)
    digest = entry.get("hash")
    if not isinstance(digest, str):
        raise InputError(where, f"{path}.hash: missing or not text", _fix())
    ranks = []
    for key, missing in (("ranks", False), ("missing_ranks", True)):
        listed = entry.get(key) or []
        if not isinstance(listed, list):
            raise InputError(where, f"{path}.{key}: expected a list", _fix())
        ranks += [
            _rank(item, f"{path}.{key}[{index}]", where, missing=missing)
            for index, item in enumerate(listed)
        ]
    size = _int(entry.get("size", len(ranks)), f"{path}.size", where) or len(ranks)
    return RasCommunicator(digest, size, tuple(sorted(ranks, key=lambda r: r.rank)))


def parse_nccl_ras(text: str, source: str) -> tuple[RasReport, ...]:
    """Return each query of an NCCL RAS JSON file; InputError naming the file, the line and the
    JSON path of anything it cannot read, or when two queries come from different NCCL
    versions."""
    documents = json_documents(text, source, _WHAT)
    if not documents:
        raise InputError(source, "empty: no RAS query in it", f"write the {_WHAT} into it")
    reports = []
    for line, value in documents:
        where = f"{source}:{line}"
        document = value if isinstance(value, dict) else None
        if document is None or not isinstance(document.get("communicators"), list):
            raise InputError(
                where,
                "not NCCL RAS JSON: no 'communicators' list (the text output of ncclras, or "
                "another file?)",
                "take it with ncclras -f json (NCCL >= 2.28.7)",
            )
        version = document.get("nccl_version")
        if not isinstance(version, str):
            raise InputError(where, "nccl_version: missing or not text", _fix())
        communicators = tuple(
            _communicator(raw, f"communicators[{index}]", where)
            for index, raw in enumerate(document["communicators"])
        )
        reports.append(
            RasReport(source, line, version, str(document.get("timestamp") or ""), communicators)
        )
    first = reports[0]
    for report in reports[1:]:
        if report.nccl_version != first.nccl_version:
            raise InputError(
                f"{source}:{report.line}",
                f"NCCL {report.nccl_version}, but the query on line {first.line} is NCCL "
                f"{first.nccl_version}: the file mixes two runs",
                "give the queries of one run of the job in one file",
            )
    return tuple(reports)


def _behind(communicator: RasCommunicator) -> dict[int, int]:
    """Return, per present rank behind the communicator's most advanced one in any collective,
    by how many operations it is behind at most."""
    present = [rank for rank in communicator.ranks if not rank.missing]
    names = {name for rank in present for name in rank.counts}
    most = {name: max(rank.counts.get(name, 0) for rank in present) for name in names}
    behind = {}
    for rank in present:
        gap = max((most[name] - rank.counts.get(name, 0) for name in names), default=0)
        if gap > 0:
            behind[rank.rank] = gap
    return behind


def slow_ranks(reports: Sequence[RasReport]) -> tuple[list[RasSlowRank], list[str]]:
    """Return the ranks the queries name as slow (see the module docstring), and what else they
    said that is not a finding (a rank behind in one query only)."""
    found: dict[tuple[str, int], RasSlowRank] = {}
    seen: list[str] = []
    last = reports[-1]
    for communicator in last.communicators:
        where = f"{last.source}:{last.line}"
        for rank in communicator.ranks:
            why = []
            if rank.missing:
                why.append(
                    "missing: RAS considers it dead"
                    if rank.considered_dead
                    else "missing: RAS could not reach it (unresponsive)"
                    if rank.unresponsive
                    else "missing from the communicator"
                )
            if rank.async_error:
                why.append(f"asynchronous error {rank.async_error}")
            if rank.init_state not in (0, _IN_PROGRESS):
                why.append(f"initialization failed (state {rank.init_state})")
            if why:
                found[(communicator.hash, rank.rank)] = RasSlowRank(
                    rank.rank, rank.host, rank.cuda_dev, rank.nvml_dev, communicator.hash,
                    f"NCCL RAS: {', '.join(why)} in communicator {communicator.hash}", where,
                )  # fmt: skip
    behind_each = [
        {(c.hash, rank): gap for c in report.communicators for rank, gap in _behind(c).items()}
        for report in reports
    ]
    always = set(behind_each[0]).intersection(*behind_each[1:])
    by_rank = {(c.hash, r.rank): r for c in last.communicators for r in c.ranks}
    for key in sorted(always):
        behind = by_rank.get(key)
        if behind is None or key in found:
            continue
        rank = behind
        gaps = ", ".join(str(each[key]) for each in behind_each)
        if len(reports) >= 2:
            found[key] = RasSlowRank(
                rank.rank, rank.host, rank.cuda_dev, rank.nvml_dev, key[0],
                f"NCCL RAS: behind its communicator {key[0]} in all {len(reports)} queries "
                f"(by {gaps} collectives)", f"{last.source}:{last.line}",
            )  # fmt: skip
        else:
            seen.append(
                f"{last.source}: rank {rank.rank} was {gaps} collective(s) behind in the one "
                "RAS query: normal while collectives run (NCCL's guide); not read as slow, give "
                "two queries to tell"
            )
    return sorted(found.values(), key=lambda r: (r.communicator, r.rank)), seen
