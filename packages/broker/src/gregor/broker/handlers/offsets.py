"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords: offsets of partition leaders' logs."""

from __future__ import annotations

from collections import Counter

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from gregor.protocol.apis.offset_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.storage.results import (
    EARLIEST_LOCAL_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchIsolation,
)

CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
READ_COMMITTED = 1
# The first ListOffsets version that may ask for each special timestamp.
_TIMESTAMP_SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


@handles(ApiKey.LIST_OFFSETS, "1-8")
async def list_offsets(
    ctx: RequestContext, request: ListOffsetsRequest, version: int
) -> ListOffsetsResponse:
    manager = ctx.services.replica_manager
    if request.replica_id >= 0:
        isolation: FetchIsolation | None = None  # a follower: up to the log end
    elif version >= 2 and request.isolation_level == READ_COMMITTED:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    require_leader = request.replica_id != DEBUGGING_REPLICA_ID
    counts = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    duplicates = {key for key, n in counts.items() if n > 1}
    response = ListOffsetsResponse()
    for topic in request.topics:
        answers = []
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for asked in topic.partitions:
            answer = ListOffsetsPartitionResponse(partition_index=asked.partition_index)
            answers.append(answer)
            if not allowed:
                answer.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if (topic.name, asked.partition_index) in duplicates:
                answer.error_code = ErrorCode.INVALID_REQUEST
                continue
            if version < _TIMESTAMP_SINCE.get(asked.timestamp, 0):
                answer.error_code = ErrorCode.UNSUPPORTED_VERSION
                continue
            try:
                partition = manager.partition_or_error(topic.name, asked.partition_index)
                found = partition.offset_for_timestamp(
                    asked.timestamp, isolation, asked.current_leader_epoch, require_leader
                )
            except KafkaError as exc:
                answer.error_code = exc.code
                continue
            if found is not None:
                answer.timestamp = found.timestamp
                answer.offset = found.offset
                if version >= 4 and found.leader_epoch is not None:  # v1-3 have no epoch
                    answer.leader_epoch = found.leader_epoch
        response.topics.append(ListOffsetsTopicResponse(topic.name, answers))
    return response


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, "0-4")
async def offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest, version: int
) -> OffsetForLeaderEpochResponse:
    manager = ctx.services.replica_manager
    response = OffsetForLeaderEpochResponse()
    # Brokers ask with CLUSTER_ACTION, consumers (KIP-320) with DESCRIBE on the topic.
    cluster_action = ctx.authorized(AclOperation.CLUSTER_ACTION)
    for topic in request.topics:
        answers = []
        allowed = cluster_action or ctx.authorized(
            AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic
        )
        for asked in topic.partitions:
            answer = EpochEndOffset(partition=asked.partition)
            answers.append(answer)
            if not allowed:
                answer.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                partition = manager.partition_or_error(topic.topic, asked.partition)
                found = partition.end_offset_for_epoch(
                    asked.leader_epoch, asked.current_leader_epoch, require_leader=True
                )
            except KafkaError as exc:
                answer.error_code = exc.code
                continue
            if found is not None:
                answer.leader_epoch, answer.end_offset = found
        response.topics.append(OffsetForLeaderTopicResult(topic.topic, answers))
    return response


@handles(ApiKey.DELETE_RECORDS, "0-2")
async def delete_records(
    ctx: RequestContext, request: DeleteRecordsRequest, version: int
) -> DeleteRecordsResponse:
    offsets: dict[tuple[str, int], int] = {}
    results: dict[tuple[str, int], tuple[int, int]] = {}
    for topic in request.topics:
        allowed = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        for asked in topic.partitions:
            key = (topic.name, asked.partition_index)
            if allowed:
                offsets[key] = asked.offset
            else:
                results[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    if offsets:
        results.update(
            await ctx.services.replica_manager.delete_records(offsets, request.timeout_ms)
        )
    by_topic: dict[str, list[DeleteRecordsPartitionResult]] = {}
    for (name, index), (error, low) in results.items():
        by_topic.setdefault(name, []).append(DeleteRecordsPartitionResult(index, low, error))
    return DeleteRecordsResponse(
        topics=[DeleteRecordsTopicResult(name, parts) for name, parts in by_topic.items()]
    )
