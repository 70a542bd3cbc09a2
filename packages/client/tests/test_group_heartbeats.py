"""KIP-848 consumer groups (`group.protocol=consumer`) against the scripted cluster, whose
ConsumerGroupHeartbeat is answered by a one-member coordinator scripted here (a hook): the
exact heartbeats the member sends (member id, epoch, subscription, owned partitions) and the
assignment it ends with, through joining, a reassignment, fencing, leaving and a pattern
subscription.

The test's trio clock is a frozen MockClock: the member heartbeats on its own only when the
test moves the clock past the heartbeat interval, so every heartbeat in a test is one the
test asked for (or one the member sends at once after joining).
"""

from __future__ import annotations

import base64
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from client_scripted import DEFAULT_VERSIONS, ScriptedCluster, scripted_cluster
from trio.testing import MockClock

from gregor.client import AsyncConsumer, TopicPartition
from gregor.protocol.apis.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from gregor.protocol.apis.metadata import MetadataRequest
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Request, Response

CONSUMER_GROUP_HEARTBEAT = 68
METADATA = 3
VERSIONS = {**DEFAULT_VERSIONS, CONSUMER_GROUP_HEARTBEAT: (0, 1)}
INTERVAL = 5.0  # the heartbeat interval the coordinator hands out, in seconds
GROUP = "g"


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"gregor-test-topic/{name}")


NAMES_BY_ID: dict[uuid.UUID, str] = {}


def names(topic_partitions: list[TopicPartitions] | None) -> dict[str, list[int]] | None:
    """A heartbeat's topic_partitions by topic name (None stays None)."""
    if topic_partitions is None:
        return None
    return {NAMES_BY_ID[t.topic_id]: sorted(t.partitions) for t in topic_partitions}


Event = tuple[str, Any]  # ("heartbeat", request), ("answer", response), or a listener call


