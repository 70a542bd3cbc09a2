"""InitProducerId: a producer id and epoch, for an idempotent or a transactional producer.

Without a transactional id every request gets a new producer id at epoch 0, whatever id
and epoch it names (v3+): Kafka's coordinator accepts such requests blindly too, and the
producer's sequences start again at 0. The partition leaders check the sequences of its
batches (gregor-storage's producer state): a retried batch among a producer's last five is
answered with its original offsets, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch
INVALID_PRODUCER_EPOCH.

With a transactional id the transaction coordinator answers: the id's producer id, its
epoch bumped (the previous instance fenced, its open transaction aborted: the answer is
CONCURRENT_TRANSACTIONS until that is done, which the producer retries). PRODUCER_FENCED
exists from v4 (KIP-588); older versions get INVALID_PRODUCER_EPOCH. An empty transactional
id is INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

import logging

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.handlers.transactions import fenced_as
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def _error(code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


@handles(ApiKey.INIT_PRODUCER_ID, "0-5")
async def init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest, version: int
) -> InitProducerIdResponse:
    if request.transactional_id == "":
        return _error(ErrorCode.INVALID_REQUEST)
    if request.transactional_id is not None:
        if not ctx.authorized(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):
            return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        result = await ctx.services.transaction_coordinator.init_producer_id(
            request.transactional_id,
            request.transaction_timeout_ms,
            request.producer_id if version >= 3 else -1,
            request.producer_epoch if version >= 3 else -1,
        )
        return InitProducerIdResponse(
            error_code=fenced_as(version, 4, result.error),
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )
    # Idempotence needs IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).
    if not ctx.authorized(
        AclOperation.IDEMPOTENT_WRITE
    ) and not ctx.services.authorizer.authorize_any(
        ctx.principal, ctx.client_host, AclOperation.WRITE, ResourceType.TOPIC
    ):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await ctx.services.producer_ids.next_id()
    except Exception as exc:
        # ZooKeeper unreachable or a bad znode: the producer asks again.
        log.warning("cannot allocate a producer id: %s", exc)
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)
