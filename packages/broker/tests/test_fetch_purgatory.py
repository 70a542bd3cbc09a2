"""A parked fetch (the replica manager's fetch purgatory): a wake-up looks only at the
partitions notified since it last looked, and a fetch without a session still answers for
every partition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing

from gregor.broker.config import BrokerConfig
from gregor.broker.fetch_sessions import FetchSessionCache, FullFetchContext
from gregor.broker.metadata_cache import MetadataCache
from gregor.broker.metrics import Metrics
from gregor.broker.partition import Partition
from gregor.broker.replica_manager import (
    FetchParams,
    FetchPartition,
    FetchResult,
    ReplicaManager,
)
from gregor.protocol.apis.fetch import PartitionData
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrPartitionState
from gregor.protocol.records import BatchBuilder
from gregor.storage import LogConfig, open_log
from gregor.storage.results import FetchIsolation

PARTITIONS = 10


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[ReplicaManager]:
    """Broker 0 leading t-0 .. t-9 alone (RF 1), each log holding one record."""
    config = BrokerConfig.from_properties(
        {"broker.id": 0, "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path)}
    )
    manager = ReplicaManager(config, MetadataCache(0), Metrics(), cast(Any, None), cast(Any, None))
    state = LeaderAndIsrPartitionState(leader=0, leader_epoch=1, isr=[0], replicas=[0])
    logs = []
    for index in range(PARTITIONS):
        log = open_log(tmp_path / f"t-{index}", LogConfig.from_properties({}))
        logs.append(log)
        partition = Partition(manager, "t", index)
        partition.make_leader(state, log)
        manager.partitions[partition.key] = partition
        append(manager, index)
    yield manager
    for log in logs:
        log.close()


def append(manager: ReplicaManager, index: int) -> None:
    builder = BatchBuilder()
    builder.append(b"record")
    manager.partitions[("t", index)].append_as_leader(builder.build(), 1)


def at_end(manager: ReplicaManager) -> list[FetchPartition]:
    return [
        FetchPartition("t", i, manager.partitions[("t", i)].local_log().log_end_offset, 1 << 20)
        for i in range(PARTITIONS)
    ]


def params(quiet: Any) -> FetchParams:
    return FetchParams(-1, 10_000, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK, quiet=quiet)


async def park(
    manager: ReplicaManager, fetch: FetchParams, requests: list[FetchPartition]
) -> tuple[list[FetchPartition], list[FetchResult]]:
    """Answer `fetch` once partition 3 has a new record, appended while it is parked."""
    (heard, _), done = manager.fetch_now(fetch, requests)
    assert not done
    answered = []

    async def wait() -> None:
        answered.append(await manager.fetch_later(fetch, requests, heard))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert manager.fetch_purgatory.watched(("t", 3)) == 1
        append(manager, 3)
    return answered[0]


async def test_a_wake_up_looks_only_at_the_partitions_notified(manager: ReplicaManager) -> None:
    cache = FetchSessionCache(10)
    requests = at_end(manager)
    context = cache.new_context(12, 0, 0, requests, [], False)
    assert isinstance(context, FullFetchContext)
    told = [
        PartitionData(
            partition_index=r.partition,
            high_watermark=r.fetch_offset,
            last_stable_offset=r.fetch_offset,
            log_start_offset=0,
        )
        for r in requests
    ]
    _, session_id, _ = context.finish(list(zip(requests, told, strict=True)))
    quiet = cache.new_context(12, session_id, 1, [], [], False).quiet
    assert quiet is not None
    tested: list[int] = []

    def counted(fetch: FetchParams, request: FetchPartition, partition: Partition | None) -> bool:
        tested.append(request.partition)
        return quiet(fetch, request, partition)

    wanted, results = await park(manager, params(counted), requests)
    # fetch_now tested all ten once; the wake-up tested only t-3, and read only it.
    assert sorted(tested[:PARTITIONS]) == list(range(PARTITIONS))
    assert tested[PARTITIONS:] == [3]
    assert [w.partition for w in wanted] == [3]
    read = results[0].read
    assert read is not None and read.info is not None
    assert read.info.records.length > 0 and read.high_watermark == 2


async def test_a_fetch_without_a_session_answers_for_every_partition(
    manager: ReplicaManager,
) -> None:
    wanted, results = await park(manager, params(None), at_end(manager))
    assert [w.partition for w in wanted] == list(range(PARTITIONS))
    assert [r.size > 0 for r in results] == [i == 3 for i in range(PARTITIONS)]
