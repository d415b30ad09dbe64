"""The fabric agent benchmark runs the real loop and counts what it would write."""

from __future__ import annotations

from tpfabric_bench.fabric_agent import run


def test_a_quiet_fabric_writes_nothing_after_the_first_publication_and_an_incident_six() -> None:
    result = run(hcas=1, ports=1, gpus=0, hours=2)
    assert result["writes_before_last_hour"] == 2  # label+annotation, then the condition
    assert result["writes_per_hour_quiet"] == 0
    # degraded (2 writes, the timeline's burst opening with them), the burst cut at its 300 s
    # cap (1), closed when the errors stop (1), ok again (2)
    assert result["writes_incident"] == 6
    assert result["node_reads_per_hour"] == 12.0  # one re-read per 5 minutes
    assert result["cpu_ms_per_interval_median"] > 0
