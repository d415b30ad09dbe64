"""Which operator replica acts: the holder of a ``coordination.k8s.io`` Lease, and only it.

Two operators acting on the same jobs charged one incident twice (each with its own lagging
view of the pods) and posted every Event twice. Every replica runs kopf, its watches and its pod
cache (a follower takes over with warm caches), but only the Lease holder acts: every reconcile
(kopf's handlers, the ticks and the woken reconciles of :mod:`.wakeups` alike) begins with
:func:`leading` and does nothing in a follower, and so does the report of suspect switches.

A follower still writes what kopf writes for any handler that ran or was filtered out: its
finalizer on a new job and the ``tpfabric.io/last-handled-configuration`` annotation after a
change of the spec (``kopf/_core/reactor/processing.py``: the diff-base is stored once the
handlers are done, or when none matched). Both replicas write the same value there; neither
writes a status, a pod or an Event of a job.

A replica that begins to lead reconciles every job at once (:func:`start`'s ``on_leading``), not
at its next tick. A leader stops acting at its renew deadline, before any other replica may take
the Lease (the elector's contract); a reconcile that began earlier and ends after it drops its
status patch. A leader stopped cleanly releases the Lease, and a follower takes over within one
retry period.

Without :func:`start` (a single replica, ``--no-leader-elect``, unit tests) this process
always leads.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from tpfabric_kube.leader_election import LeaseElector

__all__ = ["identity", "leading", "start", "stop"]

_elector: LeaseElector | None = None
_stop = threading.Event()
_thread: threading.Thread | None = None


def identity(name: str | None = None) -> str:
    """Return a holder identity unique to this process: ``<name or hostname>_<random>``.

    As client-go's: the pod name alone would let a restarted process take its predecessor's
    Lease as its own before that one's deadline, and two processes on one host the same Lease.
    """
    return f"{name or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def start(
    coordination: Any,
    namespace: str,
    name: str,
    holder: str,
    *,
    lease_seconds: float,
    renew_seconds: float,
    retry_seconds: float,
    on_leading: Callable[[], None] | None = None,
) -> None:
    """Campaign for Lease ``namespace/name`` as ``holder`` in a thread of its own;
    ``on_leading`` is called (from that thread) each time this replica begins to lead."""
    global _elector, _thread  # noqa: PLW0603 - one campaign per operator process

    def transition(leading: bool) -> None:
        if leading and on_leading is not None:
            on_leading()

    _elector = LeaseElector(
        coordination,
        namespace,
        name,
        holder,
        lease_seconds=lease_seconds,
        renew_seconds=renew_seconds,
        retry_seconds=retry_seconds,
        on_transition=transition,
    )
    _stop.clear()
    _thread = threading.Thread(target=_elector.run, args=(_stop,), name="lease", daemon=True)
    _thread.start()


def stop() -> None:
    """End the campaign; release the Lease if held (call once nothing acts any more)."""
    _stop.set()
    if _thread is not None:
        _thread.join(timeout=10)


def leading() -> bool:
    """Return whether this replica may act now."""
    return _elector is None or _elector.is_leader()
