"""AlterPartitionReassignments and ListPartitionReassignments, answered by the controller
(a top-level NOT_CONTROLLER elsewhere). A null replica list cancels a reassignment."""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation
from gregor.broker.controller import ApiError
from gregor.broker.zk import TopicPartition
from gregor.broker.zk.znodes import group_by_topic
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from gregor.protocol.apis.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, "0")
async def alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest, version: int
) -> AlterPartitionReassignmentsResponse:
    if not ctx.authorized(AclOperation.ALTER):
        return AlterPartitionReassignmentsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
    wanted: dict[TopicPartition, list[int] | None] = {
        TopicPartition(t.name, p.partition_index): (
            None if p.replicas is None else list(p.replicas)
        )
        for t in request.topics
        for p in t.partitions
    }
    outcome = await ctx.services.controller.alter_partition_reassignments(wanted)
    if isinstance(outcome, ApiError):
        return AlterPartitionReassignmentsResponse(
            error_code=outcome.code, error_message=outcome.message
        )
    by_topic = group_by_topic(
        (tp.topic, ReassignablePartitionResponse(tp.partition, error.code, error.message))
        for tp, error in sorted(outcome.items())
    )
    return AlterPartitionReassignmentsResponse(
        error_message=None,
        responses=[ReassignableTopicResponse(t, parts) for t, parts in by_topic],
    )


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, "0")
async def list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest, version: int
) -> ListPartitionReassignmentsResponse:
    if not ctx.authorized(AclOperation.DESCRIBE):
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    partitions = (
        None
        if request.topics is None
        else {TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes}
    )
    outcome = await ctx.services.controller.list_partition_reassignments(partitions)
    if isinstance(outcome, ApiError):
        return ListPartitionReassignmentsResponse(
            error_code=outcome.code, error_message=outcome.message
        )
    by_topic = group_by_topic(
        (
            tp.topic,
            OngoingPartitionReassignment(
                tp.partition, list(a.replicas), list(a.adding), list(a.removing)
            ),
        )
        for tp, a in sorted(outcome.items())
    )
    return ListPartitionReassignmentsResponse(
        error_message=None,
        topics=[OngoingTopicReassignment(t, parts) for t, parts in by_topic],
    )
