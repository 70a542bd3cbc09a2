"""gregor-etl under failure: records produced while it runs, its driver SIGKILLed at random
moments after committed batches, rerun; then the Parquet table holds every record exactly
once as pyarrow sees it, bad JSON is in the _rejected table, and the group's committed
offsets are the table's maximum offsets + 1. Every run prints each batch's offsets and lag,
also for a batch an earlier run planned and did not commit.

GREGOR_ETL_RECORDS (default 9,000) and GREGOR_ETL_KILLS (default 1) scale it; the
`spark_etl_faults` nox session runs it with a million records and 5 kills.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import confluent_kafka
import pyarrow.dataset as ds
from prometheus_client.parser import text_string_to_metric_families

from gregor.client import Consumer, TopicPartition
from gregor.devcluster import LocalCluster
from gregor.spark.etl import committed_files
from gregor_testing.cluster import create_topic, unique_topic, wait_for

RECORDS = int(os.environ.get("GREGOR_ETL_RECORDS", "9000"))
KILLS = int(os.environ.get("GREGOR_ETL_KILLS", "1"))
# Batches of 1,500 records, or ~20 per run for a big load (a batch costs Spark ~1 s).
BATCH = max(1500, RECORDS // 20)
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


PROGRESS = re.compile(
    r"gregor-etl: (?P<topic>\S+): batch (?P<batch>\d+): (?P<records>\d+) records, "
    r"offsets (?P<ranges>(?:\d+:(?:\d+|\?)-\d+ ?)+), \d+ this run, lag (?P<lag>\d+)$"
)


def progress(log: str, topic: str) -> list[re.Match[str]]:
    """The per-batch progress lines of `topic`, each checked: its records are its ranges."""
    lines = [m for m in map(PROGRESS.search, log.splitlines()) if m and m["topic"] == topic]
    for m in lines:
        ranges = [r.split(":")[1].split("-") for r in m["ranges"].split()]
        if all(start != "?" for start, _ in ranges):
            assert int(m["records"]) == sum(int(end) - int(start) for start, end in ranges)
    return lines


def etl(
    bootstrap: str, topic: str, warehouse: Path, schema: Path, *extra: str
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "gregor.spark.etl",
        "--bootstrap-servers", bootstrap, "--topics", topic, "--warehouse", str(warehouse),
        "--master", "local[2]", "--value-format", "json", "--schema", str(schema),
        "--max-records-per-batch", str(BATCH), "--group", f"etl-{topic}", *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        # Spark's scratch space beside the warehouse: a killed driver leaves it behind.
        "SPARK_LOCAL_DIRS": str(warehouse.parent),
    }
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
    log = (tmp_path / "etl.log").read_text()
    assert progress(log, topic), log[-5000:]
    summary = re.findall(rf"gregor-etl: {topic}: \d+ records loaded this run, lag (\d+)", log)
    assert summary and summary[-1] == "0", log[-5000:]

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


def run_with_metrics(
    bootstrap: str, topic: str, warehouse: Path, schema: Path
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A whole gregor-etl run with --metrics-listener and --metrics-linger: what Prometheus
    scrapes once it has finished (and before SIGTERM ends the linger, exit status 0)."""
    log = warehouse.parent / "etl.log"
    process = etl(
        bootstrap, topic, warehouse, schema,
        "--metrics-listener", "http://127.0.0.1:0", "--metrics-linger", "600",
    )  # fmt: skip
    try:
        wait_for(
            lambda: "serving the final metrics" in log.read_text() or process.poll() is not None,
            600,
            "gregor-etl to finish its run",
        )
        text = log.read_text()
        assert process.poll() is None, text[-5000:]
        [url] = re.findall(r"metrics for Prometheus on (http://\S+)", text)
        with urllib.request.urlopen(url, timeout=30) as response:
            scraped = response.read().decode()
        process.send_signal(signal.SIGTERM)  # ends the linger: exit status 0
        assert process.wait(60) == 0, log.read_text()[-5000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(60)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped)
        for s in family.samples
    }


def test_etl_metrics_then_a_rerun_finishes_a_batch_planned_but_not_committed(
    shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    """A first run serves its figures for Prometheus while it runs and, with
    --metrics-linger, after it, until SIGTERM: what prometheus_client's parser reads there
    is exactly what was produced (records read, written to the table, rejected), one
    duration per batch, and per partition the committed offset (the end) and no lag.

    Then that run is made one that stopped after Spark planned its last batch (offsets/N in
    the checkpoint) and before it committed it (no commits/N, no sink log entry N): the
    rerun redoes that batch, loads each record once, and prints the batch's offsets and lag
    though Spark reports no latest offsets for a batch it did not plan itself."""
    bootstrap = shared_cluster.bootstrap_servers
    topic = unique_topic("etl-resume")
    create_topic(shared_cluster, topic, partitions=PARTITIONS, replication_factor=2)
    records = 3000  # 4 of them bad JSON, in 2 batches of 1,500
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for n in range(records):
        producer.produce(topic, value=value(n), key=str(n).encode(), partition=n % PARTITIONS)
    assert producer.flush(60) == 0
    bad = sum(1 for n in range(records) if n % BAD_EVERY == 5)
    warehouse = tmp_path / "warehouse"
    schema = tmp_path / "schema.ddl"
    schema.write_text("n bigint, name string")
    samples = run_with_metrics(bootstrap, topic, warehouse, schema)

    def sample(name: str, **labels: str) -> float:
        return samples[f"gregor_etl_{name}", tuple(sorted({"topic": topic, **labels}.items()))]

    batches = len(progress((tmp_path / "etl.log").read_text(), topic))
    assert batches >= 2
    assert sample("records_read_total") == records
    assert sample("records_written_total") == records - bad
    assert sample("records_rejected_total") == bad
    assert sample("batches_total") == sample("batch_duration_seconds_count") == batches
    assert sample("batch_duration_seconds_sum") > 0
    for p in range(PARTITIONS):
        assert sample("committed_offset", partition=str(p)) == records // PARTITIONS
        assert sample("lag", partition=str(p)) == 0

    # Undo the last batch's commit in both queries, as a kill before it would have.
    last = None
    for name in (topic, f"_rejected/{topic}"):
        commits = warehouse / "_checkpoints" / name / "commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        sink_log = warehouse / name / "_spark_metadata"
        for path in (commits / str(last), commits / f".{last}.crc"):
            path.unlink()
        for path in (sink_log / str(last), sink_log / f".{last}.crc"):
            path.unlink(missing_ok=True)
    (tmp_path / "etl.log").write_bytes(b"")
    assert etl(bootstrap, topic, warehouse, schema).wait(600) == 0, (
        tmp_path / "etl.log"
    ).read_text()[-5000:]
    log = (tmp_path / "etl.log").read_text()
    lines = progress(log, topic)
    assert [(int(m["batch"]), int(m["lag"])) for m in lines] == [(last, 0)], log[-5000:]
    rows = ds.dataset(warehouse / topic, format="parquet", partitioning="hive").to_table()
    rejected = ds.dataset(warehouse / "_rejected" / topic, format="parquet").to_table()
    seen = [(r["partition"], r["offset"]) for r in rows.select(["partition", "offset"]).to_pylist()]
    seen += [
        (r["partition"], r["offset"]) for r in rejected.select(["partition", "offset"]).to_pylist()
    ]
    assert sorted(seen) == sorted((n % PARTITIONS, n // PARTITIONS) for n in range(records))
