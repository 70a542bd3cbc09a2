"""Scale: one broker holding 1,000 and then 10,000 partitions (RF=1, topics of 1,000
partitions each), with 1,000 idle connections and 100 active producers.

For each size, on a fresh broker: the seconds to create the partitions; the broker's RSS and
open file descriptors (with the idle connections open); a Metadata request for every topic
(median and max of 20, decoded by gregor-protocol in this process); 100 confluent-kafka
producers (in `--processes` processes) sending 100-byte records spread over every partition,
against the same load on a topic of 10 partitions; then the seconds until every partition
has a leader again after a clean restart and after SIGKILL (the broker's old ZooKeeper
session must expire before it registers again, as in Kafka). Goals: RSS <= 200 MB at 1,000
partitions and <= 1 GB at 10,000; recovery after SIGKILL at 10,000 in <= 30 s.

    python bench/bench_scale.py [--partitions N ...] [--records-per-producer R]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_broker import VALUE, process_tree

TOPIC_SIZE = 1000  # partitions per topic
PRODUCERS = 100
IDLE = 1000
GOALS_RSS_MB = {1000: 200, 10000: 1024}
GOAL_RECOVERY_S = 30.0
PRODUCER = {"linger.ms": 5, "acks": "1", "enable.idempotence": False}


def producers(
    bootstrap: str, spread: list[tuple[str, int]], count: int, offset: int, records: int,
    results: Any,
) -> None:  # fmt: skip
    """`count` producers, each sending `records` round robin over `spread` (topic,
    partition) from its own starting point; puts the seconds from the first send to the
    last acknowledgement."""
    from confluent_kafka import Producer

    clients = [Producer({"bootstrap.servers": bootstrap, **PRODUCER}) for _ in range(count)]
    for client in clients:
        client.produce(spread[0][0], VALUE, partition=spread[0][1])
        client.flush(60)
    started = time.perf_counter()
    for n in range(records):
        for i, client in enumerate(clients):
            topic, partition = spread[((offset + i) * records + n) % len(spread)]
            try:
                client.produce(topic, VALUE, partition=partition)
            except BufferError:
                client.poll(0.01)
                client.produce(topic, VALUE, partition=partition)
        if n % 100 == 0:
            for client in clients:
                client.poll(0)
    left = sum(client.flush(300) for client in clients)
    results.put(RuntimeError(f"{left} records unsent") if left else time.perf_counter() - started)


def produce_rate(
    bootstrap: str, spread: list[tuple[str, int]], processes: int, records: int
) -> float:
    """records/s of PRODUCERS producers in `processes` processes, each sending `records`."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    per = PRODUCERS // processes
    children = [
        context.Process(
            target=producers, args=(bootstrap, spread, per, p * per, records, results), daemon=True
        )
        for p in range(processes)
    ]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=900) for _ in children]
    for child in children:
        child.join(30)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        raise failed[0]
    return per * processes * records / max(outcomes)


def rss_mb(pid: int) -> float:
    total = 0
    for p in process_tree(pid):
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def open_fds(pid: int) -> int:
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in process_tree(pid))


def idle_connections(host: str, port: int, count: int) -> list[socket.socket]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 1024)), hard))
    return [socket.create_connection((host, port), 10) for _ in range(count)]


def leaders_everywhere(broker: Any, topics: list[str]) -> bool:
    from gregor.devcluster.admin import metadata

    try:
        answer = metadata(broker, topics)
    except OSError:
        return False
    return all(
        t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions)
        for t in answer.topics
    )


def restart_seconds(broker: Any, topics: list[str], kill: bool) -> tuple[float, int]:
    """Seconds until every partition has a leader again, and how many times the broker had
    to be started: as a supervisor does, it is started again whenever it exits. A broker
    started within zookeeper.session.timeout.ms of a SIGKILL exits (its old session still
    holds /brokers/ids/N, as in Kafka) until that session expires."""
    from gregor.devcluster import wait_until

    if kill:
        broker.kill()
    else:
        broker.stop(120)
    started, starts = time.monotonic(), 0

    def back() -> bool:
        nonlocal starts
        if not broker.is_running():
            broker.launch()
            starts += 1
        return leaders_everywhere(broker, topics)

    wait_until(back, 600, "every partition's leader", 0.2)
    return time.monotonic() - started, starts


