"""The broker side of controlled shutdown: ask the controller to move leadership away.

On SIGTERM a broker (with `controlled.shutdown.enable`) sends ControlledShutdown to the
controller it finds in ZooKeeper, and tries again while the controller cannot finish
(partitions remain led by this broker, the controller moved, a connection failed),
`controlled.shutdown.max.retries` times in all, as Kafka's broker does.

Between attempts it waits `controlled.shutdown.retry.backoff.ms`, as Kafka does, with one
shortcut: when the attempt failed because the controller went away (its connection closed,
NOT_CONTROLLER, none elected), the next attempt goes as soon as another controller is
elected. That is what happens when the controller itself shuts down with the others.

Finding the controller needs ZooKeeper. While it is unreachable, an attempt waits for the
connection `zookeeper.connection.timeout.ms` at most (as Kafka's ZooKeeper client does) and
fails: a broker stopped while ZooKeeper is down gives up on controlled shutdown after its
retries, says why, and stops anyway (its logs are still closed cleanly).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from gregor.broker.controller.settings import ControllerSettings
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.session import ZooKeeperError
from gregor.broker.zk.znodes import BrokerRegistration
from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.protocol.apis.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from gregor.protocol.errors import ErrorCode, KafkaError, NetworkError, ProtocolError

if TYPE_CHECKING:
    from gregor.broker.controller.controller import Controller

log = logging.getLogger(__name__)

NO_CONTROLLER = -1


async def controlled_shutdown(
    zk: KafkaZkClient,
    settings: ControllerSettings,
    broker_epoch: int,
    controller: Controller | None = None,
) -> bool:
    """True when the controller moved every leadership away from this broker.

    `controller` is this broker's own (it follows /controller): with it, an attempt that
    lost its controller is retried once a new one is elected rather than after the backoff.
    """
    for attempt in range(1, settings.controlled_shutdown_max_retries + 1):
        asked = NO_CONTROLLER
        controller_gone = True
        try:
            with trio.fail_after(settings.zookeeper_connection_timeout_s):
                asked = await _controller_id(zk)
                found = await zk.get_broker(asked) if asked != NO_CONTROLLER else None
            response = await _ask_controller(settings, broker_epoch, asked, found)
        except* trio.TooSlowError:
            log.warning(
                "controlled shutdown attempt %d failed: ZooKeeper unreachable for %.0fs, "
                "so the controller cannot be found",
                attempt,
                settings.zookeeper_connection_timeout_s,
            )
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
                controller_gone = response.error_code == ErrorCode.NOT_CONTROLLER
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
            with trio.move_on_after(settings.controlled_shutdown_retry_backoff_s):
                if controller is not None and controller_gone:
                    await controller.wait_for_another_controller(asked)
                else:
                    await trio.sleep_forever()
    log.warning("controlled shutdown did not complete; shutting down anyway")
    return False


async def _controller_id(zk: KafkaZkClient) -> int:
    found = await zk.get_controller_id()
    if found is None:
        log.info("no controller is elected yet")
        return NO_CONTROLLER
    return found


async def _ask_controller(
    settings: ControllerSettings,
    broker_epoch: int,
    controller_id: int,
    broker: BrokerRegistration | None,
) -> ControlledShutdownResponse | None:
    """The controller's answer; None when there is none to ask or it has no endpoint."""
    if controller_id == NO_CONTROLLER:
        return None
    endpoint = broker.endpoint(settings.inter_broker_listener) if broker is not None else None
    if endpoint is None:
        log.info("controller %d has no %s endpoint", controller_id, settings.inter_broker_listener)
        return None
    config = ConnectionConfig(
        client_id=f"broker-{settings.broker_id}",
        request_timeout=settings.request_timeout_s,
        security=settings.security,
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
