"""A control-plane test cluster: real ZooKeeper, real controllers, and broker peers.

Each `Node` is what a broker contributes to the control plane: a KafkaZkClient session, a
Controller, and a `BrokerPeer` listening on real TCP where the broker's inter-broker
listener would be. The peer answers ApiVersions, LeaderAndIsr, UpdateMetadata and
StopReplica as a broker must (that is the contract the data plane implements) and records
every request it gets, so tests assert on exactly what the controller sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio

from gregor.broker import control_requests as control
from gregor.broker.controller import Controller, ControllerSettings
from gregor.broker.zk import BrokerEndpoint, BrokerRegistration, KafkaZkClient, TopicPartition
from gregor.protocol.apis.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.leader_and_isr import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from gregor.protocol.apis.stop_replica import StopReplicaRequest, StopReplicaResponse
from gregor.protocol.apis.update_metadata import UpdateMetadataResponse
from gregor.protocol.framing import FrameReader, decode_request, encode_response
from gregor.protocol.schema import Request, Response

STALE_CONTROLLER_EPOCH = 11


@attrs.frozen
class Received:
    """One control request a peer got, flattened per partition for easy assertions."""

    api: str
    version: int
    controller_id: int
    controller_epoch: int
    body: Any


class BrokerPeer:
    """The broker end of the controller's connections."""

    def __init__(self, broker_id: int, versions: dict[int, int] | None = None) -> None:
        self.broker_id = broker_id
        self.port = 0
        # Highest version per API (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6).
        self.versions = versions or {4: 7, 5: 4, 6: 8}
        self.received: list[Received] = []
        self.controller_epoch = -1  # the highest epoch seen, as a broker tracks it
        self.changed = trio.Event()

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        reader = FrameReader(1 << 24)
        try:
            while data := await stream.receive_some(1 << 16):
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    header, body = decode_request(frame)
                    response = self.answer(body, header.request_api_version)
                    await stream.send_all(
                        encode_response(response, header.request_api_version, header.correlation_id)
                    )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def answer(self, body: Request, version: int) -> Response:
        if isinstance(body, ApiVersionsRequest):
            keys = [ApiVersion(18, 0, 3)] + [ApiVersion(k, 0, v) for k, v in self.versions.items()]
            return ApiVersionsResponse(api_keys=keys)
        epoch = getattr(body, "controller_epoch", -1)
        if epoch < self.controller_epoch:
            return _error_response(body, STALE_CONTROLLER_EPOCH)
        self.controller_epoch = epoch
        self.received.append(
            Received(type(body).__name__, version, body.controller_id, epoch, body)  # type: ignore[attr-defined]
        )
        self.changed.set()
        self.changed = trio.Event()
        if isinstance(body, LeaderAndIsrRequest):
            return control.leader_and_isr_response(
                version,
                {(topic, p.partition_index): 0 for topic, p in control.partition_states(body)},
                {t.topic_name: t.topic_id for t in body.topic_states},
            )
        if isinstance(body, StopReplicaRequest):
            return control.stop_replica_response(
                ((topic, index), 0) for topic, index, _, _ in control.stop_replica_states(body)
            )
        return UpdateMetadataResponse()

    # -- views for assertions ----------------------------------------------------------

    def of(self, api: str) -> list[Received]:
        return [r for r in self.received if r.api == api]

    def leader_and_isr_states(self) -> list[tuple[TopicPartition, LeaderAndIsrPartitionState]]:
        return [
            (TopicPartition(topic, p.partition_index), p)
            for r in self.of("LeaderAndIsrRequest")
            for topic, p in control.partition_states(r.body)
        ]

    def latest_leader_and_isr(self, tp: TopicPartition) -> LeaderAndIsrPartitionState | None:
        found = [state for t, state in self.leader_and_isr_states() if t == tp]
        return found[-1] if found else None

    def metadata(self) -> dict[TopicPartition, Any]:
        """The partition states UpdateMetadata told this broker, latest wins."""
        return {
            TopicPartition(topic, p.partition_index): p
            for r in self.of("UpdateMetadataRequest")
            for topic, p in control.partition_states(r.body)
        }

    def live_brokers(self) -> set[int]:
        updates = self.of("UpdateMetadataRequest")
        return {b.id for b in updates[-1].body.live_brokers} if updates else set()

    def stop_replicas(self) -> list[tuple[TopicPartition, bool]]:
        return [
            (TopicPartition(topic, index), delete)
            for r in self.of("StopReplicaRequest")
            for topic, index, _, delete in control.stop_replica_states(r.body)
        ]