def verdict(ok: bool, goal: str) -> str:
    return f" (goal {goal}: {'met' if ok else 'NOT met'})"


def footprint(pid: int) -> str:
    return f"RSS {rss_mb(pid):.0f} MB, {open_fds(pid)} fds"


def metadata_ms(broker: Any) -> tuple[float, float]:
    """Median and max milliseconds of 20 Metadata requests for every topic."""
    from gregor.devcluster.admin import metadata

    timings = []
    for _ in range(20):
        begun = time.perf_counter()
        metadata(broker, None)
        timings.append((time.perf_counter() - begun) * 1000)
    return statistics.median(timings), max(timings)


def loaded(broker: Any, partitions: int, topics: list[str], processes: int, records: int) -> None:
    """What the broker holds and does with IDLE idle connections open."""
    assert broker.pid is not None
    sockets = idle_connections(broker.host, broker.port, IDLE)
    try:
        rss, goal = rss_mb(broker.pid), GOALS_RSS_MB.get(partitions)
        ok = verdict(rss <= goal, f"<= {goal} MB") if goal else ""
        print(f"  {IDLE} idle connections: RSS {rss:.0f} MB{ok}, {open_fds(broker.pid)} fds")
        median, slowest = metadata_ms(broker)
        print(f"  Metadata, every topic: median {median:.1f} ms, max {slowest:.1f} ms")
        spread = [(t, p) for t in topics for p in range(min(partitions, TOPIC_SIZE))]
        everywhere = produce_rate(broker.address, spread, processes, records)
        ten = produce_rate(broker.address, [("ten", p) for p in range(10)], processes, records)
        print(
            f"  {PRODUCERS} producers: {everywhere:,.0f} records/s over every partition, "
            f"{ten:,.0f} over 10 ({everywhere / ten:.2f}x)"
        )
        print(f"  after producing: {footprint(broker.pid)}")
    finally:
        for s in sockets:
            s.close()


def run_size(partitions: int, processes: int, records: int) -> None:
    from gregor.devcluster import LocalCluster, create_topic

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        cluster = LocalCluster(Path(tmp), 1, properties={"gregor.metrics.log.interval.ms": "0"})
        cluster.start()
        try:
            broker = cluster.brokers[0]
            assert broker.pid is not None
            print(f"\n{partitions:,} partitions (RF=1, topics of {TOPIC_SIZE:,}), one broker")
            print(f"  empty: {footprint(broker.pid)}")
            started = time.monotonic()
            topics = [f"scale-{i}" for i in range(max(1, partitions // TOPIC_SIZE))]
            for n, topic in enumerate(topics):
                try:
                    create_topic(cluster, topic, min(partitions, TOPIC_SIZE), 1)
                except (OSError, RuntimeError, TimeoutError) as exc:
                    errors = [
                        line for line in broker.log_tail(20_000).splitlines() if "ERROR" in line
                    ]
                    print(f"  BROKE after {n * TOPIC_SIZE:,} partitions: {exc}")
                    print(f"  {errors[-1] if errors else broker.log_tail(500)}", flush=True)
                    return
            print(f"  created in {time.monotonic() - started:.1f} s")
            create_topic(cluster, "ten", 10, 1)
            loaded(broker, partitions, topics, processes, records)
            every = [*topics, "ten"]
            restart, _ = restart_seconds(broker, every, kill=False)
            print(f"  clean restart: every partition led again after {restart:.1f} s")
            recovery, starts = restart_seconds(broker, every, kill=True)
            ok = verdict(recovery <= GOAL_RECOVERY_S, f"<= {GOAL_RECOVERY_S:g} s")
            print(
                f"  SIGKILL: every partition led again after {recovery:.1f} s, {starts} starts"
                + (ok if partitions >= 10_000 else ""),
                flush=True,
            )
        finally:
            cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--records-per-producer", type=int, default=2000)
    args = parser.parse_args()
    for partitions in args.partitions:
        run_size(partitions, args.processes, args.records_per_producer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
