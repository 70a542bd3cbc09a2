"""TransactionCoordinator: the transactional APIs, request by request, with Kafka's errors.

InitProducerId (with a transactional id), AddPartitionsToTxn, AddOffsetsToTxn (through
AddPartitionsToTxn, with the group's `__consumer_offsets` partition), EndTxn, and what the
admin APIs read. Every decision is taken synchronously on the event loop against the id's
metadata (see `state` for the rules), then written to `__transaction_state` and awaited;
a second request for an id with a transition pending gets CONCURRENT_TRANSACTIONS, which
clients retry.

After a PrepareCommit/PrepareAbort is written the client has its answer; the markers are
written in the background (`markers`) and the transaction then completes. The
CompleteCommit/CompleteAbort record takes effect once it is in the log (the id's next
write goes behind it and is answered only once replicated). The producer's next
AddPartitionsToTxn/AddOffsetsToTxn, usually sent while that is under way, waits for it
(up to `completion_wait_ms`) instead of being told CONCURRENT_TRANSACTIONS at once, which
Kafka answers: the clients retry that 20 ms later, longer than completing takes. The same happens
for every transaction found prepared when a partition is loaded, for a transaction aborted
because its producer called InitProducerId again, and for one past its timeout (whose
producer is fenced: its epoch is bumped first). Producer ids come from an allocator the
broker gives (ZooKeeper's `/latest_producer_id_block`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence

import attrs
import trio

from gregor.broker.coordinator.topic_log import PartitionRole
from gregor.broker.coordinator.transaction.config import TransactionConfig
from gregor.broker.coordinator.transaction.manager import TransactionStateManager
from gregor.broker.coordinator.transaction.markers import TxnMarkerChannel
from gregor.broker.coordinator.transaction.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransition,
    ProducerFenced,
    TopicPartition,
    TransactionMetadata,
    TxnState,
)
from gregor.broker.topic_names import TRANSACTION_STATE
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

ProducerIdAllocator = Callable[[], Awaitable[int]]


@attrs.frozen(slots=True)
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@attrs.frozen(slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: TxnState


@attrs.frozen(slots=True)
class TransactionDescription:
    error: int
    transactional_id: str
    state: TxnState = TxnState.EMPTY
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: TransactionConfig,
        manager: TransactionStateManager,
        markers: TxnMarkerChannel,
        allocate_producer_id: ProducerIdAllocator,
        existing_partitions: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.manager = manager
        self.markers = markers
        self.allocate_producer_id = allocate_producer_id
        self._existing_partitions = existing_partitions
        # Set once the transaction being completed for the id (markers, then Complete*) is.
        self._completing: dict[str, trio.Event] = {}

    def now_ms(self) -> int:
        return self.manager.now_ms()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Loads, marker writes and the periodic scans; cancel to stop."""
        partitions = None
        if self._existing_partitions is not None:
            try:
                partitions = await self._existing_partitions()
            except Exception:
                log.exception("cannot read the partition count of %s", TRANSACTION_STATE)
        async with trio.open_nursery() as nursery:
            self.manager.start(nursery, partitions)
            nursery.start_soon(
                self._every, self.config.abort_timed_out_interval_ms, self.abort_timed_out
            )
            nursery.start_soon(
                self._every, self.config.remove_expired_interval_ms, self.expire_transactional_ids
            )
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.manager.shutting_down = True

    async def _every(self, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                job()
            except Exception:
                log.exception("transaction coordinator: %s failed", job)

    # -- leadership ------------------------------------------------------------------------

    def on_leadership_change(
        self, led: Sequence[PartitionRole], resigned: Sequence[PartitionRole]
    ) -> None:
        for p in led:
            if p.topic == TRANSACTION_STATE and p.is_leader:
                self.manager.schedule_load(p.partition, p.leader_epoch, self._on_loaded)
        for p in resigned:
            if p.topic == TRANSACTION_STATE:
                self.manager.unload(p.partition, p.leader_epoch)

    def _on_loaded(
        self, partition: int, coordinator_epoch: int, loaded: list[TransactionMetadata]
    ) -> None:
        """Finish what the previous coordinator left prepared."""
        for metadata in loaded:
            if metadata.state.is_prepare:
                log.info(
                    "transactional id %s was left in %s; completing it",
                    metadata.transactional_id,
                    metadata.state.display,
                )
                self._spawn_completion(metadata, coordinator_epoch)

    # -- InitProducerId --------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        found = self.manager.lookup(transactional_id)
        if found.error != ErrorCode.NONE:
            return InitResult(found.error)
        metadata = found.metadata
        if metadata is None:
            producer_id = await self.allocate_producer_id()
            found = self.manager.lookup(transactional_id)  # the await let others in
            if found.error != ErrorCode.NONE:
                return InitResult(found.error)
            metadata = self.manager.put_if_absent(
                TransactionMetadata(
                    transactional_id,
                    producer_id=producer_id,
                    previous_producer_id=NO_PRODUCER_ID,
                    producer_epoch=NO_PRODUCER_EPOCH,
                    last_producer_epoch=NO_PRODUCER_EPOCH,
                    timeout_ms=timeout_ms,
                    state=TxnState.EMPTY,
                    update_ms=self.now_ms(),
                )
            )
        coordinator_epoch = found.coordinator_epoch
        expected = None if expected_producer_id == NO_PRODUCER_ID else expected_epoch
        new_producer_id = None
        if (
            metadata.is_epoch_exhausted
            and metadata.state.is_expirable
            and expected in (None, metadata.producer_epoch)
        ):
            new_producer_id = await self.allocate_producer_id()
            if not self.manager.is_current(transactional_id, coordinator_epoch):
                return InitResult(ErrorCode.NOT_COORDINATOR)
        if metadata.pending_state is not None:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not _is_known_producer(
            metadata, expected_producer_id, expected
        ):
            return InitResult(ErrorCode.PRODUCER_FENCED)
        state = metadata.state
        if state.is_prepare or state is TxnState.PREPARE_EPOCH_FENCE:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state is TxnState.ONGOING:
            # The producer restarted: fence its old epoch and abort what it left open; it
            # retries (CONCURRENT_TRANSACTIONS) until the abort is complete.
            metadata.fence_epoch()
            error = await self._end(metadata, coordinator_epoch, commit=False)
            return InitResult(
                error if error != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS
            )
        if state is TxnState.DEAD:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        now = self.now_ms()
        try:
            if new_producer_id is not None:
                transit = metadata.prepare_producer_id_rotation(
                    new_producer_id, timeout_ms, now, record_last_epoch=expected is not None
                )
            else:
                transit = metadata.prepare_epoch_bump(timeout_ms, now, expected)
        except ProducerFenced as exc:
            log.info("%s", exc)
            return InitResult(ErrorCode.PRODUCER_FENCED)
        error = await self.manager.append(metadata, transit, coordinator_epoch)
        if error != ErrorCode.NONE:
            return InitResult(error)
        log.info(
            "transactional id %s: producer %d, epoch %d",
            transactional_id,
            transit.producer_id,
            transit.producer_epoch,
        )
        return InitResult(ErrorCode.NONE, transit.producer_id, transit.producer_epoch)

    # -- the checks every transactional request passes ---------------------------------------

    def _checked(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        pending_too: bool = False,
    ) -> tuple[int, int, TransactionMetadata | None]:
        """(error, coordinator epoch, metadata) for a request of the producer; with a
        transition pending, CONCURRENT_TRANSACTIONS unless `pending_too`."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, None
        found = self.manager.lookup(transactional_id)
        if found.error != ErrorCode.NONE:
            return found.error, -1, None
        metadata = found.metadata
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, None
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, -1, None
        if metadata.pending_state is not None and not pending_too:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, None
        return ErrorCode.NONE, found.coordinator_epoch, metadata

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> int:
        completing = self._completing.get(transactional_id)
        if completing is not None:
            with trio.move_on_after(self.config.completion_wait_ms / 1000):
                await completing.wait()
        error, coordinator_epoch, metadata = self._checked(
            transactional_id, producer_id, producer_epoch
        )
        if metadata is None:
            return error
        if metadata.state.is_prepare or metadata.state is TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state is TxnState.DEAD:
            return ErrorCode.INVALID_TXN_STATE
        if metadata.state is TxnState.ONGOING and metadata.partitions.issuperset(partitions):
            return ErrorCode.NONE
        transit = metadata.prepare_add_partitions(partitions, self.now_ms())
        return await self.manager.append(metadata, transit, coordinator_epoch)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn's verify_only: which partitions the transaction has.

        A transition under way is no reason to refuse, as in Kafka: partitions join the
        transaction once their AddPartitionsToTxn is written, so those found are in it (a
        producer adding another partition meanwhile need not stall its batches)."""
        error, _, metadata = self._checked(
            transactional_id, producer_id, producer_epoch, pending_too=True
        )
        if metadata is None:
            return {tp: error for tp in partitions}
        if metadata.state.is_prepare:
            return {tp: ErrorCode.CONCURRENT_TRANSACTIONS for tp in partitions}
        ongoing = metadata.state is TxnState.ONGOING
        return {
            tp: ErrorCode.NONE
            if ongoing and tp in metadata.partitions
            else ErrorCode.INVALID_TXN_STATE
            for tp in partitions
        }

    # -- EndTxn ----------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        error, coordinator_epoch, metadata = self._checked(
            transactional_id, producer_id, producer_epoch
        )
        if metadata is None:
            return error
        state = metadata.state
        if state is TxnState.ONGOING:
            return await self._end(metadata, coordinator_epoch, commit)
        wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state is wanted:
            return ErrorCode.NONE  # a retry of an EndTxn that was done
        if state is preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    async def _end(
        self, metadata: TransactionMetadata, coordinator_epoch: int, commit: bool
    ) -> int:
        """Write PrepareCommit/PrepareAbort, then have the markers written in the background."""
        try:
            transit = metadata.prepare_end(commit, self.now_ms())
        except IllegalTransition as exc:
            log.error("%s", exc)
            return ErrorCode.INVALID_TXN_STATE
        error = await self.manager.append(metadata, transit, coordinator_epoch)
        if error == ErrorCode.NONE:
            self._spawn_completion(metadata, coordinator_epoch)
        return error

    def _spawn_completion(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        tid = metadata.transactional_id
        done = self._completing.get(tid)
        if done is None:
            done = self._completing[tid] = trio.Event()
        self.manager.spawn(self._complete, metadata, coordinator_epoch, done)

    async def _complete(
        self, metadata: TransactionMetadata, coordinator_epoch: int, done: trio.Event
    ) -> None:
        tid = metadata.transactional_id
        try:
            await self._write_markers_and_complete(metadata, coordinator_epoch)
        finally:
            done.set()
            if self._completing.get(tid) is done:
                del self._completing[tid]

    async def _write_markers_and_complete(
        self, metadata: TransactionMetadata, coordinator_epoch: int
    ) -> None:
        """The markers of a prepared transaction, then CompleteCommit/CompleteAbort."""
        tid = metadata.transactional_id

        def current() -> bool:
            return self.manager.is_current(tid, coordinator_epoch)

        written = await self.markers.write_markers(
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.state is TxnState.PREPARE_COMMIT,
            coordinator_epoch,
            set(metadata.partitions),
            current,
        )
        while written and current():
            if metadata.pending_state is not None or not metadata.state.is_prepare:
                log.error("transactional id %s: %s while completing", tid, metadata)
                return
            transit = metadata.prepare_complete(self.now_ms())
            error = await self.manager.append(
                metadata, transit, coordinator_epoch, apply_when_appended=True
            )
            if error in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                return
            await trio.sleep(self.config.marker_retry_backoff_ms / 1000)

    # -- timeouts and expiry ---------------------------------------------------------------

    def abort_timed_out(self) -> int:
        """Abort every Ongoing transaction past its timeout, fencing its producer."""
        now = self.now_ms()
        aborted = 0
        for coordinator_epoch, metadata in self.manager.all_transactions():
            if (
                metadata.state is not TxnState.ONGOING
                or metadata.pending_state is not None
                or metadata.start_ms + metadata.timeout_ms > now
            ):
                continue
            log.info(
                "transactional id %s: the transaction of producer %d/%d timed out; aborting it",
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
            )
            metadata.fence_epoch()
            self.manager.spawn(self._end, metadata, coordinator_epoch, False)
            aborted += 1
        return aborted

    def expire_transactional_ids(self) -> int:
        """Forget the ids idle past transactional.id.expiration.ms (a tombstone each)."""
        now = self.now_ms()
        expired = 0
        for coordinator_epoch, metadata in self.manager.all_transactions():
            if (
                not metadata.state.is_expirable
                or metadata.pending_state is not None
                or metadata.update_ms + self.config.transactional_id_expiration_ms > now
            ):
                continue
            transit = metadata.prepare_dead(now)
            self.manager.spawn(self.manager.append, metadata, transit, coordinator_epoch)
            expired += 1
        if expired:
            log.info("expiring %d transactional ids", expired)
        return expired

    # -- admin -----------------------------------------------------------------------------

    def list_transactions(
        self,
        states: Collection[TxnState],
        producer_ids: Collection[int],
        min_duration_ms: int = -1,
    ) -> list[TransactionListing]:
        now = self.now_ms()
        out = []
        for _, metadata in self.manager.all_transactions():
            if states and metadata.state not in states:
                continue
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (
                metadata.start_ms < 0 or now - metadata.start_ms < min_duration_ms
            ):
                continue
            out.append(
                TransactionListing(metadata.transactional_id, metadata.producer_id, metadata.state)
            )
        return out

    def describe(self, transactional_id: str) -> TransactionDescription:
        found = self.manager.lookup(transactional_id) if transactional_id else None
        if found is None:
            return TransactionDescription(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        if found.error != ErrorCode.NONE:
            return TransactionDescription(found.error, transactional_id)
        metadata = found.metadata
        if metadata is None or metadata.state is TxnState.DEAD:
            return TransactionDescription(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        return TransactionDescription(
            ErrorCode.NONE,
            transactional_id,
            metadata.state,
            metadata.timeout_ms,
            metadata.start_ms,
            metadata.producer_id,
            metadata.producer_epoch,
            frozenset(metadata.partitions),
        )


def _is_known_producer(metadata: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """InitProducerId v3+ from a producer that knows its id (KIP-360), as Kafka checks it:
    the id has no epoch yet, or it is the current producer id (its epoch is checked by the
    bump), or the previous one with an exhausted epoch (a retry of the rotation it did not
    hear of)."""
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == metadata.producer_id
        or (producer_id == metadata.previous_producer_id and epoch >= MAX_EPOCH - 1)
    )
