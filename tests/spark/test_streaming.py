"""spark.readStream.format("gregor"): admission control, restarts from the checkpoint,
partitions and topics that appear while a query lives, and the progress Spark reports: each
micro-batch's start and end offsets and the latest offsets (the lag is their difference).

Each query runs with Trigger.AvailableNow into Parquet, and the Parquet files are read
back with pyarrow: every record must be there exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow.dataset as ds
from pyspark.sql import SparkSession

from gregor.client import AdminClient
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic, wait_for_topic


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(start, start + count):
        producer.produce(
            topic, value=f"v{n}".encode(), key=f"k{n}".encode(), partition=n % partitions
        )
    assert producer.flush(30) == 0


def run(spark: SparkSession, bootstrap: str, out: Path, **options: str) -> list[int]:
    """One Trigger.AvailableNow run into Parquet at `out`; each micro-batch's row count."""
    return [p["numInputRows"] for p in progress(spark, bootstrap, out, **options)]


def progress(spark: SparkSession, bootstrap: str, out: Path, **options: str) -> list[Any]:
    """`run`'s progress events of the micro-batches that read rows."""
    reader = spark.readStream.format("gregor").option("kafka.bootstrap.servers", bootstrap)
    for name, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(out / "table"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def source_offsets(source: Any, name: str) -> dict[int, int]:
    """A progress source's offsets (spark-sql-kafka's JSON) of its one topic, by partition."""
    found = source[name]
    found = json.loads(found) if isinstance(found, str) else found
    if found is None:  # the first batch's start
        return {}
    [by_partition] = found.values()
    return {int(p): o for p, o in by_partition.items()}


def table(out: Path) -> list[tuple[str, int, int, str]]:
    rows = ds.dataset(out / "table", format="parquet").to_table().to_pylist()
    return sorted((r["topic"], r["partition"], r["offset"], r["value"]) for r in rows)


def test_max_offsets_per_trigger_and_restart(
    spark: SparkSession, shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = unique_topic("stream")
    create_topic(shared_cluster, topic, partitions=2)
    produce(bootstrap, topic, 0, 100, 2)
    events = progress(spark, bootstrap, tmp_path, subscribe=topic, maxOffsetsPerTrigger="30")
    batches = [p["numInputRows"] for p in events]
    assert sum(batches) == 100 and len(batches) >= 4 and max(batches) <= 30
    # Each batch's offsets, and the latest: the lag falls to 0 by the last batch.
    lags = []
    for event in events:
        [source] = event["sources"]
        start, end = source_offsets(source, "startOffset"), source_offsets(source, "endOffset")
        assert sum(end[p] - start.get(p, 0) for p in end) == event["numInputRows"]
        latest = source_offsets(source, "latestOffset")
        assert latest == {0: 50, 1: 50}
        lags.append(sum(latest[p] - end[p] for p in latest))
    assert lags == sorted(lags, reverse=True) and lags[-1] == 0
    # A second run resumes from the checkpoint: the new records, once each.
    produce(bootstrap, topic, 100, 50, 2)
    assert sum(run(spark, bootstrap, tmp_path, subscribe=topic)) == 50
    values = sorted((int(v[1:]) for _, _, _, v in table(tmp_path)))
    assert values == list(range(150))
    offsets = [(p, o) for _, p, o, _ in table(tmp_path)]
    assert sorted(offsets) == [(p, o) for p in (0, 1) for o in range(75)]


def test_max_records_per_partition_splits_a_micro_batch(
    spark: SparkSession, shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    """As in a batch read: each of the two 50-offset ranges of the one micro-batch is cut
    into 5 tasks of 10, each writing its own Parquet file."""
    bootstrap = shared_cluster.bootstrap_servers
    topic = unique_topic("stream-split")
    create_topic(shared_cluster, topic, partitions=2)
    produce(bootstrap, topic, 0, 100, 2)
    assert run(spark, bootstrap, tmp_path, subscribe=topic, maxRecordsPerPartition="10") == [100]
    assert len(list((tmp_path / "table").glob("part-*.parquet"))) == 10
    assert [(p, o) for _, p, o, _ in table(tmp_path)] == [(p, o) for p in (0, 1) for o in range(50)]


def test_new_partitions_and_topics_are_read(
    spark: SparkSession, shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    prefix = unique_topic("grow")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(shared_cluster, first, partitions=1)
    produce(bootstrap, first, 0, 20, 1)
    pattern = {"subscribePattern": f"{prefix}-.*"}
    assert sum(run(spark, bootstrap, tmp_path, **pattern)) == 20
    # A partition added to the topic, and a new topic matching the pattern: both are read
    # from their earliest offset.
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_partitions({first: 2})
    wait_for_topic(shared_cluster, first, 2)
    create_topic(shared_cluster, second, partitions=1)
    produce(bootstrap, first, 20, 20, 2)
    produce(bootstrap, second, 40, 10, 1)
    assert sum(run(spark, bootstrap, tmp_path, **pattern)) == 30
    rows = table(tmp_path)
    assert sorted(int(v[1:]) for *_, v in rows) == list(range(50))
    assert {(t, p) for t, p, _, _ in rows} == {(first, 0), (first, 1), (second, 0)}
