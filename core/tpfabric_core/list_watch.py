"""The loop of an informer: list, watch from the list's version, list again after any failure.

Shared by the placer's informers and the operator's pod cache (each brings its own list and
watch calls; this module never touches the network). A watch that ends normally (the server's
timeout, a forced close of a slow watcher) is resumed from the last version seen; one that
fails, or whose version expired (410 Gone), is followed by a fresh list after a backoff that
doubles up to 10 s and resets after every good list.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["list_and_watch"]


def list_and_watch(
    list_once: Callable[[], str],
    watch_from: Callable[[str], str],
    stopped: threading.Event,
    *,
    what: str,
    expired: Callable[[Exception], bool],
    log: logging.Logger,
) -> None:
    """Run until ``stopped``: ``list_once()`` returns a version, ``watch_from(version)`` the
    last version it saw. ``expired(err)`` tells a version that is merely too old (no warning)."""
    backoff = 0.5
    while not stopped.is_set():
        try:
            version = list_once()
            backoff = 0.5
            while not stopped.is_set():
                version = watch_from(version)
        except Exception as err:  # noqa: BLE001 - an informer must survive anything
            if not expired(err):
                log.warning("watching %s failed: %r; listing again", what, err)
        stopped.wait(backoff)
        backoff = min(backoff * 2, 10.0)
