"""How long a consumer group takes to settle after one member joins, and how much its other
members read meanwhile: classic eager, classic cooperative-sticky and KIP-848
(`group.protocol=consumer`) side by side, confluent-kafka members on three gregor-brokers.

Ten members share a topic of 30 partitions while a producer writes to it at a steady rate;
an eleventh joins. The clock runs from its subscribe() until every member owns its share
(30 partitions over 11, none owned twice). An eager rebalance stops every member; the
incremental ones move only what changes, so the others go on reading: the figure beside
the time is the records the ten read during it.

    python bench/bench_rebalance.py [--members N] [--partitions P] [--rate R]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TOPIC = "bench-rebalance"
# Each protocol's consumer settings; the brokers tell KIP-848 members their heartbeat.
PROTOCOLS: dict[str, dict[str, Any]] = {
    "classic eager": {"partition.assignment.strategy": "range", "heartbeat.interval.ms": 500},
    "classic cooperative-sticky": {
        "partition.assignment.strategy": "cooperative-sticky",
        "heartbeat.interval.ms": 500,
    },
    "KIP-848 (consumer)": {"group.protocol": "consumer"},
}
BROKER = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "gregor.metrics.log.interval.ms": "0",
}


def produce_steadily(bootstrap: str, rate: int, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started, sent = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        for _ in range(due - sent):
            producer.produce(TOPIC, b"x" * 100)
        sent = max(sent, due)
        producer.poll(0.005)
    producer.flush(30)


def settled(members: list[Any], partitions: int) -> bool:
    owned = [{tp.partition for tp in m.assignment()} for m in members]
    share = partitions // len(members)
    return (
        sum(map(len, owned)) == partitions
        and len(set().union(*owned)) == partitions
        and all(share <= len(o) <= share + 1 for o in owned)
    )


def measure(bootstrap: str, name: str, settings: dict[str, Any], args: Any) -> tuple[float, int]:
    from confluent_kafka import Consumer

    group = f"bench-{name.split()[0]}-{time.monotonic_ns()}"

    def member(i: int) -> Any:
        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"m{i}",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                **settings,
            }
        )

    members = [member(i) for i in range(args.members)]
    try:
        for m in members:
            m.subscribe([TOPIC])
        deadline = time.monotonic() + 120
        while not settled(members, args.partitions):
            for m in members:
                m.poll(0.01)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: the first {args.members} members never settled")
        joiner = member(args.members)
        everyone = [*members, joiner]
        read = 0
        started = time.monotonic()
        joiner.subscribe([TOPIC])
        while not settled(everyone, args.partitions):
            for m in members:
                message = m.poll(0.01)
                if message is not None and message.error() is None:
                    read += 1
            joiner.poll(0.01)
            if time.monotonic() - started > 120:
                raise TimeoutError(f"{name}: the group never settled after the join")
        return time.monotonic() - started, read
    finally:
        for m in members:
            m.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--rate", type=int, default=5000, help="records/s produced meanwhile")
    args = parser.parse_args()

    from gregor.devcluster import LocalCluster, create_topic

    print(
        f"{args.members} members and one joining, {args.partitions} partitions, "
        f"{args.rate:,} records/s produced meanwhile, 3 brokers"
    )
    with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp:
        cluster = LocalCluster(Path(tmp), 3, properties=BROKER)
        cluster.start()
        stop = threading.Event()
        producer = threading.Thread(
            target=produce_steadily, args=(cluster.bootstrap_servers, args.rate, stop)
        )
        try:
            create_topic(cluster, TOPIC, args.partitions, 3)
            producer.start()
            print(f"  {'protocol':<28} {'settle s':>9} {'records read meanwhile':>24}")
            for name, settings in PROTOCOLS.items():
                seconds, read = measure(cluster.bootstrap_servers, name, settings, args)
                print(f"  {name:<28} {seconds:>9.2f} {read:>24,}")
        finally:
            stop.set()
            if producer.is_alive():
                producer.join()
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
