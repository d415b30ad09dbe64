"""NCCL Inspector output (the profiler plugin's JSON, ``plugins/profiler/inspector``): each
collective's bus bandwidth per rank, and when it ran.

One JSON object per collective per communicator, as JSON lines (the plugin writes one per line;
its README prints them pretty): ``header`` (communicator ``id``, ``rank``, ``n_ranks``,
``nnodes``), ``metadata`` (``inspector_output_format_version``, ``dump_timestamp_us``,
``hostname``, ``pid``) and ``coll_perf`` (``coll``, ``coll_sn``, ``coll_msg_size_bytes``,
``coll_exec_time_us``, ``coll_busbw_gbs``, ...). Format version 4 is read (the README's
``v4.0``); a file whose records carry two versions mixes two runs and is refused, naming both
lines. Records without ``coll_perf`` (point-to-point ones) are counted and left aside.

What is read as a slow rank: within one communicator, collective and message size, a rank whose
median bus bandwidth is below :data:`SLOW_FRACTION` of the best rank's (a collective moves at its
slowest member's pace, so ranks of one collective mostly agree; one that does not stands out).
When the ranks agree, Inspector says *when* collectives were slow, not *who*:
:func:`slow_collectives` gives the times whose bus bandwidth fell below half the communicator's
median, for lining up with the link timeline.

Pure: text in, records out.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.diagnose.json_documents import json_documents
from tpfabric_core.errors import InputError

__all__ = [
    "SLOW_FRACTION",
    "InspectorRecord",
    "InspectorSlowRank",
    "parse_nccl_inspector",
    "slow_collectives",
    "slow_ranks",
]

_WHAT = "NCCL Inspector output (NCCL_INSPECTOR_DUMP_DIR's files)"
#: a rank whose median bus bandwidth is under this share of the best rank's is slow
SLOW_FRACTION = 0.8
_MAJOR = "v4"


@dataclass(frozen=True, slots=True)
class InspectorRecord:
    """One collective on one rank."""

    line: int
    communicator: str
    rank: int
    ranks: int
    hostname: str
    time: float  # Unix seconds of the dump
    collective: str
    sequence: int
    size_bytes: int
    exec_time_us: float
    busbw_gbs: float


@dataclass(frozen=True, slots=True)
class InspectorSlowRank:
    """A rank whose bus bandwidth stands below its peers' in one communicator."""

    rank: int
    hostname: str
    communicator: str
    words: str
    line: int


