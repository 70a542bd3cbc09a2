"""Fetching from the preferred read replica (KIP-392) against two scripted brokers: broker
0 leads the partition, broker 1 follows it (both in its ISR, as the Metadata hook here
says). The leader names broker 1 as the preferred read replica of a fetch that carries a
rack, as Kafka's RackAwareReplicaSelector does, and broker 1 serves the partition as a
follower would. The tests assert which broker each Fetch went to, with which rack and
offset, and what the consumer read.

The test's trio clock is a frozen MockClock: the consumer waits on data, never on time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from client_scripted import DROP, ScriptedCluster, fill, scripted_cluster
from trio.testing import MockClock

from gregor.client import AsyncConsumer, ConsumerRecord, TopicPartition
from gregor.protocol.apis.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from gregor.protocol.apis.metadata import MetadataRequest
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Request, Response

FETCH = 1
METADATA = 3
LEADER, FOLLOWER = 0, 1
T0 = TopicPartition("t", 0)


@attrs.define
class Fetched:
    broker: int
    rack: str
    offset: int
    failed: bool = False  # answered with the failure the test set up


class ReadReplicas:
    """The scripted cluster's Fetch and Metadata, made rack-aware: every Fetch is logged;
    the leader names `preferred` for a fetch with a rack (serving it itself without one,
    or when `preferred` is None); the follower serves as the leader would; `fail` makes
    the next fetch at the follower fail (an error code for the partition, or DROP: the
    connection is closed)."""

    def __init__(self, cluster: ScriptedCluster) -> None:
        self.cluster = cluster
        self.preferred: int | None = FOLLOWER
        self.fail: int | object | None = None
        self.fetches: list[Fetched] = []
        self.lock = threading.Lock()
        cluster.hooks[FETCH] = self._fetch
        cluster.hooks[METADATA] = self._metadata

    def log(self) -> list[Fetched]:
        with self.lock:
            return list(self.fetches)

    async def _metadata(self, broker: int, body: Request, version: int) -> Response:
        assert isinstance(body, MetadataRequest)
        response: Any = await self.cluster._MetadataRequest(broker, body, version)
        for topic in response.topics:
            for p in topic.partitions:
                p.replica_nodes = [LEADER, FOLLOWER]
                p.isr_nodes = [LEADER, FOLLOWER]
        result: Response = response
        return result

    def _fetch(self, broker: int, body: Request, version: int) -> Any:
        assert isinstance(body, FetchRequest)
        asked = [(t.topic, p.partition, p.fetch_offset) for t in body.topics for p in t.partitions]
        if not asked:  # (an incremental fetch naming nothing new)
            return None
        assert [(t, p) for t, p, _ in asked] == [("t", 0)]
        offset = asked[0][2]
        entry = Fetched(broker, body.rack_id, offset)
        with self.lock:
            self.fetches.append(entry)
            failure, self.fail = (self.fail, None) if broker == FOLLOWER else (None, self.fail)
        if failure is not None:
            entry.failed = True
            if failure is DROP:
                return DROP
            assert isinstance(failure, int)
            return self._answer(PartitionData(partition_index=0, error_code=failure))
        if broker == LEADER and body.rack_id and self.preferred is not None:
            state = self.cluster.topics["t"][0]
            return self._answer(
                PartitionData(
                    partition_index=0,
                    high_watermark=state.next_offset,
                    last_stable_offset=state.next_offset,
                    log_start_offset=state.log_start,
                    preferred_read_replica=self.preferred,
                )
            )
        # The leader serving itself, or the follower serving what the leader has.
        return self.cluster._FetchRequest(LEADER, body, version)

    @staticmethod
    def _answer(data: PartitionData) -> FetchResponse:
        return FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[data])])


@pytest.fixture
def two_brokers() -> Iterator[ScriptedCluster]:
    with scripted_cluster(2) as running:
        running.create_topic("t", 1, leaders=[LEADER])
        yield running


def consumer_config(cluster: ScriptedCluster, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
        # A replica that cannot be reached stays shunned that long (real time).
        "reconnect.backoff.max.ms": 60_000,
        **extra,
    }


async def start(consumer: AsyncConsumer) -> None:
    """Assign the partition, its metadata known first (the clock stands still, so the
    consumer must not have to retry for it)."""
    assert await consumer.partitions_for("t") == [0]
    consumer.assign([T0])


async def read(consumer: AsyncConsumer, count: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    while len(records) < count:
        records += await consumer.getmany(timeout=None)
    return records


async def twenty_in_two_rounds(cluster: ScriptedCluster, **config: Any) -> list[ConsumerRecord]:
    """Records 0-9 written and read, then 10-19, by one consumer with `config`."""
    fill(cluster, "t", 0, 10)
    async with AsyncConsumer(consumer_config(cluster, **config)) as c:
        await start(c)
        records = await read(c, 10)
        fill(cluster, "t", 0, 10, start=10)
        return records + await read(c, 10)


async def test_the_preferred_read_replica_named_by_the_leader_is_read_from(
    two_brokers: ScriptedCluster, mock_clock: MockClock
) -> None:
    replicas = ReadReplicas(two_brokers)
    records = await twenty_in_two_rounds(two_brokers, **{"client.rack": "rack-b"})

    assert [r.offset for r in records] == list(range(20))
    log = replicas.log()
    # The leader, asked with the rack, names the follower; from then on the follower.
    assert log[0] == Fetched(LEADER, "rack-b", 0)
    assert log[1] == Fetched(FOLLOWER, "rack-b", 0)
    assert all(f.broker == FOLLOWER and f.rack == "rack-b" for f in log[1:])
    assert any(f.offset == 10 for f in log[1:])


@pytest.mark.parametrize(
    "failure",
    [DROP, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.OFFSET_OUT_OF_RANGE],
    ids=["connection-lost", "NOT_LEADER_OR_FOLLOWER", "OFFSET_OUT_OF_RANGE"],
)
async def test_a_failing_read_replica_sends_the_partition_back_to_the_leader(
    two_brokers: ScriptedCluster, mock_clock: MockClock, failure: object
) -> None:
    """As Kafka's consumer: a failed fetch from the preferred replica (a lost connection,
    NOT_LEADER_OR_FOLLOWER, or OFFSET_OUT_OF_RANGE, which a follower answers for an offset
    past its high watermark) clears the preferred replica: the next fetch of the partition
    goes to the leader, at the same offset (the position is not reset)."""
    replicas = ReadReplicas(two_brokers)
    fill(two_brokers, "t", 0, 10)
    async with AsyncConsumer(consumer_config(two_brokers, **{"client.rack": "rack-b"})) as c:
        await start(c)
        records = await read(c, 10)
        assert replicas.log()[-1].broker == FOLLOWER
        replicas.fail = failure
        fill(two_brokers, "t", 0, 10, start=10)
        records += await read(c, 10)
        fill(two_brokers, "t", 0, 10, start=20)
        records += await read(c, 10)

    assert [r.offset for r in records] == list(range(30))  # nothing skipped, nothing reread
    log = replicas.log()
    failed = next(i for i, f in enumerate(log) if f.failed)
    assert log[failed].broker == FOLLOWER
    after = log[failed + 1]
    assert (after.broker, after.offset) == (LEADER, log[failed].offset)
    if failure is DROP:
        # The unreachable replica is shunned: the leader is asked without the rack, so that
        # it serves the partition itself instead of naming the replica again.
        assert after.rack == ""
        assert all(f.broker == LEADER and f.rack == "" for f in log[failed + 1 :])
    else:
        # The replica answered: the leader, asked with the rack, names it again.
        assert after.rack == "rack-b"
        assert log[failed + 2].broker == FOLLOWER
        assert log[-1].broker == FOLLOWER


async def test_without_a_rack_every_fetch_goes_to_the_leader(
    two_brokers: ScriptedCluster, mock_clock: MockClock
) -> None:
    replicas = ReadReplicas(two_brokers)
    records = await twenty_in_two_rounds(two_brokers)

    assert [r.offset for r in records] == list(range(20))
    log = replicas.log()
    assert log[0] == Fetched(LEADER, "", 0)
    assert all(f.broker == LEADER and f.rack == "" for f in log)
    assert any(f.offset == 10 for f in log)
