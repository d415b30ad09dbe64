"""What an informer does, shared by the placer's informers and the operator's pod cache.

Each brings its own list and watch calls; this module never opens a connection itself.

- :func:`list_pages` reads a list in pages of ``LIST_PAGE_SIZE`` (``limit``/``continue``: one
  consistent snapshot), each page parsed with ``orjson`` and cut down before the next is fetched.
  Each object is cut down on its own: one that its ``slim`` cannot read is skipped and reported
  (:mod:`.malformed`), never the end of the list.
- :func:`list_and_watch` is the loop: list, watch from the list's version, resume a watch that
  ended normally (the server's timeout, a forced close of a slow watcher) from the last version
  seen, and list again after a failure or an expired version (410 Gone), after a backoff that
  doubles up to 10 s and resets after every good list.
- ``WATCH_TIMEOUT_S`` and ``WATCH_REQUEST_TIMEOUT``: the server ends a watch after 240 s and
  sends bookmarks meanwhile, so a stream silent for a minute longer is a dead connection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson

from tpfabric_kube.malformed import MalformedObjects, Skipped

__all__ = [
    "LIST_PAGE_SIZE",
    "WATCH_REQUEST_TIMEOUT",
    "WATCH_TIMEOUT_S",
    "list_and_watch",
    "list_pages",
]

T = TypeVar("T")

WATCH_TIMEOUT_S = 240
#: (connect, read) seconds of a watch request: the read outlasts the server's end by a minute
WATCH_REQUEST_TIMEOUT: tuple[float, float] = (10.0, WATCH_TIMEOUT_S + 60.0)
LIST_PAGE_SIZE = 500  # what client-go's pager asks for
_GONE = 410
#: reports of the lists whose caller names no reporter of its own (logged and counted only)
_UNNAMED = MalformedObjects("tpfabric")


def list_pages(
    list_call: Callable[..., Any],
    slim: Callable[[dict[str, Any]], T],
    *,
    page_size: int = LIST_PAGE_SIZE,
    malformed: MalformedObjects | None = None,
    kind: str = "object",
) -> tuple[list[T], str]:
    """Return every object of a paginated list, each cut down by ``slim``, and its version.

    An object ``slim`` raises on is left out and reported to ``malformed`` as a ``kind``.

    Pages of ``page_size`` objects; each response body is parsed, cut down and dropped before
    the next one is fetched. The resourceVersion is the snapshot's (the first page's). An
    expired continue token (410) raises like any list error: the caller lists again from the
    start. Parsing a body is one call that holds the interpreter's lock throughout: a process
    that must keep answering other threads meanwhile asks for smaller pages.
    """
    objects: list[T] = []
    version, token = "", ""
    while True:
        page = _page(list_call, token, page_size)
        version = version or str(page["metadata"]["resourceVersion"])
        token = str(page["metadata"].get("continue") or "")
        _parse_each(page.get("items") or (), slim, malformed or _UNNAMED, kind, objects)
        del page  # dropped before the next page is fetched
        if not token:
            return objects, version


def _parse_each(
    items: Iterable[dict[str, Any]],
    slim: Callable[[dict[str, Any]], T],
    reports: MalformedObjects,
    kind: str,
    into: list[T],
) -> None:
    """Append what ``slim`` makes of each of ``items`` to ``into``; skip (and report) an item it
    raises on. A function of its own: no raw item outlives the page in a local."""
    for item in items:
        parsed = reports.parse(kind, slim, item)
        if not isinstance(parsed, Skipped):
            into.append(parsed)


def _page(list_call: Callable[..., Any], token: str, page_size: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
    if token:
        kwargs["_continue"] = token
    page: dict[str, Any] = orjson.loads(list_call(**kwargs).data)
    return page


def list_and_watch(
    list_once: Callable[[], str],
    watch_from: Callable[[str], str],
    stopped: threading.Event,
    *,
    what: str,
    log: logging.Logger,
) -> None:
    """Run until ``stopped``: ``list_once()`` returns a version, ``watch_from(version)`` the
    last version it saw. An error whose ``status`` is 410 (the client's ``ApiException`` for a
    version too old) is expected and not logged."""
    backoff = 0.5
    while not stopped.is_set():
        try:
            version = list_once()
            backoff = 0.5
            while not stopped.is_set():
                version = watch_from(version)
        except Exception as err:  # noqa: BLE001 - an informer must survive anything
            if getattr(err, "status", None) != _GONE:
                log.warning("watching %s failed: %r; listing again", what, err)
        stopped.wait(backoff)
        backoff = min(backoff * 2, 10.0)
