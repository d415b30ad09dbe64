"""The job-side inputs of ``tpfabric diagnose``, read from their formats' own documented samples
(``data/README.md`` names each source), and bad input: truncated, mixed versions, not the format."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tpfabric_core.diagnose.nccl_inspector import (
    parse_nccl_inspector,
    slow_collectives,
)
from tpfabric_core.diagnose.nccl_inspector import slow_ranks as inspector_slow_ranks
from tpfabric_core.diagnose.nccl_ras import parse_nccl_ras
from tpfabric_core.diagnose.nccl_ras import slow_ranks as ras_slow_ranks
from tpfabric_core.diagnose.straggler_report import parse_straggler_report
from tpfabric_core.errors import InputError

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


# -- NCCL RAS JSON ------------------------------------------------------------------------------


def test_the_documented_ras_sample_names_its_missing_rank_with_host_and_gpu() -> None:
    (report,) = parse_nccl_ras(read("nccl-ras-2.29.1-doc-sample.json"), "ras.json")
    assert (report.nccl_version, report.timestamp) == ("2.29.1", "2025-12-19 13:06:53")
    (communicator,) = report.communicators
    assert (communicator.hash, communicator.size) == ("0xae94423cfbb2ef4a", 2)
    present, missing = communicator.ranks
    assert (present.rank, present.host, present.cuda_dev, present.missing) == (
        0,
        "172.16.64.245",
        0,
        False,
    )
    assert (missing.rank, missing.nvml_dev, missing.unresponsive) == (1, 1, True)
    slow, seen = ras_slow_ranks([report])
    assert [(s.rank, s.host, s.cuda_dev) for s in slow] == [(1, "172.16.64.245", 1)]
    assert slow[0].words == (
        "NCCL RAS: missing: RAS could not reach it (unresponsive) in communicator "
        "0xae94423cfbb2ef4a"
    )
    assert seen == []


def test_a_rank_behind_in_every_query_is_slow_and_one_behind_once_is_only_reported() -> None:
    reports = parse_nccl_ras(read("nccl-ras-two-queries-built-from-schema.json"), "ras.json")
    assert [r.line for r in reports] == [1, 360]
    slow, seen = ras_slow_ranks(reports)
    assert [(s.rank, s.host) for s in slow] == [(13, "10.244.2.10")]
    assert "in all 2 queries (by 2, 2 collectives)" in slow[0].words
    assert seen == []  # rank 6 caught up: behind in one query is no finding


def test_one_query_with_a_rank_behind_says_so_and_names_no_slow_rank() -> None:
    text = read("nccl-ras-two-queries-built-from-schema.json")
    first = text[: text.index("\n{")]
    slow, seen = ras_slow_ranks(parse_nccl_ras(first, "ras.json"))
    assert slow == []
    assert len(seen) == 2
    assert "normal while collectives run" in seen[0]


def test_a_truncated_ras_file_names_the_line_where_it_ends() -> None:
    text = read("nccl-ras-2.29.1-doc-sample.json")
    with pytest.raises(InputError) as raised:
        parse_nccl_ras(text[: text.index('"missing_ranks"')], "ras.json")
    assert str(raised.value).startswith("ras.json:37: the JSON document that starts on line 1")
    assert "the file is cut short" in str(raised.value)


def test_ras_queries_of_two_nccl_versions_are_refused_naming_both_lines() -> None:
    one = read("nccl-ras-2.29.1-doc-sample.json")
    other = one.replace('"2.29.1"', '"2.28.7"')
    with pytest.raises(InputError, match=r"ras.json:57: NCCL 2.28.7, but the query on line 1 is "):
        parse_nccl_ras(one + other, "ras.json")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Job summary\n===========\n", "ras.json:1: not JSON"),
        ('{"communicators": {}}', "not NCCL RAS JSON: no 'communicators' list"),
        ("", "ras.json: empty"),
        (
            json.dumps(
                {
                    "nccl_version": "2.29.1",
                    "communicators": [{"hash": "0x1", "ranks": [{"rank": "one", "host": "h"}]}],
                }
            ),
            "communicators[0].ranks[0].rank: 'one' is not a whole number",
        ),
    ],
)
def test_what_is_not_ras_json_is_refused_with_the_fix(text: str, words: str) -> None:
    with pytest.raises(InputError, match=re.escape(words)):
        parse_nccl_ras(text, "ras.json")


# -- NCCL Inspector --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rank", "collective", "busbw"),
    [
        ("nccl-inspector-v4.0-readme-sample.json", 2, "AllReduce", 485.119099),
        ("nccl-inspector-v4.0-readme-verbose-sample.json", 4, "ReduceScatter", 366.134533),
        ("nccl-inspector-v4.0-exporter-readme-sample.json", 31, "ReduceScatter", 18.469236),
    ],
)
def test_the_documented_inspector_samples_are_read(
    name: str, rank: int, collective: str, busbw: float
) -> None:
    (record,) = parse_nccl_inspector([(name, read(name))])
    assert (record.rank, record.collective, record.busbw_gbs) == (rank, collective, busbw)
    assert record.hostname == "example-hostname"
    assert 1.7e9 < record.time < 1.8e9  # dump_timestamp_us, in Unix seconds


def test_the_readme_samples_one_after_another_read_as_one_run() -> None:
    names = (
        "nccl-inspector-v4.0-readme-sample.json",
        "nccl-inspector-v4.0-readme-verbose-sample.json",
    )
    texts = [(name, read(name)) for name in names]
    assert [r.rank for r in parse_nccl_inspector(texts)] == [2, 4]


def test_a_rank_at_half_its_peers_bus_bandwidth_is_slow() -> None:
    name = "nccl-inspector-built-from-schema.jsonl"
    records = parse_nccl_inspector([(name, read(name))])
    assert len(records) == 24
    (slow,) = inspector_slow_ranks(records)
    assert (slow.rank, slow.hostname, slow.line) == (3, "serve-70b-worker-1", 4)
    assert "AllReduce of 268,435,456 bytes at a median 180.0 GB/s bus bandwidth, 50% of" in (
        slow.words
    )
    assert slow_collectives(records) == []  # no collective under half its own median


def test_inspector_records_of_two_format_versions_are_refused_naming_both() -> None:
    name = "nccl-inspector-built-from-schema.jsonl"
    lines = read(name).splitlines()
    lines[5] = lines[5].replace('"v4.0"', '"v4.1"')
    with pytest.raises(InputError) as raised:
        parse_nccl_inspector([(name, "\n".join(lines))])
    assert str(raised.value).startswith(
        f"{name}:6: Inspector output format v4.1, but {name}:1 is v4.0: the files mix two runs"
    )


def test_an_older_inspector_format_is_refused() -> None:
    text = read("nccl-inspector-v4.0-readme-sample.json").replace('"v4.0"', '"v3.0"')
    with pytest.raises(
        InputError, match=r"Inspector output format v3\.0; this tpfabric reads v4\.x"
    ):
        parse_nccl_inspector([("old.json", text)])


def test_a_truncated_inspector_file_names_its_last_line() -> None:
    name = "nccl-inspector-built-from-schema.jsonl"
    text = read(name)
    with pytest.raises(InputError, match=rf"{name}:24: the JSON document that starts on line 24"):
        parse_nccl_inspector([(name, text[: text.rindex('"coll_busbw_gbs"')])])


def test_prometheus_mode_output_is_not_the_json_inspector_output() -> None:
    prom = 'nccl_bus_bandwidth_gbs{version="v5.1",node="n",gpu="GPU0"} 678.263\n'
    with pytest.raises(InputError, match="not JSON"):
        parse_nccl_inspector([("prom.txt", prom)])


# -- nvidia-resiliency-ext -----------------------------------------------------------------------


def test_the_usage_guides_scores_are_read_and_their_slow_ranks_named() -> None:
    report = parse_straggler_report(read("nvrx-straggler-usage-guide-sample.txt"), "scores.txt")
    assert report.scores["relative GPU"][3] == 0.663
    assert report.scores["relative section data_loading"][6] == 0.591
    slow = report.slow_ranks()
    # the library's default threshold is 0.75: GPU scores of ranks 0, 2, 3, 4, 6, 7
    # and rank 6's data_loading score
    assert [s.rank for s in slow] == [0, 2, 3, 4, 6, 7]
    six = next(s for s in slow if s.rank == 6)
    assert six.words == "nvidia-resiliency-ext: relative GPU performance score 0.72, under 0.75"
    assert six.line == 7  # where its dictionary begins
    assert six.node is None  # the dictionaries name no node


def test_the_callbacks_log_gives_ranks_nodes_and_the_warnings_straggler() -> None:
    name = "nvrx-straggler-callback-built-from-source.log"
    report = parse_straggler_report(read(name), name)
    assert report.nodes[13] == "serve-70b-worker-1"
    assert report.scores["relative GPU"][0] == 1.0
    (slow,) = report.slow_ranks()
    assert (slow.rank, slow.node, slow.line) == (13, "serve-70b-worker-1", 4)


def test_a_straggler_report_cut_inside_a_dictionary_names_the_line() -> None:
    text = read("nvrx-straggler-usage-guide-sample.txt")
    with pytest.raises(InputError, match=r"scores.txt:7: the score dictionary that starts here"):
        parse_straggler_report(text[: text.index("}\n\n")], "scores.txt")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "Relative GPU performance scores:\n{0: 1.7}\n",
            "scores.txt:2: rank 0: 1.7 is not a score",
        ),
        ("Relative GPU performance scores:\n{0: __import__('os')}\n", "not a dictionary of scores"),
        ("nothing to see here\n", "no performance scores and no straggler warning"),
    ],
)
def test_what_is_not_a_straggler_report_is_refused(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        parse_straggler_report(text, "scores.txt")


def test_the_fixtures_readme_names_every_file() -> None:
    readme = read("README.md")
    for path in DATA.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`" in readme, path.name
    json.loads(read("nccl-ras-2.29.1-doc-sample.json"))
