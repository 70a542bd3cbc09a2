"""The partition side of transactions: WriteTxnMarkers and DescribeProducers.

WriteTxnMarkers comes from a transaction coordinator (inter-broker): this broker, the
leader of each partition named, appends the COMMIT or ABORT control batch
(`Partition.append_txn_marker`), waits for the ISR as acks=all does, and answers per
partition. A marker written to a `__consumer_offsets` partition also ends the producer's
pending TxnOffsetCommit offsets in the group coordinator: visible on COMMIT, dropped on
ABORT. DescribeProducers lists the active producers of a partition's replica here,
leader or follower.
"""

from __future__ import annotations

import logging

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.replica_manager import Appended, ProduceResult
from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from gregor.protocol.apis.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from gregor.protocol.errors import (
    ErrorCode,
    KafkaError,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
)
from gregor.protocol.records import ControlType

log = logging.getLogger(__name__)

# How long a marker waits for the ISR (Kafka: the broker's request.timeout.ms).
MARKER_REPLICATION_TIMEOUT_MS = 30_000


@handles(ApiKey.WRITE_TXN_MARKERS, "0-1")
async def write_txn_markers(
    ctx: RequestContext, request: WriteTxnMarkersRequest, version: int
) -> WriteTxnMarkersResponse:
    replicas = ctx.services.replica_manager
    allowed = ctx.authorized(AclOperation.CLUSTER_ACTION)
    out = []
    for marker in request.markers:
        control = ControlType.COMMIT if marker.transaction_result else ControlType.ABORT
        results: dict[tuple[str, int], ProduceResult] = {}
        waiting: dict[tuple[str, int], int] = {}
        for topic in marker.topics:
            for index in topic.partition_indexes:
                key = (topic.name, index)
                if not allowed:
                    results[key] = ProduceResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    continue
                try:
                    partition = replicas.partition_or_error(topic.name, index)
                    info = partition.append_txn_marker(
                        marker.producer_id,
                        marker.producer_epoch,
                        control,
                        marker.coordinator_epoch,
                    )
                except KafkaError as exc:
                    results[key] = ProduceResult(exc.code)
                    continue
                except Exception:
                    log.exception("the marker of producer %d on %s-%d", marker.producer_id, *key)
                    results[key] = ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR)
                    continue
                # Bytes in, as Kafka counts every append to a leader, markers too.
                ctx.services.metrics.appended(topic.name, info.valid_bytes, info.records_count)
                results[key] = ProduceResult(ErrorCode.NONE, info.first_offset)
                waiting[key] = info.last_offset + 1
        await Appended(replicas, results, waiting).replicated(MARKER_REPLICATION_TIMEOUT_MS)
        offsets_partitions = {
            index
            for (topic, index), result in results.items()
            if topic == CONSUMER_OFFSETS and result.error == ErrorCode.NONE
        }
        if offsets_partitions:
            ctx.services.group_coordinator.manager.handle_txn_completion(
                marker.producer_id, offsets_partitions, control is ControlType.COMMIT
            )
        by_topic: dict[str, list[WritableTxnMarkerPartitionResult]] = {}
        for (name, index), result in results.items():
            by_topic.setdefault(name, []).append(
                WritableTxnMarkerPartitionResult(index, result.error)
            )
        out.append(
            WritableTxnMarkerResult(
                marker.producer_id,
                [WritableTxnMarkerTopicResult(t, ps) for t, ps in by_topic.items()],
            )
        )
    return WriteTxnMarkersResponse(markers=out)


@handles(ApiKey.DESCRIBE_PRODUCERS, "0")
async def describe_producers(
    ctx: RequestContext, request: DescribeProducersRequest, version: int
) -> DescribeProducersResponse:
    replicas = ctx.services.replica_manager
    topics = []
    for topic in request.topics:
        partitions = []
        allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            try:
                if not allowed:
                    raise TopicAuthorizationFailedError(f"not authorized to read {topic.name}")
                partition = replicas.partition_or_error(topic.name, index)
                # Any replica answers from its own log, a follower too (as Kafka's do:
                # `kafka-transactions.sh describe-producers --broker-id` asks one); a
                # broker that hosts no replica says NOT_LEADER_OR_FOLLOWER.
                if partition.log is None:
                    raise NotLeaderOrFollowerError(
                        f"broker {ctx.services.broker_id} does not host {topic.name}-{index}"
                    )
                producers = partition.log.producer_state.active_producers()
            except KafkaError as exc:
                partitions.append(PartitionResponse(index, exc.code, str(exc)))
                continue
            partitions.append(
                PartitionResponse(
                    index,
                    active_producers=[
                        ProducerState(
                            producer_id=e.producer_id,
                            producer_epoch=e.producer_epoch,
                            last_sequence=e.last_seq,
                            last_timestamp=e.last_timestamp,
                            coordinator_epoch=e.coordinator_epoch,
                            current_txn_start_offset=-1
                            if e.current_txn_first_offset is None
                            else e.current_txn_first_offset,
                        )
                        for e in producers.values()
                    ],
                )
            )
        topics.append(TopicResponse(topic.name, partitions))
    return DescribeProducersResponse(topics=topics)
