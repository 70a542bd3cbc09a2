"""Consumer groups with confluent-kafka (librdkafka): balanced assignments that follow the
group's membership, committed offsets that outlive the consumers, incremental
(cooperative-sticky) rebalancing, and static members that restart without a rebalance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from groups.helpers import (
    SESSION,
    assert_static_restart,
    assignment_of,
    committed_offsets,
    group_metadata_records,
    poll_until,
    produce,
)

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic


@pytest.fixture
def consumers(group_cluster: LocalCluster) -> Iterator[Any]:
    """A factory of consumers closed at the end of the test (unless closed before)."""
    made: list[Consumer] = []
    closed: set[int] = set()

    def make(group: str, **conf: Any) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": group_cluster.bootstrap_servers,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **SESSION,
                **conf,
            }
        )
        made.append(consumer)
        return consumer

    def close(consumer: Consumer) -> None:
        consumer.close()
        closed.add(id(consumer))

    make.close = close  # type: ignore[attr-defined]
    yield make
    for consumer in made:
        if id(consumer) not in closed:
            consumer.close()


@pytest.mark.interop("confluent", "groups")
def test_assignments_follow_the_membership(group_cluster: LocalCluster, consumers: Any) -> None:
    topic = unique_topic("balance")
    create_topic(group_cluster, topic, partitions=12, replication_factor=3)
    group = unique_topic("g-balance")
    members = [consumers(group, **{"client.id": f"member-{i}"}) for i in range(3)]
    for consumer in members:
        consumer.subscribe([topic])

    def balanced(active: list[Consumer], each: int) -> bool:
        owned = [assignment_of(c) for c in active]
        union = set().union(*owned)
        return all(len(o) == each for o in owned) and union == set(range(12))

    poll_until(members, lambda: balanced(members, 4), 60, "4 partitions for each of 3 members")
    consumers.close(members[2])  # leaves the group
    poll_until(members[:2], lambda: balanced(members[:2], 6), 60, "6 partitions for each of 2")


@pytest.mark.interop("confluent", "groups")
def test_committed_offsets_survive_consumer_restarts(
    group_cluster: LocalCluster, consumers: Any
) -> None:
    topic = unique_topic("restart")
    create_topic(group_cluster, topic, partitions=4, replication_factor=3)
    values = [f"record-{i}".encode() for i in range(200)]
    produce(group_cluster, topic, values, 4)
    group = unique_topic("g-restart")
    seen: list[Message] = []

    first = consumers(group)
    first.subscribe([topic])
    poll_until([first], lambda: len(seen) >= 120, 60, "120 records", lambda _i, m: seen.append(m))
    committed = first.commit(asynchronous=False)
    # (a partition it read nothing from yet has no position to commit)
    positions = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
    consumers.close(first)
    # What was committed is what the coordinator keeps.
    assert committed_offsets(group_cluster, group) == {
        (topic, p): offset for p, offset in positions.items()
    }

    second = consumers(group)
    second.subscribe([topic])
    rest: list[Message] = []
    poll_until(
        [second],
        lambda: len(seen) + len(rest) >= 200,
        60,
        "the remaining records",
        lambda _i, m: rest.append(m),
    )
    # The second consumer starts exactly where the first committed: nothing twice, no gap.
    for message in rest:
        assert message.offset() >= positions.get(message.partition(), 0)
    assert sorted(m.value() for m in seen + rest) == sorted(values)
    assert len(seen) + len(rest) == 200
    second.commit(asynchronous=False)
    third = consumers(group)
    counts = {p: sum(1 for m in seen + rest if m.partition() == p) for p in range(4)}
    assert {
        tp.partition: tp.offset
        for tp in third.committed([TopicPartition(topic, p) for p in range(4)], timeout=30)
        if tp.offset >= 0
    } == {p: n for p, n in counts.items() if n}


@pytest.mark.interop("confluent", "static-coop")
def test_cooperative_sticky_rebalances_incrementally(
    group_cluster: LocalCluster, consumers: Any
) -> None:
    topic = unique_topic("coop")
    create_topic(group_cluster, topic, partitions=6, replication_factor=3)
    group = unique_topic("g-coop")
    events: dict[str, list[tuple[str, set[int]]]] = {"a": [], "b": []}

    def subscribe(name: str) -> Consumer:
        consumer = consumers(group, **{"partition.assignment.strategy": "cooperative-sticky"})
        consumer.subscribe(
            [topic],
            on_assign=lambda _c, ps: events[name].append(("assign", {p.partition for p in ps})),
            on_revoke=lambda _c, ps: events[name].append(("revoke", {p.partition for p in ps})),
        )
        return consumer

    a = subscribe("a")
    poll_until([a], lambda: assignment_of(a) == set(range(6)), 60, "all 6 partitions for a")
    b = subscribe("b")
    poll_until(
        [a, b],
        lambda: len(assignment_of(a)) == 3 and len(assignment_of(b)) == 3,
        60,
        "3 partitions each",
    )
    kept = assignment_of(a)
    assert kept.isdisjoint(assignment_of(b))
    # a gave up exactly what b took, and nothing it kept was ever revoked.
    revoked = set().union(*(ps for kind, ps in events["a"] if kind == "revoke"))
    assert revoked == assignment_of(b)
    assert not revoked & kept
    assert all(kind == "assign" for kind, _ in events["b"])


@pytest.mark.interop("confluent", "static-coop")
def test_static_member_restart_causes_no_rebalance(
    group_cluster: LocalCluster, consumers: Any
) -> None:
    topic = unique_topic("static")
    create_topic(group_cluster, topic, partitions=4, replication_factor=3)
    group = unique_topic("g-static")
    static = {"session.timeout.ms": 30000}
    rebalances: list[str] = []

    def member(instance: str) -> Consumer:
        consumer = consumers(group, **{**static, "group.instance.id": instance})
        consumer.subscribe(
            [topic],
            on_assign=lambda _c, _ps: rebalances.append(f"{instance} assigned"),
            on_revoke=lambda _c, _ps: rebalances.append(f"{instance} revoked"),
        )
        return consumer

    first, second = member("instance-1"), member("instance-2")
    poll_until(
        [first, second],
        lambda: len(assignment_of(first)) == 2 and len(assignment_of(second)) == 2,
        60,
        "2 partitions each",
    )
    owned = assignment_of(second)
    before = group_metadata_records(group_cluster, group)[-1]
    assert before is not None
    consumers.close(second)  # a static member does not leave the group when it closes
    rebalances.clear()
    restarted = member("instance-2")
    poll_until(
        [first, restarted], lambda: assignment_of(restarted) == owned, 60, "the same partitions"
    )
    after = group_metadata_records(group_cluster, group)[-1]
    assert_static_restart(before, after, "instance-1", "instance-2")
    # Only the restarted consumer was assigned (its own partitions); the other saw nothing.
    assert rebalances == ["instance-2 assigned"]
