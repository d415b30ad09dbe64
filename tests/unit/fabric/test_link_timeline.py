"""A node's link timeline: bursts of each counter, when they began and ended, written on change."""

from __future__ import annotations

import json

import pytest

from tpfabric_core.fabric.link_judge import LinkJudge, LinkJudgeConfig, NodeSample
from tpfabric_core.fabric.link_samples import WATCHED_COUNTERS, PortSample
from tpfabric_core.fabric.link_timeline import (
    TIMELINE_ANNOTATION,
    Burst,
    NodeTimeline,
    PortTimeline,
    TimelineConfig,
    TimelineRecorder,
    format_timeline,
    read_timeline,
)

GUID = "b83fd20300050001"
T0 = 1_700_000_000.0


def port(
    counters: dict[str, int], *, hca: str = "mlx5_5", unread: frozenset[str] = frozenset()
) -> PortSample:
    return PortSample(
        hca, 1, "ACTIVE", "LinkUp", 400.0, 4, counters=counters, unread=unread, guid=GUID
    )


def run(
    recorder: TimelineRecorder, series: list[int], counter: str = "packet_seq_err"
) -> list[bool]:
    """Feed one sample per 10 s with ``counter`` at each value of ``series``; return which
    samples changed the published timeline."""
    return [
        recorder.observe(T0 + 10 * i, [port({counter: value})], {"mlx5_5": 5})
        for i, value in enumerate(series)
    ]


def test_a_burst_runs_from_the_sample_before_the_first_rise_to_the_last_rise() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    run(recorder, [0, 0, 400, 810, 810, 810])
    (only,) = recorder.timeline().ports
    assert (only.guid, only.rail, only.where) == (GUID, 5, "mlx5_5 port 1")
    assert only.bursts == (Burst("packet_seq_err", T0 + 10, T0 + 30, 810, 41.0),)


def test_the_timeline_is_written_only_when_a_burst_opens_or_closes() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    changed = run(recorder, [0, 0, 400, 810, 810, 810, 810, 1200, 1200])
    # first sample (history begins), burst opens, burst closes, next opens, next closes
    assert changed == [True, False, True, False, True, False, False, True, True]


def test_an_open_burst_is_published_as_open_and_grows_without_a_write() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    run(recorder, [0, 400, 800, 1200])
    (burst,) = recorder.timeline().ports[0].bursts
    assert burst.open
    assert burst.events == 400
    assert json.loads(recorder.annotation())["ports"][0]["bursts"][0][-1] == 1


def test_periodic_bursts_are_each_kept_with_their_times() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    series, total = [], 0
    for step in range(60):  # a burst of 400 every 180 s, 10 minutes
        total += 400 if step % 18 == 5 else 0
        series.append(total)
    run(recorder, series)
    starts = [b.start - T0 for b in recorder.timeline().ports[0].bursts]
    assert starts == [40.0, 220.0, 400.0, 580.0]


def test_a_congestion_counter_makes_a_burst_only_above_its_floor() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    run(recorder, [0, 5_000, 10_000, 200_000, 200_100], counter="np_cnp_sent")
    (burst,) = recorder.timeline().ports[0].bursts
    assert (burst.start - T0, burst.end - T0, burst.events, burst.congestion) == (
        20.0,
        30.0,
        190_000,
        True,
    )


def test_a_counter_that_never_rests_is_cut_into_bursts_of_at_most_max_open_seconds() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0, TimelineConfig(max_open_seconds=60))
    changed = run(recorder, [i * 100 for i in range(20)])
    bursts = recorder.timeline().ports[0].bursts
    assert [(b.start - T0, b.end - T0, b.open) for b in bursts] == [
        (0.0, 50.0, False),
        (50.0, 100.0, False),
        (100.0, 150.0, False),
        (150.0, 160.0, True),  # as written when it opened
    ]
    assert changed.count(True) == 5  # the first sample, then one write per cut


def test_unread_counters_are_published_as_unknown() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    recorder.observe(T0, [port({}, unread=frozenset({"roce_adp_retrans", "np_cnp_sent"}))], {})
    (only,) = recorder.timeline().ports
    assert only.unread == ("roce_adp_retrans", "np_cnp_sent")  # in the agent's order
    assert only.rail is None


def test_old_bursts_leave_at_the_next_write_and_history_then_begins_after_them() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0, TimelineConfig(keep_seconds=100))
    run(recorder, [0, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 20, 20])
    timeline = recorder.timeline()
    assert [b.start - T0 for b in timeline.ports[0].bursts] == [130.0]
    assert timeline.since == T0 + 10  # the end of the burst that was dropped


