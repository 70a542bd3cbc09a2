"""The fetch session cache (KIP-227): contexts, incremental responses, errors, eviction."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from gregor.broker.fetch_sessions import (
    EVICTION_MS,
    FetchContext,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    next_epoch,
)
from gregor.broker.partition import FollowerState, Partition
from gregor.broker.replica_manager import FetchParams, FetchPartition
from gregor.protocol.apis.fetch import EpochEndOffset, PartitionData
from gregor.protocol.errors import ErrorCode
from gregor.storage.results import FetchIsolation


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def ask(topic: str, partition: int, offset: int = 0) -> FetchPartition:
    return FetchPartition(topic, partition, offset, 1 << 20)


def data(
    partition: int, hw: int = 0, records: bytes = b"", error: int = 0, lso: int = 0
) -> PartitionData:
    return PartitionData(
        partition_index=partition,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=0,
        records=records,
    )


def open_session(
    cache: FetchSessionCache, partitions: list[FetchPartition], follower: bool = False
) -> int:
    context = cache.new_context(12, 0, 0, partitions, [], follower)
    assert isinstance(context, FullFetchContext)
    error, session_id, kept = context.finish([(p, data(p.partition)) for p in partitions])
    assert error == ErrorCode.NONE and session_id > 0 and len(kept) == len(partitions)
    return session_id


def test_epochs_wrap_to_one_and_final_stays() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_before_v7_and_with_final_epoch_there_is_no_session() -> None:
    cache = FetchSessionCache(10)
    wanted = [ask("t", 0)]
    for version, epoch in ((6, 0), (12, -1)):
        context = cache.new_context(version, 0, epoch, wanted, [], False)
        assert type(context) is FetchContext and context.partitions == wanted
        assert context.finish([(wanted[0], data(0))])[1] == 0
    assert len(cache) == 0


def test_full_request_creates_a_session_incremental_ones_send_only_changes() -> None:
    cache = FetchSessionCache(10)
    a0, a1, b0 = ask("a", 0, 5), ask("a", 1, 7), ask("b", 0, 0)
    session_id = open_session(cache, [a0, a1, b0])
    # Epoch 1: nothing named, every cached partition read at its cached offset.
    context = cache.new_context(12, session_id, 1, [], [], False)
    assert isinstance(context, IncrementalFetchContext)
    assert context.partitions == [a0, a1, b0]
    error, sid, kept = context.finish(
        [(a0, data(0)), (a1, data(1, records=b"xyz")), (b0, data(0, hw=3))]
    )
    assert (error, sid) == (ErrorCode.NONE, session_id)
    assert [(p.topic, p.partition) for p, _ in kept] == [("a", 1), ("b", 0)]
    # The partition that returned data goes last; a new fetch offset replaces the cached one.
    moved = ask("a", 1, 10)
    context = cache.new_context(12, session_id, 2, [moved], [], False)
    assert context.partitions == [a0, b0, moved]
    _, _, kept = context.finish([(a0, data(0)), (b0, data(0, hw=3)), (moved, data(1))])
    assert kept == []  # nothing changed since the last response


def test_incremental_adds_forgets_and_an_empty_session_ends() -> None:
    cache = FetchSessionCache(10)
    a0 = ask("a", 0)
    session_id = open_session(cache, [a0])
    c2 = ask("c", 2)
    context = cache.new_context(12, session_id, 1, [c2], [("a", 0)], False)
    assert context.partitions == [c2]
    _, _, kept = context.finish([(c2, data(2))])
    assert [p for p, _ in kept] == [c2]  # a new partition is always sent once
    context = cache.new_context(12, session_id, 2, [], [("c", 2)], False)
    assert type(context) is FetchContext and context.partitions == []
    assert len(cache) == 0


def test_errors_diverging_epochs_and_lso_changes_are_always_sent() -> None:
    cache = FetchSessionCache(10)
    a0 = ask("a", 0)
    session_id = open_session(cache, [a0])
    failed = data(0, hw=-1, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    for epoch, answer in enumerate([failed, failed, data(0)], start=1):
        context = cache.new_context(12, session_id, epoch, [], [], True)
        assert context.finish([(a0, answer)])[2] == [(a0, answer)]  # the error and its end
    diverging = data(0)
    diverging.diverging_epoch = EpochEndOffset(3, 10)
    context = cache.new_context(12, session_id, 4, [], [], True)
    assert len(context.finish([(a0, diverging)])[2]) == 1
    context = cache.new_context(12, session_id, 5, [], [], True)
    assert len(context.finish([(a0, data(0, lso=4))])[2]) == 1


def test_a_followers_session_reads_its_quiet_partitions_every_refresh() -> None:
    """A follower's incremental fetches skip quiet partitions (the context's test), except
    one fetch per refresh interval, which reads them all so the leader sees the follower
    caught up on them; a consumer's never need it."""
    clock = Clock()
    cache = FetchSessionCache(10, clock=clock, refresh_ms=1_000)
    follower = open_session(cache, [ask("a", 0)], follower=True)
    consumer = open_session(cache, [ask("a", 0)])
    tested = []
    for epoch, step in enumerate([0, 400, 599, 1, 999, 1], start=1):
        clock.now += step
        context = cache.new_context(12, follower, epoch, [], [], True)
        tested.append(context.quiet is not None)
        assert cache.new_context(12, consumer, epoch, [], [], False).quiet is not None
    assert tested == [True, True, True, False, True, False]


class Host:
    broker_id = 0


