"""TransactionStateManager: the transactional ids this broker coordinates, and their place
in `__transaction_state`.

- An id belongs to partition `abs(hashCode(id)) % transaction.state.log.num.partitions`;
  this broker coordinates the ids of the partitions it leads. The partition's leader epoch
  is the coordinator epoch every marker carries, so a partition leader refuses markers of
  a deposed coordinator.
- Becoming leader of a partition starts a load: the partition is read from its start to its
  end. Meanwhile its ids answer COORDINATOR_LOAD_IN_PROGRESS; once loaded, the coordinator
  is told (to finish the transactions left in PrepareCommit/PrepareAbort). Losing leadership
  drops them (NOT_COORDINATOR). Loads and unloads carry the leader epoch, and one from an
  older epoch than the last seen is ignored.
- Writes: each transition is one record, appended at once and answered once the ISR has it
  (acks=all, bounded by request.timeout.ms); the transition is applied only then, and only
  if this broker is still the coordinator of the same epoch. A completion
  (CompleteCommit/CompleteAbort) is applied as soon as it is appended: nobody is answered
  on it, and every later write of the id lands behind it in the log and waits for the ISR.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from functools import partial

import attrs
import trio

from gregor.broker.coordinator.loading import record_epoch, replay_log
from gregor.broker.coordinator.partitioning import partition_for
from gregor.broker.coordinator.topic_log import APPEND_ERRORS, TopicLog, Write
from gregor.broker.coordinator.transaction.config import TransactionConfig
from gregor.broker.coordinator.transaction.records import LoadedTransactions, transit_batch
from gregor.broker.coordinator.transaction.state import TransactionMetadata, TxnState, TxnTransit
from gregor.broker.topic_names import TRANSACTION_STATE
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


# (partition, coordinator epoch, the ids loaded)
LoadedCallback = Callable[[int, int, list[TransactionMetadata]], None]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define(slots=True, eq=False)
class OwnedPartition:
    coordinator_epoch: int
    transactions: dict[str, TransactionMetadata] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class Lookup:
    """An id's place: an error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) or this
    broker's coordinator epoch for it and its metadata (None: not known)."""

    error: int
    coordinator_epoch: int = -1
    metadata: TransactionMetadata | None = None


