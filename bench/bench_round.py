"""The CPU of one replication round, against the trio echo floor measured in the same run.

A round is what a partition's leader and followers do for one produce request: the
Produce, each follower's woken fetch and its next one (which moves the high watermark),
and the acknowledgement. One confluent-kafka producer (acks=all, linger.ms=0) sends single
100-byte records in turn, each flushed before the next, to a partition with RF 3 on 3
idle brokers, so each record is one round. Printed: the acknowledgement latency (p50,
p99), and each broker's CPU per round from /proc (leader and followers), also as a
multiple of what a trio echo server spends per request (one task, one read, one write,
100 bytes), measured here first. `--filler P` puts a P-partition RF-3 topic beside the
written one, as a consumer group's 50 `__consumer_offsets` partitions do: its quiet
partitions sit in the followers' fetch sessions. docs/performance.md says what the
figures mean for bench_latency.

To compare two versions of the code, run it from each checkout in turn, several times:
from one run to the next on this machine the figures move by about 10%.

    python bench/bench_round.py [--records N] [--filler P] [--echo N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the benchmarks' shared helpers: this script runs from bench/, beside bench_broker
from bench_broker import cpu_seconds
from bench_latency import percentiles

TOPIC = "round"
SIZE = 100


def _echo_server(ports: Any) -> None:
    import trio

    async def answer(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some(65536):
            await stream.send_all(data)

    async def serve() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        ports.put(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(answer, listeners)

    trio.run(serve)


def echo_floor(requests: int) -> float:
    """Seconds of CPU a trio echo server spends per 100-byte request, asked in turn over
    one connection (after a warm-up). Raises if an answer is not the request echoed."""
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=_echo_server, args=(ports,), daemon=True)
    server.start()
    try:
        assert server.pid is not None
        with socket.create_connection(("127.0.0.1", ports.get(timeout=30))) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            message = bytes(range(SIZE))

            def ask(count: int) -> None:
                for _ in range(count):
                    client.sendall(message)
                    answer = b""
                    while len(answer) < SIZE:
                        more = client.recv(SIZE - len(answer))
                        if not more:
                            raise RuntimeError("the echo server closed the connection")
                        answer += more
                    if answer != message:
                        raise RuntimeError("the echo server answered something else")

            ask(min(1000, requests))
            before = cpu_seconds([server.pid])
            ask(requests)
            return (cpu_seconds([server.pid]) - before) / requests
    finally:
        server.kill()
        server.join(10)


def rounds(records: int, filler: int) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """(ack latency percentiles in ms, [(role, CPU seconds per round)] leader first)."""
    from confluent_kafka import Producer

    from gregor.devcluster import LocalCluster, create_topic
    from gregor.devcluster.admin import leader

    with tempfile.TemporaryDirectory(prefix="bench-round-") as tmp:
        cluster = LocalCluster(Path(tmp), 3, properties={"gregor.metrics.log.interval.ms": "0"})
        cluster.start()
        try:
            create_topic(cluster, TOPIC, 1, 3)
            if filler:
                create_topic(cluster, "filler", filler, 3)
            led = leader(cluster, TOPIC, 0)
            brokers = [led] + [b for b in cluster.brokers if b is not led]
            producer = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "acks": "all",
                    "linger.ms": 0,
                    "enable.idempotence": False,
                }
            )
            value = b"r" * SIZE
            for _ in range(200):  # warm-up: connections, fetch sessions, metadata
                producer.produce(TOPIC, value)
                if producer.flush(30):
                    raise RuntimeError("a warm-up record was not acknowledged")
            pids = [b.pid for b in brokers if b.pid is not None]
            before = [cpu_seconds([pid]) for pid in pids]
            latencies = []
            now = time.monotonic_ns
            for _ in range(records):
                started = now()
                producer.produce(TOPIC, value)
                if producer.flush(30):
                    raise RuntimeError("a record was not acknowledged")
                latencies.append(now() - started)
            after = [cpu_seconds([pid]) for pid in pids]
            spent = [(a - b) / records for a, b in zip(after, before, strict=True)]
        finally:
            cluster.stop()
    roles = ["leader"] + [f"follower {i}" for i in range(1, len(spent))]
    return percentiles(latencies), list(zip(roles, spent, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3000, help="rounds measured")
    parser.add_argument("--filler", type=int, default=0, help="partitions of a quiet topic")
    parser.add_argument("--echo", type=int, default=20_000, help="echo requests measured")
    args = parser.parse_args()
    floor = echo_floor(args.echo)
    print(f"trio echo floor: {floor * 1e6:.1f} us of CPU per request")
    latency, spent = rounds(args.records, args.filler)
    print(
        f"{args.records:,} rounds (one {SIZE}-byte record each, acks=all, RF 3"
        + (f", a {args.filler}-partition topic beside" if args.filler else "")
        + f"): ack p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} ms"
    )
    total = sum(seconds for _, seconds in spent)
    for role, seconds in [*spent, ("all three", total)]:
        echoes = seconds / floor
        print(f"  {role:<11} {seconds * 1e6:>7.0f} us of CPU a round = {echoes:5.1f} echoes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