def led_partition(follower_end: int, follower_start: int = 0) -> Partition:
    """a-0, led here in epoch 3, its log ending at 10 (all of it committed); follower 1 as
    the leader last recorded it."""
    p = Partition(cast(Any, Host()), "a", 0)
    p.log = cast(
        Any,
        SimpleNamespace(
            log_end_offset=10,
            high_watermark=10,
            last_stable_offset=10,
            log_start_offset=0,
            offline=False,
        ),
    )
    p.leader_id, p.leader_epoch = 0, 3
    p.followers[1] = FollowerState(1, log_end_offset=follower_end, log_start_offset=follower_start)
    return p


def test_quiet_means_nothing_to_read_tell_or_record() -> None:
    """A partition is set aside only when its fetcher is at its end, was told its offsets,
    and (a follower) the leader has recorded that position: a follower's first fetch at the
    new log end after an append is what moves the high watermark."""
    cache = FetchSessionCache(10)
    at_end = FetchPartition("a", 0, 10, 1 << 20, 0, 3)
    for follower in (True, False):
        session_id = open_session(cache, [at_end], follower)
        context = cache.new_context(12, session_id, 1, [], [], follower)
        context.finish([(at_end, data(0, hw=10, lso=10))])  # told the offsets
        quiet = cache.new_context(12, session_id, 2, [], [], follower).quiet
        assert quiet is not None
        replica_id = 1 if follower else -1
        params = FetchParams(replica_id, 500, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK)
        assert quiet(params, at_end, led_partition(10))
        assert not quiet(params, FetchPartition("a", 0, 9, 1 << 20, 0, 3), led_partition(10))
        assert not quiet(params, FetchPartition("a", 0, 10, 1 << 20, 0, 4), led_partition(10))
        assert not quiet(params, at_end, None)
        # Positions the leader has not recorded yet: its end, its log start.
        assert quiet(params, at_end, led_partition(8)) is not follower
        assert quiet(params, at_end, led_partition(10, follower_start=2)) is not follower


def test_session_errors() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [ask("a", 0)])
    unknown = cache.new_context(12, session_id + 1, 1, [], [], False)
    assert isinstance(unknown, SessionErrorContext)
    assert unknown.finish([]) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    stale = cache.new_context(12, session_id, 5, [], [], False)
    assert stale.finish([])[0] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    by_id = cache.new_context(13, session_id, 1, [], [], False)
    assert by_id.finish([])[0] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # A full request naming the session closes it.
    cache.new_context(12, session_id, -1, [ask("a", 0)], [], False)
    assert cache.new_context(12, session_id, 1, [], [], False).finish([])[0] == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )


def test_a_duplicate_request_fails_the_one_that_waited() -> None:
    cache = FetchSessionCache(10)
    a0 = ask("a", 0)
    session_id = open_session(cache, [a0])
    waiting = cache.new_context(12, session_id, 1, [], [], False)
    cache.new_context(12, session_id, 2, [], [], False)
    assert waiting.finish([(a0, data(0, hw=9))]) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        session_id,
        [],
    )


def test_no_slots_means_no_sessions() -> None:
    cache = FetchSessionCache(0)
    context = cache.new_context(12, 0, 0, [ask("a", 0)], [], True)
    assert type(context) is FetchContext
    assert context.finish([])[1] == 0


@pytest.mark.parametrize("follower", [False, True])
def test_young_follower_sessions_are_kept(follower: bool) -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    open_session(cache, [ask("a", 0)], follower=True)
    open_session(cache, [ask("a", 1)], follower=True)
    # Young followers' sessions are safe from everyone, even for a larger session.
    assert open_session_id(cache, [ask("b", i) for i in range(3)], follower) == 0
    assert len(cache) == 2 and cache.evictions == 0


def test_followers_evict_the_smallest_consumer_session() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    small = open_session(cache, [ask("a", 0)])
    large = open_session(cache, [ask("a", 1), ask("a", 2)])
    # A consumer's session may not evict a young one, even a smaller one.
    many = [ask("b", i) for i in range(5)]
    assert open_session_id(cache, many, follower=False) == 0
    # A follower's evicts the smallest consumer session.
    assert open_session_id(cache, [ask("c", 0)], follower=True) > 0
    assert small not in cache.sessions and large in cache.sessions
    assert cache.evictions == 1


def test_older_sessions_are_evicted_for_larger_ones_only() -> None:
    clock = Clock()
    cache = FetchSessionCache(1, clock=clock)
    old = open_session(cache, [ask("a", 0), ask("a", 1)])
    clock.now += EVICTION_MS + 1
    cache.touch(cache.sessions[old])  # used recently, but created long ago
    assert open_session_id(cache, [ask("b", 0), ask("b", 1)], follower=False) == 0  # as large
    assert open_session_id(cache, [ask("b", i) for i in range(3)], follower=False) > 0
    assert old not in cache.sessions


def test_a_stale_session_is_evicted_by_anyone() -> None:
    clock = Clock()
    cache = FetchSessionCache(1, clock=clock)
    stale = open_session(cache, [ask("a", i) for i in range(10)], follower=True)
    clock.now += EVICTION_MS + 1
    assert open_session_id(cache, [ask("b", 0)], follower=False) > 0
    assert stale not in cache.sessions


def open_session_id(
    cache: FetchSessionCache, partitions: list[FetchPartition], follower: bool
) -> int:
    context = cache.new_context(12, 0, 0, partitions, [], follower)
    return context.finish([(p, data(p.partition)) for p in partitions])[1]