def _number(value: object, path: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(where, f"{path}: {value!r:.40} is not a number", f"give the {_WHAT}")
    return float(value)


def _record(line: int, value: Any, source: str) -> tuple[InspectorRecord | None, str]:
    """Return the record of one document (None for one without ``coll_perf``) and its format
    version."""
    where = f"{source}:{line}"
    if not isinstance(value, dict) or not all(
        isinstance(value.get(key), dict) for key in ("header", "metadata")
    ):
        raise InputError(
            where,
            "not an NCCL Inspector record: no 'header' and 'metadata' objects",
            f"give the {_WHAT}, JSON mode (NCCL_INSPECTOR_PROM_DUMP=0)",
        )
    header, metadata = value["header"], value["metadata"]
    version = metadata.get("inspector_output_format_version")
    if not isinstance(version, str):
        raise InputError(where, "metadata.inspector_output_format_version: missing")
    if not (version == _MAJOR or version.startswith(f"{_MAJOR}.")):
        raise InputError(
            where,
            f"Inspector output format {version[:20]}; this tpfabric reads {_MAJOR}.x (NCCL's "
            "plugins/profiler/inspector README)",
            "take the output with an Inspector of format v4",
        )
    perf = value.get("coll_perf")
    if not isinstance(perf, dict):
        return None, version
    hostname = metadata.get("hostname")
    communicator = header.get("id")
    collective = perf.get("coll")
    if not isinstance(hostname, str) or not isinstance(communicator, str):
        raise InputError(where, "header.id or metadata.hostname: missing or not text")
    if not isinstance(collective, str):
        raise InputError(where, "coll_perf.coll: missing or not text")
    return (
        InspectorRecord(
            line=line,
            communicator=communicator,
            rank=int(_number(header.get("rank"), "header.rank", where)),
            ranks=int(_number(header.get("n_ranks"), "header.n_ranks", where)),
            hostname=hostname[:253],
            time=_number(metadata.get("dump_timestamp_us"), "metadata.dump_timestamp_us", where)
            / 1e6,
            collective=collective,
            sequence=int(_number(perf.get("coll_sn"), "coll_perf.coll_sn", where)),
            size_bytes=int(
                _number(perf.get("coll_msg_size_bytes"), "coll_perf.coll_msg_size_bytes", where)
            ),
            exec_time_us=_number(
                perf.get("coll_exec_time_us"), "coll_perf.coll_exec_time_us", where
            ),
            busbw_gbs=_number(perf.get("coll_busbw_gbs"), "coll_perf.coll_busbw_gbs", where),
        ),
        version,
    )


def parse_nccl_inspector(texts: Sequence[tuple[str, str]]) -> tuple[InspectorRecord, ...]:
    """Return the collective records of Inspector files (``(source, text)`` each: one file per
    process, as the plugin writes them); InputError naming the file and line of what cannot be
    read, of a second format version, or of a file without any collective record."""
    records: list[InspectorRecord] = []
    first_version: tuple[str, str] | None = None
    for source, text in texts:
        documents = json_documents(text, source, _WHAT)
        if not documents:
            raise InputError(source, "empty: no Inspector record in it", f"give the {_WHAT}")
        for line, value in documents:
            record, version = _record(line, value, source)
            if first_version is None:
                first_version = (version, f"{source}:{line}")
            elif version != first_version[0]:
                raise InputError(
                    f"{source}:{line}",
                    f"Inspector output format {version}, but {first_version[1]} is "
                    f"{first_version[0]}: the files mix two runs",
                    "give the output of one run of the job",
                )
            if record is not None:
                records.append(record)
    if not records:
        sources = ", ".join(source for source, _ in texts)
        raise InputError(sources, "no collective record (coll_perf) in the Inspector output")
    return tuple(records)


def slow_ranks(records: Sequence[InspectorRecord]) -> list[InspectorSlowRank]:
    """Return the ranks whose median bus bandwidth, in some communicator, collective and message
    size, is under :data:`SLOW_FRACTION` of the best rank's there (at least 3 records each)."""
    groups: dict[tuple[str, str, int], dict[int, list[InspectorRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for record in records:
        groups[(record.communicator, record.collective, record.size_bytes)][record.rank].append(
            record
        )
    found: dict[tuple[str, int], InspectorSlowRank] = {}
    for (communicator, collective, size), by_rank in sorted(groups.items()):
        medians = {
            rank: statistics.median(r.busbw_gbs for r in rows)
            for rank, rows in by_rank.items()
            if len(rows) >= 3
        }
        if len(medians) < 2:
            continue
        best = max(medians.values())
        for rank, median in sorted(medians.items()):
            if best > 0 and median < SLOW_FRACTION * best and (communicator, rank) not in found:
                rows = by_rank[rank]
                found[(communicator, rank)] = InspectorSlowRank(
                    rank, rows[0].hostname, communicator,
                    f"NCCL Inspector: {collective} of {size:,} bytes at a median {median:.1f} GB/s "
                    f"bus bandwidth, {median / best:.0%} of the best rank's {best:.1f} GB/s "
                    f"(communicator {communicator})", rows[0].line,
                )  # fmt: skip
    return list(found.values())


def slow_collectives(records: Sequence[InspectorRecord]) -> list[tuple[float, str]]:
    """Return ``(time, words)`` of the collectives whose bus bandwidth fell under half their
    communicator's median for that collective and size (the times a job was slow)."""
    groups: dict[tuple[str, str, int], list[InspectorRecord]] = defaultdict(list)
    for record in records:
        groups[(record.communicator, record.collective, record.size_bytes)].append(record)
    slow = []
    for (communicator, collective, _), rows in groups.items():
        if len(rows) < 3:
            continue
        median = statistics.median(r.busbw_gbs for r in rows)
        slow += [
            (
                r.time,
                (
                    f"{collective} #{r.sequence} on rank {r.rank} at {r.busbw_gbs:.1f} GB/s "
                    f"(median {median:.1f}, communicator {communicator})"
                ),
            )
            for r in rows
            if r.busbw_gbs < 0.5 * median
        ]
    return sorted(slow)
