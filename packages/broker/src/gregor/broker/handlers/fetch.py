"""Fetch: consumers and follower replicas read record batches from partition leaders.

Records leave as file regions (sent with sendfile), except for v0-v3, whose clients need the
old message formats (magic 0 for v0-v1, magic 1 for v2-v3): those are read and converted.
Fetch v7+ may use incremental fetch sessions (KIP-227, `gregor.broker.fetch_sessions`): the
session's context says which partitions are read and which of them the response carries.
A consumer's Fetch v11+ may be answered by a follower (up to its high watermark), and by a
leader with `preferred_read_replica` instead of records (KIP-392, `replica_selector`).
"""

from __future__ import annotations

from gregor.broker.apis import Later, RequestContext, answer_when_done, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.fetch_sessions import FetchContext
from gregor.broker.replica_manager import FetchParams, FetchPartition, FetchResult
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from gregor.protocol.errors import ErrorCode, UnsupportedCompressionTypeError
from gregor.protocol.legacy import batches_to_message_set
from gregor.storage.results import FetchIsolation

INT32_MAX = 2**31 - 1
READ_COMMITTED = 1


@handles(ApiKey.FETCH, "0-12")
async def fetch(ctx: RequestContext, request: FetchRequest, version: int) -> FetchResponse | Later:
    config = ctx.services.config
    from_follower = request.replica_id >= 0
    max_bytes = request.max_bytes if version >= 3 else INT32_MAX
    cap = config.replica_fetch_response_max_bytes if from_follower else config.fetch_max_bytes
    isolation = (
        FetchIsolation.TXN_COMMITTED
        if version >= 4 and request.isolation_level == READ_COMMITTED
        else FetchIsolation.HIGH_WATERMARK
    )
    requested = [
        FetchPartition(
            topic.topic,
            p.partition,
            p.fetch_offset,
            p.partition_max_bytes,
            p.log_start_offset,
            p.current_leader_epoch,
            p.last_fetched_epoch,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    context = ctx.services.fetch_sessions.new_context(
        version,
        request.session_id,
        request.session_epoch,
        requested,
        [(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions],
        from_follower,
    )
    params = FetchParams(
        replica_id=request.replica_id,
        max_wait_ms=request.max_wait_ms,
        min_bytes=request.min_bytes,
        max_bytes=min(max_bytes, cap),
        isolation=isolation,
        hard_max_bytes_limit=version <= 2,
        quiet=context.quiet,
        watch=context.watch,
        # Kafka's ClientMetadata: a v11+ consumer may read followers (KIP-392).
        client_rack=request.rack_id if version >= 11 and not from_follower else None,
        listener=ctx.listener,
    )
    wanted = context.partitions
    # A follower needs CLUSTER_ACTION, a consumer READ on each topic.
    if from_follower:
        allowed = ctx.authorized(AclOperation.CLUSTER_ACTION)
        denied = set() if allowed else {w.topic for w in wanted}
    else:
        denied = {
            t
            for t in {w.topic for w in wanted}
            if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t)
        }
    refused = [w for w in wanted if w.topic in denied] if denied else []
    if denied:
        wanted = [w for w in wanted if w.topic not in denied]
    manager = ctx.services.replica_manager
    fetched, done = manager.fetch_now(params, wanted) if wanted else (([], []), True)
    if not done:
        # A long poll: the connection's next requests are handled meanwhile.
        return answer_when_done(
            manager.fetch_later(params, wanted, fetched[0]),
            lambda later: _response(ctx, context, *later, refused, version, request.replica_id),
        )
    return _response(ctx, context, *fetched, refused, version, request.replica_id)


def _response(
    ctx: RequestContext,
    context: FetchContext,
    wanted: list[FetchPartition],
    results: list[FetchResult],
    refused: list[FetchPartition],
    version: int,
    replica_id: int,
) -> FetchResponse:
    from_follower = replica_id >= 0
    entries = [
        (asked, _partition_data(ctx, asked, result, version, from_follower))
        for asked, result in zip(wanted, results, strict=True)
    ]
    entries += [(asked, _error(asked, ErrorCode.TOPIC_AUTHORIZATION_FAILED)) for asked in refused]
    held_back = [
        (asked.topic, asked.partition)
        for asked, data in entries
        if from_follower and _throttle_replication(ctx, asked, data, replica_id)
    ]
    error, session_id, entries = context.finish(entries, held_back)
    response = FetchResponse(error_code=error, session_id=session_id)
    topics: dict[str, FetchableTopicResponse] = {}
    metrics = ctx.services.metrics
    for asked, data in entries:
        if not from_follower and data.records is not None:
            metrics.sent(asked.topic, len(data.records))
        entry = topics.get(asked.topic)
        if entry is None:
            entry = topics[asked.topic] = FetchableTopicResponse(topic=asked.topic)
            response.responses.append(entry)
        entry.partitions.append(data)
    return response


def _throttle_replication(
    ctx: RequestContext, asked: FetchPartition, data: PartitionData, follower: int
) -> bool:
    """leader.replication.throttled.rate: a throttled replica's follower out of the ISR gets
    no records while the throttled bytes are over the rate (gregor.broker.replication_quotas).
    Whether its records were held back."""
    quota = ctx.services.replication_quotas.leader
    if not data.records or not quota.is_throttled(asked.topic, asked.partition):
        return False
    partition = ctx.services.replica_manager.partition(asked.topic, asked.partition)
    if partition is None or follower in partition.isr:
        return False
    if quota.exceeded():
        data.records = None
        return True
    quota.record(len(data.records))
    return False


def _partition_data(
    ctx: RequestContext, asked: FetchPartition, result: FetchResult, version: int, follower: bool
) -> PartitionData:
    read = result.read
    if result.error != ErrorCode.NONE or read is None:
        return _error(asked, result.error)
    data = PartitionData(
        partition_index=asked.partition,
        high_watermark=read.high_watermark,
        last_stable_offset=read.last_stable_offset,
        log_start_offset=read.log_start_offset,
        aborted_transactions=None,
        records=b"",
        preferred_read_replica=result.preferred_read_replica,
    )
    if read.diverging_epoch is not None:
        data.diverging_epoch = EpochEndOffset(*read.diverging_epoch)
        return data
    info = read.info
    if info is None:
        return data
    if info.aborted_transactions is not None:
        data.aborted_transactions = [
            AbortedTransaction(txn.producer_id, txn.first_offset)
            for txn in info.aborted_transactions
        ]
    if not info.records.length:
        return data
    if not follower and version < 10:
        topic_config = ctx.services.local_logs.topic_log_config(asked.topic)
        if topic_config.compression_type == "zstd":
            return _error(asked, UnsupportedCompressionTypeError.code)
    if version <= 3 and not follower:
        try:
            data.records = batches_to_message_set(info.records.read(), 0 if version <= 1 else 1)
        except UnsupportedCompressionTypeError:
            return _error(asked, UnsupportedCompressionTypeError.code)
    else:
        data.records = info.records
    return data


def _error(asked: FetchPartition, code: int) -> PartitionData:
    return PartitionData(
        partition_index=asked.partition,
        error_code=code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        records=b"",
    )
