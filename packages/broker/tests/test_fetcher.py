"""The replica fetcher's loop, alone: a partition that moved on under it rests its state for a
backoff. Sending nothing for it, the loop used to go round without ever yielding, and so
starved the whole broker: a LeaderAndIsr that a full disk broke off half-way left such a
state behind, and the broker spun at 100% CPU, deaf even to SIGTERM."""

from __future__ import annotations

import types
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from gregor.broker.config import BrokerConfig
from gregor.broker.fetcher import FULL_PASS_S, PartitionFetchState, ReplicaFetcher, State
from gregor.broker.replication_quotas import ReplicationQuotas
from gregor.client.security import ClientSecurity
from gregor.protocol.apis.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)


class Host:
    """The broker as a fetcher sees it, hosting one partition."""

    def __init__(self, partition: object) -> None:
        self.config = BrokerConfig.from_properties(
            {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
        )
        self.broker_id = 1
        self.replication_quotas = ReplicationQuotas(1)
        self.inter_broker_security = ClientSecurity()
        self.hosted = partition

    def leader_endpoint(self, leader_id: int) -> tuple[str, int] | None:
        return None

    def partition(self, topic: str, index: int) -> object:
        return self.hosted


MOVED_ON = {
    "led here now": types.SimpleNamespace(log=object(), is_leader=True, leader_epoch=5),
    "in a later epoch": types.SimpleNamespace(log=object(), is_leader=False, leader_epoch=5),
    "gone": None,
}


@pytest.mark.timeout(30)  # the old loop never yields: it would hang here
@pytest.mark.parametrize("phase", [State.TRUNCATING, State.FETCHING])
@pytest.mark.parametrize("moved_on", MOVED_ON.keys())
async def test_a_partition_that_moved_on_rests_the_loop(
    phase: State, moved_on: str, autojump_clock: MockClock
) -> None:
    fetcher = ReplicaFetcher(Host(MOVED_ON[moved_on]), 2, 0)  # type: ignore[arg-type]
    held = PartitionFetchState(fetch_offset=0, leader_epoch=4, state=phase)
    fetcher.add(("t", 0), held)
    with trio.move_on_after(10):
        # Nothing may be sent for it: the connection is never touched.
        await fetcher._replicate(None)  # type: ignore[arg-type]
    # It rested a backoff at a time (replica.fetch.backoff.ms), still held for the broker
    # to replace or remove.
    assert fetcher.backoff == 1.0
    assert 10 <= held.delayed_until <= 11
    assert fetcher.states == {("t", 0): held}


class FollowerLog:
    def __init__(self) -> None:
        self.log_end_offset = self.log_start_offset = self.high_watermark = 0

    def append_as_follower(self, records: object) -> None:
        self.log_end_offset += 1

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset


class Followed(Host):
    """Broker 1 following partitions t-0.. of leader 2 in epoch 4; counts the lookups."""

    def __init__(self) -> None:
        super().__init__(None)
        self.partitions: dict[tuple[str, int], object] = {}
        self.lookups = 0

    def follow(self, index: int) -> PartitionFetchState:
        self.partitions[("t", index)] = types.SimpleNamespace(
            log=FollowerLog(),
            is_leader=False,
            leader_epoch=4,
            isr=[1, 2],
            host=types.SimpleNamespace(notify_high_watermark=lambda partition: None),
        )
        return PartitionFetchState(fetch_offset=0, leader_epoch=4, state=State.FETCHING)

    def partition(self, topic: str, index: int) -> object:
        self.lookups += 1
        return self.partitions.get((topic, index))


class Leader:
    """The leader's side of the fetcher's connection: answers each Fetch from a script
    (the partitions that get a record), noting what each request named and how many
    partitions the fetcher looked up to build it."""

    def __init__(self, host: Followed, fetcher: ReplicaFetcher, script: list[Any]) -> None:
        self.host, self.fetcher, self.script = host, fetcher, script
        self.sent: list[tuple[int, list[tuple[int, int]], int]] = []

    def version_for(self, *args: object, **kwargs: object) -> int:
        return 12

    async def request(self, request: FetchRequest, *args: object, **kwargs: object) -> Any:
        named = [(p.partition, p.fetch_offset) for t in request.topics for p in t.partitions]
        self.sent.append((request.session_epoch, named, self.host.lookups))
        self.host.lookups = 0
        await trio.sleep(0.1)  # the leader's max wait
        step = self.script.pop(0)
        if callable(step):
            step()
            step = []
        if not self.script:
            self.fetcher.stopped = True
        return FetchResponse(
            session_id=9,
            responses=[
                FetchableTopicResponse(
                    topic="t",
                    partitions=[
                        PartitionData(partition_index=i, high_watermark=1, records=b"r")
                        for i in step
                    ],
                )
            ],
        )


async def test_a_steady_fetcher_builds_only_what_moved(autojump_clock: MockClock) -> None:
    """While every partition is fetched and none is added, removed or delayed, a fetch is
    built from the last one with only the partitions its response moved looked up and
    sent; an added partition, or a second gone by, makes the next one a full pass."""
    host = Followed()
    fetcher = ReplicaFetcher(host, 2, 0)  # type: ignore[arg-type]
    for index in range(20):
        fetcher.add(("t", index), host.follow(index))

    def add_one() -> None:
        fetcher.add(("t", 20), host.follow(20))

    def rest() -> None:
        autojump_clock.jump(FULL_PASS_S)

    script: list[Any] = [[3], [], [], add_one, [], rest, []]
    leader = Leader(host, fetcher, script)
    await fetcher._replicate(leader)  # type: ignore[arg-type]
    epochs, named, lookups = zip(*leader.sent, strict=True)
    assert epochs == (0, 1, 2, 3, 4, 5, 6)
    assert named[0] == [(i, 0) for i in range(20)] and lookups[0] == 20  # full
    # t-3 got a record: looked up to process it, then to build the next request.
    assert (named[1], lookups[1]) == ([(3, 1)], 2)
    assert (named[2], lookups[2]) == ([], 0)
    assert (named[3], lookups[3]) == ([], 0)
    assert (named[4], lookups[4]) == ([(20, 0)], 21)  # added: a full pass
    assert (named[5], lookups[5]) == ([], 0)
    assert (named[6], lookups[6]) == ([], 21)  # a second on: a full pass
