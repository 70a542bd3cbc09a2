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


def test_prometheus_names_and_counts() -> None:
    """The collector's families, rendered in the text format and parsed back by
    prometheus_client: MM2's names as the JMX exporter writes them, counts exact."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gregor.mirror.prometheus import MirrorCollector

    metrics = FlowMetrics("A->B", lambda topic: f"A.{topic}")
    now = now_ms()
    metrics.read(TP, now - 500, now, lag=30)
    metrics.delivered(TP, 100, 4000, now - 2000)
    metrics.delivered(TP, 1, 40, now - 1000)
    metrics.report()  # a log report resets the windows, not the counts
    metrics.checkpoint_latency.add(12)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MirrorCollector([metrics]))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    labels = (("partition", "1"), ("source", "A"), ("target", "B"), ("topic", "A.orders"))
    source = "kafka_connect_mirror_mirrorsourceconnector_"
    assert samples[source + "record_count_total", labels] == 101
    assert samples[source + "byte_count_total", labels] == 4040
    assert samples[source + "record_age_ms_count", labels] == 1
    assert samples[source + "record_age_ms_sum", labels] == 500
    assert samples[source + "replication_latency_ms_count", labels] == 2
    assert 3000 <= samples[source + "replication_latency_ms_sum", labels] < 13_000
    assert samples[source + "record_lag", labels] == 30
    flow = (("source", "A"), ("target", "B"))
    checkpoint = "kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms"
    assert samples[checkpoint + "_count", flow] == 1
    assert samples[checkpoint + "_sum", flow] == 12
