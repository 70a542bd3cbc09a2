"""The controller at scale: 3 brokers, 1,000 topics of 10 partitions each (RF 3 by default).

- Creating them: CreateTopics requests of `--per-request` topics to the controller, and the
  seconds until every partition has a leader on every broker.
- A failover of the controller: SIGKILL it; the seconds until another broker is controller,
  and until every partition has a leader that is alive, as the surviving brokers' Metadata
  says. The first includes `zookeeper.session.timeout.ms` (the dead controller's ZooKeeper
  session must expire first, as in Kafka), printed beside it; the difference is the work of
  the new controller.
- The same after a clean shutdown of the controller (SIGTERM: it resigns and moves its
  leaders away itself).

    python bench/bench_controller.py [--topics 1000] [--partitions 10] [--replication-factor 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SESSION_TIMEOUT_MS = 6000  # devcluster's zookeeper.session.timeout.ms


def metadata(broker: Any) -> Any | None:
    from gregor.devcluster.admin import metadata as ask

    try:
        return ask(broker, None)
    except (OSError, AssertionError, TimeoutError):
        return None


def create(cluster: Any, names: list[str], partitions: int, rf: int, per_request: int) -> None:
    from gregor.devcluster.admin import controller
    from gregor.devcluster.wire import send_request
    from gregor.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest

    for start in range(0, len(names), per_request):
        chosen = controller(cluster)
        topics = [CreatableTopic(n, partitions, rf) for n in names[start : start + per_request]]
        request = CreateTopicsRequest(topics=topics, timeout_ms=0)  # don't wait per request
        response = send_request(chosen.host, chosen.port, request, 5, timeout=120)
        # With timeout 0 a started creation answers REQUEST_TIMED_OUT (7), as in Kafka.
        failed = [t for t in response.topics if t.error_code not in (0, 7)]
        if failed:
            bad = failed[0]
            raise RuntimeError(f"CreateTopics {bad.name}: error {bad.error_code}")


def every_partition_led(brokers: list[Any], count: int, alive: set[int]) -> bool:
    """Every broker in `brokers` knows `count` partitions, each led by a broker in `alive`."""
    for broker in brokers:
        answer = metadata(broker)
        if answer is None:
            return False
        parts = [p for t in answer.topics if not t.is_internal for p in t.partitions]
        if len(parts) < count or any(p.leader_id not in alive for p in parts):
            return False
    return True


def seconds_until(condition: Callable[[], bool], timeout: float = 900.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"not done after {timeout:g} s")
        time.sleep(0.1)
    return time.monotonic() - started


def controller_id(brokers: list[Any], not_: int) -> int | None:
    for broker in brokers:
        answer = metadata(broker)
        if answer is not None and answer.controller_id not in (-1, not_):
            return int(answer.controller_id)
    return None


def failover(cluster: Any, count: int, kill: bool) -> None:
    from gregor.devcluster.admin import controller

    old = controller(cluster)
    others = [b for b in cluster.brokers if b is not old]
    alive = {b.broker_id for b in others}
    begun = time.monotonic()
    if kill:
        old.kill()
    else:
        old.stop(300)  # returns once it has exited: its controlled shutdown is counted
    seconds_until(lambda: controller_id(others, old.broker_id) is not None)
    elected = time.monotonic() - begun
    seconds_until(lambda: every_partition_led(others, count, alive))
    led = time.monotonic() - begun
    how = "SIGKILL" if kill else "clean shutdown"
    wait = f" (includes the {SESSION_TIMEOUT_MS / 1000:g} s session timeout)" if kill else ""
    print(
        f"  {how} of controller {old.broker_id}: a new controller after {elected:.1f} s"
        f"{wait}; every partition led by a live broker after {led:.1f} s",
        flush=True,
    )
    old.launch()
    seconds_until(lambda: every_partition_led(cluster.brokers, count, alive | {old.broker_id}))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--per-request", type=int, default=100)
    args = parser.parse_args()
    from gregor.devcluster import LocalCluster

    count = args.topics * args.partitions
    print(
        f"{args.topics:,} topics x {args.partitions} partitions = {count:,} partitions, "
        f"RF {args.replication_factor}, 3 brokers",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-controller-") as tmp:
        properties = {
            "gregor.metrics.log.interval.ms": "0",
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "auto.leader.rebalance.enable": "false",  # only the failover moves leaders
        }
        cluster = LocalCluster(Path(tmp), 3, properties=properties)
        cluster.start()
        try:
            names = [f"c-{i}" for i in range(args.topics)]
            begun = time.monotonic()
            create(cluster, names, args.partitions, args.replication_factor, args.per_request)
            asked = time.monotonic() - begun
            everyone = {b.broker_id for b in cluster.brokers}
            seconds_until(lambda: every_partition_led(cluster.brokers, count, everyone))
            print(
                f"  created: requests answered after {asked:.1f} s, every partition led on "
                f"every broker after {time.monotonic() - begun:.1f} s",
                flush=True,
            )
            failover(cluster, count, kill=True)
            failover(cluster, count, kill=False)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
