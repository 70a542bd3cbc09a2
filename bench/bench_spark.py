"""Spark's batch read through the gregor source, against one confluent-kafka consumer.

A one-broker cluster (with its own ZooKeeper) gets `--records` 100-byte records in a
6-partition topic. Then the same records go to Parquet twice, each timed:

- baseline: one confluent-kafka consumer process reads every partition and writes the
  records (key, value, topic, partition, offset, timestamp) to Parquet with pyarrow;
- gregor-spark: `spark.read.format("gregor")...load().write.parquet(...)` on local[2].

The Spark session is started before the clock runs (a JVM start is paid once per job, not
per read). Records/s are printed, with Spark's as a ratio to the baseline; the goal is at
least 1.0: Spark's overhead must be paid back by its parallel read.

    python bench/bench_spark.py [--records N] [--master local[2]]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka
import pyarrow as pa
import pyarrow.parquet as pq

# the benchmarks' shared input writer: this script runs from bench/, beside bench_broker
from bench_broker import fill

from gregor.client import AdminClient, NewTopic
from gregor.devcluster import LocalCluster

TOPIC = "bench-spark"
PARTITIONS = 6


def produce(bootstrap: str, records: int) -> None:
    settings = {"linger.ms": 5, "queue.buffering.max.kbytes": 2_097_151}
    fill(bootstrap, TOPIC, records, PARTITIONS, {**settings, "delivery.report.only.error": True})


def baseline(bootstrap: str, records: int, out: str) -> None:
    """One consumer process: every partition, to one Parquet file, with pyarrow."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-baseline",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 8_388_608,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    schema = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
        ]
    )
    seen = 0
    with pq.ParquetWriter(out, schema) as writer:
        while seen < records:
            msgs = consumer.consume(10_000, timeout=1.0)
            if not msgs:
                continue
            columns = [
                [m.key() for m in msgs],
                [m.value() for m in msgs],
                [m.topic() for m in msgs],
                [m.partition() for m in msgs],
                [m.offset() for m in msgs],
                [m.timestamp()[1] for m in msgs],
            ]
            writer.write_batch(pa.record_batch(columns, schema=schema))
            seen += len(msgs)
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        root = Path(tmp)
        cluster = LocalCluster(root / "cluster", 1)
        cluster.start()
        try:
            bootstrap = cluster.bootstrap_servers
            with AdminClient({"bootstrap.servers": bootstrap}) as admin:
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
            started = time.perf_counter()
            produce(bootstrap, args.records)
            print(f"produced {args.records:,} records in {time.perf_counter() - started:.1f} s")

            started = time.perf_counter()
            process = multiprocessing.get_context("spawn").Process(
                target=baseline, args=(bootstrap, args.records, str(root / "baseline.parquet"))
            )
            process.start()
            process.join()
            assert process.exitcode == 0
            base = args.records / (time.perf_counter() - started)
            print(f"baseline (one confluent-kafka consumer + pyarrow): {base:,.0f} records/s")

            from pyspark.sql import SparkSession

            spark = (
                SparkSession.builder.master(args.master)
                .config("spark.ui.enabled", "false")
                .config("spark.driver.memory", "2g")
                .getOrCreate()
            )
            try:
                started = time.perf_counter()
                (
                    spark.read.format("gregor")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", TOPIC)
                    .load()
                    .write.parquet(str(root / "spark"))
                )
                elapsed = time.perf_counter() - started
                written = spark.read.parquet(str(root / "spark")).count()
            finally:
                spark.stop()
            assert written == args.records, (written, args.records)
            rate = args.records / elapsed
            print(
                f"gregor-spark ({args.master}, read + Parquet write): {rate:,.0f} records/s, "
                f"{rate / base:.2f}x the baseline (goal: at least 1.0)"
            )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
