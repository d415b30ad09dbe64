"""Logs a machine can read: every component (operator, gang webhook, extender and placer, fabric
agent) writes one JSON object per line on stderr, or, for people at a terminal, one line of text.

A JSON line always has ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``,
``component`` and ``message``; a line about an object adds the object's fields (the
``extra`` convention of :func:`about`): ``kind``, ``namespace``, ``name``, and where they apply
``gang`` (the Gang record or TensorParallelJob a pod belongs to) and ``node``. kopf's own
per-object lines (its ``k8s_ref``) are given the same ``kind``/``namespace``/``name``. A
traceback is one field (``exc_info``) of its line, never lines of its own; Python's warnings,
uncaught exceptions (of any thread) and exceptions it ignores (a failing ``__del__``) are
logged, not printed. The JSON is made by a library
(python-json-logger, which kopf's own JSON mode uses), never by a format string, so any quote,
newline or non-ASCII character in a message stays inside its string.

The format is chosen by ``--log-format`` (``json``, the default, or ``text``; env
``TPFABRIC_LOG_FORMAT``; the chart's ``logFormat``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import threading
import types
from collections.abc import Mapping
from typing import Any, Literal

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

__all__ = [
    "LOG_FORMATS",
    "OBJECT_FIELDS",
    "about",
    "add_log_flags",
    "configure_logging",
    "json_formatter",
    "text_formatter",
]

LogFormat = Literal["json", "text"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text")
#: the fields a line about an object carries (``extra=about(...)``), in this order
OBJECT_FIELDS = ("kind", "namespace", "name", "gang", "node")
#: LogRecord attributes that are not fields of a line (the record's own, kopf's)
_SKIPPED = frozenset(RESERVED_ATTRS) | {"k8s_ref", "k8s_skip", "settings", "message", "asctime"}
#: the LogRecord attribute an object's fields travel in (``name`` is the logger's own)
_OBJECT = "tpfabric_object"


def about(
    kind: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    *,
    gang: str | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    """Return the ``extra`` of a log line about an object, e.g.
    ``log.info("planned", extra=about("TensorParallelJob", ns, name))``; fields left None are
    left out."""
    fields = {"kind": kind, "namespace": namespace, "name": name, "gang": gang, "node": node}
    return {_OBJECT: {k: v for k, v in fields.items() if v is not None}}


def _object_of(record: logging.LogRecord) -> dict[str, Any]:
    """Return the object fields of ``record``: ours (:func:`about`), else kopf's ``k8s_ref``."""
    ours = getattr(record, _OBJECT, None)
    if isinstance(ours, Mapping):
        return dict(ours)
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, Mapping):
        return {k: ref[k] for k in ("kind", "namespace", "name") if ref.get(k)}
    return {}


def _rfc3339(created: float) -> str:
    moment = dt.datetime.fromtimestamp(created, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _Json(JsonFormatter):
    """One JSON object per record: the fixed fields, the object's, then any other ``extra``."""

    def __init__(self, component: str) -> None:
        super().__init__(reserved_attrs=sorted(_SKIPPED | {_OBJECT}))
        self._component = component

    def add_fields(
        self,
        log_data: dict[str, Any],
        record: logging.LogRecord,
        message_dict: dict[str, Any],
    ) -> None:
        log_data["time"] = _rfc3339(record.created)
        log_data["level"] = record.levelname
        log_data["logger"] = record.name
        log_data["component"] = self._component
        log_data["message"] = record.message
        log_data.update(_object_of(record))
        for key, value in record.__dict__.items():
            if key not in self.reserved_attrs and not key.startswith("_"):
                log_data.setdefault(key, value)
        log_data.update(message_dict)


class _Text(logging.Formatter):
    """``time level logger: message [kind namespace/name ...]``, a traceback below it."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _object_of(record)
        if not fields:
            return text
        where = "/".join(str(fields[k]) for k in ("namespace", "name") if k in fields)
        words = [str(fields["kind"])] if "kind" in fields else []
        words += [where] if where else []
        words += [f"{k}={fields[k]}" for k in ("gang", "node") if k in fields]
        head, _, tail = text.partition("\n")
        return f"{head} [{' '.join(words)}]" + (f"\n{tail}" if tail else "")


def json_formatter(component: str) -> logging.Formatter:
    """Return the JSON formatter of ``component``'s lines."""
    return _Json(component)


def text_formatter() -> logging.Formatter:
    """Return the formatter of the text mode."""
    return _Text()


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _level(text: str) -> str:
    if text.upper() not in _LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(_LEVELS)}")
    return text.upper()


def _format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(LOG_FORMATS)}")
    return text


def add_log_flags(parser: argparse.ArgumentParser, *, level: str | None = None) -> None:
    """Add ``--log-level`` (env TPFABRIC_LOG_LEVEL) and ``--log-format`` (env
    TPFABRIC_LOG_FORMAT) to ``parser``; a bad value, given or from the environment, is a usage
    error naming the flag."""
    parser.add_argument(
        "--log-level",
        type=_level,
        default=level or os.environ.get("TPFABRIC_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env TPFABRIC_LOG_LEVEL)",
    )
    parser.add_argument(
        "--log-format",
        type=_format,
        default=os.environ.get("TPFABRIC_LOG_FORMAT", "json"),
        help="json (default): one JSON object per line, for a log pipeline; text: one line of "
        "text, for people (env TPFABRIC_LOG_FORMAT)",
    )


def configure_logging(component: str, level: str = "INFO", log_format: str = "json") -> None:
    """Send every log record of the process to stderr in ``log_format``, at ``level``; route
    Python's warnings and uncaught exceptions (any thread's) through logging too. Raises
    ValueError naming the flag on an unknown level or format."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"--log-format={log_format}: expected one of {', '.join(LOG_FORMATS)}")
    if level.upper() not in _LEVELS:
        raise ValueError(f"--log-level={level}: expected one of {', '.join(_LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter(component) if log_format == "json" else _Text())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # off, then on: a second configuration in one process routes warnings anew (captureWarnings
    # installs its hook only once, whatever replaced warnings.showwarning since)
    logging.captureWarnings(False)
    logging.captureWarnings(True)
    crash = logging.getLogger(f"tpfabric.{component}")

    def uncaught(
        kind: type[BaseException], error: BaseException, trace: types.TracebackType | None
    ) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, error, trace)
            return
        crash.critical("uncaught exception: %s", error, exc_info=(kind, error, trace))

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or issubclass(args.exc_type, SystemExit):
            return
        crash.critical(
            "uncaught exception in thread %s: %s",
            args.thread.name if args.thread else "?",
            args.exc_value,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    def unraisable(args: Any) -> None:  # sys.UnraisableHookArgs
        error = args.exc_value
        crash.error(
            "%s: %s",
            args.err_msg or "exception ignored",
            error,
            exc_info=(args.exc_type, error, args.exc_traceback) if error is not None else None,
        )

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread
    sys.unraisablehook = unraisable
