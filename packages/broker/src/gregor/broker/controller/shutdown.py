"""The broker side of controlled shutdown: ask the controller to move leadership away.

On SIGTERM a broker (with `controlled.shutdown.enable`) sends ControlledShutdown to the
controller it finds in ZooKeeper, and tries again after a backoff while the controller
cannot finish (partitions remain led by this broker, the controller moved, a connection
failed), `controlled.shutdown.max.retries` times in all, as Kafka's broker does.
"""

from __future__ import annotations

import logging

import trio

from gregor.broker.controller.settings import ControllerSettings
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.session import ZooKeeperError
from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.protocol.apis.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from gregor.protocol.errors import ErrorCode, KafkaError, NetworkError, ProtocolError

log = logging.getLogger(__name__)


async def controlled_shutdown(
    zk: KafkaZkClient, settings: ControllerSettings, broker_epoch: int
) -> bool:
    """True when the controller moved every leadership away from this broker."""
    for attempt in range(1, settings.controlled_shutdown_max_retries + 1):
        response = None
        try:
            response = await _ask_controller(zk, settings, broker_epoch)
        except* (ZooKeeperError, NetworkError, ProtocolError, OSError) as group:
            log.warning("controlled shutdown attempt %d failed: %s", attempt, group.exceptions[0])
        else:
            if response is not None:
                remaining = [
                    f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions
                ]
                if response.error_code == ErrorCode.NONE and not remaining:
                    log.info("controlled shutdown succeeded")
                    return True
                error = (
                    KafkaError.for_code(response.error_code).error_name()
                    if response.error_code
                    else None
                )
                log.warning(
                    "controlled shutdown attempt %d incomplete: error %s, still leading %s",
                    attempt,
                    error,
                    remaining,
                )
        if attempt < settings.controlled_shutdown_max_retries:
            await trio.sleep(settings.controlled_shutdown_retry_backoff_s)
    log.warning("controlled shutdown did not complete; shutting down anyway")
    return False


async def _ask_controller(
    zk: KafkaZkClient, settings: ControllerSettings, broker_epoch: int
) -> ControlledShutdownResponse | None:
    controller_id = await zk.get_controller_id()
    if controller_id is None:
        log.info("no controller is elected yet")
        return None
    broker = await zk.get_broker(controller_id)
    endpoint = broker.endpoint(settings.inter_broker_listener) if broker is not None else None
    if endpoint is None:
        log.info("controller %d has no %s endpoint", controller_id, settings.inter_broker_listener)
        return None
    config = ConnectionConfig(
        client_id=f"broker-{settings.broker_id}", request_timeout=settings.request_timeout_s
    )
    async with trio.open_nursery() as nursery:
        connection = await BrokerConnection.open(nursery, endpoint.host, endpoint.port, config)
        try:
            # v0 has a header of its own; every broker since 0.9 speaks v1+.
            version = connection.version_for(ControlledShutdownRequest, min_version=1)
            request = ControlledShutdownRequest(settings.broker_id, broker_epoch)
            return await connection.request(
                request, version, response_type=ControlledShutdownResponse
            )
        finally:
            await connection.aclose()
