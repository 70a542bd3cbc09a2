"""The markers' transport: WriteTxnMarkers over gregor-client's `BrokerConnection`s to the
brokers' inter-broker listeners, as the controller's channel reaches brokers.

One connection per broker, opened on first use and kept (a failed one is dropped and the
next send opens another); the leaders and endpoints come from the metadata cache.
"""

from __future__ import annotations

import logging
from typing import Protocol, TypeVar

import trio

from gregor.broker.coordinator.transaction.markers import NO_LEADER
from gregor.broker.metadata_cache import Node, PartitionState
from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.client.security import ClientSecurity, SecuritySettings
from gregor.protocol.apis.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from gregor.protocol.errors import NetworkError
from gregor.protocol.schema import Request, Response

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Response)


class ClusterView(Protocol):
    """What the transport reads of the metadata cache."""

    def contains_topic(self, topic: str) -> bool: ...
    def partition(self, topic: str, partition: int) -> PartitionState | None: ...
    def node(self, broker_id: int, listener: str) -> Node | None: ...


class InterBrokerMarkerTransport:
    def __init__(
        self,
        broker_id: int,
        cluster: ClusterView,
        listener: str,
        request_timeout_s: float = 30.0,
        security: SecuritySettings = ClientSecurity(),  # noqa: B008 (frozen)
    ) -> None:
        self.cluster = cluster
        self.listener = listener
        self.config = ConnectionConfig(
            client_id=f"broker-{broker_id}-txn-markers",
            request_timeout=request_timeout_s,
            max_in_flight=5,
            security=security,
        )
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Holds the connections' readers; cancel to close them."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for connection in self._connections.values():
                with trio.CancelScope(shield=True):
                    await connection.aclose()
            self._connections.clear()

    def leader_of(self, topic: str, partition: int) -> int | None:
        if not self.cluster.contains_topic(topic):
            return None
        state = self.cluster.partition(topic, partition)
        if state is None:
            return None
        return state.leader if state.leader >= 0 else NO_LEADER

    async def _connection(self, broker_id: int) -> BrokerConnection:
        lock = self._locks.setdefault(broker_id, trio.Lock())
        async with lock:
            connection = self._connections.get(broker_id)
            if connection is not None and not connection.closed:
                return connection
            node = self.cluster.node(broker_id, self.listener)
            if node is None:
                raise NetworkError(f"broker {broker_id} has no {self.listener} endpoint")
            if self._nursery is None:
                raise NetworkError("the marker transport is not running")
            connection = await BrokerConnection.open(
                self._nursery, node.host, node.port, self.config
            )
            self._connections[broker_id] = connection
            return connection

    async def send(
        self, broker_id: int, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        return await self.request(broker_id, request, WriteTxnMarkersResponse)

    async def request(self, broker_id: int, request: Request, response_type: type[R]) -> R:
        """Any inter-broker request (markers; a leader's transaction verification)."""
        connection = await self._connection(broker_id)
        try:
            return await connection.request(request, response_type=response_type)
        except Exception:
            if self._connections.get(broker_id) is connection:
                del self._connections[broker_id]
            await connection.aclose()
            raise
