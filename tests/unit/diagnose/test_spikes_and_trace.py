"""Latency spikes (how far the tail sits from the median, when, on what period), the serve trace
format, and the pairing rdma-init leaves in its termination message."""

from __future__ import annotations

import json
import re

import pytest

from tpfabric_core.diagnose.rdma_summary import parse_summary, pod_pairing
from tpfabric_core.diagnose.serve_trace import (
    ServeTarget,
    TracedRequest,
    endpoint_offset,
    itl_samples,
    parse_serve_trace,
    trace_document,
)
from tpfabric_core.diagnose.spikes import find_spikes, format_duration, period_of
from tpfabric_core.errors import InputError

T0 = 1_786_356_000.0


def war_story_waits(minutes: int = 30, every: float = 300.0) -> list[tuple[float, float]]:
    """Inter-token waits of 18 ms, and of 210 ms for two seconds every ``every`` seconds."""
    waits, now = [], T0
    while now < T0 + minutes * 60:
        stalled = (now - T0) % every < 2.0 and now - T0 > 60
        wait = 0.210 if stalled else 0.018
        now += wait
        waits.append((now, wait))
    return waits


def test_the_war_storys_spikes_are_found_with_their_ratio_and_period() -> None:
    report = find_spikes(war_story_waits())
    assert report is not None
    assert report.median == pytest.approx(0.018)
    # two seconds of 210 ms in five minutes hide in the whole run's p99: the worst ten seconds'
    # p99 shows them, as the war story's per-interval p99 did
    assert report.ratio == pytest.approx(1.0)
    assert report.worst_ratio is not None
    assert report.worst_ratio == pytest.approx(210 / 18, rel=0.01)
    assert len(report.spikes) == 5  # at 5, 10, 15, 20 and 25 minutes
    assert report.period is not None
    assert report.period.words == "every 5.0 min"
    assert [round(s.start - T0) for s in report.spikes] == [300, 600, 900, 1200, 1500]


def test_waits_of_several_streams_stalled_together_are_one_event() -> None:
    streams = [[(T0 + 10 + s * 0.001, 0.3)] + [(T0 + i * 0.02, 0.02) for i in range(1, 200)]
               for s in range(8)]  # fmt: skip
    report = find_spikes([w for stream in streams for w in stream])
    assert report is not None
    (event,) = report.spikes
    assert event.samples == 8


def test_spikes_on_an_irregular_schedule_are_not_called_periodic() -> None:
    assert period_of([0, 100, 130, 400]) is None
    assert period_of([0, 100]) is None  # two events are no period
    period = period_of([0, 240, 600, 840, 1200])  # every four to six minutes
    assert period is not None
    assert period.words == "every 4.0-6.0 min"


@pytest.mark.parametrize(
    ("seconds", "words"), [(0.018, "18 ms"), (2.9, "2.9 s"), (180, "180 s"), (300, "5.0 min")]
)
def test_durations_read_as_a_person_says_them(seconds: float, words: str) -> None:
    assert format_duration(seconds) == words


def test_no_samples_no_report() -> None:
    assert find_spikes([]) is None


# -- the serve trace -----------------------------------------------------------------------------


def traced(chunks: list[float], sent: float = T0, date: float | None = None) -> TracedRequest:
    return TracedRequest(sent, sent + 0.05, date, tuple(chunks))


def test_the_trace_round_trips_and_gives_its_waits() -> None:
    requests = [traced([T0 + 0.1, T0 + 0.12, T0 + 0.45]), traced([T0 + 1.0, T0 + 1.02], T0 + 0.9)]
    document = trace_document(
        "bench-host",
        [{"label": "a", "endpoint": "http://e/v1", "model": "m", "requests": requests}],
    )
    trace = parse_serve_trace(json.dumps(document), "trace.json")
    (target,) = trace.targets
    assert (trace.client, target.label, target.endpoint) == ("bench-host", "a", "http://e/v1")
    assert target.requests == tuple(requests)
    assert target.span == (T0, T0 + 1.02)
    assert [round(w, 3) for _, w in itl_samples(target)] == [0.02, 0.33, 0.02]


