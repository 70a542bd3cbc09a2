"""The transaction coordinator's rules, request by request, on trio's mock clock.

`__transaction_state` is real gregor-storage logs in a temp directory whose appends count as
replicated at once; the partition leaders the markers go to are a transport that records
each WriteTxnMarkers and answers it as the test says (the real leaders are proven by the
cluster tests in tests/transactions). Producer ids come from a counter.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import pytest
import trio
from trio.testing import MockClock

from gregor.broker.coordinator.topic_log import FailedWrite, Write
from gregor.broker.coordinator.transaction import (
    TransactionConfig,
    TransactionCoordinator,
    TransactionStateManager,
    TxnMarkerChannel,
    TxnState,
)
from gregor.broker.coordinator.transaction.markers import NO_LEADER
from gregor.protocol import transaction_records as wire
from gregor.protocol.apis.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import iter_batches
from gregor.storage.config import LogConfig
from gregor.storage.loader import open_log
from gregor.storage.log import Log
from gregor.storage.results import FetchIsolation

PARTITIONS = 3
E = ErrorCode
TID = "txn-a"


class DoneWrite:
    def __init__(self, base_offset: int, held: trio.Event | None = None) -> None:
        self.error = E.NONE
        self.base_offset = base_offset
        self.held = held

    async def replicated(self, timeout_s: float) -> int:
        if self.held is not None:
            await self.held.wait()
        return E.NONE


class LocalStateTopic:
    def __init__(self, directory: Path) -> None:
        config = LogConfig()
        self.logs: dict[int, Log] = {
            p: open_log(directory / f"__transaction_state-{p}", config) for p in range(PARTITIONS)
        }
        self.leading = set(range(PARTITIONS))
        self.fail_next: list[int] = []
        self.hold: trio.Event | None = None  # set: writes are replicated once it is set

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
        return DoneWrite(info.first_offset, self.hold)

    def leader_log(self, partition: int) -> Log | None:
        return self.logs[partition] if partition in self.leading else None

    def values(self, partition: int) -> list[tuple[str, wire.TransactionLogValue | None]]:
        log, out, offset = self.logs[partition], [], 0
        while offset < log.log_end_offset:  # a read stops at the end of a segment
            data = log.read(offset, 1 << 30, FetchIsolation.LOG_END).records.read()
            for batch in iter_batches(data):
                for r in batch:
                    value = None if r.value is None else wire.decode_value(r.value)
                    out.append((wire.decode_key(r.key or b""), value))
                offset = batch.header.next_offset
        return out

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


@attrs.define
class Leaders:
    """The partition leaders: every partition of topics `t*` is led by broker 1."""

    sent: list[WriteTxnMarkersRequest] = attrs.field(factory=list)
    reachable: bool = True
    answer: int = E.NONE
    gone: set[str] = attrs.field(factory=set)
    delay_s: float = 0.0

    def leader_of(self, topic: str, partition: int) -> int | None:
        if topic in self.gone:
            return None
        return 1 if topic.startswith(("t", "__")) else NO_LEADER

    async def send(
        self, broker_id: int, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        await trio.sleep(self.delay_s)
        if not self.reachable:
            raise OSError("connection refused")
        self.sent.append(request)
        return WriteTxnMarkersResponse(
            markers=[
                WritableTxnMarkerResult(
                    m.producer_id,
                    [
                        WritableTxnMarkerTopicResult(
                            t.name,
                            [
                                WritableTxnMarkerPartitionResult(p, self.answer)
                                for p in t.partition_indexes
                            ],
                        )
                        for t in m.topics
                    ],
                )
                for m in request.markers
            ]
        )

    def markers(self) -> list[tuple[int, int, bool, int, list[tuple[str, int]]]]:
        return [
            (
                m.producer_id,
                m.producer_epoch,
                m.transaction_result,
                m.coordinator_epoch,
                [(t.name, p) for t in m.topics for p in t.partition_indexes],
            )
            for r in self.sent
            for m in r.markers
        ]


@attrs.define
class Harness:
    coordinator: TransactionCoordinator
    topic: LocalStateTopic
    leaders: Leaders
    wall: list[int]
    nursery: trio.Nursery

    @property
    def manager(self) -> TransactionStateManager:
        return self.coordinator.manager

    def state(self, tid: str = TID) -> TxnState:
        found = self.manager.lookup(tid)
        assert found.metadata is not None
        return found.metadata.state

    async def settle(self) -> None:
        """Until the loads (which read in a worker thread) are done and every task waits."""
        while self.manager.loading:
            await trio.sleep(0.001)
        await trio.testing.wait_all_tasks_blocked()

    def elect(self, epoch: int, partitions: range = range(PARTITIONS)) -> None:
        for p in partitions:
            self.manager.schedule_load(p, epoch, self.coordinator._on_loaded)

    async def begin(self, tid: str = TID, *tps: tuple[str, int]) -> tuple[int, int]:
        init = await self.coordinator.init_producer_id(tid, 60_000)
        assert init.error == E.NONE
        error = await self.coordinator.add_partitions(
            tid, init.producer_id, init.producer_epoch, tps or [("t1", 0), ("t1", 1)]
        )
        assert error == E.NONE
        return init.producer_id, init.producer_epoch


def make_coordinator(
    topic: LocalStateTopic, leaders: Leaders, wall: list[int]
) -> TransactionCoordinator:
    config = TransactionConfig(state_log_partitions=PARTITIONS, max_timeout_ms=120_000)
    ids = iter(range(1000, 2000))

    async def allocate() -> int:
        await trio.sleep(0)
        return next(ids)

    return TransactionCoordinator(
        1,
        config,
        TransactionStateManager(config, topic, wall_clock=lambda: wall[0]),
        TxnMarkerChannel(leaders, retry_backoff_s=0.1),
        allocate,
    )


@pytest.fixture(autouse=True)
def clock() -> MockClock:
    return MockClock(autojump_threshold=0)


@pytest.fixture
def topic(tmp_path: Path) -> Iterator[LocalStateTopic]:
    t = LocalStateTopic(tmp_path)
    yield t
    t.close()


@pytest.fixture
async def h(topic: LocalStateTopic) -> AsyncIterator[Harness]:
    leaders = Leaders()
    wall = [1_000_000]
    coordinator = make_coordinator(topic, leaders, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        harness = Harness(coordinator, topic, leaders, wall, nursery)
        harness.elect(5)
        await harness.settle()
        yield harness
        nursery.cancel_scope.cancel()


async def test_a_committed_transaction_goes_through_every_state_to_the_log(
    h: Harness,
) -> None:
    pid, epoch = await h.begin()
    assert (pid, epoch) == (1000, 0)
    assert h.state() is TxnState.ONGOING
    assert await h.coordinator.end_transaction(TID, pid, epoch, True) == E.NONE
    await h.settle()
    assert h.state() is TxnState.COMPLETE_COMMIT
    assert h.leaders.markers() == [(1000, 0, True, 5, [("t1", 0), ("t1", 1)])]
    partition = h.manager.partition_for(TID)
    statuses = [(tid, v.transaction_status if v else None) for tid, v in h.topic.values(partition)]
    assert statuses == [(TID, s) for s in (0, 1, 2, 4)]
    ongoing = h.topic.values(partition)[1][1]
    assert ongoing is not None
    assert [(p.topic, p.partition_ids) for p in ongoing.transaction_partitions or []] == [
        ("t1", [0, 1])
    ]
    assert ongoing.transaction_start_timestamp_ms == h.wall[0]
    # A retried EndTxn is answered as done; the other outcome is not possible any more.
    assert await h.coordinator.end_transaction(TID, pid, epoch, True) == E.NONE
    assert await h.coordinator.end_transaction(TID, pid, epoch, False) == E.INVALID_TXN_STATE


async def test_a_new_init_bumps_the_epoch_and_fences_the_old_producer(h: Harness) -> None:
    pid, epoch = await h.begin()
    # The producer restarts while its transaction is open: the transaction is aborted with
    # the next epoch, and the new producer is told to retry until that is done.
    again = await h.coordinator.init_producer_id(TID, 60_000)
    assert again.error == E.CONCURRENT_TRANSACTIONS
    await h.settle()
    assert h.leaders.markers() == [(pid, epoch + 1, False, 5, [("t1", 0), ("t1", 1)])]
    assert h.state() is TxnState.COMPLETE_ABORT
    again = await h.coordinator.init_producer_id(TID, 60_000)
    assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, pid, epoch + 2)
    # The zombie's requests are fenced.
    assert await h.coordinator.add_partitions(TID, pid, epoch, [("t2", 0)]) == E.PRODUCER_FENCED
    assert await h.coordinator.end_transaction(TID, pid, epoch, True) == E.PRODUCER_FENCED
    assert h.state() is TxnState.EMPTY


async def test_the_next_add_partitions_waits_for_the_previous_transaction_to_complete(
    h: Harness,
) -> None:
    pid, epoch = await h.begin()
    h.leaders.delay_s = 0.05  # the markers take a while
    assert await h.coordinator.end_transaction(TID, pid, epoch, True) == E.NONE
    assert h.state() is TxnState.PREPARE_COMMIT
    # Sent at once, it is answered once the commit is complete, not CONCURRENT_TRANSACTIONS.
    assert await h.coordinator.add_partitions(TID, pid, epoch, [("t2", 0)]) == E.NONE
    assert h.leaders.markers() == [(pid, epoch, True, 5, [("t1", 0), ("t1", 1)])]
    metadata = h.manager.lookup(TID).metadata
    assert metadata is not None
    assert (metadata.state, metadata.partitions) == (TxnState.ONGOING, {("t2", 0)})
    partition = h.manager.partition_for(TID)
    statuses = [v.transaction_status if v else None for _, v in h.topic.values(partition)]
    assert statuses[-3:] == [2, 4, 1]
    # Markers that cannot be written: after completion_wait_ms, CONCURRENT_TRANSACTIONS.
    h.leaders.reachable = False
    assert await h.coordinator.end_transaction(TID, pid, epoch, False) == E.NONE
    error = await h.coordinator.add_partitions(TID, pid, epoch, [("t2", 1)])
    assert error == E.CONCURRENT_TRANSACTIONS
    h.leaders.reachable = True
    await trio.sleep(1)  # the marker channel's retry
    assert h.state() is TxnState.COMPLETE_ABORT


async def test_an_end_txn_whose_client_went_away_still_completes(h: Harness) -> None:
    """The EndTxn's request is cancelled (its connection closed) while the PrepareCommit
    waits for the ISR: the commit still takes effect and completes, and the transactional id
    is not left pending (CONCURRENT_TRANSACTIONS to every later request)."""
    pid, epoch = await h.begin()
    hold = h.topic.hold = trio.Event()
    h.nursery.start_soon(lambda: _set_after(hold, 2))
    with trio.move_on_after(1):
        await h.coordinator.end_transaction(TID, pid, epoch, True)
    h.topic.hold = None
    await h.settle()
    assert h.state() is TxnState.COMPLETE_COMMIT
    assert h.leaders.markers() == [(pid, epoch, True, 5, [("t1", 0), ("t1", 1)])]
    again = await h.coordinator.init_producer_id(TID, 60_000)
    assert (again.error, again.producer_epoch) == (E.NONE, epoch + 1)


async def test_verification_answers_while_another_partition_is_being_added(
    h: Harness,
) -> None:
    """A partition leader's verify_only is answered from what is written, as in Kafka: an
    AddPartitionsToTxn still replicating does not refuse the partitions already in the
    transaction (CONCURRENT_TRANSACTIONS there made every produce of the producer back off)."""
    pid, epoch = await h.begin()
    hold = h.topic.hold = trio.Event()
    h.nursery.start_soon(h.coordinator.add_partitions, TID, pid, epoch, [("t2", 0)])
    await trio.testing.wait_all_tasks_blocked()
    try:
        metadata = h.manager.lookup(TID).metadata
        assert metadata is not None and metadata.pending_state is TxnState.ONGOING
        verified = h.coordinator.verify_partitions(TID, pid, epoch, [("t1", 0), ("t2", 0)])
        assert verified == {("t1", 0): E.NONE, ("t2", 0): E.INVALID_TXN_STATE}
        assert h.coordinator.verify_partitions(TID, pid, epoch + 1, [("t1", 0)]) == {
            ("t1", 0): E.PRODUCER_FENCED
        }
    finally:
        h.topic.hold = None
        hold.set()
    await h.settle()
    assert h.coordinator.verify_partitions(TID, pid, epoch, [("t2", 0)]) == {("t2", 0): E.NONE}
    # Once the commit is prepared, its markers come next: the leader is told to wait.
    h.leaders.delay_s = 0.05
    assert await h.coordinator.end_transaction(TID, pid, epoch, True) == E.NONE
    assert h.state() is TxnState.PREPARE_COMMIT
    assert h.coordinator.verify_partitions(TID, pid, epoch, [("t1", 0)]) == {
        ("t1", 0): E.CONCURRENT_TRANSACTIONS
    }
    await h.settle()


async def _set_after(event: trio.Event, seconds: float) -> None:
    await trio.sleep(seconds)
    event.set()


async def test_kip_360_a_producer_bumps_its_own_epoch_but_a_fenced_one_cannot_come_back(
    h: Harness,
) -> None:
    c = h.coordinator
    first = await c.init_producer_id(TID, 60_000)
    pid, epoch = first.producer_id, first.producer_epoch
    # The producer recovers from an error with the epoch it has: the next one.
    bumped = await c.init_producer_id(TID, 60_000, pid, epoch)
    assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (E.NONE, pid, epoch + 1)
    # Its retry (the answer was lost) gets the same epoch again, not a third.
    retry = await c.init_producer_id(TID, 60_000, pid, epoch)
    assert (retry.error, retry.producer_epoch) == (E.NONE, epoch + 1)
    # A new producer (no id to give) takes over: the old epochs are all fenced.
    new = await c.init_producer_id(TID, 60_000)
    assert (new.error, new.producer_epoch) == (E.NONE, epoch + 2)
    for old in (epoch, epoch + 1):
        assert (await c.init_producer_id(TID, 60_000, pid, old)).error == E.PRODUCER_FENCED
    # Fenced by a timeout's abort: the epoch it had is not one to come back with either.
    await c.add_partitions(TID, pid, epoch + 2, [("t1", 0)])
    h.wall[0] += 61_000
    assert c.abort_timed_out() == 1
    await h.settle()
    assert (await c.init_producer_id(TID, 60_000, pid, epoch + 2)).error == E.PRODUCER_FENCED
    metadata = h.manager.lookup(TID).metadata
    assert metadata is not None
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (epoch + 3, -1)


async def test_a_fence_whose_abort_was_not_written_bumps_the_epoch_once(h: Harness) -> None:
    pid, epoch = await h.begin()
    for _ in range(2):
        h.topic.fail_next = [E.NOT_ENOUGH_REPLICAS]
        again = await h.coordinator.init_producer_id(TID, 60_000)
        assert again.error == E.COORDINATOR_NOT_AVAILABLE
        assert h.state() is TxnState.ONGOING
    assert (await h.coordinator.init_producer_id(TID, 60_000)).error == E.CONCURRENT_TRANSACTIONS
    await h.settle()
    assert h.leaders.markers() == [(pid, epoch + 1, False, 5, [("t1", 0), ("t1", 1)])]
    again = await h.coordinator.init_producer_id(TID, 60_000)
    assert (again.error, again.producer_epoch) == (E.NONE, epoch + 2)


async def test_bad_requests_get_kafkas_errors_and_write_nothing(h: Harness) -> None:
    c = h.coordinator
    assert (await c.init_producer_id(TID, 0)).error == E.INVALID_TRANSACTION_TIMEOUT
    assert (await c.init_producer_id(TID, 120_001)).error == E.INVALID_TRANSACTION_TIMEOUT
    assert (await c.init_producer_id("", 1000)).error == E.INVALID_REQUEST
    assert await c.add_partitions(TID, 77, 0, [("t1", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert await c.end_transaction(TID, 77, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert all(not h.topic.values(p) for p in range(PARTITIONS))
    init = await c.init_producer_id(TID, 1000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await c.add_partitions(TID, pid + 1, epoch, [("t1", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert await c.end_transaction(TID, pid, epoch, True) == E.INVALID_TXN_STATE
    assert await c.end_transaction(TID, pid, epoch + 1, True) == E.PRODUCER_FENCED
    assert h.state() is TxnState.EMPTY
    assert len(h.topic.values(h.manager.partition_for(TID))) == 1


async def test_a_failed_write_changes_nothing(h: Harness) -> None:
    init = await h.coordinator.init_producer_id(TID, 1000)
    h.topic.fail_next = [E.NOT_ENOUGH_REPLICAS]
    error = await h.coordinator.add_partitions(
        TID, init.producer_id, init.producer_epoch, [("t1", 0)]
    )
    assert error == E.COORDINATOR_NOT_AVAILABLE
    metadata = h.manager.lookup(TID).metadata
    assert metadata is not None
    assert (metadata.state, metadata.partitions, metadata.pending_state) == (
        TxnState.EMPTY,
        set(),
        None,
    )


async def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    h: Harness,
) -> None:
    pid, epoch = await h.begin()
    h.wall[0] += 59_000
    assert h.coordinator.abort_timed_out() == 0
    h.wall[0] += 2_000
    assert h.coordinator.abort_timed_out() == 1
    await h.settle()
    assert h.state() is TxnState.COMPLETE_ABORT
    assert h.leaders.markers() == [(pid, epoch + 1, False, 5, [("t1", 0), ("t1", 1)])]
    assert await h.coordinator.add_partitions(TID, pid, epoch, [("t1", 0)]) == E.PRODUCER_FENCED


async def test_idle_transactional_ids_expire_with_a_tombstone(h: Harness) -> None:
    await h.coordinator.init_producer_id(TID, 1000)
    h.wall[0] += h.coordinator.config.transactional_id_expiration_ms + 1
    assert h.coordinator.expire_transactional_ids() == 1
    await h.settle()
    assert h.manager.lookup(TID).metadata is None
    assert h.topic.values(h.manager.partition_for(TID))[-1] == (TID, None)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
async def test_a_new_coordinator_completes_what_the_old_one_prepared(
    topic: LocalStateTopic, commit: bool
) -> None:
    """PrepareCommit or PrepareAbort left in the log: the new coordinator sends the markers
    at its own epoch and completes the transaction as it was decided."""
    prepared, complete = (
        (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
        if commit
        else (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
    )
    leaders = Leaders(reachable=False)
    wall = [1_000_000]
    old = make_coordinator(topic, leaders, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(old.run)
        h = Harness(old, topic, leaders, wall, nursery)
        h.elect(5)
        await h.settle()
        pid, epoch = await h.begin()
        assert await old.end_transaction(TID, pid, epoch, commit) == E.NONE
        await trio.sleep(1)  # the leaders are unreachable: the markers are retried
        assert h.state() is prepared
        # The partition moves away, and comes back in a newer epoch, to a new coordinator.
        for p in range(PARTITIONS):
            old.manager.unload(p, 6)
        nursery.cancel_scope.cancel()
    leaders.reachable = True
    new = make_coordinator(topic, leaders, wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(new.run)
        h = Harness(new, topic, leaders, wall, nursery)
        h.elect(7)
        assert (await new.init_producer_id(TID, 1000)).error == E.COORDINATOR_LOAD_IN_PROGRESS
        await h.settle()
        assert h.state() is complete
        assert leaders.markers() == [(pid, epoch, commit, 7, [("t1", 0), ("t1", 1)])]
        again = await new.init_producer_id(TID, 1000)
        assert (again.producer_id, again.producer_epoch) == (pid, epoch + 1)
        nursery.cancel_scope.cancel()


async def test_a_fenced_coordinator_gives_the_transaction_up(h: Harness) -> None:
    pid, epoch = await h.begin()
    h.leaders.answer = E.TRANSACTION_COORDINATOR_FENCED
    assert await h.coordinator.end_transaction(TID, pid, epoch, False) == E.NONE
    await h.settle()
    assert h.state() is TxnState.PREPARE_ABORT


async def test_markers_skip_partitions_of_deleted_topics(h: Harness) -> None:
    pid, epoch = await h.begin(TID, ("t1", 0), ("gone", 0))
    h.leaders.gone.add("gone")
    assert await h.coordinator.end_transaction(TID, pid, epoch, True) == E.NONE
    await h.settle()
    assert h.state() is TxnState.COMPLETE_COMMIT
    assert h.leaders.markers() == [(pid, epoch, True, 5, [("t1", 0)])]


async def test_not_the_coordinator_of_a_partition_led_elsewhere(h: Harness) -> None:
    partition = h.manager.partition_for(TID)
    h.manager.unload(partition, 6)
    assert (await h.coordinator.init_producer_id(TID, 1000)).error == E.NOT_COORDINATOR


async def test_admin_views(h: Harness) -> None:
    pid, epoch = await h.begin()
    await h.coordinator.init_producer_id("txn-b", 1000)
    listed = h.coordinator.list_transactions({TxnState.ONGOING}, ())
    assert [(t.transactional_id, t.producer_id) for t in listed] == [(TID, pid)]
    described = h.coordinator.describe(TID)
    assert (described.state, described.partitions, described.producer_epoch) == (
        TxnState.ONGOING,
        frozenset({("t1", 0), ("t1", 1)}),
        epoch,
    )
    assert h.coordinator.describe("nobody").error == E.TRANSACTIONAL_ID_NOT_FOUND


def test_transaction_log_records_round_trip_in_both_versions() -> None:
    value = wire.TransactionLogValue(
        producer_id=7,
        producer_epoch=3,
        transaction_timeout_ms=60000,
        transaction_status=1,
        transaction_partitions=[wire.TransactionPartitions("t", [0, 2])],
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=4,
    )
    for version in (0, 1):
        assert wire.decode_value(wire.encode_value(value, version)) == value
    # Kafka's layout (TransactionLogValue.json), byte for byte: the version, then producer
    # id, epoch, timeout, status, the partitions (nullable array of topic and ids), last
    # update and start times; v1 is flexible (compact arrays and strings, tag buffers).
    fixed = struct.pack(">qhib", 7, 3, 60000, 1)
    times = struct.pack(">qq", 5, 4)
    v0 = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">iii", 2, 0, 2)
    assert wire.encode_value(value, 0) == b"\x00\x00" + fixed + v0[2:] + times
    v1 = bytes([2, 2]) + b"t" + bytes([3]) + struct.pack(">ii", 0, 2) + b"\x00"
    assert wire.encode_value(value, 1) == b"\x00\x01" + fixed + v1 + times + b"\x00"
    assert wire.encode_key("x") == b"\x00\x00\x00\x01x"
    assert wire.decode_key(wire.encode_key("x")) == "x"
