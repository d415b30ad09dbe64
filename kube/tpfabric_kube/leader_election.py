"""Leader election on a ``coordination.k8s.io/v1`` Lease: one placer plans, one operator acts.

Shared by the placer (``tpfabric_scheduler``) and the operator (``tpfabric_operator.leadership``);
like :mod:`tpfabric_kube.list_watch`, it never opens a connection itself: the caller brings the
Lease API (``kubernetes.client.CoordinationV1Api`` or a stand-in), and an error is read by its
``status`` (409 conflict, 404 not found), as ``ApiException`` carries it.

The protocol of client-go's ``leaderelection`` with a LeaseLock, kept small:

- a candidate takes the lease when it is absent, expired (``renewTime + leaseDurationSeconds`` is
  past) or already its own; every write is a create, or a replace carrying the resourceVersion
  it read, so of two candidates racing for an expired lease exactly one wins (the other gets 409);
- the leader renews every ``retry_seconds``; when it has not renewed for ``renew_seconds`` (the
  renew deadline, shorter than the lease) it stops leading *before* anyone else may take over, and
  :meth:`LeaseElector.is_leader` turns false on the clock alone, even if the renewing thread hangs;
- a leader that stops cleanly releases the lease (empty holder), so a follower takes over within
  one retry period instead of waiting out the lease.

Expiry compares the lease's ``renewTime``, written with the holder's clock, with the candidate's
clock: replicas need clocks in step (NTP) to within ``lease_seconds - renew_seconds``.

The clock is injected; :meth:`LeaseElector.try_acquire_or_renew` is one step, unit-tested against a
fake API. This module only elects: what a leader does is the caller's business.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from tpfabric_core.timestamps import micro_time

__all__ = ["LeaseElector", "add_timing_flags", "check_timing_flags"]

log = logging.getLogger("tpfabric.leader_election")

_CONFLICT = 409
_NOT_FOUND = 404


def _status(err: Exception) -> Any:
    """Return the HTTP status an API error carries (None: not an answer of the API server)."""
    return getattr(err, "status", None)


def _parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()  # 3.11 reads the "Z"
    except ValueError:
        return None


class LeaseElector:
    """Campaigns for one Lease; ``is_leader()`` says whether this replica may act as leader.

    ``lease_seconds``: how long a lease lasts after its last renewal before others may take it.
    ``renew_seconds``: how long a leader keeps failing to renew before it stops leading (must be
    shorter than ``lease_seconds``). ``retry_seconds``: the period of every attempt.
    ``on_transition(leading)`` is called from :meth:`run`'s thread on every change of
    :meth:`is_leader`.
    """

    def __init__(
        self,
        coordination: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: float = 15,
        renew_seconds: float = 10,
        retry_seconds: float = 2,
        clock: Callable[[], float] = time.time,
        on_transition: Callable[[bool], None] | None = None,
    ) -> None:
        if not retry_seconds < renew_seconds < lease_seconds:
            raise ValueError(
                f"need retry_seconds < renew_seconds < lease_seconds, got {retry_seconds}, "
                f"{renew_seconds}, {lease_seconds}"
            )
        self.api = coordination
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.on_transition = on_transition
        self._renewed_at: float | None = None  # our clock, last successful acquire/renew
        #: the lease's ``leaseTransitions`` as we wrote it last: our term as leader
        self._term = 0
        self._reported = False
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """Return ``namespace/name`` of the lease."""
        return f"{self.namespace}/{self.name}"

    def is_leader(self) -> bool:
        """Return whether we renewed the lease less than ``renew_seconds`` ago."""
        with self._lock:
            renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.renew_seconds

    def term(self) -> int | None:
        """Return our term while we lead (the lease's ``leaseTransitions`` when we took it),
        None otherwise.

        Terms only grow: every takeover (of an expired or released lease) counts one more, so
        a replica that lost the lease and took it again leads in a new term, and what it
        computed in the old one must not be written in the new one.
        """
        with self._lock:
            term = self._term
        return term if self.is_leader() else None

    # -- one step ------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """Take or renew the lease if we may; return whether we hold it now.

        False when another holder's lease is still valid (we stop leading at once), when a
        concurrent write won (409), or when the API could not be reached (then leadership lasts
        until the renew deadline, see :meth:`is_leader`).
        """
        now = self.clock()
        try:
            lease = self._read()
            if lease is None:
                term = self._create(now)
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                if holder and holder != self.identity and not self._expired(spec, now):
                    self._lost(f"held by {holder}")
                    return False
                term = self._replace(lease, spec, holder, now)
        except Exception as err:  # noqa: BLE001 - a network error must not end the campaign
            status = _status(err)
            if status == _CONFLICT:
                log.debug("lease %s: another candidate wrote first", self.where)
                self._lost("another candidate wrote first")
            elif status == _NOT_FOUND:  # only a create gets here with 404
                log.warning(
                    "lease %s: namespace %s not found; pass --lease-namespace (an existing one)",
                    self.where,
                    self.namespace,
                )
            elif status is not None:
                log.warning("lease %s: %s %s", self.where, status, getattr(err, "reason", ""))
            else:
                log.warning("lease %s: %r", self.where, err)
            return False
        with self._lock:
            self._renewed_at = now
            self._term = term
        return True

    def _expired(self, spec: dict[str, Any], now: float) -> bool:
        renewed = _parse_time(spec.get("renewTime")) or _parse_time(spec.get("acquireTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        return renewed is None or renewed + duration < now

    def _lost(self, why: str) -> None:
        with self._lock:
            was = self._renewed_at is not None
            self._renewed_at = None
        if was:
            log.info("lease %s: no longer ours (%s)", self.where, why)

    def _read(self) -> dict[str, Any] | None:
        try:
            response = self.api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False
            )
        except Exception as err:
            if _status(err) == _NOT_FOUND:
                return None
            raise
        lease: dict[str, Any] = orjson.loads(response.data)
        return lease

    def _spec(self, now: float, acquired: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_seconds)),
            "acquireTime": micro_time(acquired),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def _create(self, now: float) -> int:
        """Create the lease, ours; return our term (0)."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(now, now, 0),
        }
        # read to the end: an unread answer keeps its connection out of the pool
        self.api.create_namespaced_lease(self.namespace, body, _preload_content=False).read()
        return 0

    def _replace(self, lease: dict[str, Any], spec: dict[str, Any], holder: str, now: float) -> int:
        """Renew our lease or take over an expired or released one; return our term."""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquired = _parse_time(spec.get("acquireTime")) or now
        else:  # taking over (expired or released): a new term, as client-go counts it
            acquired = now
            transitions += 1
        self._write_over(lease, self._spec(now, acquired, transitions))
        return transitions

    def _write_over(self, lease: dict[str, Any], spec: dict[str, Any]) -> None:
        """Replace ``lease`` (as read) with ``spec``: refused (409) if it changed meanwhile."""
        meta = lease.get("metadata") or {}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": meta.get("resourceVersion"),
            },
            "spec": spec,
        }
        self.api.replace_namespaced_lease(
            self.name, self.namespace, body, _preload_content=False
        ).read()

    def release(self) -> bool:
        """Give the lease up if we hold it (empty holder: a follower takes it at its next try).

        Return whether a release was written. Call only once the leader's work has stopped.
        """
        if not self.is_leader():
            return False
        with self._lock:
            self._renewed_at = None
        try:
            lease = self._read()
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                return False
            released = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1}
            self._write_over(lease, {**released, "renewTime": micro_time(self.clock())})
        except Exception as err:  # noqa: BLE001 - the lease then simply expires
            log.warning("lease %s: not released: %r", self.where, err)
            return False
        log.info("lease %s: released by %s", self.where, self.identity)
        return True

    # -- the loop ------------------------------------------------------------------------------

    def step(self) -> bool:
        """Make one attempt, report a transition of :meth:`is_leader`; return it."""
        self.try_acquire_or_renew()
        leading = self.is_leader()
        if leading != self._reported:
            self._reported = leading
            if leading:
                log.info("lease %s: %s is now the leader", self.where, self.identity)
            else:
                log.warning("lease %s: %s stopped leading", self.where, self.identity)
            if self.on_transition is not None:
                self.on_transition(leading)
        return leading

    def run(self, stop: threading.Event, *, release: bool = True) -> None:
        """Campaign every ``retry_seconds`` until ``stop`` is set; then release the lease.

        ``release=False`` leaves the lease to expire (what a crashed leader does).
        """
        log.info("lease %s: %s campaigning", self.where, self.identity)
        while not stop.is_set():
            self.step()
            stop.wait(self.retry_seconds)
        if release:
            self.release()
        if self._reported:
            self._reported = False
            if self.on_transition is not None:
                self.on_transition(False)


def add_timing_flags(group: argparse._ArgumentGroup, acts: str) -> None:
    """Add ``--lease-seconds``, ``--renew-seconds`` and ``--retry-seconds`` (the elector's
    timings, with client-go's defaults) to a command's flags; ``acts``: what a leader that
    could not renew stops doing ("planning", "acting")."""
    timings = {
        "lease": (15.0, "a lease not renewed for this long may be taken over"),
        "renew": (10.0, f"a leader that could not renew for this long stops {acts}"),
        "retry": (2.0, "period of every acquire/renew attempt"),
    }
    for key, (default, words) in timings.items():
        group.add_argument(
            f"--{key}-seconds", type=float, default=default, help=f"{words} (default {default:g})"
        )


def check_timing_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error unless 0 < retry < renew < lease (what the elector needs)."""
    if not 0 < args.retry_seconds < args.renew_seconds < args.lease_seconds:
        parser.error(
            "need 0 < --retry-seconds < --renew-seconds < --lease-seconds, got "
            f"{args.retry_seconds}, {args.renew_seconds}, {args.lease_seconds}"
        )
