"""The coordinator broker dies (SIGKILL) while a group consumes and commits: the group
re-forms on the new coordinator, which has every committed offset, and consumption goes on
without skipping a record."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from groups.helpers import (
    SESSION,
    committed_offsets,
    find_coordinator,
    poll_until,
    produce,
)

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.consumer_group_describe import ConsumerGroupDescribeRequest
from gregor.protocol.apis.describe_groups import DescribeGroupsRequest
from gregor.protocol.errors import ErrorCode, ProtocolError
from gregor_testing.cluster import WireClient, create_topic, unique_topic, wait_for

PARTITIONS = 6
RECORDS = 3000
FAILOVER_PROPERTIES = {
    "replica.lag.time.max.ms": "3000",
    "group.initial.rebalance.delay.ms": "500",
    "group.min.session.timeout.ms": "1000",
}
KIP848_PROPERTIES = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
}


def commit(consumer: Consumer) -> None:
    """Commit the consumer's positions; nothing new to commit is fine."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def test_coordinator_failover(cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory(3, **FAILOVER_PROPERTIES)
    topic = unique_topic("failover")
    create_topic(cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = [f"r-{i}".encode() for i in range(RECORDS)]
    produce(cluster, topic, values, PARTITIONS)
    group = unique_topic("g-failover")
    members = [
        Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "client.id": f"member-{i}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **SESSION,
            }
        )
        for i in range(2)
    ]
    seen: list[bytes] = []
    since_commit = [0, 0]

    def record(index: int, message: Any) -> None:
        seen.append(message.value())
        since_commit[index] += 1
        if since_commit[index] >= 50:
            # A commit may fail while the coordinator moves; the next one covers it.
            try:
                members[index].commit(asynchronous=False)
            except Exception:
                return
            since_commit[index] = 0

    try:
        for consumer in members:
            consumer.subscribe([topic])
        poll_until(
            members, lambda: len(seen) >= RECORDS // 3, 120, "a third of the records", record
        )
        for consumer in members:
            commit(consumer)
        before = committed_offsets(cluster, group)
        assert sum(before.values()) >= RECORDS // 3 - 2 * 50
        coordinator = find_coordinator(cluster, group)
        coordinator.kill()

        # The new coordinator has loaded every committed offset.
        successor = find_coordinator(cluster, group)
        assert successor.broker_id != coordinator.broker_id
        assert committed_offsets(cluster, group) == before

        poll_until(members, lambda: set(seen) >= set(values), 180, "every record", record)

        def reformed() -> bool:
            poll_until(members, lambda: True, 1, "a poll")
            with WireClient(find_coordinator(cluster, group)) as conn:
                response = conn.request(DescribeGroupsRequest(groups=[group]), 5)
            [described] = response.groups
            return (
                described.error_code == ErrorCode.NONE
                and described.group_state == "Stable"
                and len(described.members) == 2
            )

        wait_for(reformed, 60, "the group to be stable with both members again")
        for consumer in members:
            commit(consumer)
    finally:
        for consumer in members:
            consumer.close()
    # Nothing skipped (records read again after the failover are fine), all committed.
    assert set(seen) == set(values)
    after = committed_offsets(cluster, group)
    assert after == {(topic, p): RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert all(after[tp] >= offset for tp, offset in before.items())


def test_consumer_protocol_coordinator_failover(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    """The same for a KIP-848 group (two librdkafka members and a gregor-client one): the new
    coordinator loads the group from its records, so the members carry on as they were, the
    same member ids at the same epochs with the same partitions, from where they were.

    The records are produced once the group is stable: with KIP-848 the first member to
    join gets every partition at once, so records produced before could all be read and
    committed before the last member joined, leaving it partitions with nothing to read
    (the stall of stop 26's CI rehearsal, where the other two members had read every partition)."""
    from gregor.client import Consumer as GregorConsumer

    cluster = cluster_factory(3, **FAILOVER_PROPERTIES, **KIP848_PROPERTIES)
    topic = unique_topic("failover848")
    create_topic(cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = [f"r-{i}".encode() for i in range(RECORDS)]
    group = unique_topic("g-failover848")
    conf = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    theirs = [Consumer({**conf, "client.id": f"librdkafka-{i}"}) for i in range(2)]
    ours = GregorConsumer({**conf, "client.id": "gregor"})
    seen: Counter[tuple[int, int]] = Counter()
    read = [0, 0, 0]
    errors: list[str] = []  # what librdkafka reported (offset fetches that failed, ...)

    def got(index: int, partition: int, offset: int, value: bytes) -> bool:
        """Count a record; True when its reader should commit (every 50 records)."""
        assert value == values[offset * PARTITIONS + partition]
        seen[(partition, offset)] += 1
        read[index] += 1
        return read[index] % 50 == 0

    def step() -> None:
        for i, consumer in enumerate(theirs):
            for message in consumer.consume(500, 0.05):
                if message.error() is not None:
                    errors.append(f"librdkafka-{i}: {message.error()}")
                    continue
                if got(i, message.partition(), message.offset(), message.value()):
                    # A commit may fail while the coordinator moves; the next one covers it.
                    with contextlib.suppress(KafkaException):
                        consumer.commit(message, asynchronous=False)
        for record in ours.consume(timeout=0.05):
            if got(2, record.partition, record.offset, record.value):
                with contextlib.suppress(ProtocolError, OSError):
                    ours.commit()

    def described() -> Any:
        with WireClient(find_coordinator(cluster, group)) as conn:
            [answer] = conn.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups
        return answer

    def stable() -> Any:
        """The group, once Stable with its three members (stepping meanwhile)."""
        found: list[Any] = []

        def check() -> bool:
            step()
            answer = described()
            found[:] = [answer]
            return answer.group_state == "Stable" and len(answer.members) == 3

        wait_for(check, 60, "the group to be stable with its three members")
        return found[0]

    def partitions(assignment: Any) -> list[int]:
        return sorted(p for t in assignment.topic_partitions for p in t.partitions)

    def members_of(answer: Any) -> dict[str, tuple[int, list[int]]]:
        return {m.member_id: (m.member_epoch, partitions(m.assignment)) for m in answer.members}

    def explain(exc: TimeoutError) -> AssertionError:
        """What each member read and holds, and what the coordinator says of each."""
        holds = [sorted(tp.partition for tp in c.assignment()) for c in [*theirs, ours]]
        answer = described()
        coordinator = [
            (m.client_id, m.member_epoch, partitions(m.assignment), partitions(m.target_assignment))
            for m in answer.members
        ]
        return AssertionError(
            f"{exc}: read {read} (librdkafka-0, librdkafka-1, gregor), {len(seen)} records; "
            f"they hold {holds}; the coordinator (epoch {answer.group_epoch}, assignment epoch "
            f"{answer.assignment_epoch}) has (client, epoch, assigned, target) {coordinator}; "
            f"librdkafka reported {errors[-10:]}"
        )

    try:
        for consumer in [*theirs, ours]:
            consumer.subscribe([topic])
        formed = stable()
        assert sorted(len(ps) for _, ps in members_of(formed).values()) == [2, 2, 2]
        produce(cluster, topic, values, PARTITIONS)
        try:
            wait_for(
                lambda: step() or (len(seen) >= RECORDS // 3 and min(read) > 0),
                120,
                "a third of the records, some read by each member",
            )
        except TimeoutError as exc:
            raise explain(exc) from exc
        before = stable()
        # Nobody joined again while reading: the same members, epochs and partitions.
        assert members_of(before) == members_of(formed)
        for consumer in theirs:
            commit(consumer)
        ours.commit()
        committed = committed_offsets(cluster, group)
        assert sum(committed.values()) >= RECORDS // 3
        coordinator = find_coordinator(cluster, group)
        coordinator.kill()

        successor = find_coordinator(cluster, group)
        assert successor.broker_id != coordinator.broker_id
        assert committed_offsets(cluster, group) == committed
        loaded = described()
        assert loaded.error_code == ErrorCode.NONE, loaded
        assert (loaded.group_epoch, loaded.assignment_epoch) == (
            before.group_epoch,
            before.assignment_epoch,
        )
        assert members_of(loaded) == members_of(before)

        wait_for(lambda: step() or len(seen) == RECORDS, 180, "every record")
        # Nobody had to join again: the same members, epochs and partitions.
        assert members_of(stable()) == members_of(before)
        for consumer in theirs:
            commit(consumer)
        ours.commit()
    finally:
        for consumer in theirs:
            consumer.close()
        ours.close()
    assert set(seen) == {(p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)}
    # No partition moved, so no record was read twice either.
    assert [tp for tp, count in seen.items() if count > 1] == []
    assert committed_offsets(cluster, group) == {
        (topic, p): RECORDS // PARTITIONS for p in range(PARTITIONS)
    }
