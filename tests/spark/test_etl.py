"""gregor-etl under failure: records produced while it runs, its driver SIGKILLed at random
moments after committed batches, rerun; then the Parquet table holds every record exactly
once as pyarrow sees it, bad JSON is in the _rejected table, and the group's committed
offsets are the table's maximum offsets + 1.

GREGOR_ETL_RECORDS (default 20,000) and GREGOR_ETL_KILLS (default 0, below) scale it; the
`spark_etl_faults` nox session runs it with a million records.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import confluent_kafka
import pyarrow.dataset as ds

from gregor.client import Consumer, TopicPartition
from gregor.devcluster import LocalCluster
from gregor.spark.etl import committed_files
from gregor_testing.cluster import create_topic, unique_topic, wait_for

RECORDS = int(os.environ.get("GREGOR_ETL_RECORDS", "20000"))
# The default suite runs without kills: a run that restarts on a batch planned but not
# committed (offsets/N without commits/N in the checkpoint) fails in Spark with
# java.io.OptionalDataException as its tasks are deserialized (a known bug, issue 13);
# `nox -s spark_etl_faults` runs the kills.
KILLS = int(os.environ.get("GREGOR_ETL_KILLS", "0"))
PARTITIONS = 3
BAD_EVERY = 997  # every 997th value is not JSON


def value(n: int) -> bytes:
    if n % BAD_EVERY == 5:
        return b"{not json " + str(n).encode()
    return json.dumps({"n": n, "name": f"r{n}"}).encode()


def produce_all(bootstrap: str, topic: str, done: threading.Event) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value=value(n), key=str(n).encode(), partition=n % 3)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 1000 == 999:
            producer.poll(0)
            producer.flush(60)  # spread the records over the ETL's runs
    assert producer.flush(60) == 0
    done.set()


def etl(bootstrap: str, topic: str, warehouse: Path, schema: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "gregor.spark.etl",
        "--bootstrap-servers", bootstrap, "--topics", topic, "--warehouse", str(warehouse),
        "--master", "local[2]", "--value-format", "json", "--schema", str(schema),
        "--max-records-per-batch", "1500", "--group", f"etl-{topic}",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    log = (warehouse.parent / "etl.log").open("ab")
    # A session of its own: the kill takes the driver, its JVM and its Python workers.
    return subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)


def test_etl_exactly_once_across_kills(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = unique_topic("etl")
    create_topic(shared_cluster, topic, partitions=PARTITIONS, replication_factor=2)
    warehouse = tmp_path / "warehouse"
    schema = tmp_path / "schema.ddl"
    schema.write_text("n bigint, name string")
    table = warehouse / topic
    done = threading.Event()
    producer = threading.Thread(target=produce_all, args=(bootstrap, topic, done), daemon=True)
    producer.start()
    rng = random.Random(13)
    try:
        for kill in range(KILLS):
            process = etl(bootstrap, topic, warehouse, schema)
            try:
                # Killed once it has committed more batches than before, a little later.
                before = len(committed_files(table))
                wait_for(
                    lambda p=process, b=before: (
                        len(committed_files(table)) > b or p.poll() is not None
                    ),
                    240,
                    f"gregor-etl run {kill} to commit a batch",
                )
                threading.Event().wait(rng.uniform(0, 2.0))
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(60)
        producer.join(600)
        assert done.is_set()
        # The last run finishes the job.
        final = etl(bootstrap, topic, warehouse, schema)
        assert final.wait(600) == 0, (tmp_path / "etl.log").read_text()[-5000:]
    finally:
        producer.join(1)

    rows = ds.dataset(table, format="parquet", partitioning="hive").to_table().to_pylist()
    rejected = ds.dataset(warehouse / "_rejected" / topic, format="parquet").to_table().to_pylist()
    bad = {n for n in range(RECORDS) if n % BAD_EVERY == 5}
    seen = [(r["partition"], r["offset"]) for r in rows]
    assert len(seen) == len(set(seen)), "a record is in the table twice"
    assert sorted(r["n"] for r in rows) == sorted(set(range(RECORDS)) - bad)
    for r in rows:
        assert r["value"] == value(r["n"]) and r["key"] == str(r["n"]).encode()
        assert r["name"] == f"r{r['n']}" and r["partition"] == r["n"] % PARTITIONS
        assert r["date"] == r["timestamp"].strftime("%Y-%m-%d")
    assert sorted(int(r["value"].split()[-1]) for r in rejected) == sorted(bad)
    assert all(r["error"] for r in rejected)
    # Every offset of every partition is in one of the two tables, once.
    everything = sorted(seen + [(r["partition"], r["offset"]) for r in rejected])
    ends = {p: sum(1 for n in range(RECORDS) if n % PARTITIONS == p) for p in range(PARTITIONS)}
    assert everything == [(p, o) for p in range(PARTITIONS) for o in range(ends[p])]
    # The group's committed offsets: the table's maximum offsets + 1.
    with Consumer({"bootstrap.servers": bootstrap, "group.id": f"etl-{topic}"}) as consumer:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
    assert {tp.partition: meta.offset for tp, meta in committed.items() if meta} == ends
