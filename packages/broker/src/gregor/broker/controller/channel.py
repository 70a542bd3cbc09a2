"""The controller's connections to brokers: one queue and one sender task per live broker.

Requests to a broker are sent one at a time, in the order they were queued, over a
`BrokerConnection` to the broker's inter-broker listener (the controller's own broker
included). A request that fails on the network is sent again on a new connection after a
short backoff, until it is answered or the broker is removed (it died: the controller will
send it everything afresh when it returns). The request body is built when it is sent, for
the version that connection negotiated.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import attrs
import trio

from gregor.broker.zk.znodes import BrokerRegistration
from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.client.security import ClientSecurity, SecuritySettings
from gregor.protocol.errors import NetworkError, ProtocolError, UnsupportedVersionError
from gregor.protocol.schema import Request, Response

log = logging.getLogger(__name__)

RETRY_BACKOFF = 0.1


@attrs.frozen
class ControlRequest:
    """A LeaderAndIsr, UpdateMetadata or StopReplica for one broker, built at send time."""

    api: type[Request]
    build: Callable[[int], Request | None]  # version -> body (None: nothing to send at it)
    on_response: Callable[[Response, int], None] | None = None  # (response, version)
    description: str = ""


class BrokerChannel:
    def __init__(self, broker: BrokerRegistration, host: str, port: int, config: ConnectionConfig):
        self.broker = broker
        self.host = host
        self.port = port
        self.config = config
        self.queue: deque[ControlRequest] = deque()
        self.wakeup = trio.Event()
        self.scope = trio.CancelScope()

    def put(self, request: ControlRequest) -> None:
        self.queue.append(request)
        self.wakeup.set()

    async def run(self) -> None:
        with self.scope:
            while True:
                try:
                    async with trio.open_nursery() as nursery:
                        connection = await BrokerConnection.open(
                            nursery, self.host, self.port, self.config
                        )
                        try:
                            await self._send_all(connection)
                        finally:
                            await connection.aclose()
                except* (NetworkError, OSError) as group:
                    log.info(
                        "controller connection to broker %d failed: %s",
                        self.broker.id,
                        group.exceptions[0],
                    )
                await trio.sleep(RETRY_BACKOFF)

    async def _send_all(self, connection: BrokerConnection) -> None:
        while True:
            while not self.queue:
                self.wakeup = trio.Event()
                await self.wakeup.wait()
            item = self.queue[0]
            try:
                version = connection.version_for(item.api)
            except UnsupportedVersionError as exc:
                log.error("broker %d cannot take %s: %s", self.broker.id, item.description, exc)
                self.queue.popleft()
                continue
            body = item.build(version)
            if body is None:
                self.queue.popleft()
                continue
            try:
                response: Response = await connection.request(body, version)
            except (NetworkError, ProtocolError) as exc:
                if isinstance(exc, NetworkError) or connection.closed:
                    raise NetworkError(str(exc)) from exc
                # The broker answered something we cannot read: do not resend forever.
                log.error("broker %d answered %s badly: %s", self.broker.id, item.description, exc)
                self.queue.popleft()
                continue
            self.queue.popleft()
            if item.on_response is not None:
                item.on_response(response, version)


class ControllerChannelManager:
    def __init__(
        self,
        controller_id: int,
        listener: str,
        request_timeout: float = 30.0,
        security: SecuritySettings = ClientSecurity(),  # noqa: B008 (frozen)
    ) -> None:
        self.controller_id = controller_id
        self.listener = listener
        self.config = ConnectionConfig(
            client_id=f"controller-{controller_id}",
            request_timeout=request_timeout,
            max_in_flight=1,
            security=security,
        )
        self.channels: dict[int, BrokerChannel] = {}
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery, brokers: list[BrokerRegistration]) -> None:
        self._nursery = nursery
        for broker in brokers:
            self.add_broker(broker)

    def add_broker(self, broker: BrokerRegistration) -> None:
        if broker.id in self.channels or self._nursery is None:
            return
        endpoint = broker.endpoint(self.listener)
        if endpoint is None:
            log.error(
                "broker %d has no %s listener: the controller cannot reach it",
                broker.id,
                self.listener,
            )
            return
        channel = BrokerChannel(broker, endpoint.host, endpoint.port, self.config)
        self.channels[broker.id] = channel
        self._nursery.start_soon(channel.run)

    def remove_broker(self, broker_id: int) -> None:
        channel = self.channels.pop(broker_id, None)
        if channel is not None:
            channel.scope.cancel()

    def send(self, broker_id: int, request: ControlRequest) -> None:
        channel = self.channels.get(broker_id)
        if channel is None:
            log.warning(
                "not sending %s to broker %d: it is offline", request.description, broker_id
            )
            return
        channel.put(request)

    def queued(self, broker_id: int) -> int:
        channel = self.channels.get(broker_id)
        return len(channel.queue) if channel is not None else 0

    def shutdown(self) -> None:
        for broker_id in list(self.channels):
            self.remove_broker(broker_id)
        self._nursery = None
