"""Slurm-style hostlist expressions: ``dgx-[01-04,07]`` <-> ``dgx-01 dgx-02 dgx-03 dgx-04 dgx-07``.

Used by the fabric description files and the Slurm ``topology.conf`` importer/exporter. Ranges keep
their zero padding (``[01-10]`` yields ``01``..``10``); several bracket groups expand as a cartesian
product, left to right, the way ``scontrol show hostnames`` does.

An expression names at most :data:`MAX_HOSTS` hosts and is at most :data:`MAX_EXPRESSION`
characters long: 22 characters can name 10**12 hosts, and a file must not be able to make a
reader expand them.
"""

from __future__ import annotations

import re
from itertools import product

__all__ = ["MAX_EXPRESSION", "MAX_HOSTS", "HostlistError", "compress_hostlist", "expand_hostlist"]

#: hosts one expression may name: more nodes than any one fabric has
MAX_HOSTS = 100_000
#: characters of one expression
MAX_EXPRESSION = 1_000_000

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_NUMERIC_TAIL = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded; the message names the bad part."""


def _split_top_level(expr: str) -> list[str]:
    """Return the comma-separated items of ``expr``, ignoring commas inside brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in expr:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def _range_bounds(part: str, expr: str) -> tuple[int, int, int]:
    """Return (low, high, zero-padded width) of one range such as ``01-04``."""
    low, _, high = part.partition("-")
    if not (_digits(low) and _digits(high)):
        raise HostlistError(f"range {part!r} in hostlist {expr!r} is not numeric")
    if int(high) < int(low):
        raise HostlistError(f"range {part!r} in hostlist {expr!r} runs backwards")
    return int(low), int(high), len(low)


def _digits(text: str) -> bool:
    """Return whether ``text`` is ASCII digits a host name can carry (``int()`` reads them)."""
    return text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS


_MAX_DIGITS = 18


def _range_size(body: str, expr: str) -> int:
    """Return how many values one bracket body such as ``01-04,07`` names (none expanded)."""
    count = 0
    for raw in body.split(","):
        part = raw.strip()
        if not part:
            raise HostlistError(f"empty range in hostlist {expr!r}")
        if "-" in part:
            low, high, _ = _range_bounds(part, expr)
            count += high - low + 1
        elif _digits(part):
            count += 1
        else:
            raise HostlistError(f"value {part!r} in hostlist {expr!r} is not numeric")
    return count


def _expand_range(body: str, expr: str) -> list[str]:
    """Return the values of one bracket body such as ``01-04,07`` (sized first)."""
    values: list[str] = []
    for raw in body.split(","):
        part = raw.strip()
        if "-" in part:
            low, high, width = _range_bounds(part, expr)
            values.extend(str(n).zfill(width) for n in range(low, high + 1))
        else:
            values.append(part)
    return values


def _too_many(expr: str, count: int) -> HostlistError:
    return HostlistError(
        f"hostlist {expr[:80]!r}{'...' if len(expr) > 80 else ''} names {count} hosts or more, "
        f"more than the {MAX_HOSTS} one expression may name: list the hosts in several "
        "expressions, or check the ranges"
    )


def expand_hostlist(expr: str) -> list[str]:
    """Return the host names of a hostlist expression, in order, duplicates kept out.

    HostlistError when it is malformed, longer than :data:`MAX_EXPRESSION` characters or names
    more than :data:`MAX_HOSTS` hosts (counted before any is made).
    """
    if len(expr) > MAX_EXPRESSION:
        raise HostlistError(
            f"hostlist of {len(expr)} characters, more than the {MAX_EXPRESSION} allowed"
        )
    items = []
    total = 0
    for item in _split_top_level(expr):
        pieces = _BRACKET.split(item)
        # pieces alternates literal, bracket body, literal, ...
        literals = pieces[0::2]
        if any("[" in lit or "]" in lit for lit in literals):
            raise HostlistError(f"nested or unbalanced brackets in hostlist {expr!r}")
        size = 1
        for body in pieces[1::2]:
            size *= _range_size(body, expr)
            if size > MAX_HOSTS:
                raise _too_many(expr, size)
        total += size
        if total > MAX_HOSTS:
            raise _too_many(expr, total)
        items.append(pieces)
    hosts: list[str] = []
    seen: set[str] = set()
    for pieces in items:
        choices = [
            [lit] if i % 2 == 0 else _expand_range(lit, expr) for i, lit in enumerate(pieces)
        ]
        for combo in product(*choices):
            name = "".join(combo)
            if name not in seen:
                seen.add(name)
                hosts.append(name)
    return hosts


def compress_hostlist(hosts: list[str]) -> str:
    """Return a compact hostlist expression for ``hosts``; only the trailing number is folded.

    ``expand_hostlist(compress_hostlist(h))`` returns the sorted, de-duplicated ``h``.
    """
    plain: list[str] = []
    numbered: dict[str, list[str]] = {}
    for name in sorted(set(hosts)):
        match = _NUMERIC_TAIL.match(name)
        if match:
            numbered.setdefault(match.group(1), []).append(match.group(2))
        else:
            plain.append(name)
    parts = list(plain)
    for prefix in sorted(numbered):
        digits = sorted(numbered[prefix], key=lambda d: (int(d), len(d)))
        runs: list[tuple[str, str]] = []
        for d in digits:
            if runs:
                low, high = runs[-1]
                if int(d) == int(high) + 1 and d == str(int(d)).zfill(len(low)):
                    runs[-1] = (low, d)
                    continue
            runs.append((d, d))
        if len(runs) == 1 and runs[0][0] == runs[0][1]:
            parts.append(prefix + runs[0][0])
        else:
            body = ",".join(low if low == high else f"{low}-{high}" for low, high in runs)
            parts.append(f"{prefix}[{body}]")
    return ",".join(parts)
