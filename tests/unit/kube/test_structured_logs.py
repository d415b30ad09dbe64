"""Logs a machine can read: one JSON object per line whatever the message holds (quotes, newlines,
a traceback), the object's fields where the line is about one (ours and kopf's), warnings and
uncaught exceptions of any thread logged too; a text mode for people; bad flags named."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest

from tpfabric_kube.structured_logs import (
    about,
    add_log_flags,
    configure_logging,
    json_formatter,
    text_formatter,
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    hooks = sys.excepthook, threading.excepthook, sys.unraisablehook
    yield
    root.handlers[:], root.level = handlers, level
    sys.excepthook, threading.excepthook, sys.unraisablehook = hooks
    logging.captureWarnings(False)


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("tpfabric.test", logging.WARNING, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


def test_a_message_with_quotes_newlines_and_unicode_stays_one_json_line() -> None:
    line = json_formatter("operator").format(
        record('pod "w-0" said:\n\tbad {json}, "ünïcode" \\ %s', "x")
    )
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == 'pod "w-0" said:\n\tbad {json}, "ünïcode" \\ x'
    assert parsed["level"] == "WARNING"
    assert parsed["logger"] == "tpfabric.test"
    assert parsed["component"] == "operator"
    assert parsed["time"].endswith("Z")


def _fail() -> None:
    raise ValueError('a "quoted" failure')


def test_a_traceback_is_a_field_of_its_line() -> None:
    try:
        _fail()
    except ValueError:
        failed = logging.LogRecord(
            "tpfabric.test", logging.ERROR, __file__, 1, "it failed", (), sys.exc_info()
        )
    line = json_formatter("scheduler").format(failed)
    assert "\n" not in line
    assert 'ValueError: a "quoted" failure' in json.loads(line)["exc_info"]


def test_a_line_about_an_object_carries_its_fields() -> None:
    line = json_formatter("gang-webhook").format(
        record("wired", **about("Pod", "team-a", "w-0", gang="llama"))
    )
    parsed = json.loads(line)
    assert (parsed["kind"], parsed["namespace"], parsed["name"], parsed["gang"]) == (
        "Pod",
        "team-a",
        "w-0",
        "llama",
    )
    assert parsed["logger"] == "tpfabric.test", "the object's name never hides the logger's"


def test_kopfs_own_object_lines_get_the_same_fields() -> None:
    ref = {"apiVersion": "tpfabric.io/v1alpha1", "kind": "TensorParallelJob"}
    ref |= {"name": "llama", "namespace": "team-a", "uid": "u1"}
    line = json_formatter("operator").format(
        record("Handler succeeded.", k8s_ref=ref, k8s_skip=False, settings=object())
    )
    parsed = json.loads(line)
    assert (parsed["kind"], parsed["namespace"], parsed["name"]) == (
        "TensorParallelJob",
        "team-a",
        "llama",
    )
    assert "settings" not in parsed
    assert "k8s_ref" not in parsed


def test_the_text_mode_is_one_line_for_people_with_the_object_at_its_end() -> None:
    text = text_formatter().format(record("planned %s", "leaf-a", **about("Gang", "ns", "g")))
    assert text.endswith("WARNING tpfabric.test: planned leaf-a [Gang ns/g]")


def test_warnings_and_uncaught_exceptions_of_any_thread_are_logged_as_json(
    restore_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    configure_logging("fabric-agent", "INFO", "json")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("careful", UserWarning, stacklevel=1)

    def crash() -> None:
        raise RuntimeError("thread died")

    thread = threading.Thread(target=crash, name="reader")
    thread.start()
    thread.join()
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [line["level"] for line in lines] == ["WARNING", "CRITICAL"]
    assert "careful" in lines[0]["message"]
    assert lines[1]["message"] == "uncaught exception in thread reader: thread died"
    assert "RuntimeError: thread died" in lines[1]["exc_info"]


def test_a_process_that_dies_of_an_exception_says_so_in_json() -> None:
    program = (
        "from tpfabric_kube.structured_logs import configure_logging\n"
        "configure_logging('operator')\n"
        "raise SystemError('the \"end\"')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    parsed = json.loads(line)
    assert parsed["level"] == "CRITICAL"
    assert 'SystemError: the "end"' in parsed["exc_info"]


@pytest.mark.parametrize(
    ("argv", "env", "wrong"),
    [
        (["--log-format", "yaml"], {}, "--log-format"),
        (["--log-level", "LOUD"], {}, "--log-level"),
        ([], {"TPFABRIC_LOG_FORMAT": "xml"}, "--log-format"),
    ],
)
def test_a_bad_log_flag_or_setting_is_a_usage_error_naming_it(
    argv: list[str],
    env: dict[str, str],
    wrong: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    parser = argparse.ArgumentParser(prog="component")
    add_log_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert wrong in capsys.readouterr().err


def test_the_format_defaults_to_json_and_the_environment_may_choose_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    add_log_flags(parser)
    assert parser.parse_args([]).log_format == "json"
    monkeypatch.setenv("TPFABRIC_LOG_FORMAT", "text")
    parser = argparse.ArgumentParser()
    add_log_flags(parser)
    assert parser.parse_args([]).log_format == "text"
