"""spark.read.format("gregor") on a local Spark against a real three-broker cluster.

The topic is written by confluent-kafka (librdkafka), with keys, headers, explicit
timestamps and every codec; every row Spark reads must equal what was produced, byte for
byte, and each offset option must select exactly the rows it names.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from pyspark.sql import DataFrame, SparkSession

from gregor.client import AdminClient, TopicPartition
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic
from gregor_testing.transactions import Transactions, values

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 40
PARTITIONS = 3
BASE_TS = 1_700_000_000_000

Row = tuple[Any, ...]  # (key, value, topic, partition, offset, timestamp ms, type, headers)


def produce(bootstrap: str, topic: str) -> list[Row]:
    """Records of every codec, round robin over the partitions; what the broker acked."""
    acked: list[Row] = []
    n = 0
    for codec in CODECS:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
        )

        def report(headers: list[tuple[str, bytes]], err: Any, msg: Any) -> None:
            # A delivery report carries no headers: they come from what was sent. A record
            # without any reads back with null headers, as spark-sql-kafka reads it.
            assert err is None, err
            acked.append(
                (msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(),
                 msg.timestamp()[1], 0, headers or None)
            )  # fmt: skip

        for _ in range(PER_CODEC):
            key = None if n % 7 == 0 else f"key-{n}".encode()
            value = None if n % 11 == 0 else f"{codec}-{n}-".encode() * (n % 5 + 1)
            headers = [("n", str(n).encode()), ("empty", b"")] if n % 3 else []
            producer.produce(
                topic,
                value=value,
                key=key,
                partition=n % PARTITIONS,
                timestamp=BASE_TS + n * 1000,
                headers=headers,
                on_delivery=functools.partial(report, headers),
            )
            n += 1
        assert producer.flush(30) == 0
    return sorted(acked, key=lambda r: (r[3], r[4]))


@pytest.fixture(scope="module")
def written(shared_cluster: LocalCluster) -> Iterator[tuple[str, str, list[Row]]]:
    topic = unique_topic("spark")
    create_topic(shared_cluster, topic, partitions=PARTITIONS, replication_factor=2)
    yield shared_cluster.bootstrap_servers, topic, produce(shared_cluster.bootstrap_servers, topic)


def read(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows(df: DataFrame) -> list[Row]:
    """The rows as produce() describes records, timestamps in milliseconds."""
    out = []
    for r in df.selectExpr("*", "unix_millis(timestamp) AS millis").collect():
        headers = None
        if "headers" in r and r.headers is not None:
            headers = [(h.key, h.value) for h in r.headers]
        out.append(
            (r.key, r.value, r.topic, r.partition, r.offset, r.millis, r.timestampType, headers)
        )
    return sorted(out, key=lambda x: (x[3], x[4]))


def test_whole_topic_byte_for_byte(
    spark: SparkSession, written: tuple[str, str, list[Row]]
) -> None:
    bootstrap, topic, produced = written
    # No register(): PySpark finds the source through the pyspark_gregor module.
    df = read(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    assert rows(df) == produced
    assert len(produced) == len(CODECS) * PER_CODEC
    # Without includeHeaders there is no headers column.
    plain = read(spark, bootstrap, subscribe=topic)
    assert "headers" not in plain.columns
    assert [r[:7] for r in rows(plain)] == [r[:7] for r in produced]


def test_offsets_json_select_exactly(
    spark: SparkSession, written: tuple[str, str, list[Row]]
) -> None:
    bootstrap, topic, produced = written
    starting = {topic: {"0": 5, "1": -2, "2": 20}}
    ending = {topic: {"0": 30, "1": 12, "2": -1}}
    df = read(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    ends = {0: 30, 1: 12, 2: 10**9}
    want = [r for r in produced if starting[topic][str(r[3])] <= r[4] < ends[r[3]]]
    assert [r[:7] for r in rows(df)] == [r[:7] for r in want]


def test_timestamps_select_exactly(
    spark: SparkSession, written: tuple[str, str, list[Row]]
) -> None:
    bootstrap, topic, produced = written
    # Record n has timestamp BASE_TS + n s: from n = 60 on, and up to (not with) n = 150.
    df = read(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(BASE_TS + 60_000),
        endingOffsetsByTimestamp=json.dumps(
            {topic: {str(p): BASE_TS + 150_000 for p in range(PARTITIONS)}}
        ),
    )
    want = [r for r in produced if BASE_TS + 60_000 <= r[5] < BASE_TS + 150_000]
    assert [r[:7] for r in rows(df)] == [r[:7] for r in want]
    # No record that recent: an error unless the strategy says latest.
    late = str(BASE_TS + 10**9)
    with pytest.raises(Exception, match="no offset matched the timestamp"):
        read(spark, bootstrap, subscribe=topic, startingTimestamp=late).collect()
    empty = read(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert empty.count() == 0


def test_assign_pattern_and_min_partitions(
    spark: SparkSession, written: tuple[str, str, list[Row]]
) -> None:
    bootstrap, topic, produced = written
    assigned = read(spark, bootstrap, assign=json.dumps({topic: [0, 2]}))
    assert [r[:7] for r in rows(assigned)] == [r[:7] for r in produced if r[3] in (0, 2)]
    pattern = read(spark, bootstrap, subscribePattern=topic[:-3] + "...")
    assert [r[:7] for r in rows(pattern)] == [r[:7] for r in produced]
    split = read(spark, bootstrap, subscribe=topic, minPartitions="7")
    # About minPartitions tasks, as spark-sql-kafka shares them out (here 2 per partition).
    assert split.rdd.getNumPartitions() == 6
    assert [r[:7] for r in rows(split)] == [r[:7] for r in produced]
    capped = read(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="10")
    assert capped.rdd.getNumPartitions() >= len(produced) // 10
    assert [r[:7] for r in rows(capped)] == [r[:7] for r in produced]


def test_read_committed_reads_only_committed_transactions(
    spark: SparkSession, shared_cluster: LocalCluster
) -> None:
    """kafka.isolation.level=read_committed: aborted records and control records never
    become rows, and `latest` ends at the last stable offset, before an open transaction;
    read_uncommitted (the consumer's default, as in spark-sql-kafka) reads every data record
    and still no control record."""
    topic = unique_topic("spark-txn")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=2)
    txns = Transactions(shared_cluster, topic)
    written = {
        "c": txns.write(values("c", 20), "commit"),  # offsets 0-19, its marker 20
        "a": txns.write(values("a", 10), "abort"),  # 21-30, marker 31
        "d": txns.write(values("d", 20), "commit"),  # 32-51, marker 52
        "o": txns.write(values("o", 5), None),  # 53-57, open
    }

    def read_all(**options: str) -> list[tuple[int, bytes]]:
        df = read(spark, shared_cluster.bootstrap_servers, subscribe=topic, **options)
        return [(r.offset, r.value) for r in df.orderBy("offset").collect()]

    try:
        committed = read_all(**{"kafka.isolation.level": "read_committed"})
        want = written["c"] + written["d"]
        assert committed == list(zip([*range(20), *range(32, 52)], want, strict=True))
        data = written["c"] + written["a"] + written["d"] + written["o"]
        offsets = [*range(20), *range(21, 31), *range(32, 52), *range(53, 58)]
        assert read_all() == list(zip(offsets, data, strict=True))
    finally:
        txns.producer.abort_transaction(60)


def test_errors(spark: SparkSession, written: tuple[str, str, list[Row]]) -> None:
    bootstrap, topic, _ = written
    with pytest.raises(Exception, match="subscribed topics do not exist: no-such-topic"):
        read(spark, bootstrap, subscribe="no-such-topic").collect()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Exception, match="no broker is reachable"):
        read(spark, closed, subscribe=topic, **{"kafka.default.api.timeout.ms": "3000"}).collect()
    with pytest.raises(Exception, match="must be 'earliest', 'latest' or JSON"):
        read(spark, bootstrap, subscribe=topic, startingOffsets="bogus").collect()


def test_offsets_past_the_end_follow_fail_on_data_loss(
    spark: SparkSession, written: tuple[str, str, list[Row]]
) -> None:
    bootstrap, topic, produced = written
    count = sum(1 for r in produced if r[3] == 0)
    past_end = json.dumps({topic: {"0": count + 50}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, bootstrap, assign=json.dumps({topic: [0]}), endingOffsets=past_end).collect()
    lenient = read(
        spark, bootstrap, assign=json.dumps({topic: [0]}), endingOffsets=past_end,
        failOnDataLoss="false",
    )  # fmt: skip
    assert [r[:7] for r in rows(lenient)] == [r[:7] for r in produced if r[3] == 0]
    # A start past the end: the end comes before the start.
    start = json.dumps({topic: {"0": count + 50}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, bootstrap, assign=json.dumps({topic: [0]}), startingOffsets=start).collect()
    empty = read(
        spark, bootstrap, assign=json.dumps({topic: [0]}), startingOffsets=start,
        failOnDataLoss="false",
    )  # fmt: skip
    assert empty.count() == 0


def test_a_deleted_range_follows_fail_on_data_loss(
    spark: SparkSession, shared_cluster: LocalCluster
) -> None:
    """Offsets asked for that retention (here DeleteRecords) took: failOnDataLoss=true fails
    the read and names the gap; false reads what is left."""
    bootstrap = shared_cluster.bootstrap_servers
    topic = unique_topic("deleted")
    create_topic(shared_cluster, topic, partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for n in range(100):
        producer.produce(topic, f"v{n}".encode(), partition=0)
    assert producer.flush(30) == 0
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.delete_records({TopicPartition(topic, 0): 60})
    start = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match=r"offsets \[10, 60\) of .* are gone.*failOnDataLoss"):
        read(spark, bootstrap, subscribe=topic, startingOffsets=start).collect()
    rest = read(spark, bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert [(r.offset, r.value) for r in rest.orderBy("offset").collect()] == [
        (n, f"v{n}".encode()) for n in range(60, 100)
    ]


def test_local_cluster(written: tuple[str, str, list[Row]], tmp_path: Path) -> None:
    """Separate executor JVMs and Python workers read the same rows (nothing works only
    because everything shares one process)."""
    bootstrap, topic, produced = written
    script = Path(__file__).with_name("local_cluster_read.py")
    done = subprocess.run(
        [sys.executable, str(script), bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "SPARK_LOCAL_DIRS": str(tmp_path)},  # its executors' scratch space
    )
    assert done.returncode == 0, done.stderr[-5000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(("[", "{"))]
    assert lines[-1] == {"executors": 2}
    got = sorted(
        (
            (None if k is None else bytes.fromhex(k), None if v is None else bytes.fromhex(v), p, o)
            for k, v, p, o in lines[:-1]
        ),
        key=lambda r: (r[2], r[3]),
    )
    assert got == [(r[0], r[1], r[3], r[4]) for r in produced]
