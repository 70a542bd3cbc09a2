"""The group coordinator's state machine, request by request, on trio's mock clock.

`__consumer_offsets` is real gregor-storage logs in a temp directory whose appends count as
replicated at once (the replication path is proven by the cluster tests in tests/groups);
a test can hold a write's replication, or make the next appends fail with an error code.
Timeouts run on `trio.testing.MockClock` with autojump, so a 30 s rebalance timeout costs
nothing and waits are exact.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import attrs
import pytest
import trio
from trio.testing import MockClock

from gregor.broker.coordinator.group import GroupConfig, GroupCoordinator
from gregor.broker.coordinator.group.consumer_group import as_assignment
from gregor.broker.coordinator.group.consumer_heartbeats import Heartbeat
from gregor.broker.coordinator.group.member import JoinRequest
from gregor.broker.coordinator.group.offsets import FetchedOffset, OffsetAndMetadata
from gregor.broker.coordinator.group.records import LoadedState
from gregor.broker.coordinator.group.results import JoinResult, Reply, SyncResult
from gregor.broker.coordinator.group.state import GroupState
from gregor.broker.coordinator.topic_log import FailedWrite, Write
from gregor.protocol.consumer_protocol import (
    ConsumerProtocolSubscription,
    encode_subscription,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.group_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
)
from gregor.protocol.records import Record, iter_batches
from gregor.storage.config import LogConfig
from gregor.storage.loader import open_log
from gregor.storage.log import Log
from gregor.storage.results import FetchIsolation

PARTITIONS = 4
SESSION_MS = 10_000
REBALANCE_MS = 30_000
E = ErrorCode


class HeldWrite:
    def __init__(self, base_offset: int, release: trio.Event) -> None:
        self.error = E.NONE
        self.base_offset = base_offset
        self.release = release

    async def replicated(self, timeout_s: float) -> int:
        with trio.move_on_after(timeout_s):
            await self.release.wait()
            return E.NONE
        return E.REQUEST_TIMED_OUT


class LocalOffsetsTopic:
    """`__consumer_offsets` as local logs; a write is replicated as soon as it is appended
    (unless `hold` is set, then when it is)."""

    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.logs: dict[int, Log] = {
            p: open_log(directory / f"__consumer_offsets-{p}", config) for p in range(PARTITIONS)
        }
        self.leading = set(range(PARTITIONS))
        self.fail_next: list[int] = []
        self.hold: trio.Event | None = None

    def append(self, partition: int, records: bytes, *, wait: bool = True) -> Write:
        if partition not in self.leading:
            return FailedWrite(E.NOT_LEADER_OR_FOLLOWER)
        if self.fail_next:
            return FailedWrite(self.fail_next.pop(0))
        log = self.logs[partition]
        try:
            info = log.append_as_leader(records, 0)
        except KafkaError as exc:
            return FailedWrite(exc.code)
        log.maybe_increment_high_watermark(log.log_end_offset)
        return HeldWrite(info.first_offset, self.hold if self.hold is not None else _released())

    def leader_log(self, partition: int) -> Log | None:
        return self.logs[partition] if partition in self.leading else None

    def records(self, partition: int) -> list[Record]:
        log = self.logs[partition]
        data = log.read(0, 1 << 30, FetchIsolation.LOG_END).records.read()
        return [r for batch in iter_batches(data) for r in batch]

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


def _released() -> trio.Event:
    event = trio.Event()
    event.set()
    return event


def subscription(*topics: str) -> bytes:
    return encode_subscription(ConsumerProtocolSubscription(topics=list(topics)), 0)


RANGE = [("range", subscription("t1"))]


@attrs.define
class Harness:
    coordinator: GroupCoordinator
    topic: LocalOffsetsTopic
    nursery: trio.Nursery
    wall: list[int]

    @property
    def manager(self):  # type: ignore[no-untyped-def]
        return self.coordinator.manager

    def join_soon(
        self,
        group: str,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        version: int = 3,
        client_id: str = "client",
    ) -> Reply[JoinResult]:
        reply: Reply[JoinResult] = Reply()
        join = JoinRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocols=tuple(protocols),
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            client_id=client_id,
            client_host="/127.0.0.1",
            require_known_member_id=version >= 4 and instance is None,
            support_skipping_assignment=version >= 9,
        )
        self.coordinator.handle_join_group(join, reply)
        return reply

    async def join(self, group: str, member_id: str = "", **kw: object) -> JoinResult:
        return await self.join_soon(group, member_id, **kw).wait()  # type: ignore[arg-type]

    def sync_soon(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignment: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Reply[SyncResult]:
        reply: Reply[SyncResult] = Reply()
        self.coordinator.handle_sync_group(
            group,
            generation,
            member_id,
            protocol_type,
            protocol_name,
            instance,
            assignment or {},
            reply,
        )
        return reply

    async def sync(self, *args: object, **kw: object) -> SyncResult:
        return await self.sync_soon(*args, **kw).wait()  # type: ignore[arg-type]

    async def join_all(self, group: str, joiners: Sequence[dict[str, object]]) -> list[JoinResult]:
        """Send the JoinGroups together and wait for every answer."""
        replies = [self.join_soon(group, **kw) for kw in joiners]  # type: ignore[arg-type]
        return [await r.wait() for r in replies]

    async def stable_group(
        self, group: str, members: int, *, instances: Sequence[str | None] | None = None
    ) -> list[JoinResult]:
        """Form a group of `members` (generation 1), the leader assigning b"a<i>" to each."""
        instances = instances or [None] * members
        joined = await self.join_all(group, [{"instance": i} for i in instances])
        leader = next(j for j in joined if j.member_id == j.leader_id)
        assignment = {j.member_id: f"a{i}".encode() for i, j in enumerate(joined)}
        replies = [
            self.sync_soon(
                group,
                j.member_id,
                j.generation_id,
                assignment if j is leader else None,
                instance=instances[i],
            )
            for i, j in enumerate(joined)
        ]
        for i, reply in enumerate(replies):
            result = await reply.wait()
            assert result.error == E.NONE
            assert result.assignment == f"a{i}".encode()
        assert self.state(group) is GroupState.STABLE
        return joined

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance: str | None = None
    ) -> int:
        return self.coordinator.handle_heartbeat(group, member_id, instance, generation)

    async def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int | OffsetAndMetadata],
        *,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
    ) -> dict[tuple[str, int], int]:
        reply: Reply[dict[tuple[str, int], int]] = Reply()
        values = {
            tp: o
            if isinstance(o, OffsetAndMetadata)
            else OffsetAndMetadata(o, None, "", self.wall[0])
            for tp, o in offsets.items()
        }
        self.coordinator.offsets.commit(group, member_id, instance, generation, values, reply)
        return await reply.wait()

    def fetch(
        self, group: str, partitions: Sequence[tuple[str, int]] | None = None, stable: bool = False
    ) -> tuple[int, dict[tuple[str, int], FetchedOffset]]:
        return self.coordinator.offsets.fetch(group, stable, partitions)

    def group(self, group_id: str):  # type: ignore[no-untyped-def]
        return self.coordinator.manager.get_group(group_id)

    def state(self, group_id: str) -> GroupState:
        return self.group(group_id).state  # type: ignore[no-any-return]

    def group_records(self, group_id: str) -> list[Record]:
        partition = self.coordinator.partition_for(group_id)
        return self.topic.records(partition)


CONFIG = GroupConfig(
    min_session_timeout_ms=1000,
    max_session_timeout_ms=60_000,
    initial_rebalance_delay_ms=3000,
    max_size=100,
    offsets_topic_partitions=PARTITIONS,
    offsets_retention_ms=60 * 60_000,
    offsets_retention_check_interval_ms=10**9,
)
LOG_CONFIG = LogConfig(cleanup_policy=frozenset({"compact"}))


async def start(
    nursery: trio.Nursery,
    topic: LocalOffsetsTopic,
    config: GroupConfig = CONFIG,
    wall: list[int] | None = None,
    broker_id: int = 0,
) -> Harness:
    wall = wall if wall is not None else [1_700_000_000_000]
    coordinator = GroupCoordinator(broker_id, config, topic, wall_clock=lambda: wall[0])
    await nursery.start(coordinator.run)
    for partition in sorted(topic.leading):
        coordinator.on_election(partition, 0)
    while coordinator.manager.loading:
        await trio.sleep(0.001)
    return Harness(coordinator, topic, nursery, wall)


@pytest.fixture
def topic(tmp_path: Path) -> Iterator[LocalOffsetsTopic]:
    found = LocalOffsetsTopic(tmp_path, LOG_CONFIG)
    yield found
    found.close()


@pytest.fixture
async def h(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock
) -> AsyncIterator[Harness]:
    yield await start(nursery, topic)


def group_on(partition: int, prefix: str = "g") -> str:
    """A group id that maps to `partition`."""
    from gregor.broker.coordinator.partitioning import partition_for

    return next(
        f"{prefix}{i}"
        for i in range(1000)
        if partition_for(f"{prefix}{i}", PARTITIONS) == partition
    )


# -- joining ------------------------------------------------------------------------------------


async def test_member_id_required_then_initial_delay_then_sync(
    h: Harness, autojump_clock: MockClock
) -> None:
    first = await h.join("g", version=4)
    assert first.error == E.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    assert h.state("g") is GroupState.EMPTY  # a pending member does not start a rebalance
    started = trio.current_time()
    joined = await h.join("g", first.member_id, version=4)
    # An Empty group waits group.initial.rebalance.delay.ms for more members.
    assert trio.current_time() - started == pytest.approx(3.0)
    assert joined.error == E.NONE
    assert (joined.member_id, joined.generation_id) == (first.member_id, 1)
    assert joined.leader_id == first.member_id
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, RANGE[0][1])]
    assert h.state("g") is GroupState.COMPLETING_REBALANCE
    synced = await h.sync(
        "g", first.member_id, 1, {first.member_id: b"assigned"}, protocol_type="consumer"
    )
    assert synced == SyncResult(E.NONE, "consumer", "range", b"assigned")
    assert h.state("g") is GroupState.STABLE
    summary = h.coordinator.admin.describe_group("g")
    assert (summary.error, summary.state, summary.protocol) == (E.NONE, "Stable", "range")
    assert [(m.member_id, m.client_host, m.metadata, m.assignment) for m in summary.members] == [
        (first.member_id, "/127.0.0.1", RANGE[0][1], b"assigned")
    ]
    # The group's metadata went to its __consumer_offsets partition.
    [record] = h.group_records("g")
    assert decode_key(record.key) == GroupMetadataKey("g")
    _, value = decode_group_metadata_value(record.value)
    assert (value.generation, value.protocol, value.leader) == (1, "range", first.member_id)
    assert value.members[0].assignment == b"assigned"


async def test_initial_delay_grows_while_members_arrive(
    h: Harness, autojump_clock: MockClock
) -> None:
    started = trio.current_time()
    first = h.join_soon("g")
    await trio.sleep(2)
    second = h.join_soon("g")  # within the first delay: another delay follows
    results = [await first.wait(), await second.wait()]
    assert trio.current_time() - started == pytest.approx(6.0)
    assert {r.generation_id for r in results} == {1}
    assert len(next(r for r in results if r.member_id == r.leader_id).members) == 2


async def test_protocol_is_the_most_preferred_among_common_ones(
    h: Harness, autojump_clock: MockClock
) -> None:
    joined = await h.join_all(
        "g",
        [
            {"protocols": [("roundrobin", b"r1"), ("range", b"g1"), ("sticky", b"s1")]},
            {"protocols": [("range", b"g2"), ("roundrobin", b"r2")]},
            {"protocols": [("range", b"g3"), ("roundrobin", b"r3"), ("sticky", b"s3")]},
        ],
    )
    assert {j.protocol_name for j in joined} == {"range"}
    leader = next(j for j in joined if j.member_id == j.leader_id)
    assert sorted(m.metadata for m in leader.members) == [b"g1", b"g2", b"g3"]
    assert all(not j.members for j in joined if j is not leader)


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("consumer", [("other", b"")]), ("connect", RANGE), ("consumer", [])],
    ids=["no-common-protocol", "other-protocol-type", "no-protocols"],
)
async def test_inconsistent_group_protocol(
    h: Harness, autojump_clock: MockClock, protocol_type: str, protocols: list[tuple[str, bytes]]
) -> None:
    [member] = await h.stable_group("g", 1)
    result = await h.join("g", protocol_type=protocol_type, protocols=protocols)
    assert (result.error, result.member_id) == (E.INCONSISTENT_GROUP_PROTOCOL, "")
    # Also for a known member, and also for an Empty group without protocols or type.
    result = await h.join("g", member.member_id, protocol_type=protocol_type, protocols=protocols)
    assert (result.error, result.member_id) == (E.INCONSISTENT_GROUP_PROTOCOL, member.member_id)
    assert h.state("g") is GroupState.STABLE
    assert (await h.join("fresh", protocol_type="", protocols=RANGE)).error == (
        E.INCONSISTENT_GROUP_PROTOCOL
    )
    assert (await h.join("fresh", protocols=[])).error == E.INCONSISTENT_GROUP_PROTOCOL


async def test_sync_with_other_protocol_is_inconsistent(
    h: Harness, autojump_clock: MockClock
) -> None:
    [member] = await h.join_all("g", [{}])
    result = await h.sync("g", member.member_id, 1, protocol_name="roundrobin")
    assert result.error == E.INCONSISTENT_GROUP_PROTOCOL
    result = await h.sync("g", member.member_id, 1, protocol_type="connect")
    assert result.error == E.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("session_ms", [999, 60_001])
async def test_invalid_session_timeout(
    h: Harness, autojump_clock: MockClock, session_ms: int
) -> None:
    result = await h.join("g", session_ms=session_ms)
    assert result.error == E.INVALID_SESSION_TIMEOUT
    assert h.group("g") is None


async def test_errors_for_unknown_groups_and_members(h: Harness, autojump_clock: MockClock) -> None:
    assert (await h.join("nope", "made-up-id")).error == E.UNKNOWN_MEMBER_ID
    assert h.group("nope") is None
    assert (await h.sync("nope", "made-up-id", 1)).error == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("nope", "made-up-id", 1) == E.UNKNOWN_MEMBER_ID
    assert (await h.join("", version=4)).error == E.INVALID_GROUP_ID
    assert h.heartbeat("", "m", 1) == E.INVALID_GROUP_ID
    [member] = await h.stable_group("g", 1)
    assert (await h.join("g", "made-up-id")).error == E.UNKNOWN_MEMBER_ID
    assert (await h.sync("g", "made-up-id", 1)).error == E.UNKNOWN_MEMBER_ID
    assert (await h.sync("g", member.member_id, 7)).error == E.ILLEGAL_GENERATION
    assert h.heartbeat("g", "made-up-id", 1) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", member.member_id, 0) == E.ILLEGAL_GENERATION
    assert h.heartbeat("g", member.member_id, 1) == E.NONE


async def test_not_coordinator_for_groups_of_partitions_led_elsewhere(
    h: Harness, autojump_clock: MockClock
) -> None:
    group = group_on(2)
    h.coordinator.on_resignation(2, 1)
    assert (await h.join(group)).error == E.NOT_COORDINATOR
    assert h.heartbeat(group, "m", 1) == E.NOT_COORDINATOR
    assert h.fetch(group) == (E.NOT_COORDINATOR, {})
    assert h.coordinator.admin.describe_group(group).error == E.NOT_COORDINATOR
    assert h.coordinator.admin.delete_groups([group]) == {group: E.NOT_COORDINATOR}
    # Other partitions' groups are served as before.
    assert (await h.join(group_on(1))).error == E.NONE


async def test_group_max_size(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    h = await start(nursery, topic, attrs.evolve(CONFIG, max_size=2))
    await h.stable_group("g", 2)
    result = await h.join("g")
    assert (result.error, result.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert len(h.group("g")) == 2


# -- heartbeats, timeouts, leaving ---------------------------------------------------------


async def test_heartbeat_during_rebalance_and_rejoin(h: Harness, autojump_clock: MockClock) -> None:
    a, b = await h.stable_group("g", 2)
    leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
    # The leader rejoining starts a rebalance; the follower hears of it by heartbeat.
    parked = h.join_soon("g", leader.member_id)
    assert h.state("g") is GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", follower.member_id, 1) == E.REBALANCE_IN_PROGRESS
    assert (await h.sync("g", follower.member_id, 1)).error == E.REBALANCE_IN_PROGRESS
    rejoined = await h.join("g", follower.member_id)
    assert rejoined.generation_id == 2
    assert (await parked.wait()).generation_id == 2
    assert h.heartbeat("g", follower.member_id, 1) == E.ILLEGAL_GENERATION


async def test_session_timeout_removes_a_silent_member(
    h: Harness, autojump_clock: MockClock
) -> None:
    a, b = await h.stable_group("g", 2)
    for _ in range(4):  # a heartbeats every 3 s; b is silent
        await trio.sleep(3)
        code = h.heartbeat("g", a.member_id, 1)
        if code != E.NONE:
            break
    # b's session (10 s) ran out: a rebalance without it.
    assert code == E.REBALANCE_IN_PROGRESS
    assert not h.group("g").has(b.member_id)
    rejoined = await h.join("g", a.member_id)
    assert (rejoined.generation_id, [m.member_id for m in rejoined.members]) == (
        2,
        [a.member_id],
    )


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(
    h: Harness, autojump_clock: MockClock
) -> None:
    a, b = await h.stable_group("g", 2)
    leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
    started = trio.current_time()
    parked = h.join_soon("g", leader.member_id)

    async def keep_heartbeating() -> None:
        while h.heartbeat("g", follower.member_id, 1) in (E.NONE, E.REBALANCE_IN_PROGRESS):
            await trio.sleep(2)

    h.nursery.start_soon(keep_heartbeating)
    result = await parked.wait()
    # Heartbeats do not save a member that does not rejoin within the rebalance timeout.
    assert trio.current_time() - started == pytest.approx(REBALANCE_MS / 1000)
    assert (result.generation_id, [m.member_id for m in result.members]) == (
        2,
        [leader.member_id],
    )
    assert h.heartbeat("g", follower.member_id, 2) == E.UNKNOWN_MEMBER_ID


async def test_pending_member_expires_after_its_session_timeout(
    h: Harness, autojump_clock: MockClock
) -> None:
    [member] = await h.stable_group("g", 1)
    pending = await h.join("g", version=4, session_ms=6000)
    assert pending.error == E.MEMBER_ID_REQUIRED
    started = trio.current_time()
    # The rebalance waits for the pending member until its session runs out, not 30 s.
    result = await h.join("g", member.member_id, version=4)
    assert trio.current_time() - started == pytest.approx(6.0)
    assert result.generation_id == 2
    assert (await h.join("g", pending.member_id, version=4)).error == E.UNKNOWN_MEMBER_ID


async def test_members_that_do_not_sync_are_removed(h: Harness, autojump_clock: MockClock) -> None:
    joined = await h.join_all("g", [{}, {}])
    leader = next(j for j in joined if j.member_id == j.leader_id)
    other = next(j for j in joined if j is not leader)
    assignment = {j.member_id: b"x" for j in joined}
    assert (await h.sync("g", leader.member_id, 1, assignment)).error == E.NONE
    # `other` never syncs: after the rebalance timeout it is gone and a rebalance starts.
    # (though it heartbeats).
    for _ in range(REBALANCE_MS // 2000 - 1):
        await trio.sleep(2)
        assert h.heartbeat("g", leader.member_id, 1) == E.NONE
        assert h.heartbeat("g", other.member_id, 1) == E.NONE
    await trio.sleep(2.1)
    assert not h.group("g").has(other.member_id)
    assert h.state("g") is GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", leader.member_id, 1) == E.REBALANCE_IN_PROGRESS


async def test_leave_group(h: Harness, autojump_clock: MockClock) -> None:
    a, b = await h.stable_group("g", 2)
    result = h.coordinator.handle_leave_group(
        "g", [(a.member_id, None, "bye"), ("unknown", None, None)]
    )
    assert result.error == E.NONE
    assert [(m.member_id, m.error) for m in result.members] == [
        (a.member_id, E.NONE),
        ("unknown", E.UNKNOWN_MEMBER_ID),
    ]
    assert h.state("g") is GroupState.PREPARING_REBALANCE
    assert (await h.join("g", b.member_id)).generation_id == 2
    left = h.coordinator.handle_leave_group("g", [(b.member_id, None, None)])
    assert left.members[0].error == E.NONE
    # Nobody is left to wait for: the rebalance ends at once with an Empty group.
    assert h.state("g") is GroupState.EMPTY
    assert h.group("g").generation_id == 3
    assert h.coordinator.handle_leave_group("nope", [("m", None, None)]).members[0].error == (
        E.UNKNOWN_MEMBER_ID
    )


# -- static membership ---------------------------------------------------------------------------


async def test_static_member_restart_keeps_the_generation(
    h: Harness, autojump_clock: MockClock
) -> None:
    a, b = await h.stable_group("g", 2, instances=["ia", "ib"])
    follower, follower_instance = (b, "ib") if a.member_id == a.leader_id else (a, "ia")
    leader = a if follower is b else b
    restarted = await h.join("g", instance=follower_instance, version=5)
    # No rebalance: same generation, a new member id, the old leader named.
    assert restarted.error == E.NONE
    assert restarted.generation_id == 1
    assert restarted.member_id != follower.member_id
    assert restarted.member_id.startswith(follower_instance + "-")
    assert restarted.leader_id == leader.member_id
    assert h.state("g") is GroupState.STABLE
    synced = await h.sync("g", restarted.member_id, 1, instance=follower_instance)
    assert synced.error == E.NONE
    assert synced.assignment in (b"a0", b"a1")
    # The old incarnation is fenced.
    assert h.heartbeat("g", follower.member_id, 1, follower_instance) == E.FENCED_INSTANCE_ID
    assert h.heartbeat("g", restarted.member_id, 1, follower_instance) == E.NONE
    assert h.heartbeat("g", leader.member_id, 1) == E.NONE
    # The new member id is written, so a new coordinator knows it.
    _, value = decode_group_metadata_value(h.group_records("g")[-1].value)
    assert {m.member_id for m in value.members} == {leader.member_id, restarted.member_id}
    assert value.generation == 1


async def test_static_leader_restart_with_skip_assignment(
    h: Harness, autojump_clock: MockClock
) -> None:
    a, _b = await h.stable_group("g", 2, instances=["ia", "ib"])
    leader_instance = "ia" if a.member_id == a.leader_id else "ib"
    restarted = await h.join("g", instance=leader_instance, version=9)
    assert (restarted.generation_id, restarted.skip_assignment) == (1, True)
    assert restarted.leader_id == restarted.member_id
    assert len(restarted.members) == 2


async def test_static_member_restart_while_completing_rebalance_rebalances(
    h: Harness, autojump_clock: MockClock
) -> None:
    joined = await h.join_all("g", [{"instance": "ia"}, {"instance": "ib"}])
    assert h.state("g") is GroupState.COMPLETING_REBALANCE
    restarted = h.join_soon("g", instance="ib")
    assert h.state("g") is GroupState.PREPARING_REBALANCE
    old = next(j for j in joined if j.member_id.startswith("ib-"))
    assert h.heartbeat("g", old.member_id, 1, "ib") == E.FENCED_INSTANCE_ID
    other = next(j for j in joined if j is not old)
    await h.join("g", other.member_id, instance="ia")
    assert (await restarted.wait()).generation_id == 2


async def test_duplicate_static_member_is_fenced(h: Harness, autojump_clock: MockClock) -> None:
    [member] = await h.stable_group("g", 1, instances=["ia"])
    parked = h.sync_soon("g", member.member_id, 1, instance="ia")
    assert (await parked.wait()).error == E.NONE
    second = await h.join("g", instance="ia")
    # The first process, still using its id, is fenced everywhere.
    assert h.heartbeat("g", member.member_id, 1, "ia") == E.FENCED_INSTANCE_ID
    assert (await h.join("g", member.member_id, instance="ia")).error == E.FENCED_INSTANCE_ID
    assert (await h.sync("g", member.member_id, 1, instance="ia")).error == E.FENCED_INSTANCE_ID
    codes = await h.commit(
        "g", {("t", 0): 5}, member_id=member.member_id, generation=1, instance="ia"
    )
    assert codes == {("t", 0): E.FENCED_INSTANCE_ID}
    assert h.heartbeat("g", second.member_id, 1, "ia") == E.NONE
    # An unknown instance id is an unknown member.
    assert h.heartbeat("g", second.member_id, 1, "other") == E.UNKNOWN_MEMBER_ID


async def test_static_member_removed_by_instance_id(h: Harness, autojump_clock: MockClock) -> None:
    await h.stable_group("g", 2, instances=["ia", "ib"])
    result = h.coordinator.handle_leave_group("g", [("", "ib", None), ("", "nope", None)])
    assert [m.error for m in result.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert h.group("g").current_static_member_id("ib") is None
    assert h.state("g") is GroupState.PREPARING_REBALANCE


# -- offsets -----------------------------------------------------------------------------------


async def test_commit_without_group_management(h: Harness, autojump_clock: MockClock) -> None:
    offsets = {
        ("t", 0): OffsetAndMetadata(10, 3, "meta", h.wall[0]),
        ("t", 1): OffsetAndMetadata(20, None, "", h.wall[0]),
    }
    assert await h.commit("simple", offsets) == {("t", 0): E.NONE, ("t", 1): E.NONE}
    assert h.state("simple") is GroupState.EMPTY
    error, fetched = h.fetch("simple", [("t", 0), ("t", 1), ("t", 2)])
    assert error == E.NONE
    assert fetched == {
        ("t", 0): FetchedOffset(10, 3, "meta"),
        ("t", 1): FetchedOffset(20, None, ""),
        ("t", 2): FetchedOffset(-1, None, ""),
    }
    assert h.fetch("simple") == (E.NONE, {tp: fetched[tp] for tp in offsets})
    assert h.fetch("nobody", [("t", 0)]) == (E.NONE, {("t", 0): FetchedOffset()})
    keys = [decode_key(r.key) for r in h.group_records("simple")]
    assert keys == [OffsetCommitKey("simple", "t", 0), OffsetCommitKey("simple", "t", 1)]
    # A commit of a generation for a group that does not exist: a stale member.
    codes = await h.commit("gone", {("t", 0): 1}, member_id="m", generation=3)
    assert codes == {("t", 0): E.ILLEGAL_GENERATION}


async def test_commit_checks_generation_and_member(h: Harness, autojump_clock: MockClock) -> None:
    a, b = await h.stable_group("g", 2)
    tp = ("t", 0)
    assert await h.commit("g", {tp: 5}, member_id=a.member_id, generation=1) == {tp: E.NONE}
    assert await h.commit("g", {tp: 6}, member_id=a.member_id, generation=0) == {
        tp: E.ILLEGAL_GENERATION
    }
    assert await h.commit("g", {tp: 6}, member_id="stranger", generation=1) == {
        tp: E.UNKNOWN_MEMBER_ID
    }
    # Outside group management, but the group has members: refused.
    assert await h.commit("g", {tp: 6}) == {tp: E.UNKNOWN_MEMBER_ID}
    assert h.fetch("g", [tp])[1][tp].offset == 5
    # During a rebalance: allowed while preparing, refused while completing.
    leader = a if a.member_id == a.leader_id else b
    follower = b if leader is a else a
    parked = h.join_soon("g", leader.member_id)
    assert await h.commit("g", {tp: 7}, member_id=follower.member_id, generation=1) == {tp: E.NONE}
    await h.join("g", follower.member_id)
    await parked.wait()
    assert h.state("g") is GroupState.COMPLETING_REBALANCE
    assert await h.commit("g", {tp: 8}, member_id=follower.member_id, generation=2) == {
        tp: E.REBALANCE_IN_PROGRESS
    }
    assert h.fetch("g", [tp])[1][tp].offset == 7


async def test_commit_metadata_too_large(h: Harness, autojump_clock: MockClock) -> None:
    offsets = {
        ("t", 0): OffsetAndMetadata(1, None, "x" * 4096, 0),
        ("t", 1): OffsetAndMetadata(2, None, "é" * 4097, 0),  # counted in UTF-16 units
    }
    assert await h.commit("g", offsets) == {
        ("t", 0): E.NONE,
        ("t", 1): E.OFFSET_METADATA_TOO_LARGE,
    }
    assert await h.commit("g", {("t", 1): offsets[("t", 1)]}) == {
        ("t", 1): E.OFFSET_METADATA_TOO_LARGE
    }
    assert h.fetch("g") == (E.NONE, {("t", 0): FetchedOffset(1, None, "x" * 4096)})


async def test_fetch_never_returns_a_commit_being_written(
    h: Harness, autojump_clock: MockClock
) -> None:
    tp = ("t", 0)
    assert await h.commit("g", {tp: 1}) == {tp: E.NONE}
    h.topic.hold = trio.Event()
    reply: Reply[dict[tuple[str, int], int]] = Reply()
    h.coordinator.offsets.commit("g", "", None, -1, {tp: OffsetAndMetadata(2, None, "", 0)}, reply)
    await trio.sleep(1)
    assert not reply.done
    assert h.fetch("g", [tp]) == (E.NONE, {tp: FetchedOffset(1, None, "")})
    assert h.fetch("g", [tp], stable=True) == (
        E.NONE,
        {tp: FetchedOffset(error=E.UNSTABLE_OFFSET_COMMIT)},
    )
    h.topic.hold.set()
    assert await reply.wait() == {tp: E.NONE}
    assert h.fetch("g", [tp], stable=True) == (E.NONE, {tp: FetchedOffset(2, None, "")})


async def test_a_commit_not_replicated_in_time(h: Harness, autojump_clock: MockClock) -> None:
    tp = ("t", 0)
    h.topic.hold = trio.Event()  # never released
    started = trio.current_time()
    assert await h.commit("g", {tp: 1}) == {tp: E.REQUEST_TIMED_OUT}
    assert trio.current_time() - started == pytest.approx(CONFIG.offset_commit_timeout_ms / 1000)
    assert h.fetch("g", [tp], stable=True) == (E.NONE, {tp: FetchedOffset()})


@pytest.mark.parametrize(
    ("append_error", "commit_error"),
    [
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    ],
)
async def test_failed_commit_writes_map_to_kafkas_errors(
    h: Harness, autojump_clock: MockClock, append_error: int, commit_error: int
) -> None:
    h.topic.fail_next = [append_error]
    assert await h.commit("g", {("t", 0): 1}) == {("t", 0): commit_error}
    assert h.fetch("g", [("t", 0)]) == (E.NONE, {("t", 0): FetchedOffset()})
    assert await h.commit("g", {("t", 0): 1}) == {("t", 0): E.NONE}


@pytest.mark.parametrize(
    ("append_error", "sync_error"),
    [
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
        (E.REQUEST_TIMED_OUT, E.REBALANCE_IN_PROGRESS),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    ],
)
async def test_failed_group_writes_fail_the_sync(
    h: Harness, autojump_clock: MockClock, append_error: int, sync_error: int
) -> None:
    joined = await h.join_all("g", [{}, {}])
    leader = next(j for j in joined if j.member_id == j.leader_id)
    other = next(j for j in joined if j is not leader)
    parked = h.sync_soon("g", other.member_id, 1)
    h.topic.fail_next = [append_error]
    result = await h.sync("g", leader.member_id, 1, {j.member_id: b"x" for j in joined})
    assert result == SyncResult(sync_error)
    assert await parked.wait() == SyncResult(sync_error)
    assert h.state("g") is GroupState.PREPARING_REBALANCE


async def test_a_member_abandoned_after_a_failed_sync_holds_the_group_until_its_session_ends(
    h: Harness, autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """KafkaJS's way (issue 10): its SyncGroup fails (a group write below min ISR), so it
    starts again under a new member id without leaving. As in Kafka, the rebalance waits for
    the old member until its session ends; the coordinator's log names the member it waits
    for, so the stall of the new consumer is not silent."""
    [first] = await h.join_all("g", [{"session_ms": 6000}])
    h.topic.fail_next = [E.NOT_ENOUGH_REPLICAS]
    with caplog.at_level(logging.INFO, logger="gregor.broker.coordinator.group"):
        failed = await h.sync("g", first.member_id, 1, {first.member_id: b"x"})
        assert failed == SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        started = trio.current_time()
        restarted = await h.join("g", session_ms=6000)
        assert trio.current_time() - started == pytest.approx(6.0)
    assert (restarted.generation_id, [m.member_id for m in restarted.members]) == (
        2,
        [restarted.member_id],
    )
    waits = [r.getMessage() for r in caplog.records if "to rejoin" in r.getMessage()]
    assert waits == [
        f"group g: waiting up to {REBALANCE_MS} ms for 1 member(s) to rejoin: {first.member_id}"
        " (client client at /127.0.0.1, session timeout 6000 ms)"
    ]


async def test_oversized_member_metadata(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock, tmp_path: Path
) -> None:
    small = LocalOffsetsTopic(tmp_path / "small", attrs.evolve(LOG_CONFIG, max_message_bytes=4096))
    try:
        h = await start(nursery, small)
        [joined] = await h.join_all("g", [{"protocols": [("range", b"m" * 5000)]}])
        result = await h.sync("g", joined.member_id, 1, {joined.member_id: b"x"})
        assert result.error == E.UNKNOWN_SERVER_ERROR
        # The coordinator goes on serving other groups.
        assert (await h.join("other")).error == E.NONE
        assert await h.commit("other2", {("t", 0): 1}) == {("t", 0): E.NONE}
    finally:
        small.close()


# -- deleting and listing ----------------------------------------------------------------------


async def test_delete_offsets(h: Harness, autojump_clock: MockClock) -> None:
    assert h.coordinator.offsets.delete("nope", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})
    await h.commit("simple", {("t", 0): 1, ("t", 1): 2})
    error, results = h.coordinator.offsets.delete("simple", [("t", 0)])
    assert (error, results) == (E.NONE, {("t", 0): E.NONE})
    assert h.fetch("simple")[1] == {("t", 1): FetchedOffset(2, None, "")}
    assert h.group_records("simple")[-1].value is None  # the tombstone
    # A live consumer group keeps the offsets of topics it subscribes to.
    [member] = await h.stable_group("g", 1)
    await h.commit("g", {("t1", 0): 1, ("other", 0): 2}, member_id=member.member_id, generation=1)
    error, results = h.coordinator.offsets.delete("g", [("t1", 0), ("other", 0)])
    assert (error, results) == (
        E.NONE,
        {("t1", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): E.NONE},
    )
    # A live group of another protocol type: not at all.
    await h.join_all("connect", [{"protocol_type": "connect"}])
    assert h.coordinator.offsets.delete("connect", [("t", 0)]) == (E.NON_EMPTY_GROUP, {})
    assert h.coordinator.offsets.delete("", [("t", 0)]) == (E.INVALID_GROUP_ID, {})


async def test_delete_groups(h: Harness, autojump_clock: MockClock) -> None:
    await h.stable_group("live", 1)
    await h.commit("simple", {("t", 0): 1})
    [member] = await h.stable_group("left", 1)
    h.coordinator.handle_leave_group("left", [(member.member_id, None, None)])
    assert h.state("left") is GroupState.EMPTY
    results = h.coordinator.admin.delete_groups(["live", "simple", "left", "nope", "simple"])
    assert results == {
        "live": E.NON_EMPTY_GROUP,
        "simple": E.NONE,
        "left": E.NONE,
        "nope": E.GROUP_ID_NOT_FOUND,
    }
    assert h.group("simple") is None and h.group("left") is None
    assert h.fetch("simple", [("t", 0)])[1] == {("t", 0): FetchedOffset()}
    # Tombstones: the offset of "simple"; the metadata of "left", which had generations.
    assert [(decode_key(r.key), r.value) for r in h.group_records("simple")][-1] == (
        OffsetCommitKey("simple", "t", 0),
        None,
    )
    assert (decode_key(h.group_records("left")[-1].key), h.group_records("left")[-1].value) == (
        GroupMetadataKey("left"),
        None,
    )
    assert h.coordinator.admin.delete_groups(["left"]) == {"left": E.GROUP_ID_NOT_FOUND}


async def test_list_and_describe_groups(h: Harness, autojump_clock: MockClock) -> None:
    await h.stable_group("stable", 1)
    await h.commit("empty", {("t", 0): 1})
    h.join_soon("preparing")
    error, groups = h.coordinator.admin.list_groups([], [])
    assert error == E.NONE
    assert sorted((g.group_id, g.protocol_type, g.state, g.group_type) for g in groups) == [
        ("empty", "", "Empty", "classic"),
        ("preparing", "consumer", "PreparingRebalance", "classic"),
        ("stable", "consumer", "Stable", "classic"),
    ]
    _, groups = h.coordinator.admin.list_groups(["STABLE", "empty"], [])
    assert sorted(g.group_id for g in groups) == ["empty", "stable"]
    assert h.coordinator.admin.list_groups([], ["consumer"]) == (E.NONE, [])
    assert len(h.coordinator.admin.list_groups([], ["Classic"])[1]) == 3
    described = h.coordinator.admin.describe_group("preparing")
    assert (described.state, described.protocol, described.protocol_type) == (
        "PreparingRebalance",
        "",
        "consumer",
    )
    assert [(m.metadata, m.assignment) for m in described.members] == [(b"", b"")]
    unknown = h.coordinator.admin.describe_group("nope")
    assert (unknown.error, unknown.state, unknown.members) == (E.NONE, "Dead", ())


# -- loading, unloading, expiry ----------------------------------------------------------------


async def test_a_new_coordinator_loads_groups_and_offsets(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    first = await start(nursery, topic)
    a, b = await first.stable_group("g", 2, instances=["ia", None])
    await first.commit("g", {("t1", 0): 11, ("t1", 1): 12}, member_id=a.member_id, generation=1)
    await first.commit("simple", {("t", 0): 5})
    await first.commit("simple", {("t", 0): 6})
    await first.commit("deleted", {("t", 0): 1})
    first.coordinator.admin.delete_groups(["deleted"])
    for partition in range(PARTITIONS):
        first.coordinator.on_resignation(partition, 1)
    assert (await first.join("g", a.member_id, instance="ia")).error == E.NOT_COORDINATOR

    second = GroupCoordinator(1, CONFIG, topic, wall_clock=lambda: first.wall[0])
    await nursery.start(second.run)
    partition = second.partition_for("g")
    second.on_election(partition, 2)
    # While it loads: retry later.
    assert second.offsets.fetch("g", False, None) == (E.COORDINATOR_LOAD_IN_PROGRESS, {})
    assert second.handle_heartbeat("g", a.member_id, "ia", 1) == E.NONE
    reply: Reply[SyncResult] = Reply()
    second.handle_sync_group("g", 1, a.member_id, None, None, "ia", {}, reply)
    assert reply.result() == SyncResult(E.REBALANCE_IN_PROGRESS)
    while second.manager.loading:
        await trio.sleep(0.001)
    group = second.manager.get_group("g")
    assert group is not None
    assert (group.state, group.generation_id, group.protocol_name) == (
        GroupState.STABLE,
        1,
        "range",
    )
    assert set(group.members) == {a.member_id, b.member_id}
    assert group.current_static_member_id("ia") == a.member_id
    assert group.leader_id == a.leader_id
    assert group.subscribed_topics == {"t1"}
    assert second.offsets.fetch("g", False, None) == (
        E.NONE,
        {("t1", 0): FetchedOffset(11, None, ""), ("t1", 1): FetchedOffset(12, None, "")},
    )
    # The members carry on in their generation.
    assert second.handle_heartbeat("g", b.member_id, None, 1) == E.NONE
    for name in ("simple", "deleted"):
        second.on_election(second.partition_for(name), 2)
    while second.manager.loading:
        await trio.sleep(0.001)
    assert second.offsets.fetch("simple", False, None)[1] == {("t", 0): FetchedOffset(6, None, "")}
    assert second.manager.get_group("deleted") is None


async def test_unloading_answers_parked_requests(h: Harness, autojump_clock: MockClock) -> None:
    [member] = await h.stable_group("g", 1)
    parked = h.join_soon("g", member.member_id)  # a one-member group completes at once...
    assert (await parked.wait()).generation_id == 2
    other = h.join_soon("g")  # ...a second member parks the rebalance
    assert h.state("g") is GroupState.PREPARING_REBALANCE
    partition = h.coordinator.partition_for("g")
    h.coordinator.on_resignation(partition, 0)  # an older epoch than seen: ignored
    h.coordinator.on_resignation(partition, 1)
    assert (await other.wait()).error == E.NOT_COORDINATOR
    assert h.group("g") is None
    assert h.heartbeat("g", member.member_id, 2) == E.NOT_COORDINATOR
    h.coordinator.on_election(partition, 0)  # stale again
    assert not h.manager.loading
    h.coordinator.on_election(partition, 2)
    assert h.manager.is_group_loading("g")


async def test_expiry_of_an_empty_groups_offsets(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    wall = [1_700_000_000_000]
    h = await start(nursery, topic, wall=wall)
    retention = CONFIG.offsets_retention_ms
    await h.commit("simple", {("t", 0): 1})
    [member] = await h.stable_group("consumers", 1)
    await h.commit(
        "consumers", {("t1", 0): 3, ("gone", 0): 4}, member_id=member.member_id, generation=1
    )
    wall[0] += retention
    # A live consumer group loses only the offsets of topics it no longer subscribes to.
    assert h.heartbeat("consumers", member.member_id, 1) == E.NONE
    assert h.manager.expire_offsets() == 2
    assert h.group("simple") is None
    assert h.fetch("consumers")[1] == {("t1", 0): FetchedOffset(3, None, "")}
    # Once empty, its offsets expire retention after it became empty, and then the group.
    h.coordinator.handle_leave_group("consumers", [(member.member_id, None, None)])
    assert h.state("consumers") is GroupState.EMPTY
    wall[0] += retention - 1
    assert h.manager.expire_offsets() == 0
    wall[0] += 1
    assert h.manager.expire_offsets() == 1
    assert h.group("consumers") is None
    tail = [(decode_key(r.key), r.value) for r in h.group_records("consumers")[-2:]]
    assert tail == [
        (OffsetCommitKey("consumers", "t1", 0), None),
        (GroupMetadataKey("consumers"), None),
    ]


async def test_expiry_runs_periodically(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    wall = [1_700_000_000_000]
    config = attrs.evolve(
        CONFIG, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1000
    )
    h = await start(nursery, topic, config, wall)
    await h.commit("simple", {("t", 0): 1})
    wall[0] += 60_000
    await trio.sleep(1.5)
    assert h.group("simple") is None


def test_loaded_state_applies_transactional_offsets_at_their_commit() -> None:
    from gregor.broker.coordinator.group.records import offset_commit_value
    from gregor.protocol.group_records import offset_commit_key
    from gregor.protocol.records import BatchBuilder, ControlType, RecordBatch, build_control_batch

    def txn_batch(producer_id: int, offset: int, base: int) -> RecordBatch:
        builder = BatchBuilder(
            base_offset=base, producer_id=producer_id, producer_epoch=0, is_transactional=True
        )
        builder.append(
            offset_commit_value(OffsetAndMetadata(offset)), key=offset_commit_key("g", "t", 0)
        )
        return RecordBatch.from_bytes(builder.build())

    def marker(kind: ControlType, producer_id: int, base: int) -> RecordBatch:
        return RecordBatch.from_bytes(
            build_control_batch(
                kind,
                producer_id=producer_id,
                producer_epoch=0,
                coordinator_epoch=0,
                base_offset=base,
            )
        )

    state = LoadedState()
    state.replay(txn_batch(1, 10, 0), "p")
    state.replay(txn_batch(2, 20, 1), "p")
    state.replay(marker(ControlType.ABORT, 2, 2), "p")
    assert state.offsets == {}
    state.replay(marker(ControlType.COMMIT, 1, 3), "p")
    assert {k: v.value.offset for k, v in state.offsets.items()} == {("g", ("t", 0)): 10}
    assert state.skipped == 0


# -- KIP-848 consumer groups in the log ---------------------------------------------------------

T1 = uuid.UUID(int=7)
TOPICS = {"t1": (T1, 4)}


def beat(
    group: str, member_id: str, epoch: int, owned: Sequence[int] | None = None, **kw: object
) -> Heartbeat:
    return Heartbeat(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        owned=None if owned is None else as_assignment([(T1, owned)]) if owned else {},
        **kw,  # type: ignore[arg-type]
    )


def join(group: str, member_id: str, **kw: object) -> Heartbeat:
    return beat(
        group, member_id, 0, (), rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=("t1",),
        **kw,
    )  # fmt: skip


def consumer_keys(h: Harness, group: str, since: int = 0) -> list[tuple[int, str, bool]]:
    """(key version, member id, is tombstone) of the group's KIP-848 records from `since`."""
    out = []
    for record in h.group_records(group)[since:]:
        key = decode_key(record.key or b"")
        if not isinstance(key, (OffsetCommitKey, GroupMetadataKey, UnknownKey)):
            out.append((key.valid_versions.lo, getattr(key, "member_id", ""), record.value is None))
    return out


