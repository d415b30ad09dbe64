"""nvidia-resiliency-ext straggler reports: the per-rank performance scores it prints, and the
ranks it flags.

The package publishes its reports as text, in two shapes, both read here:

- the score dictionaries, as its usage guide shows them (``docs/source/straggler_det/
  usage_guide.rst``)::

      Relative section performance scores:
      {
      'data_loading': {0: 0.961, ...},
      'fwd': {0: 0.994, ...}
      }
      Relative GPU performance scores:
      {
      0: 0.703, 1: 0.978, ...
      }

  (``Individual`` in place of ``Relative`` for the individual scores);
- the log of its PyTorch Lightning callback (``ptl_resiliency/straggler_det_callback.py``):
  ``GPU relative performance:`` / ``GPU individual performance:`` followed by lines
  ``Rank=<r> Node=<node> Score=<s>``, and ``STRAGGLER DETECTION WARNING: ... Affected ranks:
  {StragglerId(rank=6, node='n1'), ...}``. Log prefixes (time, level, logger) before the text
  are allowed.

A score is a ratio of performances, 0 to 1 (1: the best rank, or the rank's own best). A rank
is slow when a GPU or section score is under :data:`THRESHOLD` (the package's own default in
``Report.identify_stragglers``), or when a warning names it. The score dictionaries are read
with :func:`ast.literal_eval` on the bounded text of one dictionary: literals only, no code.

Pure: text in, records out; errors name ``<file>:<line>``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tpfabric_core.errors import InputError

__all__ = ["THRESHOLD", "StragglerReport", "StragglerSlowRank", "parse_straggler_report"]

#: nvidia-resiliency-ext's default threshold for every score (Report.identify_stragglers)
THRESHOLD = 0.75
_DICT_HEADING = re.compile(r"(Relative|Individual) (section|GPU) performance scores:\s*$")
_LOG_HEADING = re.compile(r"GPU (relative|individual) performance:\s*$")
_SCORE_LINE = re.compile(r"Rank=(\d{1,7}) Node=(\S{1,253}) Score=([0-9]*\.?[0-9]+)")
_WARNING = re.compile(
    r"STRAGGLER DETECTION WARNING: Some GPUs (have worse relative performance|performance "
    r"dropped)\. Affected ranks: \{(.*)\}"
)
_STRAGGLER_ID = re.compile(r"StragglerId\(rank=(\d{1,7}), node='([^']{0,253})'\)")
_MAX_DICT_CHARS = 1 << 20


@dataclass(frozen=True, slots=True)
class StragglerSlowRank:
    """A rank the report scores under the threshold or flags; ``words`` say how."""

    rank: int
    node: str | None
    words: str
    line: int


@dataclass(frozen=True, slots=True)
class StragglerReport:
    """What one report file says: scores per kind (``relative GPU``, ``individual fwd``, ...)
    by rank, each rank's node where it is named, and the ranks its warnings flag."""

    source: str
    scores: dict[str, dict[int, float]] = field(default_factory=dict)
    lines: dict[tuple[str, int], int] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    flagged: dict[int, tuple[str, int]] = field(default_factory=dict)

    def slow_ranks(self, threshold: float = THRESHOLD) -> list[StragglerSlowRank]:
        """Return the ranks under ``threshold`` in any score, or flagged by a warning."""
        found: dict[int, StragglerSlowRank] = {}
        for kind, scores in sorted(self.scores.items()):
            for rank, score in sorted(scores.items()):
                if score < threshold and rank not in found:
                    found[rank] = StragglerSlowRank(
                        rank, self.nodes.get(rank),
                        f"nvidia-resiliency-ext: {kind} performance score {score:.2f}, under "
                        f"{threshold:g}", self.lines.get((kind, rank), 0),
                    )  # fmt: skip
        for rank, (words, line) in sorted(self.flagged.items()):
            found.setdefault(
                rank,
                StragglerSlowRank(
                    rank, self.nodes.get(rank), f"nvidia-resiliency-ext: {words}", line
                ),
            )
        return sorted(found.values(), key=lambda r: r.rank)


