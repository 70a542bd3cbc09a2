"""`gregor perf produce|consume`: kafka-producer-perf-test and kafka-consumer-perf-test.

A live progress bar with running rates on a terminal (stderr), then Kafka's final statistics
on stdout: records/s, MB/s, and for producing average, max and percentile latencies.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gregor.client import Consumer, Producer, RecordMetadata
from gregor.protocol.errors import KafkaError
from gregor.tools.common import (
    Output,
    ToolError,
    add_connection,
    admin,
    client_config,
    key_values,
)

MB = 1024 * 1024
# At most this many latencies are kept (every n-th record beyond it), as Kafka samples them.
MAX_SAMPLES = 500_000


def register(commands: argparse._SubParsersAction[Any]) -> None:
    perf = commands.add_parser("perf", help="producer and consumer performance tests")
    actions = perf.add_subparsers(dest="action", required=True, metavar="ACTION")

    produce = actions.add_parser("produce", help="as kafka-producer-perf-test")
    add_connection(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=100, metavar="BYTES")
    produce.add_argument(
        "--throughput", type=float, default=-1, help="records/s to aim for (-1: as fast as can)"
    )
    produce.add_argument("--producer-props", action="append", metavar="K=V", default=[])
    produce.set_defaults(run=run_produce)

    consume = actions.add_parser("consume", help="as kafka-consumer-perf-test")
    add_connection(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, help="records to read")
    consume.add_argument("--group", help="a group to join (default: assign every partition)")
    consume.add_argument("--consumer-props", action="append", metavar="K=V", default=[])
    consume.set_defaults(run=run_consume)


class Latencies:
    """Kafka's producer-perf-test statistics: latencies of sampled records (ms)."""

    def __init__(self, records: int) -> None:
        self.sampling = max(1, records // MAX_SAMPLES)
        self.samples: list[int] = []
        self.total_ms = 0.0
        self.max_ms = 0.0
        self.count = 0
        self.errors: list[KafkaError] = []

    def callback(self, index: int, sent_at: float) -> Any:
        def done(error: KafkaError | None, metadata: RecordMetadata) -> None:
            if error is not None:
                self.errors.append(error)
                return
            latency = (time.perf_counter() - sent_at) * 1000
            self.count += 1
            self.total_ms += latency
            self.max_ms = max(self.max_ms, latency)
            if index % self.sampling == 0:
                self.samples.append(int(latency))

        return done

    def percentiles(self, *points: float) -> list[int]:
        ordered = sorted(self.samples)
        if not ordered:
            return [0 for _ in points]
        return [ordered[min(len(ordered) - 1, int(p * len(ordered)))] for p in points]


@contextmanager
def progress(total: int, unit: str) -> Iterator[tuple[Progress, TaskID]]:
    """A live bar on stderr with the running rate; nothing unless stderr is a terminal."""
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
        refresh_per_second=4,
    )
    with bar:
        yield bar, bar.add_task(unit, total=total, rate="")


def _rate(done: int, size: int, started: float) -> str:
    elapsed = max(time.perf_counter() - started, 1e-9)
    return f"{done / elapsed:,.0f} records/s, {done * size / MB / elapsed:.2f} MB/s"


def run_produce(args: argparse.Namespace) -> int:
    if args.num_records <= 0 or args.record_size < 0:
        raise ToolError("--num-records must be positive and --record-size not negative")
    config = client_config(args, **key_values(args.producer_props, "--producer-props"))
    payload = os.urandom(args.record_size)
    stats = Latencies(args.num_records)
    interval = 1 / args.throughput if args.throughput > 0 else 0.0
    with progress(args.num_records, "produce") as (bar, task), Producer(config) as producer:
        started = time.perf_counter()
        last_shown = started
        for i in range(args.num_records):
            now = time.perf_counter()
            if interval and now < started + i * interval:  # throttled: wait for the schedule
                time.sleep(started + i * interval - now)
                now = time.perf_counter()
            producer.produce(args.topic, payload, on_delivery=stats.callback(i, now))
            if now - last_shown > 0.25:
                producer.poll(0)
                bar.update(
                    task, completed=stats.count, rate=_rate(stats.count, len(payload), started)
                )
                last_shown = now
        producer.flush()
        elapsed = time.perf_counter() - started
        bar.update(task, completed=stats.count, rate=_rate(stats.count, len(payload), started))
    if stats.errors:
        raise ToolError(f"{len(stats.errors)} records failed: {stats.errors[0]}")
    p50, p95, p99, p999 = stats.percentiles(0.5, 0.95, 0.99, 0.999)
    result = {
        "records": stats.count,
        "records_per_sec": stats.count / elapsed,
        "mb_per_sec": stats.count * args.record_size / MB / elapsed,
        "avg_latency_ms": stats.total_ms / max(stats.count, 1),
        "max_latency_ms": stats.max_ms,
        "p50_ms": p50,
        "p95_ms": p95,
        "p99_ms": p99,
        "p999_ms": p999,
    }
    out = Output(args)
    if out.json:
        out.emit(result)
    else:  # Kafka's final line, word for word
        out.line(
            f"{stats.count} records sent, {result['records_per_sec']:.1f} records/sec "
            f"({result['mb_per_sec']:.2f} MB/sec), {result['avg_latency_ms']:.2f} ms avg latency, "
            f"{stats.max_ms:.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, "
            f"{p999} ms 99.9th."
        )
    return 0


def run_consume(args: argparse.Namespace) -> int:
    if args.messages <= 0:
        raise ToolError("--messages must be positive")
    extra = {"auto.offset.reset": "earliest", "enable.auto.commit": "false"}
    if args.group:
        extra["group.id"] = args.group
    extra.update(key_values(args.consumer_props, "--consumer-props"))
    config = client_config(args, **extra)
    deadline_s = args.timeout
    count = size = 0
    with progress(args.messages, "consume") as (bar, task), Consumer(config) as consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            with admin(args) as client:
                described = client.describe_topics([args.topic])[args.topic]
            consumer.assign([(args.topic, p.partition) for p in described.partitions])
        started = time.perf_counter()
        last_record = started
        while count < args.messages:
            records = consumer.consume(min(args.messages - count, 10_000), timeout=0.25)
            now = time.perf_counter()
            if not records:
                if now - last_record > deadline_s:
                    raise ToolError(
                        f"no record for {deadline_s:.0f}s after {count} of {args.messages}"
                    )
                continue
            last_record = now
            count += len(records)
            size += sum(len(r.value or b"") for r in records)
            bar.update(task, completed=count, rate=_rate(count, size // max(count, 1), started))
        elapsed = last_record - started
    result = {
        "start.time": _stamp(time.time() - elapsed),
        "end.time": _stamp(time.time()),
        "data.consumed.in.MB": size / MB,
        "MB.sec": size / MB / max(elapsed, 1e-9),
        "data.consumed.in.nMsg": count,
        "nMsg.sec": count / max(elapsed, 1e-9),
    }
    out = Output(args)
    if out.json:
        out.emit(result)
    else:  # Kafka's header line and figures, comma-separated
        out.line(", ".join(result))
        out.line(
            f"{result['start.time']}, {result['end.time']}, {result['data.consumed.in.MB']:.4f}, "
            f"{result['MB.sec']:.4f}, {count}, {result['nMsg.sec']:.4f}"
        )
    return 0


def _stamp(seconds: float) -> str:
    return (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
        + f":{int(seconds * 1000) % 1000:03d}"
    )
