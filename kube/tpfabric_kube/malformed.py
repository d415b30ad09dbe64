"""Objects a component cannot read: skipped, counted, logged once, told to their owner.

One object must never stop another's work. Every list and watch of every component parses each
object on its own (:meth:`MalformedObjects.parse`): an object whose parsing raises is skipped
(a list goes on with the next one; a watch event of it forgets what was kept of it, as a list
would), and a field that a parser had to ignore is reported the same way
(:meth:`MalformedObjects.field`), while the rest of the object is used. Each report:

- counts in ``tpfabric_malformed_objects_total{component,kind,reason}`` (the process's default
  Prometheus registry; ``reason`` is ``Unreadable`` for a skipped object, ``FieldIgnored`` for a
  field), once per version of the object;
- is logged once per version of the object, with its namespace/name and the field at fault;
- is told to ``notify`` (a component's writer of a Kubernetes Event on the object), once per
  version of the object, off the list's and the watch's thread.

The parsers are meant to be total (:mod:`tpfabric_core.input_limits`): a skipped object is a
parser's bug met in the field, and this keeps it from freezing everyone else meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kubernetes.client.rest import ApiException
from prometheus_client import Counter

from tpfabric_kube.events import event_body
from tpfabric_kube.structured_logs import about

__all__ = [
    "MALFORMED_OBJECTS",
    "SKIPPED",
    "MalformedObjects",
    "Notice",
    "Skipped",
    "event_for",
    "event_writer",
]

T = TypeVar("T")
log = logging.getLogger("tpfabric.malformed")

MALFORMED_OBJECTS = Counter(
    "tpfabric_malformed_objects",
    "Object versions a component could not read whole: skipped (reason Unreadable) or read "
    "without a field it ignored (reason FieldIgnored), by component and kind.",
    ["component", "kind", "reason"],
)


class Skipped:
    """What :meth:`MalformedObjects.parse` returns for an object it skipped."""

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED: Final = Skipped()
#: versions remembered per reporter before the memory starts over (each is logged once)
_REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class Notice:
    """One report, as a component tells the object's owner."""

    component: str
    kind: str
    namespace: str
    name: str
    uid: str
    version: str
    field: str
    message: str
    skipped: bool

    @property
    def where(self) -> str:
        """Return ``namespace/name`` (``name`` of a cluster-scoped object)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def words(self) -> str:
        """Return the report in one sentence, naming the field and what the component did."""
        done = "skipped this object" if self.skipped else "ignored the field"
        return f"{self.component} {done}: {self.field}: {self.message}"


class MalformedObjects:
    """The reports of one component (``tpfabric-operator``, ``tpfabric-scheduler``, ...)."""

    def __init__(self, component: str, *, notify: Callable[[Notice], None] | None = None) -> None:
        self.component = component
        self._notify = notify
        self._seen: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()
        self._pending: queue.Queue[Notice] = queue.Queue(maxsize=1000)
        self._sender: threading.Thread | None = None

    def parse(self, kind: str, parse: Callable[[Any], T], obj: Any) -> T | Skipped:
        """Return ``parse(obj)``, or :data:`SKIPPED` (reported) when it raises."""
        try:
            return parse(obj)
        except Exception as err:  # noqa: BLE001 - one object never stops the others
            self.report(kind, obj, "(object)", f"{type(err).__name__}: {err}", skipped=True)
            return SKIPPED

    def field(self, kind: str, obj: Any, field: str, message: str) -> None:
        """Report that ``field`` of ``obj`` was ignored because of ``message``."""
        self.report(kind, obj, field, message, skipped=False)

    def report(self, kind: str, obj: Any, field: str, message: str, *, skipped: bool) -> None:
        """Count, log and tell the owner of one malformed object, once per its version."""
        meta = _meta(obj)
        notice = Notice(
            component=self.component,
            kind=kind,
            namespace=_text(meta.get("namespace")),
            name=_text(meta.get("name")) or "(no name)",
            uid=_text(meta.get("uid")),
            version=_text(meta.get("resourceVersion")),
            field=field,
            message=message[:512],
            skipped=skipped,
        )
        key = (kind, notice.where, field)
        stamp = f"{notice.uid}/{notice.version}/{message}"
        with self._lock:
            if self._seen.get(key) == stamp:
                return
            if len(self._seen) >= _REMEMBERED:
                self._seen.clear()
            self._seen[key] = stamp
        MALFORMED_OBJECTS.labels(
            self.component, kind, "Unreadable" if skipped else "FieldIgnored"
        ).inc()
        log.warning(
            "%s %s (version %s): %s",
            kind,
            notice.where,
            notice.version,
            notice.words(),
            extra=about(kind, notice.namespace or None, notice.name),
        )
        if self._notify is not None:
            self._send(notice)

    def _send(self, notice: Notice) -> None:
        """Hand ``notice`` to the sender thread (dropped when 1,000 are already waiting)."""
        with self._lock:
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._sending, name=f"malformed-{self.component}", daemon=True
                )
                self._sender.start()
        try:
            self._pending.put_nowait(notice)
        except queue.Full:
            log.warning("%s %s: too many reports waiting; not told", notice.kind, notice.where)

    def _sending(self) -> None:
        notify = self._notify
        assert notify is not None
        while True:
            notice = self._pending.get()
            try:
                notify(notice)
            except Exception as err:  # noqa: BLE001 - a lost Event is only a lost note
                log.info("%s %s: the Event was not written: %r", notice.kind, notice.where, err)
            finally:
                self._pending.task_done()

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every report handed over so far has been told; return whether they were
        within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._pending.all_tasks_done:
            while self._pending.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._pending.all_tasks_done.wait(left)
        return True


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


#: the API version of an object's kind, for an Event's ``involvedObject``
_API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "Namespace": "v1",
    "TensorParallelJob": "tpfabric.io/v1alpha1",
    "Gang": "tpfabric.io/v1alpha1",
}


def event_for(notice: Notice, *, api_versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the core/v1 Event that tells ``notice`` on its object (a Warning, reason
    ``MalformedObject``). Its name is fixed by the object's version and field, so that two
    replicas, or a report told twice, write it once (the second create is a 409)."""
    versions = {**_API_VERSIONS, **(api_versions or {})}
    digest = hashlib.sha256(
        f"{notice.component}/{notice.kind}/{notice.uid}/{notice.version}/{notice.field}".encode()
    ).hexdigest()[:16]
    involved: dict[str, Any] = {
        "apiVersion": versions.get(notice.kind, "v1"),
        "kind": notice.kind,
        "name": notice.name,
        "uid": notice.uid,
        "resourceVersion": notice.version,
    }
    if notice.namespace:
        involved["namespace"] = notice.namespace
    return event_body(
        involved,
        reason="MalformedObject",
        message=notice.words(),
        component=notice.component,
        name=f"{notice.name[:200]}.{digest}",
    )


def event_writer(core: Any) -> Callable[[Notice], None]:
    """Return a ``notify`` that writes :func:`event_for` with ``core`` (a ``CoreV1Api``)."""

    def write(notice: Notice) -> None:
        body = event_for(notice)
        try:
            core.create_namespaced_event(body["metadata"]["namespace"], body)
        except ApiException as err:
            if err.status != 409:  # already told (another replica, an earlier report)
                raise

    return write
