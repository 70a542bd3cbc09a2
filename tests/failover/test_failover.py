"""Failover proofs on real brokers and a real ZooKeeper.

- A producer writes continuously with acks=all to a topic with RF=3 and
  min.insync.replicas=2 while the leader of a partition is SIGKILLed and restarted, and
  then the controller is SIGKILLed (and restarted). Afterwards every acknowledged record is
  at its acknowledged offset, in order, with identical bytes on every replica, and the auto
  leader rebalance has put leadership back on the preferred replicas.
- A broker SIGSTOPped past its ZooKeeper session timeout and then resumed registers again
  and rejoins every ISR with no manual step, the controller included.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.records import iter_batches
from gregor_testing.cluster import create_topic, metadata, partitions_of, wait_for, wait_for_topic
from gregor_testing.processes import zookeeper_client

PARTITIONS = 3
ASSIGNMENT = {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]}
PROPERTIES = {
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "1",
}

pytestmark = pytest.mark.slow


class ContinuousProducer:
    """confluent-kafka producing acks=all from a thread of its own, at a steady pace."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.failed: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="continuous-producer", daemon=True)

    def __enter__(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": False,  # acks=all alone: what the proof checks
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "retry.backoff.ms": 100,
                "max.in.flight.requests.per.connection": 1,  # keeps each partition in order
            }
        )
        sent = 0
        while not self._stop.is_set():
            value = f"record-{sent:09d}".encode()
            try:
                producer.produce(
                    self.topic, value=value, partition=sent % PARTITIONS, on_delivery=self._report
                )
            except BufferError:
                producer.poll(0.05)
                continue
            sent += 1
            producer.poll(0)
            if sent % 20 == 0:
                time.sleep(0.01)  # pacing: a few thousand records a second at most
        producer.flush(150)

    def _report(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failed.append(error)
        else:
            self.acked.append((message.partition(), message.offset(), message.value()))

    def wait_for_more(self, count: int, what: str, timeout: float = 90.0) -> None:
        target = len(self.acked) + count
        wait_for(lambda: len(self.acked) >= target, timeout, f"{count} more acks {what}")


def live(cluster: LocalCluster) -> list[BrokerProcess]:
    return [b for b in cluster.brokers if b.is_running()]


def controller_id(cluster: LocalCluster) -> int:
    return metadata(cluster, [], live(cluster)[0].broker_id).controller_id


def leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    return {
        p: s.leader_id for p, s in partitions_of(cluster, topic, live(cluster)[0].broker_id).items()
    }


def all_replicas_in_sync(cluster: LocalCluster, topic: str) -> Callable[[], bool]:
    def check() -> bool:
        for broker in live(cluster):
            seen = partitions_of(cluster, topic, broker.broker_id)
            if len(seen) != PARTITIONS or any(len(p.isr_nodes) != 3 for p in seen.values()):
                return False
        return True

    return check


def consume_all(
    cluster: LocalCluster, topic: str, ends: dict[int, int]
) -> dict[tuple[int, int], bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "failover-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: dict[tuple[int, int], bytes] = {}
    try:
        consumer.assign(
            [KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        done: set[int] = set()
        deadline = time.monotonic() + 120
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                if message.offset() >= ends[message.partition()]:
                    done.add(message.partition())
                continue
            found[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    assert len(done) == PARTITIONS, "the consumer did not reach every partition's end"
    return found


def replica_logs(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """The batches of one replica: its segment files, in offset order, concatenated."""
    directory = broker.data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(Path(directory).glob("*.log")))


def check_replicas_identical(
    cluster: LocalCluster, topic: str, acked: list[tuple[int, int, bytes]]
) -> None:
    """Every replica holds the same bytes, and in them every acknowledged record at its offset."""
    for partition in range(PARTITIONS):
        copies = {b.broker_id: replica_logs(b, topic, partition) for b in cluster.brokers}
        assert len(set(copies.values())) == 1, f"partition {partition}: replicas differ"
        records = {
            record.offset: record.value
            for batch in iter_batches(copies[0], strict=True)
            for record in batch
        }
        for p, offset, value in acked:
            if p == partition:
                assert records.get(offset) == value, f"acked {value!r} missing at {p}/{offset}"


def test_leader_and_controller_failover_lose_no_acknowledged_record(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3, **PROPERTIES)
    topic = "failover"
    create_topic(cluster, topic, assignment=ASSIGNMENT, configs={"min.insync.replicas": "2"})
    with ContinuousProducer(cluster.bootstrap_servers, topic) as producer:
        producer.wait_for_more(300, "before any failure")
        # The leader of a partition dies (not the controller: that comes next).
        controller = controller_id(cluster)
        partition, victim_id = next(
            (p, leader)
            for p, leader in sorted(leaders(cluster, topic).items())
            if leader != controller
        )
        victim = cluster.broker(victim_id)
        victim.kill()
        wait_for(
            lambda: leaders(cluster, topic)[partition] not in (victim_id, -1),
            60,
            f"a new leader for partition {partition}",
        )
        producer.wait_for_more(300, "with the leader dead")
        victim.start()
        wait_for(all_replicas_in_sync(cluster, topic), 90, "the restarted leader back in sync")
        producer.wait_for_more(200, "after the leader's return")
        # Now the controller dies.
        controller = controller_id(cluster)
        cluster.broker(controller).kill()
        wait_for(lambda: controller_id(cluster) not in (controller, -1), 60, "a new controller")
        producer.wait_for_more(300, "with the controller dead")
        cluster.broker(controller).start()
        wait_for(all_replicas_in_sync(cluster, topic), 90, "the old controller back in sync")
        producer.wait_for_more(200, "at the end")
    assert producer.failed == []
    acked = producer.acked
    # Offsets acknowledged per partition are distinct and increase in acknowledgement order.
    for p in range(PARTITIONS):
        offsets = [o for q, o, _ in acked if q == p]
        assert offsets == sorted(set(offsets))
    # Leadership returns to the preferred replicas (the auto leader rebalance).
    wait_for(
        lambda: leaders(cluster, topic) == {p: r[0] for p, r in ASSIGNMENT.items()},
        60,
        "leaders back on their preferred replicas",
    )
    ends = {p: max(o for q, o, _ in acked if q == p) + 1 for p in range(PARTITIONS)}
    consumed = consume_all(cluster, topic, ends)
    for p, offset, value in acked:
        assert consumed.get((p, offset)) == value
    wait_for(all_replicas_in_sync(cluster, topic), 60, "every replica in sync at the end")
    cluster.stop()
    check_replicas_identical(cluster, topic, acked)


def registered(cluster: LocalCluster) -> set[int]:
    with zookeeper_client(cluster.zookeeper_connect) as client:
        return {int(i) for i in client.get_children("/brokers/ids")}


@pytest.mark.parametrize("who", ["controller", "follower"])
def test_a_broker_paused_past_its_session_rejoins_by_itself(
    cluster_factory: Callable[..., LocalCluster], who: str
) -> None:
    cluster = cluster_factory(3)
    topic = "session-loss"
    create_topic(cluster, topic, assignment=ASSIGNMENT, configs={"min.insync.replicas": "2"})
    with ContinuousProducer(cluster.bootstrap_servers, topic) as producer:
        producer.wait_for_more(200, "before the pause")
        controller = controller_id(cluster)
        victim_id = controller if who == "controller" else (controller + 1) % 3
        victim = cluster.broker(victim_id)
        others = [b for b in cluster.brokers if b.broker_id != victim_id]
        victim.pause()
        try:
            # ZooKeeper expires its session: it is gone, and leaves every ISR.
            wait_for(lambda: victim_id not in registered(cluster), 60, "the session expired")

            def isr_without_victim() -> bool:
                seen = partitions_of(cluster, topic, others[0].broker_id)
                return all(victim_id not in p.isr_nodes and p.leader_id >= 0 for p in seen.values())

            wait_for(isr_without_victim, 60, "the paused broker out of every ISR")
            if who == "controller":
                wait_for(
                    lambda: (
                        metadata(cluster, [], others[0].broker_id).controller_id
                        not in (victim_id, -1)
                    ),
                    60,
                    "a new controller",
                )
            producer.wait_for_more(200, "while it is paused")
        finally:
            victim.resume()
        wait_for(lambda: victim_id in registered(cluster), 60, "the broker registered again")
        wait_for(all_replicas_in_sync(cluster, topic), 90, "the broker back in every ISR")
        producer.wait_for_more(200, "after it rejoined")
    assert producer.failed == []
    wait_for_topic(cluster, topic, PARTITIONS)
    cluster.stop()
    check_replicas_identical(cluster, topic, producer.acked)
