"""How large and how deep an input may be, and total readers of the text other programs write.

Everything tpfabric reads from an object or a file was written by someone else: a user, a
kubelet, another controller, a hostile pod. Each reader here either returns a value or says no
in its own input error, for any text at all: a number in a label is ASCII digits of a bounded
length (``"²".isdigit()`` is true and ``int("²")`` raises; ``int()`` of 5,000 digits raises
too), a JSON annotation or a YAML file is bounded in size and in nesting (the standard parsers
recurse and raise ``RecursionError`` on a few kilobytes of brackets). Pure.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tpfabric_core.errors import InputError

__all__ = [
    "MAX_ANNOTATION_JSON_BYTES",
    "MAX_DIGITS",
    "MAX_FILE_BYTES",
    "MAX_NESTING",
    "bounded_json",
    "check_yaml_text",
    "whole_number",
]

#: digits of a whole number read from a label or an annotation (10**18 is beyond any count)
MAX_DIGITS = 18
#: bytes of a JSON annotation tpfabric parses (the fabric agent's health detail is a few kB)
MAX_ANNOTATION_JSON_BYTES = 64 * 1024
#: bytes of a file tpfabric reads (a fabric description, a topology dump, a GUID map)
MAX_FILE_BYTES = 64 * 1024 * 1024
#: levels of nested lists and mappings in a JSON annotation or a YAML file
MAX_NESTING = 64


def whole_number(text: object, *, max_digits: int = MAX_DIGITS) -> int | None:
    """Return the whole number ``text`` spells in ASCII digits (spaces around it allowed), or
    None for anything else: a sign, a fraction, another script's digits, more than
    ``max_digits`` digits, a value that is not text or a number. Never raises."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text >= 0 and len(str(text)) <= max_digits else None
    if not isinstance(text, str):
        return None
    value = text.strip()
    if not value or len(value) > max_digits or not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def _too_deep(text: str, limit: int) -> bool:
    """Return whether JSON ``text`` nests lists and objects more than ``limit`` deep (brackets
    inside strings do not count)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def bounded_json(
    text: str,
    what: str,
    *,
    max_bytes: int = MAX_ANNOTATION_JSON_BYTES,
    max_nesting: int = MAX_NESTING,
) -> Any:
    """Return the JSON value of ``text``; ValueError naming ``what`` and the limit when it is
    longer than ``max_bytes``, nests deeper than ``max_nesting`` or is not JSON."""
    if len(text) > max_bytes:
        raise ValueError(f"{what}: {len(text)} characters, more than the {max_bytes} allowed")
    if _too_deep(text, max_nesting):
        raise ValueError(f"{what}: nested more than {max_nesting} levels deep")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{what}: not JSON ({err})") from None


def check_yaml_text(
    text: str,
    source: str,
    *,
    max_bytes: int = MAX_FILE_BYTES,
    max_nesting: int = MAX_NESTING,
) -> None:
    """Raise InputError naming ``source`` and the limit when YAML ``text`` is longer than
    ``max_bytes`` or nests lists and mappings deeper than ``max_nesting``; return None else.

    Reads the YAML's events (PyYAML's parser keeps a stack, it does not recurse), so a file
    nested 100,000 deep is refused before a loader, which recurses, ever sees it. A syntax
    error is left to the loader, which names its line.
    """
    if len(text) > max_bytes:
        raise InputError(
            source,
            f"{len(text)} characters, more than the {max_bytes} a file may have",
            "split the file or check that it is the one meant",
        )
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_nesting:
                    mark = event.start_mark
                    where = f"{source}:{mark.line + 1}" if mark is not None else source
                    raise InputError(
                        where, f"lists and mappings nested more than {max_nesting} levels deep"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return
