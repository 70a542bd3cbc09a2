"""gregor-etl's metrics for Prometheus (`--metrics-listener http://HOST:PORT`), served by
gregor.client.exporter as gregor-mirror's are, read from `EtlMetrics` when scraped.

Per topic, from each committed batch's progress event:
- `gregor_etl_records_read_total`: records the batches read from the topic,
- `gregor_etl_records_written_total`: records written to the topic's table, and
  `gregor_etl_records_rejected_total`: to its _rejected table (values that are not JSON of
  the schema; counted by the query itself, with Spark's observe()),
- `gregor_etl_batches_total` and `gregor_etl_batch_duration_seconds` (a summary: `_sum`
  and `_count` since start), `gregor_etl_last_batch_timestamp_seconds`;
per partition:
- `gregor_etl_committed_offset`: the end offset of the last committed batch (also the
  group's committed offset),
- `gregor_etl_lag`: records of the partition not loaded yet, as of that batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

PREFIX = "gregor_etl_"


@dataclass
class TopicMetrics:
    records_read: int = 0
    records_written: int = 0
    records_rejected: int = 0
    batches: int = 0
    batch_seconds: float = 0.0
    last_batch: float = 0.0  # unix time
    committed: dict[int, int] = field(default_factory=dict)  # partition -> offset
    lag: dict[int, int] = field(default_factory=dict)


class EtlMetrics:
    """What the query listener saw; written by Spark's listener thread, read by scrapes
    (each update replaces whole values, so a scrape sees a batch or not)."""

    def __init__(self, topics: Iterable[str]) -> None:
        self.topics = {topic: TopicMetrics() for topic in topics}

    def add(self, topic: str) -> None:
        """A topic loaded from now on (a service found it)."""
        self.topics.setdefault(topic, TopicMetrics())

    def batch(
        self,
        topic: str,
        read: int,
        written: int,
        seconds: float,
        at: float,
        committed: Mapping[int, int],
        latest: Mapping[int, int],
    ) -> None:
        """A batch of the topic's table committed."""
        m = self.topics[topic]
        m.records_read += read
        m.records_written += written
        m.batches += 1
        m.batch_seconds += seconds
        m.last_batch = at
        self.offsets(topic, committed, latest)

    def rejected(self, topic: str, records: int) -> None:
        self.topics[topic].records_rejected += records

    def offsets(self, topic: str, committed: Mapping[int, int], latest: Mapping[int, int]) -> None:
        m = self.topics[topic]
        m.committed = {**m.committed, **committed}
        m.lag = {**m.lag, **{p: max(latest.get(p, o) - o, 0) for p, o in committed.items()}}


class EtlCollector(Collector):
    def __init__(self, metrics: EtlMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        def counter(name: str, text: str) -> CounterMetricFamily:
            return CounterMetricFamily(PREFIX + name, text, labels=["topic"])

        read = counter("records_read", "Records read from the topic by committed batches")
        written = counter("records_written", "Records written to the topic's table")
        rejected = counter("records_rejected", "Records written to the topic's _rejected table")
        batches = counter("batches", "Batches committed")
        duration = SummaryMetricFamily(
            PREFIX + "batch_duration_seconds", "Time a batch took", labels=["topic"]
        )
        last = GaugeMetricFamily(
            PREFIX + "last_batch_timestamp_seconds",
            "When the last batch committed",
            labels=["topic"],
        )
        committed = GaugeMetricFamily(
            PREFIX + "committed_offset",
            "End offset of the last committed batch",
            labels=["topic", "partition"],
        )
        lag = GaugeMetricFamily(
            PREFIX + "lag", "Records not loaded yet", labels=["topic", "partition"]
        )
        for topic, m in sorted(self.metrics.topics.items()):
            read.add_metric([topic], m.records_read)
            written.add_metric([topic], m.records_written)
            rejected.add_metric([topic], m.records_rejected)
            batches.add_metric([topic], m.batches)
            duration.add_metric([topic], m.batches, m.batch_seconds)
            if m.batches:
                last.add_metric([topic], m.last_batch)
            for partition, offset in sorted(m.committed.items()):
                committed.add_metric([topic, str(partition)], offset)
            for partition, behind in sorted(m.lag.items()):
                lag.add_metric([topic, str(partition)], behind)
        return [read, written, rejected, batches, duration, last, committed, lag]