def _error_response(body: Request, code: int) -> Response:
    if isinstance(body, LeaderAndIsrRequest):
        return LeaderAndIsrResponse(error_code=code)
    if isinstance(body, StopReplicaRequest):
        return StopReplicaResponse(error_code=code)
    return UpdateMetadataResponse(error_code=code)


class Node:
    """One broker's control plane: ZooKeeper session, controller and peer."""

    def __init__(self, broker_id: int, zk_connect: str, settings: dict[str, Any], rack: str | None):
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.settings = ControllerSettings(broker_id=broker_id, **settings)
        self.rack = rack
        self.peer = BrokerPeer(broker_id)
        self.zk: KafkaZkClient | None = None
        self.controller: Controller | None = None
        self._scope: trio.CancelScope | None = None
        self._peer_scope: trio.CancelScope | None = None

    @property
    def registration(self) -> BrokerRegistration:
        endpoint = BrokerEndpoint("PLAINTEXT", "127.0.0.1", self.peer.port)
        return BrokerRegistration(self.broker_id, (endpoint,), self.rack)

    async def start(self, nursery: trio.Nursery) -> None:
        if self._peer_scope is None:
            self._peer_scope = await nursery.start(_in_scope, self.peer.serve)
        self.zk = KafkaZkClient(self.zk_connect, session_timeout_ms=6000)
        await self.zk.start()
        self.controller = Controller(self.zk, self.settings, self.registration)
        self._scope = await nursery.start(_in_scope, self.controller.run)

    async def stop(self) -> None:
        """The broker dies: its controller and listener stop, its session closes."""
        for scope in (self._scope, self._peer_scope):
            if scope is not None:
                scope.cancel()
        self._scope = self._peer_scope = None
        if self.zk is not None:
            await self.zk.close()

    @property
    def active(self) -> bool:
        return self.controller is not None and self._scope is not None and self.controller.is_active


async def _in_scope(
    fn: Callable[..., Awaitable[None]], task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    with trio.CancelScope() as scope:
        await fn(task_status=_Started(task_status, scope))


class _Started:
    """Hands the cancel scope to `nursery.start` once `fn` reports it started."""

    def __init__(self, outer: Any, scope: trio.CancelScope) -> None:
        self.outer = outer
        self.scope = scope

    def started(self, value: Any = None) -> None:
        self.outer.started(self.scope)


async def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    """Poll a condition of the cluster until it holds, or fail naming what was awaited."""
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def wait_until_async(
    predicate: Callable[[], Awaitable[Any]], what: str, timeout: float = 20.0
) -> None:
    with trio.move_on_after(timeout):
        while not await predicate():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Cluster:
    def __init__(self, nursery: trio.Nursery, zk_connect: str) -> None:
        self.nursery = nursery
        self.zk_connect = zk_connect
        self.nodes: dict[int, Node] = {}
        self.admin: KafkaZkClient | None = None

    async def add(self, broker_id: int, rack: str | None = None, **settings: Any) -> Node:
        settings.setdefault("auto_leader_rebalance_enable", False)
        node = Node(broker_id, self.zk_connect, settings, rack)
        self.nodes[broker_id] = node
        await node.start(self.nursery)
        return node

    def controller(self) -> Node | None:
        active = [n for n in self.nodes.values() if n.active]
        return active[0] if len(active) == 1 else None

    # Tests cannot import this conftest, so they reach the helpers through the fixture.
    wait_until = staticmethod(wait_until)
    wait_until_async = staticmethod(wait_until_async)

    async def wait_for_controller(self, timeout: float = 20.0) -> Node:
        await wait_until(
            lambda: self.controller() is not None, "a single active controller", timeout
        )
        node = self.controller()
        assert node is not None
        return node


@pytest.fixture
async def control_plane(zk_connect: str) -> AsyncIterator[Cluster]:
    async with trio.open_nursery() as nursery:
        result = Cluster(nursery, zk_connect)
        result.admin = KafkaZkClient(zk_connect)
        await result.admin.start()
        try:
            yield result
        finally:
            for node in result.nodes.values():
                await node.stop()
            await result.admin.close()
            nursery.cancel_scope.cancel()
