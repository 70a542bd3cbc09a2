"""Client throughput: produce and then consume 1,000,000 records of 100 bytes against one
Gregor broker, with gregor-client (sync and async), kafka-python, aiokafka and
confluent-kafka, in the same run.

Every client gets the same settings where they have one (acks=1, linger 5 ms, batches up
to 1 MB, no compression, no idempotence), a topic of its own with the same partitions,
and a process of its own (so no client pays for another's threads). Producing counts
until every record is acknowledged; consuming counts until every record was handed to the
application, from the beginning of the topic.

Targets for gregor-client, for produce and for consume: at least 1.5x aiokafka, 3x
kafka-python and 0.5x confluent-kafka.

    python bench/bench_client.py [--records N] [--partitions P] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VALUE = b"v" * 100
CLIENTS = ["gregor-sync", "gregor-async", "kafka-python", "aiokafka", "confluent-kafka"]
TARGETS = {"aiokafka": 1.5, "kafka-python": 3.0, "confluent-kafka": 0.5}
GREGOR_PRODUCER = {
    "acks": "1",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "buffer.memory": 256 * 1024 * 1024,
    "enable.idempotence": False,
}
GREGOR_CONSUMER = {"auto.offset.reset": "earliest", "max.partition.fetch.bytes": 8_388_608}


# -- the workers (each runs in a process of its own) ------------------------------------------


def gregor_sync(phase: str, bootstrap: str, topic: str, partitions: int, records: int) -> float:
    from gregor.client import Consumer, Producer, TopicPartition

    if phase == "produce":
        with Producer({"bootstrap.servers": bootstrap, **GREGOR_PRODUCER}) as producer:
            producer.produce(topic, VALUE).result(30)  # metadata and connections first
            started = time.perf_counter()
            produce = producer.produce
            for _ in range(records):
                produce(topic, VALUE)
            producer.flush()
            return time.perf_counter() - started
    with Consumer({"bootstrap.servers": bootstrap, **GREGOR_CONSUMER}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.position(TopicPartition(topic, 0))
        started = time.perf_counter()
        seen = 0
        while seen < records:
            seen += len(consumer.consume(10_000, timeout=10))
        return time.perf_counter() - started


def gregor_async(phase: str, bootstrap: str, topic: str, partitions: int, records: int) -> float:
    import trio

    from gregor.client import AsyncConsumer, AsyncProducer, TopicPartition

    async def produce() -> float:
        async with AsyncProducer({"bootstrap.servers": bootstrap, **GREGOR_PRODUCER}) as producer:
            await producer.send(topic, VALUE)
            started = time.perf_counter()
            send = producer.produce
            for _ in range(records):
                await send(topic, VALUE)
            await producer.flush()
            return time.perf_counter() - started

    async def consume() -> float:
        async with AsyncConsumer({"bootstrap.servers": bootstrap, **GREGOR_CONSUMER}) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            await consumer.position(TopicPartition(topic, 0))
            started = time.perf_counter()
            seen = 0
            while seen < records:
                seen += len(await consumer.getmany(10_000, timeout=10))
            return time.perf_counter() - started

    return trio.run(produce if phase == "produce" else consume)


def kafka_python(phase: str, bootstrap: str, topic: str, partitions: int, records: int) -> float:
    import kafka

    if phase == "produce":
        producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=5,
            batch_size=1_000_000,
            enable_idempotence=False,
        )
        producer.send(topic, VALUE).get(30)
        started = time.perf_counter()
        send = producer.send
        for _ in range(records):
            send(topic, VALUE)
        producer.flush()
        elapsed = time.perf_counter() - started
        producer.close()
        return elapsed
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8_388_608,
    )
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    consumer.position(kafka.TopicPartition(topic, 0))
    started = time.perf_counter()
    seen = 0
    while seen < records:
        for batch in consumer.poll(1000, max_records=10_000).values():
            seen += len(batch)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def aiokafka_worker(phase: str, bootstrap: str, topic: str, partitions: int, records: int) -> float:
    import asyncio

    import aiokafka

    async def produce() -> float:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=1_000_000
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic, VALUE)
            started = time.perf_counter()
            send = producer.send
            for _ in range(records):
                await send(topic, VALUE)
            await producer.flush()
            return time.perf_counter() - started
        finally:
            await producer.stop()

    async def consume() -> float:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8_388_608,
        )
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(partitions)])
            await consumer.position(aiokafka.TopicPartition(topic, 0))
            started = time.perf_counter()
            seen = 0
            while seen < records:
                got = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                seen += sum(len(batch) for batch in got.values())
            return time.perf_counter() - started
        finally:
            await consumer.stop()

    return asyncio.run(produce() if phase == "produce" else consume())


def confluent(phase: str, bootstrap: str, topic: str, partitions: int, records: int) -> float:
    import confluent_kafka

    if phase == "produce":
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "1",
                "linger.ms": 5,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 2_000_000,
                "queue.buffering.max.kbytes": 262_144,
                "enable.idempotence": False,
            }
        )
        producer.produce(topic, VALUE)
        producer.flush(30)
        started = time.perf_counter()
        produce, poll = producer.produce, producer.poll
        for i in range(records):
            produce(topic, VALUE)
            if i % 10_000 == 0:
                poll(0)
        producer.flush()
        return time.perf_counter() - started
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-no-commits",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 8_388_608,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    consumer.consume(1, 10)  # connected and fetching
    started = time.perf_counter()
    seen = 1
    while seen < records:
        seen += sum(1 for m in consumer.consume(10_000, 1) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


WORKERS = {
    "gregor-sync": gregor_sync,
    "gregor-async": gregor_async,
    "kafka-python": kafka_python,
    "aiokafka": aiokafka_worker,
    "confluent-kafka": confluent,
}


# -- the run ----------------------------------------------------------------------------------


def run_worker(
    name: str, phase: str, bootstrap: str, topic: str, args: argparse.Namespace
) -> float:
    command = [
        sys.executable,
        __file__,
        "--worker",
        name,
        "--phase",
        phase,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(args.partitions),
        "--records",
        str(args.records),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {phase} failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="run every client this many times, interleaved, and keep each one's best "
        "(the machine may be shared: its load varies within a run)",
    )
    parser.add_argument("--only", nargs="*", choices=CLIENTS, default=CLIENTS)
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["produce", "consume"], help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        seconds = WORKERS[args.worker](
            args.phase, args.bootstrap, args.topic, args.partitions, args.records
        )
        print(json.dumps({"seconds": seconds}))
        return 0

    from gregor.devcluster import LocalCluster, create_topic

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        cluster = LocalCluster(Path(directory), 1)
        cluster.start()
        try:
            print(
                f"{args.records:,} records of {len(VALUE)} bytes, one broker, "
                f"{args.partitions} partitions, acks=1\n"
            )
            print(f"{'client':<18}{'produce rec/s':>16}{'consume rec/s':>16}")
            for round_ in range(args.rounds):
                for name in args.only:
                    # A fresh topic per client and round: every consumer reads a full log.
                    topic = f"bench-{name}-{round_}"
                    create_topic(cluster, topic, args.partitions, 1)
                    rates = {}
                    for phase in ("produce", "consume"):
                        seconds = run_worker(name, phase, cluster.bootstrap_servers, topic, args)
                        rates[phase] = args.records / seconds
                    best = results.setdefault(name, {"produce": 0.0, "consume": 0.0})
                    for phase, rate in rates.items():
                        best[phase] = max(best[phase], rate)
                    print(f"{name:<18}{rates['produce']:>16,.0f}{rates['consume']:>16,.0f}")
            if args.rounds > 1:
                print(f"\nbest of {args.rounds} rounds")
                for name, best in results.items():
                    print(f"{name:<18}{best['produce']:>16,.0f}{best['consume']:>16,.0f}")
        finally:
            cluster.stop()
    return report(results)


def report(results: dict[str, dict[str, Any]]) -> int:
    ours = [n for n in ("gregor-sync", "gregor-async") if n in results]
    if not ours:
        return 0
    print("\nratios (gregor / other), targets in brackets")
    failed = []
    for phase in ("produce", "consume"):
        for mine in ours:
            cells = []
            for other, target in TARGETS.items():
                if other not in results:
                    continue
                ratio = results[mine][phase] / results[other][phase]
                ok = ratio >= target
                failed += [] if ok else [f"{mine} {phase} vs {other}: {ratio:.2f} < {target}"]
                cells.append(f"{other} {ratio:5.2f}x [{target}] {'ok' if ok else 'MISSED'}")
            print(f"  {mine:<13} {phase:<8} " + "   ".join(cells))
    if failed:
        print("\nmissed targets:\n  " + "\n  ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
