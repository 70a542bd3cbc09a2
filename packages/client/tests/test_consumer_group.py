"""Consumer groups against the scripted coordinator: assignment across members, listeners,
commits that survive restarts, cooperative rebalancing, static membership, auto commit,
max.poll.interval.ms, and a coordinator that moves."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from client_scripted import ScriptedCluster, wait_for

from gregor.client.consumer import Consumer, ConsumerRecord
from gregor.client.types import OffsetAndMetadata, TopicPartition
from gregor.protocol.records import BatchBuilder


def fill(cluster: ScriptedCluster, topic: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        builder = BatchBuilder()
        for n in range(per_partition):
            builder.append(b"%d-%d" % (p, n))
        cluster.append(topic, p, builder.build())


class Member:
    """A consumer polling in a thread of its own, recording what it got and was told."""

    def __init__(
        self,
        cluster: ScriptedCluster,
        group: str = "g",
        topics: tuple[str, ...] = ("t",),
        **config: Any,
    ) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 100,
                **config,
            }
        )
        self.records: list[ConsumerRecord] = []
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self.polling = threading.Event()
        self.polling.set()
        self.parked = threading.Event()  # set while the loop waits for `polling`
        self.stopped = False
        self.error: Exception | None = None
        self.consumer.subscribe(list(topics), self)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", partitions))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", partitions))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("lost", partitions))

    def _loop(self) -> None:
        try:
            while not self.stopped:
                if not self.polling.is_set():
                    self.parked.set()
                    self.polling.wait()
                    self.parked.clear()
                    continue
                self.records += self.consumer.consume(100, timeout=0.1)
        except Exception as exc:  # surfaced by the test through .error
            self.error = exc

    def pause(self) -> None:
        """Stop polling, and return once the loop is out of `consume` and waits."""
        self.polling.clear()
        assert self.parked.wait(10), "the polling loop did not park"

    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    def stop(self, close: bool = True) -> None:
        self.stopped = True
        self.polling.set()
        self.thread.join(10)
        if close:
            self.consumer.close()


def manual(cluster: ScriptedCluster) -> Consumer:
    """A group member that commits only when told to."""
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def tps(topic: str, *partitions: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in partitions}


def until(predicate: Callable[[], bool], what: str, timeout: float = 20) -> None:
    wait_for(predicate, timeout, what)


def test_a_single_member_reads_everything_and_commits(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 3)
    fill(cluster, "t", 3, 10)
    member = Member(cluster)
    try:
        until(lambda: len(member.records) == 30, "all records")
        assert member.assignment() == tps("t", 0, 1, 2)
        assert member.events[0] == ("assign", sorted(tps("t", 0, 1, 2)))
        member.pause()
        member.consumer.commit()
        committed = member.consumer.committed(sorted(tps("t", 0, 1, 2)))
        assert committed == {tp: OffsetAndMetadata(10) for tp in tps("t", 0, 1, 2)}
    finally:
        member.stop()
    assert cluster.groups["g"].offsets[("t", 1)] == (10, "")


def test_committed_offsets_survive_a_restart(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 1, 20)
    first = manual(cluster)
    first.subscribe(["t"])
    got: list[ConsumerRecord] = []
    while len(got) < 7:
        got += first.consume(7 - len(got), timeout=1)
    first.commit()
    first.close()
    second = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
    )
    second.subscribe(["t"])
    rest: list[ConsumerRecord] = []
    deadline = time.monotonic() + 20
    while len(rest) < 13 and time.monotonic() < deadline:
        rest += second.consume(20, timeout=1)
    second.close()
    assert [r.offset for r in rest] == list(range(7, 20))


def test_three_members_share_twelve_partitions_then_two(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 12)
    fill(cluster, "t", 12, 5)
    members = [Member(cluster, **{"partition.assignment.strategy": "range"}) for _ in range(3)]
    try:
        until(lambda: sorted(len(m.assignment()) for m in members) == [4, 4, 4], "4 each")
        until(lambda: sum(len(m.records) for m in members) == 60, "every record")
        members[2].stop()
        until(lambda: sorted(len(m.assignment()) for m in members[:2]) == [6, 6], "6 each")
        assert members[0].assignment() | members[1].assignment() == tps("t", *range(12))
        # Eager: every member gave up everything before the new round.
        assert members[0].events[-2][0] == "revoke" and members[0].events[-1][0] == "assign"
    finally:
        for m in members[:2]:
            m.stop()
    records = [r for m in members for r in m.records]
    assert len({(r.partition, r.offset) for r in records}) == 60


def test_cooperative_sticky_moves_only_what_must_move(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 6)
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    first = Member(cluster, **config)
    second = None
    try:
        until(lambda: len(first.assignment()) == 6, "all six")
        before = first.assignment()
        second = Member(cluster, **config)
        until(lambda: len(first.assignment()) == 3 and len(second.assignment()) == 3, "3 and 3")
        assert first.assignment() <= before  # kept half of what it had, got nothing new
        revoked = [set(p) for kind, p in first.events if kind == "revoke"]
        assert revoked == [before - first.assignment()]  # only the moved ones, once
        assert not [e for e in second.events if e[0] == "revoke"]
        generations = cluster.groups["g"].generations
        assert len(generations) >= 3  # join, incremental round, follow-up round
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_static_member_restarting_causes_no_rebalance(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 2)
    config = {"group.instance.id": "worker-1", "session.timeout.ms": 10_000}
    member = Member(cluster, **config)
    until(lambda: len(member.assignment()) == 2, "an assignment")
    generation = cluster.groups["g"].generation
    member.stop()  # a static member does not leave on close
    assert cluster.groups["g"].members  # still there
    again = Member(cluster, **config)
    try:
        until(lambda: len(again.assignment()) == 2, "the same assignment back")
        assert cluster.groups["g"].generation == generation
    finally:
        again.stop()
    assert cluster.sent("LeaveGroup") == []


def test_auto_commit_commits_positions(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 1, 10)
    member = Member(cluster, **{"auto.commit.interval.ms": 100})
    try:
        until(lambda: len(member.records) == 10, "the records")
        until(lambda: cluster.groups["g"].offsets.get(("t", 0)) == (10, ""), "an auto commit")
    finally:
        member.stop()


def test_a_member_that_stops_polling_leaves_and_is_told_on_return(
    cluster: ScriptedCluster,
) -> None:
    cluster.create_topic("t", 2)
    config = {"max.poll.interval.ms": 1000, "partition.assignment.strategy": "range"}
    slow = Member(cluster, **config)
    fast = None
    try:
        until(lambda: len(slow.assignment()) == 2, "the slow member's assignment")
        fast = Member(cluster, **config)
        until(lambda: len(fast.assignment()) == 1 and len(slow.assignment()) == 1, "1 and 1")
        slow.polling.clear()  # the application hangs
        until(lambda: len(fast.assignment()) == 2, "the fast member taking over", timeout=30)
        assert cluster.sent("LeaveGroup")
        slow.polling.set()
        until(lambda: any(kind == "lost" for kind, _ in slow.events), "on_lost")
        until(lambda: len(slow.assignment()) == 1 and len(fast.assignment()) == 1, "rejoined")
    finally:
        slow.stop()
        if fast is not None:
            fast.stop()


def test_a_coordinator_that_moves_makes_the_member_rejoin() -> None:
    from client_scripted import scripted_cluster

    with scripted_cluster(2) as cluster:
        cluster.create_topic("t", 2)
        member = Member(cluster)
        try:
            until(lambda: len(member.assignment()) == 2, "an assignment")
            joins = len(cluster.sent("JoinGroup"))

            def move() -> None:  # the new coordinator has not heard of this member
                cluster.coordinator = 1
                cluster.groups.clear()

            cluster.call(move)
            until(lambda: len(cluster.sent("JoinGroup")) > joins, "a rejoin", timeout=30)
            until(
                lambda: (
                    len(member.assignment()) == 2
                    and cluster.groups.get("g") is not None
                    and cluster.groups["g"].state == "Stable"
                ),
                "membership again",
            )
            until(
                lambda: any(b == 1 for b, _, _ in cluster.sent("Heartbeat")),
                "heartbeats to the new coordinator",
            )
        finally:
            member.stop()


def test_partitions_added_to_a_topic_are_assigned(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    member = Member(cluster, **{"metadata.max.age.ms": 200})
    try:
        until(lambda: len(member.assignment()) == 1, "one partition")

        def grow() -> None:
            from client_scripted import Partition

            cluster.topics["t"].append(Partition(0))

        cluster.call(grow)
        until(lambda: len(member.assignment()) == 2, "the new partition")
    finally:
        member.stop()


def test_commit_failures_after_a_rebalance_are_explicit(cluster: ScriptedCluster) -> None:
    from gregor.protocol.errors import IllegalGenerationError

    cluster.create_topic("t", 1)
    fill(cluster, "t", 1, 3)
    c = manual(cluster)
    c.subscribe(["t"])
    while not c.consume(3, timeout=1):
        pass
    cluster.call(lambda: setattr(cluster.groups["g"], "generation", 99))
    with pytest.raises(IllegalGenerationError, match="rebalanced"):
        c.commit()
    c.close()
