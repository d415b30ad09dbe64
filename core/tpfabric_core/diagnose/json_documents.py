"""A file of JSON documents, each with the line it starts on: one document, JSON lines, or
pretty-printed objects one after another (NCCL Inspector writes JSON lines; its README shows
them pretty-printed; ``ncclras -f json`` run twice into one file appends a second document).

Every error names the file and the line, and says what is wrong in the words a user can act on:
a document cut short (the file was truncated, or copied while being written), text that is not
JSON. Pure.
"""

from __future__ import annotations

import json
from typing import Any

from tpfabric_core.errors import InputError
from tpfabric_core.input_limits import MAX_FILE_BYTES

__all__ = ["json_documents", "line_of"]

_WHITESPACE = " \t\r\n"


def line_of(text: str, offset: int) -> int:
    """Return the 1-based line of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1


def json_documents(text: str, source: str, what: str) -> list[tuple[int, Any]]:
    """Return ``(line, value)`` of each JSON document in ``text``, in order; InputError naming
    ``source:line`` when one is cut short or is not JSON (``what`` names the format expected, for
    the fix). An empty file has no document (the caller says whether that is an error)."""
    if len(text) > MAX_FILE_BYTES:
        raise InputError(source, f"{len(text)} characters, more than the {MAX_FILE_BYTES} read")
    decoder = json.JSONDecoder()
    found: list[tuple[int, Any]] = []
    position = 0
    while True:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position >= len(text):
            return found
        line = line_of(text, position)
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as err:
            where = f"{source}:{line_of(text, err.pos)}"
            if err.pos >= len(text.rstrip()):
                raise InputError(
                    where,
                    f"the JSON document that starts on line {line} ends before it is closed: "
                    "the file is cut short",
                    f"take the {what} again, whole (not while it is being written)",
                ) from None
            raise InputError(
                where, f"not JSON ({err.msg})", f"give the {what} as written"
            ) from None
        except RecursionError:  # brackets nested thousands deep: no format of ours nests so
            raise InputError(f"{source}:{line}", "lists and objects nested too deep") from None
        except ValueError as err:  # a number of thousands of digits (int()'s own limit)
            raise InputError(f"{source}:{line}", f"not readable JSON ({err})") from None
        found.append((line, value))
        position = end
