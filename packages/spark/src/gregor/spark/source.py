"""The `gregor` data source: spark-sql-kafka's schema and options over gregor-client.

    from gregor.spark import register
    register(spark)
    df = (spark.read.format("gregor")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .load())

The driver resolves offsets and plans ranges (`planning`); each Spark task reads one range
(`fetch`) and returns Arrow record batches (`arrow`). Streaming offsets are spark-sql-kafka's
JSON, {"topic": {"partition": offset}}, kept in Spark's checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from gregor.client import Consumer, TopicPartition
from gregor.spark import planning
from gregor.spark.arrow import spark_schema
from gregor.spark.fetch import consumer_config, read_range
from gregor.spark.options import ReadOptions, read_options
from gregor.spark.planning import TP, OffsetRange

JsonOffsets = dict[str, dict[str, int]]


class GregorDataSource(DataSource):
    """spark.read / readStream / write / writeStream .format("gregor")."""

    @classmethod
    def name(cls) -> str:
        return "gregor"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from gregor.spark.sink import BatchWriter

        return BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from gregor.spark.sink import StreamWriter

        return StreamWriter(self.options, schema)


class RangePartition(InputPartition):
    """One Spark task: an offset range of one topic-partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class ClusterLookup:
    """planning's questions, answered by a gregor-client Consumer (no group)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def topics(self) -> dict[str, list[int]]:
        return self.consumer.list_topics()

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return planning.by_tp(self.consumer.beginning_offsets([TopicPartition(*tp) for tp in tps]))

    def latest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return planning.by_tp(self.consumer.end_offsets([TopicPartition(*tp) for tp in tps]))

    def for_times(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        found = self.consumer.offsets_for_times(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        )
        return {
            (tp.topic, tp.partition): None if o is None else o.offset for tp, o in found.items()
        }


def _read(options: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    return read_range(
        options.client,
        r,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        """Offsets resolved once, here on the driver, and cut into input partitions."""
        options = self.options
        assert options.ending is not None
        with Consumer(consumer_config(options.client)) as consumer:
            lookup = ClusterLookup(consumer)
            tps = planning.topic_partitions(options.strategy, lookup.topics())
            no_match_latest = options.by_timestamp_strategy == "latest"
            start = planning.resolve(
                options.starting,
                tps,
                lookup,
                name="startingOffsets",
                no_match_latest=no_match_latest,
            )
            end = planning.resolve(
                options.ending, tps, lookup, name="endingOffsets", no_match_latest=True
            )
        ranges = planning.offset_ranges(start, end, fail_on_data_loss=options.fail_on_data_loss)
        pieces = planning.split(ranges, options.min_partitions, options.max_records_per_partition)
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return _read(self.options, partition.range)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between JSON offsets. New partitions (and new topics matching a pattern)
    start at their earliest offset; `maxOffsetsPerTrigger` caps each micro-batch; with
    Trigger.AvailableNow the read stops at the offsets that were latest when it began."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None
        self._target: dict[TP, int] | None = None
        self._latest: dict[TP, int] = {}

    @property
    def lookup(self) -> ClusterLookup:
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self.options.client))
        return ClusterLookup(self._consumer)

    def _partitions_now(self) -> list[TP]:
        return planning.topic_partitions(self.options.strategy, self.lookup.topics())

    def initialOffset(self) -> JsonOffsets:
        tps = self._partitions_now()
        start = planning.resolve(
            self.options.starting,
            tps,
            self.lookup,
            name="startingOffsets",
            no_match_latest=self.options.by_timestamp_strategy == "latest",
        )
        return planning.to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._partitions_now()
        self._target = self.lookup.latest(tps)

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        begin = planning.from_json_offsets(start)
        if self._target is not None:
            latest = dict(self._target)
        else:
            tps = self._partitions_now()
            latest = self.lookup.latest(tps)
        self._latest = latest
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin.update(self.lookup.earliest(new))
        if isinstance(limit, ReadMaxRows):
            end = planning.rate_limit(begin, latest, limit.max_rows)
        else:
            end = dict(latest)
        # A partition that went away keeps its place; partitions() decides if it is loss.
        for tp, offset in begin.items():
            end.setdefault(tp, offset)
        return planning.to_json_offsets(end)

    def reportLatestOffset(self) -> JsonOffsets | None:
        return planning.to_json_offsets(self._latest) if self._latest else None

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[InputPartition]:
        begin = planning.from_json_offsets(start)
        until = planning.from_json_offsets(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.lookup.earliest(new))
        ranges = planning.offset_ranges(
            begin, until, fail_on_data_loss=self.options.fail_on_data_loss
        )
        options = self.options
        pieces = planning.split(ranges, options.min_partitions, options.max_records_per_partition)
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return _read(self.options, partition.range)

    def commit(self, end: JsonOffsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in the cluster."""

    def __getstate__(self) -> dict[str, object]:
        # Tasks get the options only; the driver's consumer stays on the driver.
        return {"options": self.options, "_consumer": None, "_target": None, "_latest": {}}

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