class TransactionStateManager:
    def __init__(
        self,
        config: TransactionConfig,
        topic: TopicLog,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.topic = topic
        self.now_ms = wall_clock
        # Fixed when the coordinator starts (the topic's count if it exists), as in Kafka.
        self.partitions = config.state_log_partitions
        self.owned: dict[int, OwnedPartition] = {}
        self.loading: dict[int, int] = {}  # partition -> epoch being loaded
        self.epochs: dict[int, int] = {}  # partition -> the newest leader epoch seen
        self.shutting_down = False
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery, partitions: int | None = None) -> None:
        self._nursery = nursery
        if partitions:
            self.partitions = partitions

    def spawn(self, fn: Callable[..., object], *args: object) -> None:
        if self._nursery is None:
            raise RuntimeError("the transaction state manager is not running")
        self._nursery.start_soon(fn, *args)  # type: ignore[arg-type]

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions)

    # -- lookups ---------------------------------------------------------------------------

    def lookup(self, transactional_id: str) -> Lookup:
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return Lookup(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        owned = self.owned.get(partition)
        if owned is None:
            return Lookup(ErrorCode.NOT_COORDINATOR)
        return Lookup(
            ErrorCode.NONE, owned.coordinator_epoch, owned.transactions.get(transactional_id)
        )

    def put_if_absent(self, metadata: TransactionMetadata) -> TransactionMetadata:
        owned = self.owned[self.partition_for(metadata.transactional_id)]
        return owned.transactions.setdefault(metadata.transactional_id, metadata)

    def is_current(self, transactional_id: str, coordinator_epoch: int) -> bool:
        """Still the coordinator of the id, in that epoch."""
        owned = self.owned.get(self.partition_for(transactional_id))
        return owned is not None and owned.coordinator_epoch == coordinator_epoch

    def all_transactions(self) -> Iterator[tuple[int, TransactionMetadata]]:
        """(coordinator epoch, metadata) of every id loaded here."""
        for owned in list(self.owned.values()):
            for metadata in list(owned.transactions.values()):
                yield owned.coordinator_epoch, metadata

    # -- writes ----------------------------------------------------------------------------

    async def append(
        self,
        metadata: TransactionMetadata,
        transit: TxnTransit,
        coordinator_epoch: int,
        *,
        apply_when_appended: bool = False,
    ) -> int:
        """Write a prepared transition; once the ISR has it (and this broker is still the
        coordinator of the same epoch) apply it. The error: NONE, or what the client is
        told; on an error the transition is abandoned. `apply_when_appended`: apply it once
        it is in the local log, then wait for the ISR only to report (a completion)."""
        tid = metadata.transactional_id
        partition = self.partition_for(tid)
        write = self.topic.append(partition, transit_batch(tid, transit))
        error = write.error
        if error == ErrorCode.NONE and apply_when_appended:
            self._apply(metadata, transit, partition)
            error = await self._replicated(write)
            if error != ErrorCode.NONE:
                # In our log all the same: a new leader replays what the ISR has.
                log.info(
                    "transactional id %s: %s not replicated: %s",
                    tid,
                    transit.state.display,
                    ErrorCode(error).name,
                )
            return ErrorCode.NONE
        if error == ErrorCode.NONE:
            error = await self._replicated(write)
        if error == ErrorCode.NONE and not self.is_current(tid, coordinator_epoch):
            error = ErrorCode.NOT_COORDINATOR
        if error != ErrorCode.NONE:
            error = APPEND_ERRORS.get(error, error)
            log.info(
                "transactional id %s: writing %s failed: %s",
                tid,
                transit.state.display,
                ErrorCode(error).name,
            )
            metadata.abandon_transition()
            return error
        self._apply(metadata, transit, partition)
        return ErrorCode.NONE

    async def _replicated(self, write: Write) -> int:
        """Wait for the ISR, shielded: the request waiting here may be cancelled (its client
        went away), yet the transition it wrote must still be applied or abandoned and what
        follows it (an EndTxn's markers) still happen, as Kafka's append callbacks run
        whatever became of the request. Left pending, it would answer every later request
        of the transactional id CONCURRENT_TRANSACTIONS, for good."""
        error: int = ErrorCode.REQUEST_TIMED_OUT
        with trio.CancelScope(shield=True):
            error = await write.replicated(self.config.append_timeout_ms / 1000)
        return error

    def _apply(self, metadata: TransactionMetadata, transit: TxnTransit, partition: int) -> None:
        metadata.complete_transition(transit)
        if transit.state is TxnState.DEAD:
            owned = self.owned.get(partition)
            tid = metadata.transactional_id
            if owned is not None and owned.transactions.get(tid) is metadata:
                del owned.transactions[tid]

    # -- loading and unloading -------------------------------------------------------------

    def schedule_load(self, partition: int, epoch: int, on_loaded: LoadedCallback) -> None:
        if not record_epoch(self.epochs, partition, epoch):
            log.info(
                "not loading %s-%d of epoch %d: epoch %d was seen",
                TRANSACTION_STATE,
                partition,
                epoch,
                self.epochs[partition],
            )
            return
        owned = self.owned.get(partition)
        if (owned is not None and owned.coordinator_epoch == epoch) or self.loading.get(
            partition
        ) == epoch:
            return
        # A new epoch: whatever was loaded is reloaded (another leader may have written).
        self.owned.pop(partition, None)
        self.loading[partition] = epoch
        log.info("loading transactions of %s-%d (epoch %d)", TRANSACTION_STATE, partition, epoch)
        self.spawn(self._load, partition, epoch, on_loaded)

    async def _load(self, partition: int, epoch: int, on_loaded: LoadedCallback) -> None:
        started = time.monotonic()
        name = f"{TRANSACTION_STATE}-{partition}"
        source = self.topic.leader_log(partition)
        if source is None:
            log.warning("%s: not the leader any more; not loading it", name)
            if self.loading.get(partition) == epoch:
                del self.loading[partition]
            return
        state = LoadedTransactions()
        try:
            await replay_log(
                source,
                partial(state.replay, partition_name=name),
                lambda: self.loading.get(partition) == epoch and not self.shutting_down,
                self.config.load_buffer_size,
            )
        except Exception:
            log.exception("%s: loading transactions failed", name)
        if self.loading.get(partition) != epoch:
            log.info("%s: the load of epoch %d was overtaken; dropping it", name, epoch)
            return
        del self.loading[partition]
        transactions = state.build()
        self.owned[partition] = OwnedPartition(epoch, transactions)
        log.info(
            "%s: loaded %d transactional ids in %.0f ms (epoch %d%s)",
            name,
            len(transactions),
            (time.monotonic() - started) * 1000,
            epoch,
            f", {state.skipped} unreadable records skipped" if state.skipped else "",
        )
        on_loaded(partition, epoch, list(transactions.values()))

    def unload(self, partition: int, epoch: int | None) -> None:
        if not record_epoch(self.epochs, partition, epoch):
            return
        self.loading.pop(partition, None)
        owned = self.owned.pop(partition, None)
        if owned is not None:
            log.info(
                "unloaded %s-%d (epoch %s): %d transactional ids",
                TRANSACTION_STATE,
                partition,
                epoch,
                len(owned.transactions),
            )
