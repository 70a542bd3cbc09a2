"""The in-process metrics and the line they are logged as."""

from __future__ import annotations

from gregor.broker.metrics import Latency, Metrics
from gregor.protocol.apis import ApiKey


def test_report_has_every_meter_the_gauge_and_latencies_then_starts_a_new_window() -> None:
    metrics = Metrics()
    metrics.messages_in.mark(1000)
    metrics.bytes_in.mark(100_000)
    metrics.bytes_out.mark(50_000)
    metrics.isr_shrinks.mark()
    metrics.isr_expands.mark(2)
    metrics.under_replicated = lambda: 3
    metrics.purgatories["fetch"] = [object(), object()]
    for ms in (1, 2, 3, 40):
        metrics.record_request(ApiKey.PRODUCE, ms / 1000)
    report = metrics.report()
    for part in (
        "messages_in=1000 (",
        "bytes_in=100000 (",
        "bytes_out=50000 (",
        "isr_shrinks=1 (",
        "isr_expands=2 (",
        "under_replicated_partitions=3",
        "fetch_purgatory_size=2",
        "Produce: n=4 mean=11.50ms",
        "max=40.0ms",
    ):
        assert part in report, (part, report)
    assert "/s)" in report
    # The next window starts empty for latencies; counts are cumulative.
    again = metrics.report()
    assert "Produce:" not in again
    assert "messages_in=1000 (0.0/s)" in again


def test_latency_percentile_is_an_upper_bound() -> None:
    latency = Latency()
    for us in [100] * 99 + [100_000]:
        latency.record(us / 1_000_000)
    assert 100 <= latency.percentile(0.5) < 200
    assert latency.percentile(0.99) < 200
    assert latency.percentile(1.0) >= 100_000
