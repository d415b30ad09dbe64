"""Rank -> pod -> node -> GPU -> HCA port: the job's ranks as its pods show them, and the ranks a
job-side input names, mapped onto them.

A pod is one *worker* (its rank label: a TensorParallelJob's worker index, a Gang's rank); its
GPUs are numbered in the pod's order (``rdma-init``'s pairing, PCI bus order). Collective
libraries number *GPU ranks*; when an input names only a rank, the GPU rank is taken as
``worker x GPUs per pod + GPU`` (torchrun's order, one process per GPU), and that assumption is
said wherever it is used. An input that names a host (NCCL RAS: the process's IP address; NCCL
Inspector and nvidia-resiliency-ext: its hostname) is matched to the pod with that IP or
hostname (``spec.hostname``, which a TensorParallelJob's worker keeps across attempts, else the
pod's name); a host or rank that is none of the job's is an error naming the input and the
line: the input is another job's, or the pods were replaced since.

Pure: pods and parsed inputs in, ranks out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tpfabric_core.diagnose.rdma_summary import GpuPair, PodPairing, pod_pairing
from tpfabric_core.errors import InputError
from tpfabric_core.input_limits import whole_number
from tpfabric_core.placement.pod_fit import pod_gpus

__all__ = ["GpuRank", "JobRanks", "Worker", "job_ranks"]


@dataclass(frozen=True, slots=True)
class Worker:
    """One pod of the job: its rank label, name, node, addresses, GPUs and published pairing."""

    worker: int
    pod: str
    hostname: str
    node: str | None
    addresses: tuple[str, ...]
    gpus: int
    pairing: PodPairing | None
    pairing_problem: str = ""
    rails: str | None = None  # the pod's tpfabric.io/rails annotation
    phase: str = ""
    started: float | None = None


@dataclass(frozen=True, slots=True)
class GpuRank:
    """One GPU rank: its number, worker, GPU index in the pod, and its port where known."""

    rank: int
    worker: Worker
    gpu: int
    pair: GpuPair | None

    @property
    def words(self) -> str:
        """Return ``rank 13 = worker 1 GPU 5 on dgx-07``."""
        node = self.worker.node or "no node"
        return f"rank {self.rank} = worker {self.worker.worker} GPU {self.gpu} on {node}"


@dataclass(frozen=True, slots=True)
class JobRanks:
    """The job's workers by worker number and its GPU ranks by rank number."""

    workers: Mapping[int, Worker]
    gpus_per_worker: int

    @property
    def size(self) -> int:
        """Return the number of GPU ranks."""
        return len(self.workers) * self.gpus_per_worker

    def rank(self, worker: Worker, gpu: int) -> GpuRank:
        """Return GPU ``gpu`` of ``worker`` as a rank (``worker x GPUs + gpu``)."""
        pair = worker.pairing.of_gpu(gpu) if worker.pairing is not None else None
        return GpuRank(worker.worker * self.gpus_per_worker + gpu, worker, gpu, pair)

    def all_ranks(self) -> list[GpuRank]:
        """Return every GPU rank of the job, in order."""
        return [
            self.rank(worker, gpu)
            for _, worker in sorted(self.workers.items())
            for gpu in range(self.gpus_per_worker)
        ]

    def by_number(self, rank: int, source: str) -> GpuRank:
        """Return GPU rank ``rank`` (``worker x GPUs + gpu``); InputError naming ``source`` when
        the job has no such rank."""
        worker = self.workers.get(rank // self.gpus_per_worker) if self.gpus_per_worker else None
        if worker is None or rank < 0:
            raise InputError(
                source,
                f"rank {rank} is none of the job's {self.size} ranks ({len(self.workers)} pods x "
                f"{self.gpus_per_worker} GPUs): the input is another job's, or from before the "
                "job changed size",
                "give the input of this job's current run",
            )
        return self.rank(worker, rank % self.gpus_per_worker)

    def by_host(self, host: str, gpu: int | None, source: str, what: str) -> GpuRank:
        """Return the rank on the pod whose address or hostname is ``host`` at its GPU ``gpu``
        (0 when the input names none); InputError naming ``source`` when no pod is that host."""
        for worker in self.workers.values():
            if host in worker.addresses or host in (worker.hostname, worker.pod):
                index = gpu if gpu is not None else 0
                if not 0 <= index < max(self.gpus_per_worker, 1):
                    raise InputError(
                        source, f"{what} names GPU {index} of {host}, which has "
                        f"{self.gpus_per_worker}", "give the input of this job's current run",
                    )  # fmt: skip
                return self.rank(worker, index)
        known = ", ".join(
            sorted({w.hostname for w in self.workers.values()} | {
                a for w in self.workers.values() for a in w.addresses
            })
        )  # fmt: skip
        raise InputError(
            source,
            f"{what} names host {host}, none of the job's pods ({known[:300]}): the input is "
            "another job's, or the pods were replaced since",
            "give the input of this job's current run",
        )


def _started(pod: Mapping[str, Any]) -> float | None:
    text = (pod.get("status") or {}).get("startTime")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def job_ranks(pods: Sequence[Mapping[str, Any]], rank_label: str) -> JobRanks:
    """Return the job's workers from its pods (as the API serves them); a pod being deleted
    gives way to a live pod of the same worker."""
    workers: dict[int, Worker] = {}
    for pod in sorted(pods, key=lambda p: bool((p.get("metadata") or {}).get("deletionTimestamp"))):
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        status = pod.get("status") or {}
        worker = whole_number(str((metadata.get("labels") or {}).get(rank_label, "")))
        if worker is None or worker in workers:
            continue
        pairing, problem = pod_pairing(pod)
        addresses = tuple(
            str(entry.get("ip"))
            for entry in status.get("podIPs") or []
            if isinstance(entry, Mapping) and entry.get("ip")
        ) or ((str(status["podIP"]),) if status.get("podIP") else ())
        workers[worker] = Worker(
            worker=worker,
            pod=str(metadata.get("name") or ""),
            hostname=str(spec.get("hostname") or metadata.get("name") or ""),
            node=spec.get("nodeName") or None,
            addresses=addresses,
            gpus=len(pairing.pairs) if pairing is not None and pairing.pairs else pod_gpus(spec),
            pairing=pairing,
            pairing_problem=problem,
            rails=(metadata.get("annotations") or {}).get("tpfabric.io/rails"),
            phase=str(status.get("phase") or ""),
            started=_started(pod),
        )
    per_worker = max((w.gpus for w in workers.values()), default=0)
    return JobRanks(workers, per_worker)
