"""FindCoordinator: which broker coordinates a group or a transactional id.

The coordinator of a key is the leader of the partition of the internal topic the key hashes
to (`__consumer_offsets` for groups, `__transaction_state` for transactional ids), answered
from the metadata cache. The first lookup creates the internal topic; until its partition
has a live leader the answer is COORDINATOR_NOT_AVAILABLE, which clients retry. From v4 one
request may ask about several keys.
"""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.coordinator.partitioning import partition_for
from gregor.broker.metadata_cache import NO_LEADER
from gregor.broker.topic_names import CONSUMER_OFFSETS, TRANSACTION_STATE
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from gregor.protocol.errors import ErrorCode

GROUP = 0
TRANSACTION = 1
# Kafka's texts for the errors of the v1-v3 top-level message ("NONE" for success).
_MESSAGES: dict[int, str] = {
    ErrorCode.NONE: "NONE",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.INVALID_REQUEST: (
        "This most likely occurs because of a request being malformed by the client library "
        "or the message was sent to an incompatible broker. See the broker logs for more "
        "details."
    ),
}
NO_NODE = (-1, "", -1)


async def _lookup(ctx: RequestContext, key_type: int, key: str) -> tuple[int, tuple[int, str, int]]:
    """(error, (node id, host, port)) of the key's coordinator."""
    services = ctx.services
    cache = services.metadata_cache
    if key_type == GROUP:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, NO_NODE
        topic = CONSUMER_OFFSETS
        partition = services.group_coordinator.partition_for(key)
    elif key_type == TRANSACTION:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, NO_NODE
        topic = TRANSACTION_STATE
        count = cache.partition_count(topic) or services.config.transaction_state_log_num_partitions
        partition = partition_for(key, count)
    else:
        return ErrorCode.INVALID_REQUEST, NO_NODE  # share groups have no coordinator here
    if not cache.contains_topic(topic):
        await services.topic_creator.create_internal(topic)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, NO_NODE
    state = cache.partition(topic, partition)
    if state is None or state.leader == NO_LEADER:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, NO_NODE
    node = cache.node(state.leader, ctx.listener)
    if node is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, NO_NODE
    return ErrorCode.NONE, (node.id, node.host, node.port)


@handles(ApiKey.FIND_COORDINATOR, "0-6")
async def find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest, version: int
) -> FindCoordinatorResponse:
    key_type = request.key_type if version >= 1 else GROUP
    if version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, (node_id, host, port) = await _lookup(ctx, key_type, key)
            coordinators.append(Coordinator(key, node_id, host, port, error))
        return FindCoordinatorResponse(coordinators=coordinators)
    error, (node_id, host, port) = await _lookup(ctx, key_type, request.key)
    return FindCoordinatorResponse(
        error_code=error,
        error_message=_MESSAGES.get(error, ErrorCode(error).name),
        node_id=node_id,
        host=host,
        port=port,
    )
