"""A partition leader's transaction verification (KIP-890 part 1, as Kafka 3.6+ does it).

A transactional batch that would start a transaction on a partition (its producer has none
ongoing there) is appended only once the transaction coordinator confirms the partition is
in the producer's ongoing transaction: AddPartitionsToTxn v4 with `verify_only`, sent to the
coordinator's broker over the inter-broker listener. Otherwise a producer that never added
the partition would leave a transaction no marker ever ends (a hanging transaction, which
pins the last stable offset). Batches of a transaction already ongoing on the partition
need no round trip.

The leader hands out a `VerificationGuard` per producer when it starts asking, and keeps it
until the producer's next transactional append or marker there; the append must present the
guard still kept. A marker written while the coordinator was being asked (the transaction
ended, say by its timeout) drops the guard, so a stale answer cannot start a transaction the
coordinator has already ended (Kafka's VerificationGuard).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Protocol

from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# Coordinator trouble a producer cannot be told as such (Produce has no coordinator
# errors): Kafka answers NOT_ENOUGH_REPLICAS, which every client retries.
_RETRIABLE = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.OPERATION_NOT_ATTEMPTED,
    }
)


class VerificationGuard:
    """One verification of one producer on one partition: compared by identity."""

    __slots__ = ()


class InterBrokerRequests(Protocol):
    """How the verifier reaches the coordinator's broker."""

    async def request(
        self,
        broker_id: int,
        request: AddPartitionsToTxnRequest,
        response_type: type[AddPartitionsToTxnResponse],
    ) -> AddPartitionsToTxnResponse: ...


class TxnVerifier:
    def __init__(
        self, coordinator_of: Callable[[str], int | None], transport: InterBrokerRequests
    ) -> None:
        """`coordinator_of` answers the broker id of a transactional id's coordinator, or
        None (or a negative id) where it is not known yet."""
        self.coordinator_of = coordinator_of
        self.transport = transport

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """Each partition's error: NONE where it is in the ongoing transaction."""
        broker = self.coordinator_of(transactional_id)
        if broker is None or broker < 0:
            return dict.fromkeys(partitions, ErrorCode.NOT_ENOUGH_REPLICAS)
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            topics[topic].append(partition)
        request = AddPartitionsToTxnRequest(
            transactions=[
                AddPartitionsToTxnTransaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=True,
                    topics=[AddPartitionsToTxnTopic(t, ps) for t, ps in topics.items()],
                )
            ]
        )
        try:
            response = await self.transport.request(broker, request, AddPartitionsToTxnResponse)
        except Exception as exc:  # the coordinator's broker unreachable: the client retries
            log.info("transaction verification with broker %d failed: %s", broker, exc)
            return dict.fromkeys(partitions, ErrorCode.NOT_ENOUGH_REPLICAS)
        answered: dict[TopicPartition, int] = {}
        if response.error_code != ErrorCode.NONE:
            return dict.fromkeys(partitions, _for_produce(response.error_code))
        for result in response.results_by_transaction:
            for named in result.topic_results:
                for p in named.results_by_partition:
                    answered[(named.name, p.partition_index)] = _for_produce(p.partition_error_code)
        return {tp: answered.get(tp, ErrorCode.INVALID_TXN_STATE) for tp in partitions}


def _for_produce(error: int) -> int:
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH  # what Produce answers a stale epoch with
    return ErrorCode.NOT_ENOUGH_REPLICAS if error in _RETRIABLE else error
