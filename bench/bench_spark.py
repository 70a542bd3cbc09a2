"""Spark's batch read through the gregor source, against one confluent-kafka consumer.

A one-broker cluster (with its own ZooKeeper) gets `--records` 100-byte records in a
6-partition topic. Then the same records go to Parquet twice, the same columns (Spark's
Kafka schema: key, value, topic, partition, offset, timestamp in microseconds UTC,
timestampType) with the same codec (snappy):

- baseline: one confluent-kafka consumer process reads every partition and writes one
  Parquet file with pyarrow;
- gregor-spark: `spark.read.format("gregor")...load().write.parquet(...)` on local[2].

Each side's startup is timed apart from its job, by one rule: what a long-running job pays
once is startup, the records' way from the broker to the file is the job. The baseline's
startup is its process start, imports and consumer; Spark's is the session (its JVM), then
Spark's own first queries, which no data source avoids (a first query, a first Python
worker: timed with `spark.range` and a Python UDF), and gregor's first query (the data
source found and planned, its Python workers' imports and first fetches). The job's
records/s are compared, Spark's as a ratio to the baseline's (the goal: at least 1.0,
Spark's overhead paid back by its parallel read); the ratios with startup included, and
with only Spark's own startup left out, are printed too.

    python bench/bench_spark.py [--records N] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import confluent_kafka
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# the benchmarks' shared input writer: this script runs from bench/, beside bench_broker
from bench_broker import fill

from gregor.client import AdminClient, NewTopic
from gregor.devcluster import LocalCluster

TOPIC = "bench-spark"
PARTITIONS = 6
CODEC = "snappy"  # Spark's default Parquet codec, and pyarrow's
# The consumers' fetch sizes, on both sides (Kafka's defaults hold 1 MiB per partition).
FETCH = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608}
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)


def produce(bootstrap: str, records: int) -> None:
    settings = {"linger.ms": 5, "queue.buffering.max.kbytes": 2_097_151}
    fill(bootstrap, TOPIC, records, PARTITIONS, {**settings, "delivery.report.only.error": True})


def baseline(bootstrap: str, records: int, out: str, report: Connection) -> None:
    """One consumer process: every partition, to one Parquet file, with pyarrow. Sends the
    seconds from its assignment to the file's close (the job)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-baseline",
            "enable.auto.commit": False,
            **FETCH,
        }
    )
    started = time.perf_counter()
    consumer.assign(
        [
            confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    seen = 0
    with pq.ParquetWriter(out, SCHEMA, compression=CODEC) as writer:
        while seen < records:
            msgs = consumer.consume(10_000, timeout=1.0)
            if not msgs:
                continue
            stamps = [m.timestamp() for m in msgs]  # (type, ms); type 1 is CreateTime
            millis = pa.array([s[1] for s in stamps], pa.int64())
            columns = [
                pa.array([m.key() for m in msgs], pa.binary()),
                pa.array([m.value() for m in msgs], pa.binary()),
                pa.array([m.topic() for m in msgs], pa.string()),
                pa.array([m.partition() for m in msgs], pa.int32()),
                pa.array([m.offset() for m in msgs], pa.int64()),
                pc.multiply(millis, 1000).cast(SCHEMA.field("timestamp").type),
                pa.array([s[0] - 1 for s in stamps], pa.int32()),
            ]
            writer.write_batch(pa.record_batch(columns, schema=SCHEMA))
            seen += len(msgs)
    report.send(time.perf_counter() - started)
    consumer.close()


def run_baseline(bootstrap: str, records: int, out: Path) -> tuple[float, float]:
    """(startup, job) seconds of the baseline's process."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    started = time.perf_counter()
    process = context.Process(target=baseline, args=(bootstrap, records, str(out), send))
    process.start()
    job = receive.recv()
    process.join()
    assert process.exitcode == 0
    return time.perf_counter() - started - job, job


def run_spark(bootstrap: str, master: str, out: Path) -> tuple[float, float, float, float]:
    """(session, Spark's first queries, gregor's first query, job) seconds of gregor-spark's
    read into Parquet."""
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.functions import udf

    started = time.perf_counter()
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.parquet.compression.codec", CODEC)
        # what pyarrow writes for timestamp[us, UTC]; Spark's default is INT96
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    try:
        session = time.perf_counter() - started

        def load(**options: str) -> DataFrame:
            reader = spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
            reader = reader.options(**{f"kafka.{k}": str(v) for k, v in FETCH.items()})
            return reader.option("subscribe", TOPIC).options(**options).load()

        started = time.perf_counter()
        spark.range(10).write.format("noop").mode("overwrite").save()
        plus_one = udf(lambda x: x + 1, "long", useArrow=False)  # a Python worker's start
        spark.range(10).select(plus_one("id")).write.format("noop").mode("overwrite").save()
        spark_warm = time.perf_counter() - started

        started = time.perf_counter()
        first = {TOPIC: {str(p): 10 for p in range(PARTITIONS)}}
        load(endingOffsets=json.dumps(first)).write.format("noop").mode("overwrite").save()
        warm = time.perf_counter() - started

        started = time.perf_counter()
        load().write.parquet(str(out))
        job = time.perf_counter() - started
    finally:
        spark.stop()
    return session, spark_warm, warm, job


def same_files(baseline: Path, spark: Path, records: int) -> None:
    """Both wrote every record, with the same columns and codec."""
    spark_files = sorted(spark.glob("*.parquet"))
    for path in [baseline, *spark_files]:
        meta = pq.ParquetFile(path).metadata
        codecs = {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
                  for c in range(meta.num_columns)}  # fmt: skip
        assert codecs <= {CODEC.upper()}, (path, codecs)
    schemas = [pq.read_schema(path).remove_metadata() for path in [baseline, *spark_files]]
    assert all(s.equals(SCHEMA) for s in schemas), schemas
    counts = [pq.ParquetFile(path).metadata.num_rows for path in (baseline, *spark_files)]
    assert counts[0] == sum(counts[1:]) == records, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    records = args.records
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        root = Path(tmp)
        cluster = LocalCluster(root / "cluster", 1)
        cluster.start()
        try:
            bootstrap = cluster.bootstrap_servers
            with AdminClient({"bootstrap.servers": bootstrap}) as admin:
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
            started = time.perf_counter()
            produce(bootstrap, records)
            print(f"produced {records:,} records in {time.perf_counter() - started:.1f} s")

            base_startup, base_job = run_baseline(bootstrap, records, root / "baseline.parquet")
            base = records / base_job
            print(
                f"baseline (one confluent-kafka consumer + pyarrow): {base:,.0f} records/s "
                f"(job {base_job:.1f} s; startup {base_startup:.1f} s: process, imports, "
                "consumer)"
            )
            session, spark_warm, warm, job = run_spark(bootstrap, args.master, root / "spark")
            same_files(root / "baseline.parquet", root / "spark", records)
            rate = records / job
            base_whole = base_startup + base_job
            whole = base_whole / (session + spark_warm + warm + job)
            print(
                f"gregor-spark ({args.master}, read + Parquet write): {rate:,.0f} records/s "
                f"(job {job:.1f} s; startup {session + spark_warm + warm:.1f} s: session "
                f"{session:.1f} s, Spark's first query and Python worker {spark_warm:.1f} s, "
                f"gregor's first query {warm:.1f} s), {rate / base:.2f}x the baseline (goal: "
                f"at least 1.0); {whole:.2f}x with both startups timed too, "
                f"{base_whole / (warm + job):.2f}x without Spark's own ("
                f"{session + spark_warm:.1f} s, against the baseline's whole {base_whole:.1f} s)"
            )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
