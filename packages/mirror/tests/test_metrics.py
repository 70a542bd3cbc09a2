"""The metrics' names and figures, as MM2 names them."""

from __future__ import annotations

from gregor.client import TopicPartition
from gregor.mirror.metrics import FlowMetrics, now_ms

TP = TopicPartition("orders", 1)


def test_report_names_what_mm2_names() -> None:
    metrics = FlowMetrics("A->B")
    now = now_ms()
    metrics.read(TP, now - 500, now)
    metrics.read(TP, now - 100, now)
    metrics.read(TP, -1, now)  # no timestamp: not an age
    metrics.delivered(TP, 100, 4000, now - 60_000)
    metrics.delivered(TP, 1, 40, -1)
    metrics.checkpoint_latency.add(12)
    flow, partition = metrics.report()
    assert flow.startswith("A->B: record-count=101 record-rate=")
    assert "byte-count=4040" in flow and "byte-rate=" in flow
    assert "checkpoint-latency-ms-min=12 checkpoint-latency-ms-avg=12" in flow
    assert partition.startswith("A->B orders-1: record-count=101 ")
    assert "record-age-ms-min=100 record-age-ms-avg=300 record-age-ms-max=500" in partition
    latency = int(partition.split("replication-latency-ms-min=")[1].split()[0])
    assert 60_000 <= latency < 70_000
    # The windows start again; the counts go on.
    flow, partition = metrics.report()
    assert "record-count=101 record-rate=0" in flow and "checkpoint-latency-ms=-" in flow
    assert "record-age-ms=- replication-latency-ms=-" in partition
