"""The transactional APIs: AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, ListTransactions and DescribeTransactions (the transaction
coordinator), and TxnOffsetCommit (the group coordinator).

Each turns the request into a call of `TransactionCoordinator` and its answer into the
response of the request's version, with Kafka's conversions: PRODUCER_FENCED exists from
InitProducerId v4 and AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2 (KIP-588); older
versions get INVALID_PRODUCER_EPOCH. AddPartitionsToTxn v4 carries several transactions
and `verify_only` (a partition leader asking whether a partition is in a transaction).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.coordinator.group.offsets import OffsetAndMetadata
from gregor.broker.coordinator.group.results import Reply
from gregor.broker.coordinator.transaction.state import STATE_BY_NAME, TopicPartition
from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
)
from gregor.protocol.apis.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    TopicData,
)
from gregor.protocol.apis.describe_transactions import TransactionState as DescribedState
from gregor.protocol.apis.end_txn import EndTxnRequest, EndTxnResponse
from gregor.protocol.apis.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
    TransactionState,
)
from gregor.protocol.apis.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from gregor.protocol.errors import ErrorCode


def fenced_as(version: int, first_with_fenced: int, error: int) -> int:
    """PRODUCER_FENCED as the request's version knows it."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def txn_allowed(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        out[topic].append(partition)
    return out


def _topic_results(errors: dict[TopicPartition, int]) -> list[AddPartitionsToTxnTopicResult]:
    return [
        AddPartitionsToTxnTopicResult(
            topic,
            [AddPartitionsToTxnPartitionResult(p, errors[(topic, p)]) for p in partitions],
        )
        for topic, partitions in by_topic(errors).items()
    ]


async def _add_partitions(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: list[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> dict[TopicPartition, int]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if not txn_allowed(ctx, transactional_id):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    cache = ctx.services.metadata_cache
    refused = {
        t.name for t in topics if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, t.name)
    }
    bad = {
        tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if tp[0] in refused
        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for tp in wanted
        if tp[0] in refused or not cache.contains_topic(tp[0]) or cache.partition(*tp) is None
    }
    if bad:
        # Nothing is added when one partition is bad (Kafka's answer).
        return {tp: bad.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    coordinator = ctx.services.transaction_coordinator
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
    error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    return dict.fromkeys(wanted, error)


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, "0-4")
async def add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest, version: int
) -> AddPartitionsToTxnResponse:
    if version < 4:
        errors = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        errors = {tp: fenced_as(version, 2, e) for tp, e in errors.items()}
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(errors))
    if not ctx.authorized(AclOperation.CLUSTER_ACTION):  # v4+: brokers verifying
        return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    for txn in request.transactions:
        errors = await _add_partitions(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
        )
        results.append(AddPartitionsToTxnResult(txn.transactional_id, _topic_results(errors)))
    return AddPartitionsToTxnResponse(results_by_transaction=results)


@handles(ApiKey.ADD_OFFSETS_TO_TXN, "0-3")
async def add_offsets_to_txn(
    ctx: RequestContext, request: AddOffsetsToTxnRequest, version: int
) -> AddOffsetsToTxnResponse:
    if not txn_allowed(ctx, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    # The group's offsets partition joins the transaction: its marker makes the offsets of
    # TxnOffsetCommit visible (or drops them).
    partition = ctx.services.group_coordinator.partition_for(request.group_id)
    error = await ctx.services.transaction_coordinator.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [(CONSUMER_OFFSETS, partition)],
    )
    return AddOffsetsToTxnResponse(error_code=fenced_as(version, 2, error))


@handles(ApiKey.END_TXN, "0-3")
async def end_txn(ctx: RequestContext, request: EndTxnRequest, version: int) -> EndTxnResponse:
    if not txn_allowed(ctx, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = await ctx.services.transaction_coordinator.end_transaction(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
    )
    return EndTxnResponse(error_code=fenced_as(version, 2, error))


@handles(ApiKey.TXN_OFFSET_COMMIT, "0-3")
async def txn_offset_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest, version: int
) -> TxnOffsetCommitResponse:
    now = time.time_ns() // 1_000_000
    offsets = {
        (topic.name, p.partition_index): OffsetAndMetadata(
            offset=p.committed_offset,
            leader_epoch=None if p.committed_leader_epoch < 0 else p.committed_leader_epoch,
            metadata=p.committed_metadata or "",
            commit_timestamp_ms=now,
        )
        for topic in request.topics
        for p in topic.partitions
    }
    cache = ctx.services.metadata_cache
    if not txn_allowed(ctx, request.transactional_id):
        refused: int | None = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        refused = None
    errors: dict[tuple[str, int], int] = {}
    for tp in offsets:
        if refused is not None:
            errors[tp] = refused
        elif not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, tp[0]):
            errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif cache.partition(*tp) is None:
            errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    known = {tp: o for tp, o in offsets.items() if tp not in errors}
    if known:
        reply: Reply[dict[tuple[str, int], int]] = Reply()
        ctx.services.group_coordinator.offsets.txn_commit(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            request.member_id if version >= 3 else "",
            request.group_instance_id if version >= 3 else None,
            request.generation_id if version >= 3 else -1,
            known,
            reply,
        )
        errors.update(await reply.wait())
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                topic,
                [
                    TxnOffsetCommitResponsePartition(p, fenced_as(version, 3, errors[(topic, p)]))
                    for p in partitions
                ],
            )
            for topic, partitions in by_topic(offsets).items()
        ]
    )


@handles(ApiKey.LIST_TRANSACTIONS, "0-1")
async def list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest, version: int
) -> ListTransactionsResponse:
    unknown = [s for s in request.state_filters if s not in STATE_BY_NAME]
    states = {STATE_BY_NAME[s] for s in request.state_filters if s in STATE_BY_NAME}
    if unknown and not states:
        # Only unknown states asked for: nothing can match.
        return ListTransactionsResponse(unknown_state_filters=unknown)
    listed = ctx.services.transaction_coordinator.list_transactions(
        states, set(request.producer_id_filters), request.duration_filter if version >= 1 else -1
    )
    # Only the ids the principal may describe.
    listed = [
        t
        for t in listed
        if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
    ]
    return ListTransactionsResponse(
        unknown_state_filters=unknown,
        transaction_states=[
            TransactionState(t.transactional_id, t.producer_id, t.state.display) for t in listed
        ],
    )


@handles(ApiKey.DESCRIBE_TRANSACTIONS, "0")
async def describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest, version: int
) -> DescribeTransactionsResponse:
    out = []
    for tid in request.transactional_ids:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            out.append(DescribedState(error_code=refused, transactional_id=tid))
            continue
        found = ctx.services.transaction_coordinator.describe(tid)
        out.append(
            DescribedState(
                error_code=found.error,
                transactional_id=tid,
                transaction_state=found.state.display if found.error == ErrorCode.NONE else "",
                transaction_timeout_ms=found.timeout_ms,
                transaction_start_time_ms=found.start_ms,
                producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
                topics=[TopicData(t, ps) for t, ps in by_topic(sorted(found.partitions)).items()],
            )
        )
    return DescribeTransactionsResponse(transaction_states=out)
