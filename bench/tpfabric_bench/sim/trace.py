"""Job traces: the seeded generator and the CSV file format users can replay their own in.

One row per job, with a header::

    name,arrival_s,workers,gpus_per_worker,params_b,tp,pp,micro_batches,steps
    job-0000,12.5,8,8,70,8,4,16,1400

``arrival_s`` is seconds from the start of the trace, ``params_b`` billions of parameters; the
data-parallel size follows (``workers x gpus_per_worker / (tp x pp)``, which must be whole).
Every gang asks for the API's default topology policy (preferred, leaf level, no wait).

Two kinds of generated traces: ``small-jobs`` (2-32 workers, models of 7-175B) and
``huge-jobs`` (the same mix plus about 1 in 100 pre-training jobs of a quarter or half of a
128-node cluster, 256 or 512 workers on larger ones, 175B-405B, running for hours). Steps are
drawn so that the job would run for a log-normal duration (median one hour; four for the huge
ones) on one idle leaf; arrivals are Poisson at ``target_load`` of the cluster's GPUs.
This module must never simulate.
"""

from __future__ import annotations

import csv
import io
import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from tpfabric_bench.sim.constants import DEFAULT_CONSTANTS, SimConstants
from tpfabric_bench.sim.model import ModelShape, ideal_traffic
from tpfabric_core.placement import GangRequest

__all__ = ["TRACE_KINDS", "SimJob", "generate_trace", "read_trace", "write_trace"]

TRACE_KINDS = ("small-jobs", "huge-jobs")
SMALL_SIZES = (2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 24, 32)
TARGET_LOAD = 0.85


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a trace: when it arrives, the gang it asks for, what it trains, how long."""

    name: str
    arrival_s: float
    workers: int
    gpus_per_worker: int
    params_b: float
    tp: int
    pp: int
    micro_batches: int
    steps: int

    @property
    def shape(self) -> ModelShape:
        """Return the model shape of the job."""
        return ModelShape(self.params_b, self.tp, self.pp, self.micro_batches)

    @property
    def gpus(self) -> int:
        """Return the GPUs of the whole gang."""
        return self.workers * self.gpus_per_worker

    def request(self) -> GangRequest:
        """Return the placement engine's request (the API's default topology policy)."""
        return GangRequest(
            name=self.name,
            workers=self.workers,
            gpus_per_worker=self.gpus_per_worker,
            rdma_per_worker=self.gpus_per_worker,
            tp_size=self.tp,
            pp_size=self.pp,
        )


def _shape(rng: random.Random, workers: int, gpus_per_worker: int, *, huge: bool) -> ModelShape:
    """Return a plausible model shape for a gang of ``workers`` x ``gpus_per_worker`` GPUs."""
    gpus = workers * gpus_per_worker
    stages: tuple[int, ...]
    if huge:
        params, tp, stages = rng.choice((175.0, 405.0)), 8, (8, 16)
    elif workers <= 4:
        params, tp, stages = rng.choice((7.0, 13.0)), rng.choice((4, 8)), (1,)
    elif workers <= 16:
        params, tp, stages = rng.choice((13.0, 34.0, 70.0)), 8, (1, 2, 4)
    else:
        params, tp, stages = rng.choice((70.0, 175.0)), 8, (4, 8)
    pp = rng.choice([p for p in stages if gpus % (tp * p) == 0] or [1])
    return ModelShape(params, tp, pp, max(8, 2 * pp))


def huge_sizes(nodes: int) -> tuple[int, int]:
    """Return the two gang sizes of huge jobs on ``nodes`` nodes (a quarter and a half, capped)."""
    return max(2, min(nodes // 4, 256)), max(2, min(nodes // 2, 512))


def generate_trace(
    kind: str,
    *,
    jobs: int,
    nodes: int,
    gpus_per_node: int = 8,
    seed: int = 7,
    constants: SimConstants = DEFAULT_CONSTANTS,
) -> list[SimJob]:
    """Return a seeded trace of ``kind`` (:data:`TRACE_KINDS`) for a ``nodes``-node cluster."""
    if kind not in TRACE_KINDS:
        raise ValueError(f"unknown trace kind {kind!r}; use one of {', '.join(TRACE_KINDS)}")
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    huge_every = 100 if kind == "huge-jobs" else 0
    drafts: list[tuple[int, int, ModelShape, int, float]] = []
    for k in range(jobs):
        huge = bool(huge_every) and k % huge_every == huge_every // 2
        workers = rng.choice(huge_sizes(nodes)) if huge else rng.choice(SMALL_SIZES)
        workers = min(workers, nodes)
        per_worker = 8 if huge or rng.random() < 0.85 else 4
        shape = _shape(rng, workers, per_worker, huge=huge)
        median = 4 * 3600.0 if huge else 3600.0
        duration = rng.lognormvariate(math.log(median), 0.5 if huge else 0.8)
        step = ideal_traffic(shape, workers, per_worker, constants).alone()
        steps = max(1, round(duration / step))
        drafts.append((workers, per_worker, shape, steps, steps * step))
    mean_work = statistics.fmean(w * g * d for w, g, _, _, d in drafts)
    rate = TARGET_LOAD * nodes * gpus_per_node / mean_work
    clock = 0.0
    trace = []
    for k, (workers, per_worker, shape, steps, _) in enumerate(drafts):
        clock += rng.expovariate(rate)
        trace.append(
            SimJob(
                name=f"job-{k:04d}",
                arrival_s=round(clock, 3),
                workers=workers,
                gpus_per_worker=per_worker,
                params_b=shape.params_b,
                tp=shape.tp,
                pp=shape.pp,
                micro_batches=shape.micro_batches,
                steps=steps,
            )
        )
    return trace


_COLUMNS = tuple(f.name for f in fields(SimJob))


def write_trace(jobs: Iterable[SimJob]) -> str:
    """Return ``jobs`` as CSV text (header first)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_COLUMNS)
    for job in jobs:
        writer.writerow(f"{v:.10g}" if isinstance(v, float) else v for v in astuple(job))
    return out.getvalue()


def read_trace(path: Path) -> list[SimJob]:
    """Return the jobs of a CSV trace file; ValueError naming the row and column on bad input."""
    jobs = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        for line, row in enumerate(reader, 2):
            try:
                job = SimJob(
                    name=row["name"],
                    arrival_s=float(row["arrival_s"]),
                    workers=int(row["workers"]),
                    gpus_per_worker=int(row["gpus_per_worker"]),
                    params_b=float(row["params_b"]),
                    tp=int(row["tp"]),
                    pp=int(row["pp"]),
                    micro_batches=int(row["micro_batches"]),
                    steps=int(row["steps"]),
                )
                job.shape.data_parallel(job.gpus)
                job.request()
            except ValueError as err:
                raise ValueError(f"{path}:{line}: {err}") from err
            jobs.append(job)
    return sorted(jobs, key=lambda j: (j.arrival_s, j.name))


def trace_columns() -> Sequence[str]:
    """Return the CSV columns, in order."""
    return _COLUMNS