class Coordinator:
    """A KIP-848 group coordinator for one member, answering ConsumerGroupHeartbeat on the
    scripted cluster's loop as Kafka's does, reduced to what one member needs:
    - joining (epoch 0) hands out a member id if the member brought none, the next epoch,
      and the assignment: `target`, or every partition of the subscribed topics;
    - a new target that takes partitions away is reached in two steps, as Kafka's
      CurrentAssignmentBuilder does: first the member's assignment without them at the same
      epoch, and only once a heartbeat reports them no longer owned, the target at a new
      epoch;
    - the assignment is in the answer when joining, when the member reported what it owns,
      or when it changed since last sent;
    - `errors` are answered, once each, to the next heartbeats; a negative epoch leaves.

    Everything it was sent and answered, with the listener's calls, goes into `timeline`
    in order; `wait_for` awaits a condition on it from the test's loop.
    """

    def __init__(self, cluster: ScriptedCluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.timeline: list[Event] = []
        self.errors: list[int] = []
        self.target: dict[str, list[int]] | None = None
        self.member_id = ""
        self.epoch = 0
        self.subscribed: list[str] = []
        self.current: set[TopicPartition] = set()  # the member's assignment
        self.owned: set[TopicPartition] = set()  # what the member last said it owns
        self.sent: set[TopicPartition] | None = None  # the assignment last answered
        self._token = trio.lowlevel.current_trio_token()
        self._changed = trio.Event()
        cluster.hooks[CONSUMER_GROUP_HEARTBEAT] = self._answer
        cluster.hooks[METADATA] = self._metadata

    # -- the test's side -------------------------------------------------------------------

    def record(self, event: Event) -> None:
        with self.lock:
            self.timeline.append(event)
        try:
            self._token.run_sync_soon(self._wake)
        except trio.RunFinishedError:
            pass

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    def heartbeats(self) -> list[ConsumerGroupHeartbeatRequest]:
        with self.lock:
            return [e for kind, e in self.timeline if kind == "heartbeat"]

    def answers(self) -> list[ConsumerGroupHeartbeatResponse]:
        with self.lock:
            return [e for kind, e in self.timeline if kind == "answer"]

    def index(self, predicate: Callable[[Event], bool]) -> int:
        """The position in the timeline of the first event matching `predicate`."""
        with self.lock:
            return next(i for i, event in enumerate(self.timeline) if predicate(event))

    def reassign(self, target: dict[str, list[int]]) -> None:
        with self.lock:
            self.target = target

    # -- the cluster's side ----------------------------------------------------------------

    async def _metadata(self, broker: int, body: Request, version: int) -> Response:
        """The scripted cluster's answer, with topic ids (which it leaves out)."""
        assert isinstance(body, MetadataRequest)
        response: Any = await self.cluster._MetadataRequest(broker, body, version)
        for topic in response.topics:
            if topic.name in self.cluster.topics:
                topic.topic_id = topic_id(topic.name)
                NAMES_BY_ID[topic.topic_id] = topic.name
        result: Response = response
        return result

    def _wanted(self) -> set[TopicPartition]:
        target = self.target
        if target is None:
            target = {
                t: list(range(len(self.cluster.topics[t])))
                for t in self.subscribed
                if t in self.cluster.topics
            }
        return {TopicPartition(t, p) for t, ps in target.items() for p in ps}

    def _answer(self, broker: int, body: Request, version: int) -> Response:
        assert isinstance(body, ConsumerGroupHeartbeatRequest)
        self.record(("heartbeat", body))
        with self.lock:
            response = self._respond(body)
        self.record(("answer", response))
        return response

    def _respond(self, hb: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        if self.errors:
            return ConsumerGroupHeartbeatResponse(error_code=self.errors.pop(0))
        if hb.member_epoch < 0:
            return ConsumerGroupHeartbeatResponse(
                member_id=hb.member_id, member_epoch=hb.member_epoch
            )
        joining = hb.member_epoch == 0
        if hb.subscribed_topic_names is not None:
            self.subscribed = list(hb.subscribed_topic_names)
        if joining:
            self.member_id = hb.member_id or f"scripted-{uuid.uuid4().hex[:8]}"
            self.epoch += 1
            self.current = self.owned = set()
            self.sent = None
        if hb.topic_partitions is not None:
            self.owned = {
                TopicPartition(NAMES_BY_ID[t.topic_id], p)
                for t in hb.topic_partitions
                for p in t.partitions
            }
        wanted = self._wanted()
        if wanted != self.current:
            if self.owned - wanted:  # revoke first, at the same epoch
                self.current = self.current & wanted
            else:
                self.current = wanted
                if not joining:
                    self.epoch += 1
            if joining:
                self.owned = set(self.current)
        assignment = None
        if joining or hb.topic_partitions is not None or self.current != self.sent:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(self.current):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            assignment = Assignment(
                [TopicPartitions(topic_id(t), ps) for t, ps in sorted(by_topic.items())]
            )
            self.sent = set(self.current)
        return ConsumerGroupHeartbeatResponse(
            member_id=self.member_id,
            member_epoch=self.epoch,
            heartbeat_interval_ms=int(INTERVAL * 1000),
            assignment=assignment,
        )


class Listener:
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.calls: list[tuple[str, list[TopicPartition]]] = []

    def _called(self, name: str, partitions: list[TopicPartition]) -> None:
        self.calls.append((name, sorted(partitions)))
        self.coordinator.record((name, sorted(partitions)))

    def on_assign(self, consumer: AsyncConsumer, partitions: list[TopicPartition]) -> None:
        self._called("assign", partitions)

    def on_revoke(self, consumer: AsyncConsumer, partitions: list[TopicPartition]) -> None:
        self._called("revoke", partitions)

    def on_lost(self, consumer: AsyncConsumer, partitions: list[TopicPartition]) -> None:
        self._called("lost", partitions)


@pytest.fixture
def kip848() -> Iterator[ScriptedCluster]:
    with scripted_cluster(1, versions=VERSIONS) as running:
        yield running


def consumer_config(cluster: ScriptedCluster, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": GROUP,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        # (the scripted cluster's OffsetCommit only knows classic members)
        "enable.auto.commit": False,
        **extra,
    }


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


async def join(consumer: AsyncConsumer, coordinator: Coordinator) -> ConsumerGroupHeartbeatResponse:
    """Poll once (which joins), then wait for the heartbeat the member sends at once after
    joining, so that no heartbeat is in flight when the test goes on; the join's answer."""
    await consumer.getmany(timeout=0)
    await coordinator.wait_for(lambda: len(coordinator.answers()) >= 2)
    return coordinator.answers()[0]


async def poll_until(consumer: AsyncConsumer, predicate: Callable[[], bool], what: str) -> None:
    """Poll (without waiting for records) until `predicate` holds: an answer the coordinator
    has given may still be on its way to the member. Time stands still for the test's loop,
    so the limit is in real time."""
    deadline = time.monotonic() + 10
    while True:
        await consumer.getmany(timeout=0)
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await trio.lowlevel.checkpoint()  # the member's tasks (and its I/O) run


async def test_joining_sends_epoch_0_and_the_subscription_then_uses_the_answer(
    kip848: ScriptedCluster, mock_clock: MockClock
) -> None:
    kip848.create_topic("t", 2)
    kip848.create_topic("unrelated", 1)
    coordinator = Coordinator(kip848)
    async with AsyncConsumer(consumer_config(kip848, **{"client.rack": "rack-a"})) as consumer:
        listener = Listener(coordinator)
        consumer.subscribe(["t"], listener)
        answer = await join(consumer, coordinator)

        first = coordinator.heartbeats()[0]
        assert first.group_id == GROUP
        assert {v for _, v, _ in kip848.sent("ConsumerGroupHeartbeat")} == {1}
        # KIP-1082: the member id is the member's own (Kafka 4's consumer makes a UUID at
        # startup; v1 of the request refuses an empty one).
        assert first.member_id
        assert uuid.UUID(bytes=_unbase64(first.member_id))
        assert first.member_epoch == 0
        assert first.topic_partitions == []
        assert first.subscribed_topic_names == ["t"]
        assert first.subscribed_topic_regex is None
        assert first.rebalance_timeout_ms == 300_000  # max.poll.interval.ms
        assert first.rack_id == "rack-a"
        assert first.instance_id is None
        assert answer.member_id == first.member_id
        assert answer.member_epoch == 1

        # The assignment, by topic id, becomes the consumer's by name.
        assert consumer.assignment() == tps("t", 0, 1)
        assert listener.calls == [("assign", tps("t", 0, 1))]

        # The next heartbeats (the one right after joining, and one an interval later) carry
        # the answer's member id and epoch, and only what changed: nothing.
        mock_clock.jump(INTERVAL)
        await coordinator.wait_for(lambda: len(coordinator.heartbeats()) >= 3)
        for later in coordinator.heartbeats()[1:3]:
            assert (later.member_id, later.member_epoch) == (answer.member_id, 1)
            assert later.subscribed_topic_names is None
            assert later.topic_partitions is None
            assert later.rebalance_timeout_ms == -1
            assert later.rack_id is None
        assert consumer.assignment() == tps("t", 0, 1)


async def test_a_new_assignment_is_revoked_first_then_acknowledged_then_added(
    kip848: ScriptedCluster, mock_clock: MockClock
) -> None:
    kip848.create_topic("t", 3)
    coordinator = Coordinator(kip848)
    coordinator.reassign({"t": [0, 1]})
    async with AsyncConsumer(consumer_config(kip848)) as consumer:
        listener = Listener(coordinator)
        consumer.subscribe(["t"], listener)
        answer = await join(consumer, coordinator)
        member = answer.member_id
        assert consumer.assignment() == tps("t", 0, 1)

        # t-0 moves away, t-2 comes: the next heartbeat's answer takes t-0 away first.
        coordinator.reassign({"t": [1, 2]})
        mock_clock.jump(INTERVAL)
        await coordinator.wait_for(
            lambda: any(
                a.assignment is not None and names(a.assignment.topic_partitions) == {"t": [1]}
                for a in coordinator.answers()
            )
        )
        assert consumer.assignment() == tps("t", 0, 1)  # until the application polls

        # The rebalance runs in poll.
        await poll_until(consumer, lambda: ("assign", tps("t", 2)) in listener.calls, "t-2 added")

        assert consumer.assignment() == tps("t", 1, 2)
        assert listener.calls == [
            ("assign", tps("t", 0, 1)),
            ("revoke", tps("t", 0)),
            ("assign", []),
            ("assign", tps("t", 2)),
        ]
        # The heartbeats that report what the member owns, in order: joining; the old set
        # (the revocation not run yet), at the epoch of the answer that took t-0; the set
        # without t-0 once on_revoke ran, which lets the coordinator move on to epoch 2.
        reports = [
            (hb.member_id, hb.member_epoch, names(hb.topic_partitions))
            for hb in coordinator.heartbeats()
            if hb.topic_partitions is not None
        ]
        assert reports == [
            (member, 0, {}),
            (member, 1, {"t": [0, 1]}),
            (member, 1, {"t": [1]}),
        ]
        revoked_at = coordinator.index(lambda e: e[0] == "revoke")
        acknowledged_at = coordinator.index(
            lambda e: e[0] == "heartbeat" and names(e[1].topic_partitions) == {"t": [1]}
        )
        taken_away_at = coordinator.index(
            lambda e: (
                e[0] == "answer"
                and e[1].assignment is not None
                and names(e[1].assignment.topic_partitions) == {"t": [1]}
            )
        )
        added_at = coordinator.index(lambda e: e == ("assign", tps("t", 2)))
        assert taken_away_at < revoked_at < acknowledged_at < added_at
        # Every heartbeat after joining names the member and an epoch it was given.
        for hb in coordinator.heartbeats()[1:]:
            assert hb.member_id == member
            assert hb.member_epoch in (1, 2)
        assert coordinator.owned == {TopicPartition("t", 1)}
        assert coordinator.current == set(tps("t", 1, 2))

        # The next heartbeat is at epoch 2.
        count = len(coordinator.heartbeats())
        mock_clock.jump(INTERVAL)
        await coordinator.wait_for(lambda: len(coordinator.heartbeats()) > count)
        assert coordinator.heartbeats()[-1].member_epoch == 2


@asynccontextmanager
async def joined_member(
    cluster: ScriptedCluster,
) -> AsyncIterator[tuple[AsyncConsumer, Coordinator, Listener, str]]:
    """A consumer subscribed to a 2-partition topic "t" and joined: (the consumer, the
    scripted coordinator, its listener, its member id)."""
    cluster.create_topic("t", 2)
    coordinator = Coordinator(cluster)
    async with AsyncConsumer(consumer_config(cluster)) as consumer:
        listener = Listener(coordinator)
        consumer.subscribe(["t"], listener)
        yield consumer, coordinator, listener, (await join(consumer, coordinator)).member_id


@pytest.mark.parametrize(
    "error", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID], ids=lambda e: e.name
)
async def test_a_fenced_member_loses_its_partitions_and_rejoins_at_epoch_0(
    kip848: ScriptedCluster, mock_clock: MockClock, error: ErrorCode
) -> None:
    """As Kafka's consumer (HeartbeatRequestManager: both errors transitionToFenced): the
    partitions are lost (on_lost, not on_revoke), and the member joins again at epoch 0
    with its member id, sending every field as when it first joined."""
    async with joined_member(kip848) as (consumer, coordinator, listener, member):
        coordinator.errors.append(error)
        mock_clock.jump(INTERVAL)
        await coordinator.wait_for(lambda: any(a.error_code for a in coordinator.answers()))
        fenced_at = len(coordinator.heartbeats())
        assert coordinator.heartbeats()[fenced_at - 1].member_epoch == 1

        # Poll gives the partitions up and rejoins.
        await poll_until(consumer, lambda: len(listener.calls) == 3, "lost, then assigned")

        assert listener.calls == [
            ("assign", tps("t", 0, 1)),
            ("lost", tps("t", 0, 1)),
            ("assign", tps("t", 0, 1)),
        ]
        rejoin = coordinator.heartbeats()[fenced_at]
        assert rejoin.member_id == member
        assert rejoin.member_epoch == 0
        assert rejoin.topic_partitions == []
        assert rejoin.subscribed_topic_names == ["t"]
        assert rejoin.rebalance_timeout_ms == 300_000
        lost_at = coordinator.index(lambda e: e[0] == "lost")
        assert lost_at < coordinator.index(lambda e: e[0] == "heartbeat" and e[1] is rejoin)
        assert coordinator.answers()[-1].member_epoch == 2
        assert consumer.assignment() == tps("t", 0, 1)

        mock_clock.jump(INTERVAL)
        count = fenced_at + 1
        await coordinator.wait_for(lambda: len(coordinator.heartbeats()) > count)
        after = coordinator.heartbeats()[count]
        assert (after.member_id, after.member_epoch) == (member, 2)


@pytest.mark.parametrize(
    ("instance_id", "epoch"), [(None, -1), ("instance-1", -2)], ids=["dynamic", "static"]
)
async def test_closing_leaves_with_epoch_minus_1_or_minus_2_when_static(
    kip848: ScriptedCluster, mock_clock: MockClock, instance_id: str | None, epoch: int
) -> None:
    kip848.create_topic("t", 2)
    coordinator = Coordinator(kip848)
    extra = {} if instance_id is None else {"group.instance.id": instance_id}
    async with AsyncConsumer(consumer_config(kip848, **extra)) as consumer:
        listener = Listener(coordinator)
        consumer.subscribe(["t"], listener)
        member = (await join(consumer, coordinator)).member_id
        assert coordinator.heartbeats()[0].instance_id == instance_id
        await consumer.close()

    leave = coordinator.heartbeats()[-1]
    assert leave.group_id == GROUP
    assert leave.member_id == member
    assert leave.member_epoch == epoch
    assert leave.instance_id == instance_id
    assert leave.topic_partitions is None
    assert leave.subscribed_topic_names is None
    assert listener.calls == [("assign", tps("t", 0, 1)), ("revoke", tps("t", 0, 1))]
    revoked_at = coordinator.index(lambda e: e[0] == "revoke")
    assert revoked_at < coordinator.index(lambda e: e[0] == "heartbeat" and e[1] is leave)
    assert [hb.member_epoch for hb in coordinator.heartbeats()].count(epoch) == 1


async def test_unsubscribing_revokes_then_leaves(
    kip848: ScriptedCluster, mock_clock: MockClock
) -> None:
    async with joined_member(kip848) as (consumer, coordinator, listener, member):
        await consumer.unsubscribe()

        leave = coordinator.heartbeats()[-1]
        assert (leave.member_id, leave.member_epoch) == (member, -1)
        assert coordinator.timeline[-3] == ("revoke", tps("t", 0, 1))
        assert consumer.assignment() == []
        assert listener.calls == [("assign", tps("t", 0, 1)), ("revoke", tps("t", 0, 1))]
    # closing after leaving sends nothing more
    assert coordinator.heartbeats()[-1] is leave


async def test_a_pattern_subscription_sends_the_matching_topics_and_takes_them(
    kip848: ScriptedCluster, mock_clock: MockClock
) -> None:
    """A compiled pattern is matched against the cluster's topics by the consumer, which
    sends the names it matched, as Kafka's consumer does for subscribe(java.util.regex.
    Pattern); the coordinator's assignment of a matching topic is taken."""
    kip848.create_topic("orders-eu", 2)
    kip848.create_topic("orders-us", 1)
    kip848.create_topic("payments", 1)
    coordinator = Coordinator(kip848)
    async with AsyncConsumer(consumer_config(kip848)) as consumer:
        listener = Listener(coordinator)
        consumer.subscribe(re.compile(r"orders-.*"), listener)
        assert sorted(await consumer.list_topics()) == ["orders-eu", "orders-us", "payments"]
        await join(consumer, coordinator)

        first = coordinator.heartbeats()[0]
        assert first.member_epoch == 0
        assert first.subscribed_topic_names == ["orders-eu", "orders-us"]
        assert first.subscribed_topic_regex is None
        expected = [*tps("orders-eu", 0, 1), *tps("orders-us", 0)]
        assert consumer.assignment() == expected
        assert consumer.subscription() == {"orders-eu", "orders-us"}
        assert listener.calls == [("assign", expected)]
        assert all(
            "payments" not in (hb.subscribed_topic_names or ()) for hb in coordinator.heartbeats()
        )


def _unbase64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
