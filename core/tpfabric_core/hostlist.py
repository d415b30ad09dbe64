"""Slurm-style hostlist expressions: ``dgx-[01-04,07]`` <-> ``dgx-01 dgx-02 dgx-03 dgx-04 dgx-07``.

Used by the fabric description files and the Slurm ``topology.conf`` importer/exporter. Ranges keep
their zero padding (``[01-10]`` yields ``01``..``10``); several bracket groups expand as a cartesian
product, left to right, the way ``scontrol show hostnames`` does.
"""

from __future__ import annotations

import re
from itertools import product

__all__ = ["HostlistError", "compress_hostlist", "expand_hostlist"]

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


def _expand_range(body: str, expr: str) -> list[str]:
    """Return the values of one bracket body such as ``01-04,07``."""
    values: list[str] = []
    for raw in body.split(","):
        part = raw.strip()
        if not part:
            raise HostlistError(f"empty range in hostlist {expr!r}")
        if "-" in part:
            low, _, high = part.partition("-")
            if not (low.isdigit() and high.isdigit()):
                raise HostlistError(f"range {part!r} in hostlist {expr!r} is not numeric")
            if int(high) < int(low):
                raise HostlistError(f"range {part!r} in hostlist {expr!r} runs backwards")
            width = len(low)
            values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
        elif part.isdigit():
            values.append(part)
        else:
            raise HostlistError(f"value {part!r} in hostlist {expr!r} is not numeric")
    return values


def expand_hostlist(expr: str) -> list[str]:
    """Return the host names of a hostlist expression, in order, duplicates kept out."""
    hosts: list[str] = []
    seen: set[str] = set()
    for item in _split_top_level(expr):
        pieces = _BRACKET.split(item)
        # pieces alternates literal, bracket body, literal, ...
        literals = pieces[0::2]
        if any("[" in lit or "]" in lit for lit in literals):
            raise HostlistError(f"nested or unbalanced brackets in hostlist {expr!r}")
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
