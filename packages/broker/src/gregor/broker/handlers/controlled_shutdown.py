"""ControlledShutdown: a stopping broker asks the controller to move its leadership away.

The answer lists the partitions the broker still leads (none when all moved); a broker
that is not the controller answers NOT_CONTROLLER, and the stopping broker asks again.
"""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    RemainingPartition,
)
from gregor.protocol.errors import ErrorCode, KafkaError

UNKNOWN_BROKER_EPOCH = -1


@handles(ApiKey.CONTROLLED_SHUTDOWN, "0-3")
async def controlled_shutdown(
    ctx: RequestContext, request: ControlledShutdownRequest, version: int
) -> ControlledShutdownResponse:
    if not ctx.authorized(AclOperation.CLUSTER_ACTION):
        return ControlledShutdownResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    epoch = request.broker_epoch if version >= 2 else UNKNOWN_BROKER_EPOCH
    try:
        remaining = await ctx.services.controller.controlled_shutdown(request.broker_id, epoch)
    except KafkaError as exc:
        return ControlledShutdownResponse(error_code=exc.code)
    return ControlledShutdownResponse(
        remaining_partitions=[
            RemainingPartition(tp.topic, tp.partition) for tp in sorted(remaining)
        ]
    )