async def reloaded(h: Harness, nursery: trio.Nursery, epoch: int) -> GroupCoordinator:
    """A second coordinator that takes every partition over from `h`'s (a failover)."""
    for partition in range(PARTITIONS):
        h.coordinator.on_resignation(partition, epoch)
    second = GroupCoordinator(epoch, CONFIG, h.topic, wall_clock=lambda: h.wall[0])
    await nursery.start(second.run)
    for partition in range(PARTITIONS):
        second.on_election(partition, epoch)
    while second.manager.loading:
        await trio.sleep(0.001)
    return second


async def test_the_first_configured_assignor_is_the_default(
    topic: LocalOffsetsTopic, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    """`group.consumer.assignors`: members that name none get the first; one that names
    another configured assignor gets it, and one not configured is refused. A coordinator
    configured without it (a changed config, a restart) loads that group with its own."""
    h = await start(nursery, topic, attrs.evolve(CONFIG, consumer_assignors=("range", "uniform")))
    rules = h.coordinator.consumer

    def assignor(coordinator: GroupCoordinator, group_id: str) -> str:
        group = coordinator.manager.get_group(group_id)
        assert group is not None and group.consumer is not None
        return group.consumer.assignor_name

    assert (await rules.heartbeat(join("cg", "a"), TOPICS)).error == E.NONE
    assert assignor(h.coordinator, "cg") == "range"
    asked = await rules.heartbeat(join("other", "b", server_assignor="uniform"), TOPICS)
    assert asked.error == E.NONE
    assert assignor(h.coordinator, "other") == "uniform"
    only = await start(nursery, topic, attrs.evolve(CONFIG, consumer_assignors=("range",)))
    assert assignor(only.coordinator, "other") == "range"
    refused = await only.coordinator.consumer.heartbeat(
        join("third", "c", server_assignor="uniform"), TOPICS
    )
    assert refused.error == E.UNSUPPORTED_ASSIGNOR


async def test_a_consumer_group_survives_a_new_coordinator(
    h: Harness, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    rules = h.coordinator.consumer
    a = await rules.heartbeat(join("cg", "a", server_assignor="range"), TOPICS)
    assert (a.error, a.member_epoch, a.assignment) == (E.NONE, 1, as_assignment([(T1, range(4))]))
    # Kafka's records, in Kafka's order: subscription, topics, epoch, target, current.
    assert consumer_keys(h, "cg") == [(5, "a", False), (4, "", False), (3, "", False),
                                      (7, "a", False), (6, "", False), (8, "a", False)]  # fmt: skip
    written = len(h.group_records("cg"))
    assert (await rules.heartbeat(beat("cg", "a", 1), TOPICS)).error == E.NONE
    assert len(h.group_records("cg")) == written  # a heartbeat that changes nothing writes nothing
    b = await rules.heartbeat(join("cg", "b"), TOPICS)
    assert (b.member_epoch, b.assignment) == (2, {})  # a's partitions are not free yet
    # a must revoke 2 and 3: it stays at epoch 1, revoking.
    a = await rules.heartbeat(beat("cg", "a", 1, [0, 1, 2, 3]), TOPICS)
    assert (a.member_epoch, a.assignment) == (1, as_assignment([(T1, [0, 1])]))
    before = h.group("cg").consumer

    second = await reloaded(h, nursery, 1)
    loaded = second.manager.get_group("cg").consumer
    assert (loaded.group_epoch, loaded.target_epoch, loaded.state) == (2, 2, "Reconciling")
    assert loaded.members == before.members
    assert loaded.target == before.target
    assert loaded.subscribed_metadata == TOPICS
    assert loaded.assignor_name == "range"
    assert [loaded.owner_of((T1, p)) for p in range(4)] == ["a", "a", "a", "a"]
    # The members carry on at their epochs: a revokes, then b gets what a gave up.
    rules = second.consumer
    a = await rules.heartbeat(beat("cg", "a", 1, [0, 1]), TOPICS)
    # A new epoch with the same partitions: sent without the assignment, as Kafka does.
    assert (a.error, a.member_epoch, a.assignment) == (E.NONE, 2, None)
    b = await rules.heartbeat(beat("cg", "b", 2, []), TOPICS)
    assert (b.error, b.member_epoch, b.assignment) == (E.NONE, 2, as_assignment([(T1, [2, 3])]))
    # A member whose session ends on the new coordinator leaves tombstones.
    since = len(h.group_records("cg"))
    autojump_clock.jump(CONFIG.consumer_session_timeout_ms / 1000 - 1)
    assert (await rules.heartbeat(beat("cg", "b", 2), TOPICS)).error == E.NONE
    await trio.sleep(2)
    assert set(second.manager.get_group("cg").consumer.members) == {"b"}
    assert consumer_keys(h, "cg", since)[:3] == [(8, "a", True), (7, "a", True), (5, "a", True)]

    third = await reloaded(Harness(second, h.topic, nursery, h.wall), nursery, 2)
    assert set(third.manager.get_group("cg").consumer.members) == {"b"}
    assert (await third.consumer.heartbeat(beat("cg", "b", -1), TOPICS)).error == E.NONE
    assert third.admin.delete_groups(["cg"]) == {"cg": E.NONE}
    fourth = await reloaded(Harness(third, h.topic, nursery, h.wall), nursery, 3)
    assert fourth.manager.get_group("cg") is None


async def test_a_failed_consumer_group_write_is_answered_and_written_later(
    h: Harness, autojump_clock: MockClock
) -> None:
    rules = h.coordinator.consumer
    h.topic.fail_next = [E.NOT_ENOUGH_REPLICAS]
    failed = await rules.heartbeat(join("cg", "a"), TOPICS)
    assert failed.error == E.COORDINATOR_NOT_AVAILABLE
    assert consumer_keys(h, "cg") == []
    again = await rules.heartbeat(join("cg", "a"), TOPICS)
    assert (again.error, again.member_epoch) == (E.NONE, 3)  # the rejoin moved it twice
    assert {version for version, _, _ in consumer_keys(h, "cg")} == {3, 4, 5, 6, 7, 8}


async def test_classic_and_consumer_records_give_way_to_each_other(
    h: Harness, nursery: trio.Nursery, autojump_clock: MockClock
) -> None:
    [member] = await h.stable_group("g", 1)
    h.coordinator.handle_leave_group("g", [(member.member_id, None, None)])
    a = await h.coordinator.consumer.heartbeat(join("g", "a"), TOPICS)
    assert a.error == E.NONE
    keys = [decode_key(r.key or b"") for r in h.group_records("g")]
    assert GroupMetadataKey("g") in keys and h.group_records("g")[-7].value is None
    second = await reloaded(h, nursery, 1)
    assert set(second.manager.get_group("g").consumer.members) == {"a"}
    assert (await second.consumer.heartbeat(beat("g", "a", -1), TOPICS)).error == E.NONE
    joined = await Harness(second, h.topic, nursery, h.wall).join("g")  # back to classic
    assert joined.error == E.NONE
    assert consumer_keys(h, "g")[-3:] == [(6, "", True), (4, "", True), (3, "", True)]
