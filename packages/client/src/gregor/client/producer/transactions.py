"""Producer ids, sequence numbers and transactions (KIP-98).

An idempotent producer gets a producer id and epoch (InitProducerId) and numbers each
partition's records from 0; the sender stamps a batch's base sequence when it first drains
it and never changes it, so a retry is recognised by the broker as the same batch. A
transactional producer gets its id from its transaction coordinator, registers each
partition (AddPartitionsToTxn) before its first batch in a transaction, and ends the
transaction with EndTxn; consumed offsets join it through AddOffsetsToTxn and
TxnOffsetCommit.

What the broker does not support is reported, not papered over: idempotence that was asked
for explicitly (or implied by transactional.id) fails with a clear UnsupportedVersionError
when the broker has no InitProducerId; idempotence that is merely the default is dropped
with a log line, as the producer then still works (without exactly-once) as it did before.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping

import trio

from gregor.client.config import ProducerConfig
from gregor.client.coordinator_lookup import CoordinatorType, find_coordinator
from gregor.client.network import BOOTSTRAP, NetworkClient
from gregor.client.types import OffsetAndMetadata, TopicPartition, partitions_by_topic
from gregor.protocol.apis.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from gregor.protocol.apis.end_txn import EndTxnRequest, EndTxnResponse
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
    RequestTimedOutError,
    UnsupportedVersionError,
)

log = logging.getLogger(__name__)

MAX_SEQUENCE = 2**31


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    FATAL = "fatal error"


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
        self._sequences: dict[TopicPartition, int] = {}
        # Per partition: the sequence after the last batch that got its outcome.
        self._resolved: dict[TopicPartition, int] = {}
        self._txn_partitions: set[TopicPartition] = set()
        self._coordinator: int | None = None
        self._init_lock = trio.Lock()

    @property
    def needs_producer_id(self) -> bool:
        return self.idempotent and self.producer_id < 0 and self.fatal is None

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

    # -- producer ids ----------------------------------------------------------------------

    async def init_producer_id(self) -> None:
        """Get a producer id and epoch (once; concurrent callers share the attempt)."""
        async with self._init_lock:
            if not self.needs_producer_id:
                if self.fatal is not None:
                    raise self.fatal
                return
            try:
                await self._init_producer_id()
            except UnsupportedVersionError as exc:
                if self.required:
                    kind = "transactions" if self.transactional_id else "idempotence"
                    self.fatal = UnsupportedVersionError(
                        f"{kind} is enabled but the broker does not support it: {exc}"
                    )
                    self.state = TxnState.FATAL
                    raise self.fatal from exc
                log.info("the broker does not support idempotence; producing without it")
                self.idempotent = False

    async def _init_producer_id(self) -> None:
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.config.transaction_timeout_ms,
        )
        attempts = 0
        with trio.move_on_after(self.timeout):
            while True:
                node = await self._coordinator_node() if self.transactional_id else BOOTSTRAP
                try:
                    response = await self.client.request(node, request)
                    assert isinstance(response, InitProducerIdResponse)
                except NetworkError:
                    self._coordinator = None
                else:
                    if response.error_code == ErrorCode.NONE:
                        self.producer_id = response.producer_id
                        self.producer_epoch = response.producer_epoch
                        self._sequences.clear()
                        self._resolved.clear()
                        self.state = TxnState.READY
                        return
                    error = KafkaError.for_code(response.error_code)
                    if not error.retriable:
                        raise error(f"InitProducerId: {error.error_name()}")
                    if response.error_code in (
                        ErrorCode.NOT_COORDINATOR,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ):
                        self._coordinator = None
                await trio.sleep(self.client.retry_backoff.delay(attempts))
                attempts += 1
        raise RequestTimedOutError(f"no producer id within max.block.ms ({self.timeout:.1f}s)")

    async def _coordinator_node(self) -> int:
        if self._coordinator is None:
            assert self.transactional_id is not None
            self._coordinator = await find_coordinator(
                self.client, self.transactional_id, CoordinatorType.TRANSACTION, self.timeout
            )
        return self._coordinator

    # -- transactions ----------------------------------------------------------------------

    def _require_transactional(self, action: str) -> None:
        if self.transactional_id is None:
            raise InvalidTxnStateError(f"{action} needs a transactional.id")
        if self.fatal is not None:
            raise self.fatal

    async def init_transactions(self) -> None:
        self._require_transactional("init_transactions")
        await self.init_producer_id()

    def begin(self) -> None:
        self._require_transactional("begin_transaction")
        if self.state is not TxnState.READY:
            raise InvalidTxnStateError(f"begin_transaction in state {self.state.value}")
        self.state = TxnState.IN_TRANSACTION
        self._txn_partitions.clear()

    @property
    def in_transaction(self) -> bool:
        return self.state is TxnState.IN_TRANSACTION

    async def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Register partitions with the transaction before their first batch goes out."""
        new = sorted(set(partitions) - self._txn_partitions)
        if not new or not self.in_transaction:
            return
        topics = [AddPartitionsToTxnTopic(t, ps) for t, ps in partitions_by_topic(new).items()]
        node = await self._coordinator_node()
        connection = await self.client.connect(node)
        version = connection.version_for(AddPartitionsToTxnRequest, max_version=5)
        assert self.transactional_id is not None
        if version >= 4:
            request = AddPartitionsToTxnRequest(
                transactions=[
                    AddPartitionsToTxnTransaction(
                        self.transactional_id, self.producer_id, self.producer_epoch, False, topics
                    )
                ]
            )
        else:
            request = AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=topics,
            )
        response = await self.client.send(connection, request, version)
        assert isinstance(response, AddPartitionsToTxnResponse)
        if response.error_code:
            raise KafkaError.for_code(response.error_code)("AddPartitionsToTxn")
        results = (
            [t for r in response.results_by_transaction for t in r.topic_results]
            if version >= 4
            else response.results_by_topic_v3_and_below
        )
        for topic in results:
            for p in topic.results_by_partition:
                if p.partition_error_code:
                    raise KafkaError.for_code(p.partition_error_code)(
                        f"AddPartitionsToTxn {topic.name}-{p.partition_index}"
                    )
        self._txn_partitions.update(new)

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_id: str,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> None:
        self._require_transactional("send_offsets_to_transaction")
        if not self.in_transaction:
            raise InvalidTxnStateError("send_offsets_to_transaction outside a transaction")
        assert self.transactional_id is not None
        add = await self.client.request(
            await self._coordinator_node(),
            AddOffsetsToTxnRequest(
                self.transactional_id, self.producer_id, self.producer_epoch, group_id
            ),
        )
        assert isinstance(add, AddOffsetsToTxnResponse)
        if add.error_code:
            raise KafkaError.for_code(add.error_code)(f"AddOffsetsToTxn for group {group_id!r}")
        group_node = await find_coordinator(
            self.client, group_id, CoordinatorType.GROUP, self.timeout
        )
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
        commit = await self.client.request(
            group_node,
            TxnOffsetCommitRequest(
                transactional_id=self.transactional_id,
                group_id=group_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                topics=[TxnOffsetCommitRequestTopic(t, ps) for t, ps in by_topic.items()],
            ),
        )
        assert isinstance(commit, TxnOffsetCommitResponse)
        for topic in commit.topics:
            for p in topic.partitions:
                if p.error_code:
                    raise KafkaError.for_code(p.error_code)(
                        f"TxnOffsetCommit {topic.name}-{p.partition_index}"
                    )

    async def end(self, commit: bool) -> None:
        """EndTxn (the caller has flushed, or dropped what was unsent for an abort)."""
        self._require_transactional("commit_transaction" if commit else "abort_transaction")
        if not self.in_transaction:
            raise InvalidTxnStateError(
                f"{'commit' if commit else 'abort'}_transaction outside a transaction"
            )
        if self._txn_partitions or commit:
            assert self.transactional_id is not None
            response = await self.client.request(
                await self._coordinator_node(),
                EndTxnRequest(self.transactional_id, self.producer_id, self.producer_epoch, commit),
            )
            assert isinstance(response, EndTxnResponse)
            if response.error_code:
                raise KafkaError.for_code(response.error_code)(
                    f"EndTxn ({'commit' if commit else 'abort'})"
                )
        self.state = TxnState.READY
        self._txn_partitions.clear()
