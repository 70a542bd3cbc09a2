"""Mirror throughput: gregor-mirror copies 100-byte records (lz4) from cluster A to cluster
B, against a consume-produce loop written with confluent-kafka (MirrorMaker 1's design,
record by record) doing the same copy in the same run.

Each cluster is one broker with a ZooKeeper of its own. The records are produced to A first;
each copier then copies the whole topic, and is timed from its start until B holds every
record. Printed: records/s and the copier's CPU seconds per million records (all its
threads), and the ratios to the baseline. The issue's goal is >= 2x the records/s at
<= 0.5x the CPU per record: gregor-mirror passes the fetched batches through as bytes
(gregor-client's `getmany_batches` and `produce_batch`), where the loop decodes and
re-encodes every record.

    python bench/bench_mirror.py [--records N] [--partitions P]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the benchmarks' shared input writer: this script runs from bench/, beside bench_broker
from bench_broker import fill

TOPIC = "bench"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, all threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, records: int, partitions: int) -> None:
    fill(bootstrap, TOPIC, records, partitions, {"compression.type": "lz4", "linger.ms": 20})


def count(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        total = 0
        for p in range(partitions):
            try:
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), 5)[1]
            except KafkaException:
                return 0
        return total
    finally:
        consumer.close()


def wait_copied(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    deadline = time.monotonic() + 3600
    while count(bootstrap, topic, partitions) < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} did not reach {records} records")
        time.sleep(0.2)


def baseline(source: str, target: str, partitions: int, records: int) -> None:
    """MirrorMaker 1's loop with confluent-kafka: poll a record, produce it (same partition,
    key, value, headers, timestamp), until every record was read; then flush."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": source,
            "group.id": "bench-mm1",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": target,
            "compression.type": "lz4",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "enable.idempotence": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, -2) for p in range(partitions)])
    seen = 0
    while seen < records:
        for message in consumer.consume(10_000, 1.0):
            if message.error():
                continue
            while True:
                try:
                    producer.produce(
                        "mm1." + TOPIC,
                        message.value(),
                        message.key(),
                        partition=message.partition(),
                        headers=message.headers(),
                        timestamp=message.timestamp()[1],
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            seen += 1
        producer.poll(0)
    assert producer.flush(300) == 0
    consumer.close()
    print(f"cpu {time.process_time():.3f}", flush=True)


def line(name: str, records: int, seconds: float, cpu: float) -> tuple[float, float]:
    rate = records / seconds
    per_million = cpu / records * 1_000_000
    print(f"{name:<40} {rate:>12,.0f} records/s {per_million:>8.2f} CPU s / M records")
    return rate, per_million


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--baseline", nargs=2, metavar=("SOURCE", "TARGET"))
    args = parser.parse_args()
    if args.baseline:
        baseline(*args.baseline, args.partitions, args.records)
        return 0

    from gregor.devcluster import LocalCluster, create_topic

    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        root = Path(tmp)
        a = LocalCluster(root / "a", 1, properties={"gregor.metrics.log.interval.ms": "0"})
        b = LocalCluster(root / "b", 1, properties={"gregor.metrics.log.interval.ms": "0"})
        a.start()
        b.start()
        try:
            create_topic(a, TOPIC, args.partitions, 1)
            create_topic(b, "mm1." + TOPIC, args.partitions, 1)
            produce(a.bootstrap_servers, args.records, args.partitions)
            print(f"{args.records:,} records of 100 bytes (lz4), {args.partitions} partitions")

            started = time.monotonic()
            loop = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--records",
                    str(args.records),
                    "--partitions",
                    str(args.partitions),
                    "--baseline",
                    a.bootstrap_servers,
                    b.bootstrap_servers,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            output, _ = loop.communicate(timeout=3600)
            elapsed = time.monotonic() - started
            cpu = float(output.split("cpu ")[1])
            base = line("confluent-kafka consume-produce loop", args.records, elapsed, cpu)

            config = root / "mm2.properties"
            config.write_text(
                f"clusters = A, B\nA.bootstrap.servers = {a.bootstrap_servers}\n"
                f"B.bootstrap.servers = {b.bootstrap_servers}\nA->B.enabled = true\n"
                f"A->B.topics = {TOPIC}\nreplication.factor = 1\n"
                "offset-syncs.topic.replication.factor = 1\n"
                "checkpoints.topic.replication.factor = 1\n"
                "heartbeats.topic.replication.factor = 1\n"
                # The loop's settings: 1 MB batches, 20 ms linger, up to 10,000 records a poll.
                "B.producer.compression.type = lz4\nB.producer.linger.ms = 20\n"
                "B.producer.batch.size = 1000000\nA.consumer.max.poll.records = 10000\n"
            )
            started = time.monotonic()
            mirror = subprocess.Popen(
                [sys.executable, "-m", "gregor.mirror", str(config), "--log-level", "WARNING"]
            )
            try:
                wait_copied(b.bootstrap_servers, "A." + TOPIC, args.partitions, args.records)
                elapsed = time.monotonic() - started
                cpu = cpu_seconds(mirror.pid)
            finally:
                mirror.terminate()
                mirror.wait(60)
            mine = line("gregor-mirror", args.records, elapsed, cpu)
            print(
                f"gregor-mirror / loop: {mine[0] / base[0]:.2f}x the records/s, "
                f"{mine[1] / base[1]:.2f}x the CPU per record (goal: >= 2x, <= 0.5x)"
            )
        finally:
            a.stop()
            b.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
