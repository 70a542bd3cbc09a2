"""Producer ids, sequence numbers and transactions (KIP-98).

An idempotent producer gets a producer id and epoch (InitProducerId) and numbers each
partition's records from 0; the sender stamps a batch's base sequence when it first drains
it and never changes it, so a retry is recognised by the broker as the same batch. A
transactional producer gets its id from its transaction coordinator (init_transactions),
registers each partition (AddPartitionsToTxn) before its first batch in a transaction, and
ends the transaction with EndTxn; consumed offsets join it through AddOffsetsToTxn and
TxnOffsetCommit.

Errors are classified as the Java client classifies them:
- retriable (a coordinator moving or loading, CONCURRENT_TRANSACTIONS while the previous
  transaction's markers are written): retried here, up to max.block.ms; past that the call
  raises RequestTimedOutError and may be called again;
- abortable (a record that could not be written, a group generation that is gone): the
  transaction cannot commit. commit_transaction and send_offsets_to_transaction raise
  `TransactionAbortableError` (the cause chained); abort_transaction() ends it, and the
  producer goes on with the next transaction. An abort drops the records not sent yet
  (they fail with `TransactionAbortedError`, as the Java client's do) and waits for those
  in flight;
- fatal: ProducerFencedError (another producer took over the transactional.id: PRODUCER_FENCED
  or INVALID_PRODUCER_EPOCH from the coordinator), authorization and version errors, an
  INVALID_TXN_STATE or INVALID_TRANSACTION_TIMEOUT. Every later transactional call raises
  the same error; the producer can only be closed.

What the broker does not support is reported, not papered over: idempotence that was asked
for explicitly (or implied by transactional.id) fails with a clear UnsupportedVersionError
when the broker has no InitProducerId; idempotence that is merely the default is dropped
with a log line, as the producer then still works (without exactly-once) as it did before.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

import attrs
import trio

from gregor.client.config import ProducerConfig
from gregor.client.coordinator_lookup import CoordinatorType, find_coordinator
from gregor.client.network import BOOTSTRAP, NetworkClient
from gregor.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TopicPartition,
    partitions_by_topic,
)
from gregor.protocol.apis.add_offsets_to_txn import AddOffsetsToTxnRequest
from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
)
from gregor.protocol.apis.end_txn import EndTxnRequest
from gregor.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from gregor.protocol.apis.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from gregor.protocol.errors import (
    ErrorCode,
    InvalidTxnStateError,
    KafkaError,
    NetworkError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    UnsupportedVersionError,
)
from gregor.protocol.schema import Request, Response

log = logging.getLogger(__name__)

MAX_SEQUENCE = 2**31


class TransactionAbortedError(KafkaError):
    """A record still queued when its transaction was aborted: it was never sent (Java's
    TransactionAbortedException; no broker error code)."""


CONCURRENT_BACKOFF = 0.02  # seconds
E = ErrorCode

# Answers that send the request to a freshly looked-up coordinator.
_MOVED = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT})
# Answers after which this producer can never go on (beyond fencing, which maps to
# ProducerFencedError).
_FATAL = frozenset(
    {
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        E.CLUSTER_AUTHORIZATION_FAILED,
        E.UNSUPPORTED_VERSION,
        E.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        E.INVALID_TXN_STATE,
        E.INVALID_TRANSACTION_TIMEOUT,
    }
)
_FENCED = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH})
# Answers that doom only the current transaction, whatever the request.
_ABORTABLE = frozenset(
    {
        E.TOPIC_AUTHORIZATION_FAILED,
        E.GROUP_AUTHORIZATION_FAILED,
        E.UNKNOWN_PRODUCER_ID,
        E.INVALID_PRODUCER_ID_MAPPING,
        E.UNKNOWN_MEMBER_ID,
        E.ILLEGAL_GENERATION,
        E.FENCED_INSTANCE_ID,
        E.TRANSACTION_ABORTABLE,
    }
)
# A produce error that is fatal rather than abortable (the rest doom the transaction only).
_FATAL_PRODUCE = (ProducerFencedError, UnsupportedVersionError)


def _error_code(response: Response) -> int:
    """The top-level error code of the responses that have one."""
    code: int = getattr(response, "error_code")  # noqa: B009
    return code


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE = "abortable error"
    ABORTING = "aborting"
    FATAL = "fatal error"


@attrs.define
class _AddRound:
    """One AddPartitionsToTxn and what its waiters learn of it."""

    partitions: list[TopicPartition]
    done: trio.Event = attrs.Factory(trio.Event)
    error: KafkaError | None = None


class TransactionManager:
    def __init__(self, config: ProducerConfig, client: NetworkClient) -> None:
        self.config = config
        self.client = client
        self.transactional_id = config.transactional_id
        self.idempotent = config.enable_idempotence
        self.required = config.idempotence_required
        self.producer_id = -1
        self.producer_epoch = -1
        self.state = TxnState.UNINITIALIZED
        self.fatal: KafkaError | None = None
        self.abortable: KafkaError | None = None  # why the open transaction cannot commit
        self._sequences: dict[TopicPartition, int] = {}
        # Per partition: the sequence after the last batch that got its outcome.
        self._resolved: dict[TopicPartition, int] = {}
        self._txn_partitions: set[TopicPartition] = set()
        # Partitions with batches that are not added yet: the next AddPartitionsToTxn
        # takes them all, as the Java client's does (one request, not one per broker).
        self._to_add: set[TopicPartition] = set()
        self._adding: _AddRound | None = None  # the AddPartitionsToTxn in flight
        self._started = False  # the coordinator knows the open transaction (EndTxn needed)
        self._renumber = False  # a numbered batch failed: sequences restart after the abort
        self._coordinator: int | None = None
        self._group_coordinators: dict[str, int] = {}
        self._init_lock = trio.Lock()

    @property
    def needs_producer_id(self) -> bool:
        """The sender gets an idempotent producer's id itself; a transactional producer's
        comes from init_transactions()."""
        return (
            self.idempotent
            and self.transactional_id is None
            and self.producer_id < 0
            and self.fatal is None
        )

    @property
    def timeout(self) -> float:
        return self.config.max_block_ms / 1000

    def next_sequence(self, tp: TopicPartition, count: int) -> int:
        """The base sequence of a partition's next batch of `count` records."""
        base = self._sequences.get(tp, 0)
        self._sequences[tp] = (base + count) % MAX_SEQUENCE
        return base

    def resolved(self, tp: TopicPartition, base_sequence: int, count: int) -> None:
        """A numbered batch got its outcome (written, or failed for good)."""
        self._resolved[tp] = (base_sequence + count) % MAX_SEQUENCE

    def follows_unresolved(self, tp: TopicPartition, base_sequence: int) -> bool:
        """Whether a batch before this one has no outcome yet: it is being retried, so an
        OUT_OF_ORDER_SEQUENCE_NUMBER for this one is retried too, as the Java client does."""
        return base_sequence != self._resolved.get(tp, 0)

    def batch_failed(self, error: KafkaError, numbered: bool) -> None:
        """A batch of the open transaction failed for good: it cannot commit (or, fenced,
        this producer can do nothing more)."""
        if self.transactional_id is None:
            return
        # The partition's sequence has a gap now: the abort starts a new epoch.
        self._renumber |= numbered
        if self.state is not TxnState.IN_TRANSACTION:
            return
        if isinstance(error, _FATAL_PRODUCE):
            self._fail(error)
        else:
            self.state = TxnState.ABORTABLE
            self.abortable = error

    # -- producer ids ----------------------------------------------------------------------

    async def init_producer_id(self) -> None:
        """Get a producer id and epoch (once; concurrent callers share the attempt)."""
        async with self._init_lock:
            if self.fatal is not None:
                raise self.fatal
            if self.producer_id >= 0 and self.transactional_id is None:
                return
            try:
                await self._init_producer_id()
            except UnsupportedVersionError as exc:
                if self.required:
                    kind = "transactions" if self.transactional_id else "idempotence"
                    raise self._fail(
                        UnsupportedVersionError(
                            f"{kind} is enabled but the broker does not support it: {exc}"
                        )
                    ) from exc
                log.info("the broker does not support idempotence; producing without it")
                self.idempotent = False

    async def _init_producer_id(self) -> None:
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.config.transaction_timeout_ms,
        )
        if self.transactional_id is None:

            async def bootstrap() -> int:
                return BOOTSTRAP

            response = await self._retrying("InitProducerId", bootstrap, request)
        else:
            response = await self._call_coordinator("InitProducerId", request)
        assert isinstance(response, InitProducerIdResponse)
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch
        self._sequences.clear()
        self._resolved.clear()
        self.state = TxnState.READY

    # -- requests to coordinators, retried as Kafka retries them -----------------------------

    async def _call_coordinator(
        self,
        what: str,
        request: Request,
        error_of: Callable[[Response], int] | None = None,
        version: int | None = None,
    ) -> Response:
        """A request to the transaction coordinator, retried through moves and loads."""
        assert self.transactional_id is not None
        tid = self.transactional_id

        async def node() -> int:
            if self._coordinator is None:
                self._coordinator = await find_coordinator(
                    self.client, tid, CoordinatorType.TRANSACTION, self.timeout
                )
            return self._coordinator

        def forget() -> None:
            self._coordinator = None

        return await self._retrying(what, node, request, error_of, forget, version)

    async def _retrying(
        self,
        what: str,
        node: Callable[[], Awaitable[int]],
        request: Request,
        error_of: Callable[[Response], int] | None = None,
        forget: Callable[[], None] | None = None,
        version: int | None = None,
    ) -> Response:
        """Send until an answer that is not retriable, within max.block.ms; return it when
        it has no error, else raise the error as classified (fatal ones end the producer,
        abortable ones the transaction)."""
        attempts = 0
        last: object = None
        with trio.move_on_after(self.timeout):
            while True:
                try:
                    response = await self.client.request(await node(), request, version)
                except NetworkError as exc:
                    last = exc
                    if forget is not None:
                        forget()
                else:
                    code = (error_of or _error_code)(response)
                    if code == E.NONE:
                        return response
                    error = KafkaError.for_code(code)
                    last = error.error_name()
                    if code in _MOVED and forget is not None:
                        forget()
                    elif not error.retriable:
                        raise self._classify(what, code)
                delay = self.client.retry_backoff.delay(attempts)
                if last == "CONCURRENT_TRANSACTIONS":
                    # The previous transaction's markers are being written, which takes
                    # milliseconds: the Java client retries after 20 ms, not retry.backoff.ms.
                    delay = min(delay, CONCURRENT_BACKOFF)
                await trio.sleep(delay)
                attempts += 1
        raise RequestTimedOutError(f"{what}: no answer within max.block.ms ({last})")

    def _classify(self, what: str, code: int) -> KafkaError:
        """The error to raise for a non-retriable answer, with the producer's state moved."""
        name = KafkaError.for_code(code).error_name()
        if code in _FENCED:
            return self._fail(
                ProducerFencedError(
                    f"{what}: {name}: another producer with transactional.id "
                    f"{self.transactional_id!r} took over (this one is fenced)"
                )
            )
        if code in _ABORTABLE and self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTING):
            self.state = TxnState.ABORTABLE
            self.abortable = KafkaError.for_code(code)(f"{what}: {name}")
            return self._abortable_error()
        if code == E.INVALID_TRANSACTION_TIMEOUT:
            return self._fail(
                KafkaError.for_code(code)(
                    f"{what}: {name}: transaction.timeout.ms={self.config.transaction_timeout_ms}"
                    " is refused by the coordinator (over the broker's "
                    "transaction.max.timeout.ms, or not positive)"
                )
            )
        return self._fail(KafkaError.for_code(code)(f"{what}: {name}"))

    def _fail(self, error: KafkaError) -> KafkaError:
        self.state = TxnState.FATAL
        self.fatal = error
        return error

    def _abortable_error(self) -> TransactionAbortableError:
        error = TransactionAbortableError(
            f"the transaction cannot commit ({self.abortable}): call abort_transaction()"
        )
        error.__cause__ = self.abortable
        return error

    # -- transactions ----------------------------------------------------------------------

    def _require(self, action: str, *states: TxnState) -> None:
        if self.transactional_id is None:
            raise InvalidTxnStateError(f"{action} needs a transactional.id")
        if self.fatal is not None:
            raise self.fatal
        if self.state not in states:
            if self.state is TxnState.ABORTABLE:
                raise self._abortable_error()
            raise InvalidTxnStateError(f"{action} in state {self.state.value}")

    async def init_transactions(self) -> None:
        self._require("init_transactions", TxnState.UNINITIALIZED)
        await self.init_producer_id()

    def begin(self) -> None:
        self._require("begin_transaction", TxnState.READY)
        self.state = TxnState.IN_TRANSACTION
        self._txn_partitions.clear()
        self._to_add.clear()
        self._started = False
        self.abortable = None

    @property
    def in_transaction(self) -> bool:
        return self.state is TxnState.IN_TRANSACTION

    def want_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions that have batches of the open transaction: the next AddPartitionsToTxn
        takes them along (a no-op outside a transaction)."""
        if self.state is TxnState.IN_TRANSACTION:
            added = self._txn_partitions
            self._to_add.update(tp for tp in partitions if tp not in added)

    async def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Register partitions with the transaction before their first batch goes out (a
        no-op for a producer that is not transactional). Callers meanwhile share one
        request: each waits for the one in flight, and the next takes every partition
        wanted by then."""
        if self.transactional_id is None:
            return
        wanted = set(partitions)
        while True:
            self._require("producing", TxnState.IN_TRANSACTION, TxnState.ABORTING)
            missing = wanted - self._txn_partitions
            if not missing:
                return
            self._to_add |= missing
            adding = self._adding
            if adding is not None:
                await adding.done.wait()
                if adding.error is not None and not missing.isdisjoint(adding.partitions):
                    raise adding.error
                continue
            adding = self._adding = _AddRound(sorted(self._to_add))
            self._to_add.clear()
            try:
                await self._add(adding.partitions)
            except KafkaError as exc:
                adding.error = exc
                raise
            finally:
                self._adding = None
                adding.done.set()

    async def _add(self, new: list[TopicPartition]) -> None:
        assert self.transactional_id is not None
        topics = [AddPartitionsToTxnTopic(t, ps) for t, ps in partitions_by_topic(new).items()]
        # v4+ (several transactions, verify_only) is for brokers; clients send v3 or older.
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=topics,
        )

        def error_of(response: Response) -> int:
            assert isinstance(response, AddPartitionsToTxnResponse)
            codes = [
                p.partition_error_code
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
            # OPERATION_NOT_ATTEMPTED: refused because another partition was; that one says why.
            return response.error_code or next(
                (c for c in codes if c not in (E.NONE, E.OPERATION_NOT_ATTEMPTED)), E.NONE
            )

        await self._call_coordinator(
            "AddPartitionsToTxn",
            request,
            error_of,
            await self._version(AddPartitionsToTxnRequest, 3),
        )
        self._txn_partitions.update(new)
        self._started = True

    async def _version(self, api: type[Request], highest: int) -> int:
        """The version of a coordinator request: the coordinator's highest up to `highest`
        (a later one would change what the client must do, as EndTxn v5's epoch bumps)."""
        assert self.transactional_id is not None
        if self._coordinator is None:
            self._coordinator = await find_coordinator(
                self.client, self.transactional_id, CoordinatorType.TRANSACTION, self.timeout
            )
        try:
            connection = await self.client.connect(self._coordinator)
        except NetworkError:
            self._coordinator = None
            return highest  # the retried request finds out
        return connection.version_for(api, max_version=highest)

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
    ) -> None:
        self._require("send_offsets_to_transaction", TxnState.IN_TRANSACTION)
        assert self.transactional_id is not None
        group_id = group.group_id
        await self._call_coordinator(
            f"AddOffsetsToTxn for group {group_id!r}",
            AddOffsetsToTxnRequest(
                self.transactional_id, self.producer_id, self.producer_epoch, group_id
            ),
        )
        self._started = True
        by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for tp, meta in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                TxnOffsetCommitRequestPartition(
                    tp.partition,
                    meta.offset,
                    -1 if meta.leader_epoch is None else meta.leader_epoch,
                    meta.metadata,
                )
            )
        request = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=[TxnOffsetCommitRequestTopic(t, ps) for t, ps in by_topic.items()],
        )

        async def node() -> int:
            if group_id not in self._group_coordinators:
                self._group_coordinators[group_id] = await find_coordinator(
                    self.client, group_id, CoordinatorType.GROUP, self.timeout
                )
            return self._group_coordinators[group_id]

        def error_of(response: Response) -> int:
            assert isinstance(response, TxnOffsetCommitResponse)
            codes = [p.error_code for t in response.topics for p in t.partitions]
            return next((c for c in codes if c), E.NONE)

        await self._retrying(
            f"TxnOffsetCommit for group {group_id!r}",
            node,
            request,
            error_of,
            lambda: self._forget_group(group_id),
        )

    def _forget_group(self, group_id: str) -> None:
        self._group_coordinators.pop(group_id, None)

    def check_commit(self) -> None:
        self._require("commit_transaction", TxnState.IN_TRANSACTION)

    def abort_started(self) -> None:
        """abort_transaction began (or is called again after a timeout)."""
        self._require(
            "abort_transaction", TxnState.IN_TRANSACTION, TxnState.ABORTABLE, TxnState.ABORTING
        )
        self.state = TxnState.ABORTING

    async def end(self, commit: bool) -> None:
        """EndTxn (the caller has flushed what was produced). An empty transaction, which
        the coordinator never heard of, ends here."""
        if commit:
            self._require("commit_transaction", TxnState.IN_TRANSACTION)
        else:
            self._require("abort_transaction", TxnState.ABORTING)
        if self._started:
            assert self.transactional_id is not None
            await self._call_coordinator(
                f"EndTxn ({'commit' if commit else 'abort'})",
                EndTxnRequest(self.transactional_id, self.producer_id, self.producer_epoch, commit),
                version=await self._version(EndTxnRequest, 4),  # v5: an epoch per transaction
            )
        bump = self._renumber
        self._renumber = False
        self.state = TxnState.READY
        self._txn_partitions.clear()
        self._started = False
        self.abortable = None
        if bump:
            # A batch of the aborted transaction may have failed after it was numbered:
            # a new epoch starts every partition's sequence again (KIP-360's bump).
            await self._init_producer_id()