def _score(value: object, where: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InputError(where, f"{path}: {value!r:.40} is not a score from 0 to 1")
    return float(value)


def _rank(value: object, where: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(where, f"{path}: {value!r:.40} is not a rank")
    return value


def _dictionary(lines: list[str], start: int, source: str) -> tuple[object, int]:
    """Return the Python literal starting on line index ``start`` (braces balanced over the
    following lines) and the index of the line after it."""
    depth, end, seen = 0, start, False
    for end in range(start, len(lines)):
        for char in lines[end]:
            if char == "{":
                depth, seen = depth + 1, True
            elif char == "}":
                depth -= 1
        if seen and depth <= 0:
            break
    else:
        raise InputError(
            f"{source}:{start + 1}",
            "the score dictionary that starts here is never closed: the file is cut short",
            "give the whole report",
        )
    text = "\n".join(lines[start : end + 1])
    if len(text) > _MAX_DICT_CHARS:
        raise InputError(f"{source}:{start + 1}", "a score dictionary longer than 1 MiB")
    try:
        return ast.literal_eval(text.strip()), end + 1
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(
            f"{source}:{start + 1}",
            "not a dictionary of scores as nvidia-resiliency-ext prints it",
            "give the report as printed",
        ) from None


def _read_dictionary(
    report: StragglerReport, heading: re.Match[str], value: object, line: int
) -> None:
    where = f"{report.source}:{line}"
    scope = heading[1].lower()
    if not isinstance(value, dict):
        raise InputError(where, "expected a dictionary of scores after the heading")
    if heading[2] == "GPU":
        kind = f"{scope} GPU"
        report.scores[kind] = {
            _rank(rank, where, "rank"): _score(score, where, f"rank {rank}")
            for rank, score in value.items()
        }
        report.lines.update(((kind, rank), line) for rank in report.scores[kind])
        return
    for section, scores in value.items():
        if not isinstance(scores, dict):
            raise InputError(where, f"section {section!r:.40}: expected a dictionary of scores")
        kind = f"{scope} section {section}"
        report.scores[kind] = {
            _rank(rank, where, "rank"): _score(score, where, f"{section} rank {rank}")
            for rank, score in scores.items()
        }
        report.lines.update(((kind, rank), line) for rank in report.scores[kind])


def parse_straggler_report(text: str, source: str) -> StragglerReport:
    """Return what a straggler report file says; InputError naming ``source:line`` for a score
    dictionary it cannot read, a score out of 0..1, or a file with no score and no warning."""
    report = StragglerReport(source)
    lines = text.splitlines()
    index, kind = 0, None
    while index < len(lines):
        line = lines[index]
        if (heading := _DICT_HEADING.search(line)) is not None:
            start = index + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
            value, index = _dictionary(lines, start, source)
            _read_dictionary(report, heading, value, start + 1)
            continue
        if (log_heading := _LOG_HEADING.search(line)) is not None:
            kind = f"{log_heading[1]} GPU"
            report.scores.setdefault(kind, {})
        elif kind is not None and (score := _SCORE_LINE.search(line)) is not None:
            rank = int(score[1])
            report.scores[kind][rank] = _score(float(score[3]), f"{source}:{index + 1}", "Score")
            report.lines[(kind, rank)] = index + 1
            report.nodes[rank] = score[2]
        elif (warning := _WARNING.search(line)) is not None:
            words = (
                "flagged for worse relative performance than the other GPUs"
                if warning[1].startswith("have")
                else "flagged for a performance drop against its own best"
            )
            for straggler in _STRAGGLER_ID.finditer(warning[2]):
                rank = int(straggler[1])
                report.flagged.setdefault(rank, (words, index + 1))
                report.nodes.setdefault(rank, straggler[2])
        index += 1
    if not report.scores and not report.flagged:
        raise InputError(
            source,
            "no performance scores and no straggler warning in it",
            "give the scores nvidia-resiliency-ext printed (its usage guide's dictionaries, or "
            "the StragglerDetectionCallback's log)",
        )
    return report
