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
        answered.append(await manager.fetch_later(fetch, requests, heard).result())

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


class Clock:
    now = 1_000_000

    def __call__(self) -> int:
        return self.now


def told(requests: list[FetchPartition], results: list[FetchResult]) -> list[PartitionData]:
    """The response data of what a fetch read (records left out: only their presence counts)."""
    told = []
    for request, result in zip(requests, results, strict=True):
        read = result.read
        assert read is not None
        told.append(
            PartitionData(
                partition_index=request.partition,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                records=b"x" if result.size else b"",
            )
        )
    return told


async def test_a_sessions_fetch_looks_only_at_what_moved(manager: ReplicaManager) -> None:
    """With its watch in the fetch purgatory, a session's incremental fetch tests only the
    partitions notified since its last fetch, those the last fetch did not find quiet, and
    those the request moved; it parks on the watch, not on each partition; once a refresh
    interval it looks at them all; forgotten partitions and closed sessions are unwatched."""
    clock = Clock()
    cache = FetchSessionCache(10, clock=clock, refresh_ms=1_000, purgatory=manager.fetch_purgatory)
    requests = at_end(manager)
    full = cache.new_context(12, 0, 0, requests, [], False)
    results = manager.read(params(None), requests)
    _, session_id, _ = full.finish(list(zip(requests, told(requests, results), strict=True)))
    epoch = 0

    def fetch(asked: list[FetchPartition] | None = None) -> tuple[list[int], list[int]]:
        """One incremental fetch, answered at once: the partitions it tested, and answered."""
        nonlocal epoch
        epoch += 1
        context = cache.new_context(12, session_id, epoch, asked or [], [], False)
        quiet = context.quiet
        assert quiet is not None
        tested: list[int] = []

        def counted(
            fetch: FetchParams, request: FetchPartition, partition: Partition | None
        ) -> bool:
            tested.append(request.partition)
            return quiet(fetch, request, partition)

        fetch_params = FetchParams(
            -1,
            0,
            1,
            1 << 20,
            FetchIsolation.HIGH_WATERMARK,
            quiet=counted,
            watch=context.watch,
        )
        (wanted, results), _ = manager.fetch_now(fetch_params, context.partitions)
        kept = context.finish(list(zip(wanted, told(wanted, results), strict=True)))[2]
        return sorted(tested), [r.partition for r, _ in kept]

    assert fetch() == (list(range(PARTITIONS)), [])  # the first look is at all
    assert fetch() == ([], [])
    append(manager, 3)
    assert fetch() == ([3], [3])
    end = manager.partitions[("t", 3)].local_log().log_end_offset
    # It read t-3, which stays looked at; the request moves t-3 (and t-5, to where it was).
    assert fetch([FetchPartition("t", 3, end, 1 << 20), at_end(manager)[5]]) == ([3, 5], [])
    assert fetch() == ([], [])

    # Parked: on the watch alone, and woken by an append to any of its partitions.
    epoch += 1
    context = cache.new_context(12, session_id, epoch, [], [], False)
    parked = FetchParams(
        -1,
        10_000,
        1,
        1 << 20,
        FetchIsolation.HIGH_WATERMARK,
        quiet=context.quiet,
        watch=context.watch,
    )
    (heard, _), done = manager.fetch_now(parked, context.partitions)
    assert heard == [] and not done
    answered: list[tuple[list[FetchPartition], list[FetchResult]]] = []

    async def wait() -> None:
        answered.append(await manager.fetch_later(parked, context.partitions, heard).result())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert len(manager.fetch_purgatory) == PARTITIONS
        assert manager.fetch_purgatory.watched(("t", 7)) == 0
        append(manager, 7)
    [(wanted, results)] = answered
    assert [w.partition for w in wanted] == [7] and results[0].size > 0
    context.finish(list(zip(wanted, told(wanted, results), strict=True)))
    assert fetch(at_end(manager)[7:8]) == ([7], [])  # read: looked at again, moved on

    clock.now += 1_000  # a refresh: every partition is tested
    assert fetch() == (list(range(PARTITIONS)), [])
    assert fetch() == ([], [])

    epoch += 1
    cache.new_context(12, session_id, epoch, [], [("t", 2)], False)
    assert ("t", 2) not in manager.fetch_purgatory.subscribers
    cache.new_context(12, session_id, 0, requests, [], False)  # a full request closes it
    assert manager.fetch_purgatory.subscribers == {}
