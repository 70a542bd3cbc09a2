"""The controller's requests to brokers (LeaderAndIsr, UpdateMetadata, StopReplica) read
the same whatever their version, and the LeaderAndIsr and StopReplica answers in the shape
of the request's version.

Old versions list partition states flat, newer ones group them by topic; StopReplica also
changed from partitions to topics of partitions and then to per-partition states. The
broker and the test peers that stand in for brokers (tests/controller) use these, so a
version handled here is handled everywhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import overload

from gregor.protocol.apis.leader_and_isr import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
)
from gregor.protocol.apis.stop_replica import (
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
)
from gregor.protocol.apis.update_metadata import (
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

Key = tuple[str, int]  # (topic, partition)


@overload
def partition_states(
    request: LeaderAndIsrRequest,
) -> Iterable[tuple[str, LeaderAndIsrPartitionState]]: ...


@overload
def partition_states(
    request: UpdateMetadataRequest,
) -> Iterable[tuple[str, UpdateMetadataPartitionState]]: ...


def partition_states(
    request: LeaderAndIsrRequest | UpdateMetadataRequest,
) -> Iterable[tuple[str, LeaderAndIsrPartitionState | UpdateMetadataPartitionState]]:
    """(topic, partition state) of every partition the request names."""
    for state in request.ungrouped_partition_states:
        yield state.topic_name, state
    for topic in request.topic_states:
        for state in topic.partition_states:
            yield topic.topic_name, state


def leader_and_isr_response(
    version: int, errors: Mapping[Key, int], topic_ids: Mapping[str, uuid.UUID]
) -> LeaderAndIsrResponse:
    """The answer with an error code per partition: flat before v5, by topic id since."""
    if version < 5:
        return LeaderAndIsrResponse(
            partition_errors=[
                LeaderAndIsrPartitionError(topic, index, code)
                for (topic, index), code in errors.items()
            ]
        )
    by_topic: dict[str, list[LeaderAndIsrPartitionError]] = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append(LeaderAndIsrPartitionError(topic, index, code))
    return LeaderAndIsrResponse(
        topics=[
            LeaderAndIsrTopicError(topic_id, by_topic.get(topic_name, []))
            for topic_name, topic_id in topic_ids.items()
        ]
    )


def stop_replica_states(request: StopReplicaRequest) -> Iterable[tuple[str, int, int, bool]]:
    """(topic, partition, leader epoch, delete) of every partition; -1 where the version
    carries no leader epoch."""
    for p in request.ungrouped_partitions:
        yield p.topic_name, p.partition_index, -1, request.delete_partitions
    for topic in request.topics:
        for index in topic.partition_indexes:
            yield topic.name, index, -1, request.delete_partitions
    for topic_state in request.topic_states:
        for state in topic_state.partition_states:
            yield (
                topic_state.topic_name,
                state.partition_index,
                state.leader_epoch,
                state.delete_partition,
            )


def stop_replica_response(errors: Iterable[tuple[Key, int]]) -> StopReplicaResponse:
    """The answer with an error code per partition (one shape for every version)."""
    return StopReplicaResponse(
        partition_errors=[
            StopReplicaPartitionError(topic, index, code) for (topic, index), code in errors
        ]
    )
