"""Transactions' throughput: confluent-kafka produces 100-byte records in transactions of
1,000 records (acks=all) into three gregor-brokers (RF=3), as a ratio to the same producer
idempotent but not transactional, measured in the same run; then gregor-client's sync
producer, transactional against idempotent, the same way.

Each figure runs `--clients` producer processes at once (each with a transactional id and
partitions of its own, bench_broker's `in_parallel`) and keeps the best of `--rounds`
runs, the two modes interleaved. Goal: a ratio of at least 0.8.

    python bench/bench_transactions.py [--records N] [--clients C] [--rounds R]
        [--only confluent|gregor ...]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path

# bench_broker's process pool and figures: this script runs from bench/, beside it.
from bench_broker import PARTITIONS_PER_CLIENT, TOPIC, VALUE, best_of, in_parallel, line

GOAL = 0.8
MODES = ("idempotent", "transactional")
CONFLUENT = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "queue.buffering.max.messages": 4_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "delivery.report.only.error": True,
}
GREGOR = {"acks": "all", "linger.ms": 5, "buffer.memory": 256 * 1024 * 1024}
TXN_RECORDS = 1000


def transactions_of(records: int, partitions: list[int]) -> list[list[int]]:
    """Each transaction's records as their partitions: TXN_RECORDS at a time, round robin
    over the client's partitions."""
    spread = [partitions[i % len(partitions)] for i in range(records)]
    return [spread[i : i + TXN_RECORDS] for i in range(0, records, TXN_RECORDS)]


def confluent_worker(
    bootstrap: str, mode: str, partitions: list[int], records: int, go: Barrier
) -> float:
    from confluent_kafka import Producer

    transactional = mode == "transactional"
    config = {"bootstrap.servers": bootstrap, **CONFLUENT}
    if transactional:
        config["transactional.id"] = f"bench-{mode}-{partitions[0]}-{os.getpid()}"
    producer = Producer(config)
    errors: list[object] = []

    def report(error: object, _message: object) -> None:
        if error is not None:
            errors.append(error)

    send, poll = producer.produce, producer.poll

    def run(batches: list[list[int]]) -> None:
        for batch in batches:
            if transactional:
                producer.begin_transaction()
            for partition in batch:
                try:
                    send(TOPIC, VALUE, None, partition, report)
                except BufferError:
                    poll(0.005)
                    send(TOPIC, VALUE, None, partition, report)
            if transactional:
                producer.commit_transaction(120)
        if producer.flush(600) or errors:
            raise RuntimeError(f"records not delivered: {errors[:3]}")

    if transactional:
        producer.init_transactions(120)
    run([partitions])  # metadata, connections, the coordinator: before the clock starts
    go.wait()
    started = time.perf_counter()
    run(transactions_of(records, partitions))
    return time.perf_counter() - started


def gregor_worker(
    bootstrap: str, mode: str, partitions: list[int], records: int, go: Barrier
) -> float:
    from gregor.client import Producer

    transactional = mode == "transactional"
    config = {"bootstrap.servers": bootstrap, **GREGOR}
    if transactional:
        config["transactional.id"] = f"bench-gregor-{partitions[0]}-{os.getpid()}"
    with Producer(config) as producer:
        send = producer.produce

        def run(batches: list[list[int]]) -> None:
            futures = []
            for batch in batches:
                if transactional:
                    producer.begin_transaction()
                # One future per partition's last record: a batch fails as a whole.
                futures += [send(TOPIC, VALUE, partition=p) for p in batch][-len(partitions) :]
                if transactional:
                    producer.commit_transaction()
            producer.flush()
            failed = [f.exception() for f in futures if f.exception() is not None]
            if failed:
                raise RuntimeError(f"records not delivered: {failed[:3]}")

        if transactional:
            producer.init_transactions()
        run([partitions])
        go.wait()
        started = time.perf_counter()
        run(transactions_of(records, partitions))
        return time.perf_counter() - started


WORKERS: dict[str, Callable[..., float]] = {"confluent": confluent_worker, "gregor": gregor_worker}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=sorted(WORKERS), default=sorted(WORKERS))
    args = parser.parse_args()

    from gregor.devcluster import LocalCluster, create_topic

    records = args.records // (args.clients * TXN_RECORDS) * (args.clients * TXN_RECORDS)
    print(
        f"{records:,} records of {len(VALUE)} bytes in transactions of {TXN_RECORDS:,}, "
        f"acks=all, 3 brokers, RF=3, {args.clients} producer processes, "
        f"{args.clients * PARTITIONS_PER_CLIENT} partitions"
    )
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-transactions-") as tmp:
        cluster = LocalCluster(
            Path(tmp),
            3,
            properties={"gregor.metrics.log.interval.ms": "0", "log.segment.bytes": "536870912"},
        )
        cluster.start()
        try:
            create_topic(cluster, TOPIC, args.clients * PARTITIONS_PER_CLIENT, 3)
            bootstrap = cluster.bootstrap_servers
            pids = [b.pid for b in cluster.brokers if b.pid is not None]
            for client in args.only:
                best: dict[str, tuple[float, float]] = {}
                for _ in range(args.rounds):  # the modes interleaved: the load varies
                    for mode in MODES:
                        work = functools.partial(
                            in_parallel, args.clients, WORKERS[client], bootstrap, mode, records
                        )
                        run = best_of(1, pids, work)
                        best[mode] = min(best.get(mode, run), run)
                rates = {mode: line(f"{client} {mode}", records, *best[mode]) for mode in MODES}
                ratios[client] = rates["transactional"] / rates["idempotent"]
        finally:
            cluster.stop()
    for client, ratio in ratios.items():
        verdict = "met" if ratio >= GOAL else "not met"
        print(f"  {client}: transactional / idempotent {ratio:.2f} (goal {GOAL}: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
