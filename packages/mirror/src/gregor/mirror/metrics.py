"""A flow's metrics, under MirrorMaker 2's names, logged periodically.

Per mirrored partition, as MM2's MirrorSourceConnector reports them:
- `record-count` (since start) and `record-rate` (records/s since the last report),
- `byte-count` and `byte-rate` (record batch bytes as fetched, compressed or not),
- `record-age-ms` (min/avg/max): how old a record is when the mirror reads it,
- `replication-latency-ms` (min/avg/max): from a record's timestamp to its delivery on the
  target.
- `record-lag`: records of the source partition not copied yet, as its last fetch saw the
  partition's end (MM2 has no such metric; its users compute it from consumer lag).
And per flow, as MM2's MirrorCheckpointConnector: `checkpoint-latency-ms` (min/avg/max),
the time a round of checkpoints takes to be written.

The same figures go to Prometheus when asked (see prometheus.py): counts as counters, ages
and latencies as summaries (a sum and a count since start, which never reset).

A batch that passes through counts once for its records, with the timestamp of its newest
record (records are not decoded); a record produced one by one counts alone. The min, avg
and max are over the time since the last report.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gregor.client import TopicPartition


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Stat:
    """min, avg and max of what was seen since the last `reset`; the count and sum of all
    that was seen since start."""

    __slots__ = ("all_count", "all_total", "count", "max", "min", "total")

    def __init__(self) -> None:
        self.all_count = 0
        self.all_total = 0
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    def add(self, value: int) -> None:
        if not self.count or value < self.min:
            self.min = value
        if not self.count or value > self.max:
            self.max = value
        self.count += 1
        self.total += value
        self.all_count += 1
        self.all_total += value

    def describe(self, name: str) -> str:
        if not self.count:
            return f"{name}=-"
        avg = self.total / self.count
        return f"{name}-min={self.min} {name}-avg={avg:.0f} {name}-max={self.max}"


class PartitionMetrics:
    __slots__ = ("byte_count", "bytes_then", "lag", "record_age", "record_count",
                 "records_then", "replication_latency")  # fmt: skip

    def __init__(self) -> None:
        self.record_count = 0
        self.byte_count = 0
        self.records_then = 0  # at the last report
        self.bytes_then = 0
        self.record_age = Stat()
        self.replication_latency = Stat()
        self.lag = -1  # unknown until fetched


class FlowMetrics:
    """Kept by the flow across copier restarts."""

    def __init__(self, name: str, remote: Callable[[str], str] = str) -> None:
        self.name = name
        self.remote = remote  # a source topic's name on the target
        self.partitions: dict[TopicPartition, PartitionMetrics] = {}
        self.checkpoint_latency = Stat()
        self.reported = time.monotonic()

    def partition(self, tp: TopicPartition) -> PartitionMetrics:
        metrics = self.partitions.get(tp)
        if metrics is None:
            metrics = self.partitions[tp] = PartitionMetrics()
        return metrics

    def read(self, tp: TopicPartition, timestamp: int, now: int, lag: int = -1) -> None:
        """Records with this (newest) timestamp were read from the source, `lag` records
        before the partition's end (-1: not known)."""
        metrics = self.partition(tp)
        if timestamp >= 0:
            metrics.record_age.add(max(0, now - timestamp))
        if lag >= 0:
            metrics.lag = lag

    def delivered(self, tp: TopicPartition, records: int, size: int, timestamp: int) -> None:
        metrics = self.partition(tp)
        metrics.record_count += records
        metrics.byte_count += size
        if timestamp >= 0:
            metrics.replication_latency.add(max(0, now_ms() - timestamp))

    def report(self) -> list[str]:
        """One line for the flow, then one per partition; the windows start again."""
        now = time.monotonic()
        seconds = max(now - self.reported, 1e-9)
        self.reported = now
        lines = []
        records = sum(m.record_count for m in self.partitions.values())
        size = sum(m.byte_count for m in self.partitions.values())
        records_then = sum(m.records_then for m in self.partitions.values())
        bytes_then = sum(m.bytes_then for m in self.partitions.values())
        # The flow's lag, so that a stalled copy (lag, no rate) shows apart from a source
        # with nothing new (no lag).
        lags = [m.lag for m in self.partitions.values() if m.lag >= 0]
        lines.append(
            f"{self.name}: record-count={records} "
            f"record-rate={(records - records_then) / seconds:.0f} byte-count={size} "
            f"byte-rate={(size - bytes_then) / seconds:.0f} "
            f"record-lag={sum(lags) if lags else '-'} "
            + self.checkpoint_latency.describe("checkpoint-latency-ms")
        )
        self.checkpoint_latency.reset()
        for tp in sorted(self.partitions):
            m = self.partitions[tp]
            lines.append(
                f"{self.name} {tp.topic}-{tp.partition}: record-count={m.record_count} "
                f"record-rate={(m.record_count - m.records_then) / seconds:.0f} "
                f"byte-count={m.byte_count} "
                f"byte-rate={(m.byte_count - m.bytes_then) / seconds:.0f} "
                f"{m.record_age.describe('record-age-ms')} "
                f"{m.replication_latency.describe('replication-latency-ms')} "
                f"record-lag={m.lag if m.lag >= 0 else '-'}"
            )
            m.records_then, m.bytes_then = m.record_count, m.byte_count
            m.record_age.reset()
            m.replication_latency.reset()
        return lines
