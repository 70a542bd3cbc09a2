"""ElectLeaders: preferred or unclean leader election, asked of the controller.

Any broker takes the request; the controller's answer is per partition (NOT_CONTROLLER
when this broker is not it). Elected leaders are awaited in this broker's metadata up to
the request's timeout; a partition whose new leader does not show in time gets
REQUEST_TIMED_OUT. For a null partition list (every partition) the partitions that needed
no election are left out of the answer, as Kafka does.
"""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation
from gregor.broker.controller import ApiError, ElectionType
from gregor.broker.zk import TopicPartition
from gregor.broker.zk.znodes import group_by_topic
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.ELECT_LEADERS, "0-2")
async def elect_leaders(
    ctx: RequestContext, request: ElectLeadersRequest, version: int
) -> ElectLeadersResponse:
    services = ctx.services
    cache = services.metadata_cache
    if not ctx.authorized(AclOperation.ALTER):
        return ElectLeadersResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.topic_partitions is None:
        partitions = {
            TopicPartition(topic, p)
            for topic in cache.topics()
            for p in range(cache.partition_count(topic) or 0)
        }
    else:
        partitions = {
            TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions
        }
    try:
        election_type = ElectionType(request.election_type)
    except ValueError:
        return ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST)
    results = await services.controller.elect_leaders(partitions, election_type)
    elected = {tp: leader for tp, leader in results.items() if isinstance(leader, int)}

    def shown() -> bool:
        return all(
            (state := cache.partition(tp.topic, tp.partition)) is not None
            and state.leader == leader
            for tp, leader in elected.items()
        )

    if elected:
        await cache.wait_until(shown, request.timeout_ms)
    errors: dict[TopicPartition, ApiError] = {}
    for tp, outcome in results.items():
        if isinstance(outcome, ApiError):
            errors[tp] = outcome
            continue
        state = cache.partition(tp.topic, tp.partition)
        shown_now = state is not None and state.leader == outcome
        errors[tp] = (
            ApiError(ErrorCode.NONE) if shown_now else ApiError(ErrorCode.REQUEST_TIMED_OUT)
        )
    if request.topic_partitions is None:
        errors = {tp: e for tp, e in errors.items() if e.code != ErrorCode.ELECTION_NOT_NEEDED}
    by_topic = group_by_topic(
        (tp.topic, PartitionResult(tp.partition, error.code, error.message))
        for tp, error in sorted(errors.items())
    )
    return ElectLeadersResponse(
        replica_election_results=[ReplicaElectionResult(t, r) for t, r in by_topic]
    )
