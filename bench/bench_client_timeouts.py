"""How closely gregor-client keeps its timeouts: the wall time until a record expires
(delivery.timeout.ms) and until a produce into a full buffer gives up (max.block.ms), as
ratios to the configured value, against the client tests' scripted broker.

These are the timings the unit tests used to assert; a shared machine makes them noisy, so
they are measured here, several rounds each, and reported rather than asserted. A ratio
below 1.0 is a bug (the client gave up early); the target for the slowest round is 1.5x.

    python bench/bench_client_timeouts.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The scripted broker is the client tests' support (packages/client/tests/client_scripted.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "client" / "tests"))

TARGET = 1.5


def delivery_timeout(cluster: Any, timeout_ms: int) -> float:
    """Seconds from produce() to the record's failure, while the leader says it is not."""
    from client_scripted import ScriptedCluster

    from gregor.client import Producer
    from gregor.protocol.apis.produce import (
        PartitionProduceResponse,
        ProduceResponse,
        TopicProduceResponse,
    )
    from gregor.protocol.errors import ErrorCode, RequestTimedOutError

    assert isinstance(cluster, ScriptedCluster)
    cluster.hooks[0] = lambda broker, request, version: ProduceResponse(
        responses=[
            TopicProduceResponse(
                "t", [PartitionProduceResponse(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
            )
        ]
    )
    config = {
        "bootstrap.servers": cluster.bootstrap,
        "delivery.timeout.ms": timeout_ms,
        "request.timeout.ms": timeout_ms * 5 // 7,
        "retry.backoff.ms": 20,
    }
    with Producer(config) as producer:
        producer.partitions_for("t")  # metadata first: only the expiry is timed
        started = time.perf_counter()
        future = producer.produce("t", b"v", partition=0)
        try:
            future.result(60)
        except RequestTimedOutError:
            return time.perf_counter() - started
        finally:
            cluster.hooks.pop(0, None)
    raise RuntimeError("the record was delivered; the broker was told to refuse it")


def max_block(cluster: Any, block_ms: int) -> float:
    """Seconds a produce() into a full buffer waits before it raises."""
    from client_scripted import SILENT

    from gregor.client import Producer
    from gregor.protocol.errors import RequestTimedOutError

    cluster.hooks[0] = lambda broker, request, version: SILENT
    config = {
        "bootstrap.servers": cluster.bootstrap,
        "buffer.memory": 2000,
        "max.block.ms": block_ms,
        "request.timeout.ms": 60_000,
        "delivery.timeout.ms": 120_000,
    }
    producer = Producer(config)
    try:
        producer.partitions_for("t")
        for _ in range(2000 // 121):  # 121 bytes each, counted: the buffer is full after
            producer.produce("t", b"x" * 100, partition=0)
        started = time.perf_counter()
        try:
            producer.produce("t", b"x" * 100, partition=0)
        except RequestTimedOutError:
            return time.perf_counter() - started
        raise RuntimeError("the full buffer took another record")
    finally:
        cluster.hooks.pop(0, None)
        producer.close(0)


def measure(
    name: str, configured_ms: int, rounds: int, run: Callable[[Any, int], float]
) -> list[str]:
    from client_scripted import scripted_cluster

    ratios = []
    for _ in range(rounds):
        with scripted_cluster(1) as cluster:
            cluster.create_topic("t", 1)
            ratios.append(run(cluster, configured_ms) / (configured_ms / 1000))
    low, median, high = min(ratios), statistics.median(ratios), max(ratios)
    ok = low >= 1.0 and high <= TARGET
    print(
        f"{name:<22}{configured_ms:>8} ms{low:>9.2f}x{median:>9.2f}x{high:>9.2f}x"
        f"   {'ok' if ok else 'MISSED'}"
    )
    if ok:
        return []
    return [f"{name}: {low:.2f}x .. {high:.2f}x of {configured_ms} ms, target 1.0x .. {TARGET}x"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    print(f"measured / configured over {args.rounds} rounds (target 1.0x .. {TARGET}x)\n")
    print(f"{'timeout':<22}{'configured':>11}{'min':>10}{'median':>10}{'max':>10}")
    missed = measure("delivery.timeout.ms", 700, args.rounds, delivery_timeout)
    missed += measure("max.block.ms", 300, args.rounds, max_block)
    if missed:
        print("\nmissed targets:\n  " + "\n  ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
