"""The idempotent producer, on real brokers and a real ZooKeeper.

InitProducerId hands out ids from blocks claimed in /latest_producer_id_block, and the
partition leaders check each producer's sequences: a retried batch is answered with its
original offsets, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH.

Through leader failures: confluent-kafka, kafka-python, aiokafka, KafkaJS and gregor-client
each produce with idempotence on, acks=all and up to 5 requests in flight (aiokafka sends one
batch per partition at a time), to a topic of their own whose partitions all share one leader. That
leader is SIGKILLed and restarted, then the next one: two failovers under load. Retried
batches reach the new leader with their producer id and sequences; the producer state it
rebuilt from the log it replicated answers those already written with their original
offsets. Afterwards every acknowledged record is in the log exactly once, at its
acknowledged offset, and the log holds each producer's records in the order it sent them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from gregor.broker.zk import znodes
from gregor.devcluster import LocalCluster
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.api_versions import ApiVersionsRequest
from gregor.protocol.apis.init_producer_id import InitProducerIdRequest
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import BatchBuilder
from gregor_testing.cluster import (
    WireClient,
    create_topic,
    metadata,
    partitions_of,
    unique_topic,
    wait_for,
)
from gregor_testing.processes import zookeeper_client

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE.parent / "interop" / "node_modules"
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kafkajs", "gregor-client"]


def init_producer_id(client: WireClient, version: int, transactional_id: str | None = None) -> Any:
    request = InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60_000
    )
    return client.request(request, version)


def produce(client: WireClient, topic: str, pid: int, epoch: int, sequence: int, n: int) -> Any:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
    for i in range(n):
        builder.append(f"{sequence + i}".encode())
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(0, builder.build())])],
    )
    return client.request(request, 9).responses[0].partition_responses[0]


def test_producer_ids_come_from_blocks_in_zookeeper(shared_cluster: LocalCluster) -> None:
    seen = set()
    for broker in shared_cluster.brokers[:2]:
        with WireClient(broker) as client:
            versions = client.request(ApiVersionsRequest(), 2).api_keys
            found = next(v for v in versions if v.api_key == ApiKey.INIT_PRODUCER_ID)
            assert (found.min_version, found.max_version) == (0, 5)
            for version in range(6):
                answer = init_producer_id(client, version)
                assert (answer.error_code, answer.producer_epoch) == (ErrorCode.NONE, 0)
                seen.add(answer.producer_id)
    assert len(seen) == 12  # every id new, each broker's from a block of its own
    with zookeeper_client(shared_cluster.zookeeper_connect) as zk:
        data, _ = zk.get(znodes.PRODUCER_ID_BLOCK)
    block = json.loads(data)
    assert set(block) == {"version", "broker", "block_start", "block_end"}
    assert block["version"] == 1
    assert int(block["block_end"]) - int(block["block_start"]) == znodes.PRODUCER_ID_BLOCK_SIZE - 1
    assert max(seen) <= int(block["block_end"])


def test_transactional_ids_go_to_their_transaction_coordinator(
    shared_cluster: LocalCluster,
) -> None:
    # No FindCoordinator has created __transaction_state here: no broker coordinates "txn"
    # (tests/transactions has the transactional producers).
    with WireClient(shared_cluster.brokers[0]) as client:
        assert init_producer_id(client, 4, "txn").error_code == ErrorCode.NOT_COORDINATOR
        assert init_producer_id(client, 4, "").error_code == ErrorCode.INVALID_REQUEST


def test_leaders_check_each_producers_sequences(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("sequences")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    leader = next(
        b
        for b in shared_cluster.brokers
        if b.broker_id == partitions_of(shared_cluster, topic, 0)[0].leader_id
    )
    with WireClient(leader) as client:
        pid = init_producer_id(client, 4).producer_id
        first = produce(client, topic, pid, 0, 0, 5)
        assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 0)
        assert produce(client, topic, pid, 0, 5, 5).base_offset == 5
        # A retry of one of the last five batches: its original offsets, nothing written.
        again = produce(client, topic, pid, 0, 0, 5)
        assert (again.error_code, again.base_offset) == (ErrorCode.NONE, 0)
        # A gap in the sequence.
        gap = produce(client, topic, pid, 0, 20, 1)
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # A new epoch starts at 0; then the old one is fenced.
        assert produce(client, topic, pid, 1, 0, 1).base_offset == 10
        fenced = produce(client, topic, pid, 0, 10, 1)
        assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert produce(client, topic, pid, 1, 1, 1).base_offset == 11


class ProducerProcess:
    """One client's producer as a process of its own; its acks read from its stdout."""

    def __init__(self, client: str, bootstrap: str, topic: str) -> None:
        self.client = client
        if client == "kafkajs":
            command = ["node", str(HERE / "kafkajs_idempotent.js"), bootstrap, topic]
            env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
        else:
            command = [
                sys.executable,
                str(HERE / "idempotent_producer.py"),
                client,
                bootstrap,
                topic,
            ]
            env = dict(os.environ)
        self.acked: list[tuple[int, str]] = []  # (offset, value) in acknowledgement order
        self.failed: list[str] = []
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.errors: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("FAILED "):
                self.failed.append(line.strip())
            else:
                offset, value = line.rstrip("\n").split(" ", 1)
                self.acked.append((int(offset), value))

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        self.errors.extend(self.process.stderr)

    def finish(self, timeout: float) -> str:
        """Close its stdin (it flushes and exits); the end of its stderr."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout)
        finally:
            self.kill()
        for reader in self._readers:
            reader.join(10)
        return "".join(self.errors)[-3000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def leader_id(cluster: LocalCluster, topic: str) -> int:
    live = next(b for b in cluster.brokers if b.is_running())
    return partitions_of(cluster, topic, live.broker_id)[0].leader_id


def in_sync(cluster: LocalCluster, topics: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        for broker in cluster.brokers:
            for topic in topics:
                state = partitions_of(cluster, topic, broker.broker_id).get(0)
                if state is None or len(state.isr_nodes) != 3:
                    return False
        return True

    return check


def read_partition(cluster: LocalCluster, topic: str) -> list[tuple[int, str]]:
    """(offset, value) of every record of partition 0, from the start to the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=30)
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        found: list[tuple[int, str]] = []
        deadline = time.monotonic() + 120
        while (not found or found[-1][0] < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            assert message.error() is None or message.error().code() == KafkaError._PARTITION_EOF
            if message.error() is None:
                found.append((message.offset(), message.value().decode()))
        assert end == 0 or (found and found[-1][0] == end - 1), f"{topic}: read to {end}"
        return found
    finally:
        consumer.close()


@pytest.mark.interop("confluent", "idempotence")
@pytest.mark.interop("kafka-python", "idempotence")
@pytest.mark.interop("aiokafka", "idempotence")
@pytest.mark.interop("kafkajs", "idempotence")
@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)
def test_idempotent_producers_survive_two_leader_failovers(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    controller = metadata(cluster, [], 0).controller_id
    # Not the controller first: its failover is a leader's alone.
    first = next(b for b in (1, 2, 0) if b != controller)
    order = [first, *(b for b in (0, 1, 2) if b != first)]
    topics = {client: f"idempotence-{client}" for client in CLIENTS}
    for topic in topics.values():
        create_topic(cluster, topic, assignment={0: order}, configs={"min.insync.replicas": "2"})
    producers = [ProducerProcess(c, cluster.bootstrap_servers, t) for c, t in topics.items()]
    try:

        def more_acks(count: int, what: str) -> None:
            targets = [len(p.acked) + count for p in producers]
            wait_for(
                lambda: all(len(p.acked) >= n for p, n in zip(producers, targets, strict=True)),
                180,
                f"{count} more acks from every producer {what}",
            )

        more_acks(100, "before any failure")
        for failover in (1, 2):
            victim_id = leader_id(cluster, topics["gregor-client"])
            victim = cluster.broker(victim_id)
            victim.kill()
            wait_for(
                lambda gone=victim_id: all(
                    leader_id(cluster, t) not in (gone, -1) for t in topics.values()
                ),
                60,
                f"new leaders (failover {failover})",
            )
            more_acks(200, f"with the leader dead (failover {failover})")
            victim.start()
            wait_for(in_sync(cluster, list(topics.values())), 120, "the old leader in sync")
            more_acks(100, f"after the leader's return (failover {failover})")
        errors = {p.client: p.finish(timeout=300) for p in producers}
    finally:
        for producer in producers:
            producer.kill()
    problems = []
    for producer in producers:
        name = producer.client
        if producer.failed or producer.process.returncode != 0:
            problems.append(f"{name}: {producer.failed[:3]}\n{errors[name][-2000:]}")
            continue
        log = read_partition(cluster, topics[name])
        values = [value for _, value in log]
        # Exactly once, in the order sent: the values (numbered as sent) strictly increase.
        if values != sorted(set(values)):
            problems.append(f"{name}: duplicates or reordering in the log: {_first_wrong(values)}")
        where = dict(log)
        lost = [(o, v) for o, v in producer.acked if where.get(o) != v]
        if lost:
            problems.append(f"{name}: acked records not in the log: {lost[:3]}")
        if len(producer.acked) < 500:
            problems.append(f"{name}: only {len(producer.acked)} records acknowledged")
    assert problems == []


def _first_wrong(values: list[str]) -> str:
    i = next(i for i in range(1, len(values)) if values[i] <= values[i - 1])
    return f"at {i}: {values[max(0, i - 2) : i + 2]}"
