"""The broker side of the controller's requests: LeaderAndIsr, UpdateMetadata, StopReplica.

Each is fenced twice, as in Kafka: by controller epoch (a request from a deposed controller
gets STALE_CONTROLLER_EPOCH) and by broker epoch (a request meant for an earlier incarnation
of this broker, before a restart or a new ZooKeeper session, gets STALE_BROKER_EPOCH).
"""

from __future__ import annotations

import logging

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation
from gregor.protocol.apis import ApiKey, api_name
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from gregor.protocol.apis.stop_replica import StopReplicaRequest, StopReplicaResponse
from gregor.protocol.apis.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

UNKNOWN_BROKER_EPOCH = -1


def broker_epoch_is_stale(ctx: RequestContext, request_epoch: int) -> bool:
    # A newer epoch than ours can arrive when the controller saw our re-registration first.
    stale = request_epoch != UNKNOWN_BROKER_EPOCH and request_epoch < ctx.services.broker_epoch
    if stale:
        log.info(
            "ignoring %s with broker epoch %d: ours is %d",
            api_name(ctx.api_key),
            request_epoch,
            ctx.services.broker_epoch,
        )
    return stale


@handles(ApiKey.LEADER_AND_ISR, "0-7")
async def leader_and_isr(
    ctx: RequestContext, request: LeaderAndIsrRequest, version: int
) -> LeaderAndIsrResponse:
    if not ctx.authorized(AclOperation.CLUSTER_ACTION):
        return LeaderAndIsrResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if broker_epoch_is_stale(ctx, request.broker_epoch):
        return LeaderAndIsrResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    services = ctx.services
    named = {s.topic_name for s in request.ungrouped_partition_states}
    named |= {t.topic_name for t in request.topic_states}
    await services.local_logs.load_new_topic_configs(named)
    return services.replica_manager.become_leader_or_follower(request, version)


@handles(ApiKey.UPDATE_METADATA, "0-8")
async def update_metadata(
    ctx: RequestContext, request: UpdateMetadataRequest, version: int
) -> UpdateMetadataResponse:
    if not ctx.authorized(AclOperation.CLUSTER_ACTION):
        return UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if broker_epoch_is_stale(ctx, request.broker_epoch):
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    return UpdateMetadataResponse(error_code=ctx.services.replica_manager.update_metadata(request))


@handles(ApiKey.STOP_REPLICA, "0-4")
async def stop_replica(
    ctx: RequestContext, request: StopReplicaRequest, version: int
) -> StopReplicaResponse:
    if not ctx.authorized(AclOperation.CLUSTER_ACTION):
        return StopReplicaResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if broker_epoch_is_stale(ctx, request.broker_epoch):
        return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    return ctx.services.replica_manager.stop_replicas(request, version)
