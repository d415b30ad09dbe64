"""The informer loop: resume a watch from its last version, list again after failures."""

from __future__ import annotations

import logging
import threading

import pytest

from tpfabric_kube.list_watch import list_and_watch


class ExpiredError(Exception):
    """As the client's ApiException for a version too old: status 410."""

    status = 410


def test_watches_resume_from_the_last_version_and_failures_list_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped = threading.Event()
    calls: list[str] = []
    lists = iter(["10", "20"])

    def list_once() -> str:
        calls.append("list")
        return next(lists)

    def watch_from(version: str) -> str:
        calls.append(f"watch {version}")
        if version == "10":
            return "11"  # the server ended the watch: resume from 11
        if version == "11":
            raise ExpiredError  # too old: list again, quietly
        stopped.set()
        return version

    with caplog.at_level(logging.WARNING):
        list_and_watch(
            list_once,
            watch_from,
            stopped,
            what="pods",
            log=logging.getLogger("test"),
        )
    assert calls == ["list", "watch 10", "watch 11", "list", "watch 20"]
    assert caplog.records == []


def test_an_unexpected_error_is_logged_and_the_loop_keeps_going(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped = threading.Event()
    attempts: list[int] = []

    def list_once() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("refused")
        stopped.set()
        return "1"

    with caplog.at_level(logging.WARNING):
        list_and_watch(
            list_once,
            lambda v: v,
            stopped,
            what="nodes",
            log=logging.getLogger("test"),
        )
    assert len(attempts) == 2
    assert "watching nodes failed: ConnectionError('refused')" in caplog.text
