"""The flows' metrics in Prometheus' text format, on `metrics.prometheus.listener`.

Named as the JMX exporter names MirrorMaker 2's MBeans (`kafka.connect.mirror:type=
MirrorSourceConnector,target=B,topic=A.orders,partition=0` and its attributes), so MM2
dashboards keep working: `kafka_connect_mirror_mirrorsourceconnector_record_count_total`
and so on, labelled `source`, `target`, `topic` (the remote topic) and `partition`. Counts
are counters; record age and replication latency are summaries (`_sum` and `_count` since
start, in milliseconds, to be divided over a rate window), with the window's maximum as a
gauge, as MM2 reports `-max`; lag is a gauge. `checkpoint_latency_ms` is per flow.

The figures are read from the flows' FlowMetrics when scraped: the copy path does no more
work for it. gregor.client.exporter serves them (prometheus_client's HTTP server, in a thread).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gregor.mirror.metrics import FlowMetrics

SOURCE = "kafka_connect_mirror_mirrorsourceconnector_"
CHECKPOINT = "kafka_connect_mirror_mirrorcheckpointconnector_"
LABELS = ["source", "target", "topic", "partition"]


class MirrorCollector(Collector):
    def __init__(self, flows: Sequence[FlowMetrics]) -> None:
        self.flows = flows

    def collect(self) -> Iterable[Metric]:
        records = CounterMetricFamily(
            SOURCE + "record_count", "Records copied to the target", labels=LABELS
        )
        size = CounterMetricFamily(
            SOURCE + "byte_count", "Record batch bytes copied (as fetched)", labels=LABELS
        )
        age = SummaryMetricFamily(
            SOURCE + "record_age_ms", "Age of records when read from the source", labels=LABELS
        )
        age_max = GaugeMetricFamily(
            SOURCE + "record_age_ms_max", "Oldest record age in the current window", labels=LABELS
        )
        latency = SummaryMetricFamily(
            SOURCE + "replication_latency_ms",
            "From a record's timestamp to its delivery on the target",
            labels=LABELS,
        )
        latency_max = GaugeMetricFamily(
            SOURCE + "replication_latency_ms_max",
            "Highest replication latency in the current window",
            labels=LABELS,
        )
        lag = GaugeMetricFamily(
            SOURCE + "record_lag",
            "Records of the source partition not copied yet (as of its last fetch)",
            labels=LABELS,
        )
        checkpoints = SummaryMetricFamily(
            CHECKPOINT + "checkpoint_latency_ms",
            "Time a round of checkpoints takes to be written",
            labels=["source", "target"],
        )
        for flow in self.flows:
            source, _, target = flow.name.partition("->")
            for tp, m in sorted(list(flow.partitions.items())):
                labels = [source, target, flow.remote(tp.topic), str(tp.partition)]
                records.add_metric(labels, m.record_count)
                size.add_metric(labels, m.byte_count)
                age.add_metric(labels, m.record_age.all_count, m.record_age.all_total)
                age_max.add_metric(labels, m.record_age.max)
                stat = m.replication_latency
                latency.add_metric(labels, stat.all_count, stat.all_total)
                latency_max.add_metric(labels, stat.max)
                if m.lag >= 0:
                    lag.add_metric(labels, m.lag)
            stat = flow.checkpoint_latency
            checkpoints.add_metric([source, target], stat.all_count, stat.all_total)
        return [records, size, age, age_max, latency, latency_max, lag, checkpoints]