def test_date_headers_bound_the_endpoints_clock_offset() -> None:
    # the endpoint's clock runs 12.3 s ahead; each response is stamped between send and answer
    sends = [T0 + i * 0.37 for i in range(20)]
    requests = [TracedRequest(t, t + 0.05, float(int(t + 0.02 + 12.3)), ()) for t in sends]
    bound = endpoint_offset(ServeTarget("a", "e", "m", tuple(requests)))
    assert isinstance(bound, tuple)
    low, high = bound
    assert low <= 12.3 <= high
    assert high - low <= 0.2


def test_date_headers_no_single_offset_fits_say_so() -> None:
    requests = (traced([], T0, date=T0), traced([], T0 + 1, date=T0 + 30))
    assert "fit no single clock offset" in str(
        endpoint_offset(ServeTarget("a", "e", "m", requests))
    )
    assert endpoint_offset(ServeTarget("a", "e", "m", (traced([]),))) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"benchmark": "serve"}', "not a trace of tpfabric bench serve --trace"),
        ('{"format": "tpfabric-serve-trace", "version": 9}', "trace version 9"),
        (
            json.dumps(
                {
                    "format": "tpfabric-serve-trace",
                    "version": 1,
                    "targets": [{"requests": [{"sent": 5, "chunks": [7, 6]}]}],
                }
            ),
            "targets[0].requests[0].chunks: times go backwards",
        ),
        (
            '{"format": "tpfabric-serve-trace", "version": 1, "targets": [{"requests": [',
            "cut short",
        ),
        ("{}\n{}", "2 JSON documents, a trace is one"),
    ],
)
def test_what_is_not_a_trace_is_refused(text: str, words: str) -> None:
    with pytest.raises(InputError, match=re.escape(words)):
        parse_serve_trace(text, "trace.json")


# -- the pairing in the init container's termination message -----------------------------------


def pod_with(message: object, state: str = "state") -> dict[str, object]:
    terminated = {"terminated": {"exitCode": 0, "message": message}}
    return {
        "metadata": {"name": "w-0"},
        "status": {"initContainerStatuses": [{"name": "rdma-init", state: terminated}]},
    }


def test_the_termination_message_gives_each_gpus_port_and_rail() -> None:
    message = json.dumps(
        {
            "v": 1,
            "outcome": "rdma",
            "rails": "annotation",
            "pairs": [[0, "0000:18:00.0", "mlx5_0", 1, "B83FD20300000001", 0],
                      [1, "0000:2a:00.0", "mlx5_3", 1, None, None]],
        }
    )  # fmt: skip
    pairing, why = pod_pairing(pod_with(message))
    assert why == ""
    assert pairing is not None
    first = pairing.of_gpu(0)
    assert first is not None
    assert (first.hca, first.port, first.guid, first.rail) == ("mlx5_0", 1, "b83fd20300000001", 0)
    second = pairing.of_gpu(1)
    assert second is not None
    assert (second.guid, second.rail) == (None, None)
    assert pod_pairing(pod_with(message, "lastState"))[0] == pairing  # after a restart


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        ({"metadata": {"name": "w-0"}, "status": {}}, "pod w-0 has no rdma-init status"),
        (
            {"metadata": {"name": "w-0"}, "status": {"initContainerStatuses": [
                {"name": "rdma-init", "state": {"running": {}}}]}},
            "pod w-0: rdma-init has not finished",
        ),
        (pod_with(""), "termination message is empty"),
        (pod_with("tpfabric-rdma-init: rdma (policy preferred)"), "not the pairing summary"),
        (pod_with('{"v": 2}'), "not a pairing summary of version 1"),
        (pod_with("x" * 5000), "longer than the kubelet keeps"),
        ("not a pod", "pod ? has no rdma-init status"),
    ],
)  # fmt: skip
def test_a_pod_without_a_readable_pairing_says_why(pod: object, why: str) -> None:
    pairing, problem = pod_pairing(pod)  # type: ignore[arg-type]
    assert pairing is None
    assert why in problem


def test_unreadable_pairs_are_left_out() -> None:
    pairing, _ = parse_summary('{"v": 1, "pairs": [[0, "g", "mlx5_0", 1, null, 0], [1], "x"]}')
    assert pairing is not None
    assert len(pairing.pairs) == 1