def test_the_text_stays_under_its_cap_by_dropping_the_oldest_bursts() -> None:
    bursts = tuple(
        Burst("packet_seq_err", T0 + 100 * i, T0 + 100 * i + 10, 40, 4.0) for i in range(400)
    )
    timeline = NodeTimeline(
        "dgx-07", T0 + 40_000, T0, 10.0, (PortTimeline("mlx5_5", 1, GUID, 5, None, (), bursts),)
    )
    text = format_timeline(timeline, max_characters=2048)
    assert len(text) <= 2048
    parsed, problem = read_timeline(text)
    assert problem == ""
    assert parsed is not None
    kept = parsed.ports[0].bursts
    assert kept[-1] == bursts[-1]
    assert parsed.since == kept[0].start - 90  # the end of the newest burst dropped


def test_the_annotation_round_trips() -> None:
    recorder = TimelineRecorder("dgx-07", 10.0)
    run(recorder, [0, 0, 400, 810, 810])
    parsed, problem = read_timeline(recorder.annotation())
    assert problem == ""
    assert parsed == recorder.timeline()
    assert parsed is not None
    assert parsed.node == "dgx-07"
    assert parsed.since == T0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "not JSON"),
        ("[]", "not an object"),
        ('{"v": 2}', "version '2'"),
        ('{"v": 1, "node": "n"}', "unreadable"),
    ],
)
def test_an_unreadable_annotation_says_why(text: str, words: str) -> None:
    parsed, problem = read_timeline(text)
    assert parsed is None
    assert words in problem
    assert TIMELINE_ANNOTATION in problem


def test_unreadable_bursts_are_left_out_and_counted() -> None:
    text = json.dumps(
        {
            "v": 1, "node": "n", "at": 2, "since": 1, "interval": 10,
            "ports": [
                {"hca": "mlx5_0", "port": 1, "bursts": [[1, 2, "packet_seq_err", 3, 1.5],
                                                        [2, 1, "packet_seq_err", 3, 1],
                                                        [1, 2, "made_up", 3, 1], "x"]},
                {"hca": 7},
            ],
        }
    )  # fmt: skip
    parsed, problem = read_timeline(text)
    assert parsed is not None
    assert len(parsed.ports[0].bursts) == 1
    assert (
        problem == f"{TIMELINE_ANNOTATION}: 1 unreadable port entry, 3 unreadable bursts left out"
    )


# -- the judge: retransmission bursts are a link fault with the error hysteresis --------------


def judge_series(values: list[int], every: float = 10.0) -> list[str]:
    judge = LinkJudge(LinkJudgeConfig(window_seconds=300, recover_seconds=120), {"mlx5_5": 5})
    return [
        judge.observe(NodeSample(i * every, (port({"packet_seq_err": v}),))).state
        for i, v in enumerate(values)
    ]


def test_a_retransmission_burst_degrades_the_port_at_once_and_it_stays_so_for_the_window() -> None:
    series = [0, 0, 400] + [400] * 50
    states = judge_series(series)
    assert states[:2] == ["ok", "ok"]
    assert states[2] == "degraded"
    # the burst (seen at 20 s) is in the 300 s window up to 310 s; the port turns ok 120 s later
    assert states.index("ok", 3) * 10 == 430


def test_a_burst_every_three_minutes_keeps_the_port_degraded_without_flapping() -> None:
    values, total = [], 0
    for step in range(100):
        total += 400 if step % 18 == 3 else 0
        values.append(total)
    states = judge_series(values)
    assert "ok" not in states[3:]


def test_the_reason_names_the_retransmissions_and_the_port() -> None:
    judge = LinkJudge(LinkJudgeConfig(), {"mlx5_5": 5})
    judge.observe(NodeSample(0, (port({"packet_seq_err": 0}),)))
    verdict = judge.observe(NodeSample(10, (port({"packet_seq_err": 400}),)))
    assert verdict.reasons == (
        "retransmissions (NAK sequence errors) 2,400/min on mlx5_5 port 1 (limit 60/min)",
    )


def test_congestion_counters_are_never_judged() -> None:
    judge = LinkJudge(LinkJudgeConfig(), {"mlx5_5": 5})
    judge.observe(NodeSample(0, (port({"np_cnp_sent": 0, "port_xmit_wait": 0}),)))
    verdict = judge.observe(
        NodeSample(10, (port({"np_cnp_sent": 10**7, "port_xmit_wait": 10**9}),))
    )
    assert verdict.state == "ok"


def test_every_watched_counter_has_a_width() -> None:
    from tpfabric_core.fabric.link_judge import COUNTER_BITS  # noqa: PLC0415

    assert set(WATCHED_COUNTERS) <= set(COUNTER_BITS)


def test_a_floor_given_overrides_only_its_counters_default() -> None:
    config = TimelineConfig(floors={"port_xmit_wait": 5e6, "packet_seq_err": 2.0})
    assert config.floors["port_xmit_wait"] == 5e6
    assert config.floors["packet_seq_err"] == 2.0
    assert config.floors["np_cnp_sent"] == 1000.0


@pytest.mark.parametrize(
    ("floors", "words"),
    [({"made_up": 1.0}, "no counter named made_up"), ({"np_cnp_sent": -1.0}, "below 0")],
)
def test_a_bad_floor_is_refused_naming_it(floors: dict[str, float], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        TimelineConfig(floors=floors)
