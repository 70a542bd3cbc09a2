"""The client's network layer: one connection per broker, and the metadata cache.

- Brokers are reached by node id once metadata names them; before that (and whenever no
  known broker answers) through the bootstrap servers, tried in turn.
- A broker that cannot be reached is retried after `reconnect.backoff.ms`, doubling per
  consecutive failure up to `reconnect.backoff.max.ms`, with ±20% jitter so that many
  clients do not reconnect in step.
- A response's `throttle_time_ms` holds back further requests to that broker for that long
  (KIP-219: the broker answers at once and relies on the client to wait).
- Metadata is refreshed when asked (a NOT_LEADER_OR_FOLLOWER, an unknown partition, a new
  topic), and at least every `metadata.max.age.ms`. Failed refreshes are retried after
  `retry.backoff.ms`, doubling up to `retry.backoff.max.ms`. Waiting for a refresh is
  `await client.update_metadata()`.

Everything runs in the nursery of `NetworkClient.run`; connections' readers live there too.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import trio

from gregor.client.cluster import Cluster
from gregor.client.config import ClientConfig, parse_host_port
from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.client.security import AUTHENTICATION_ERRORS
from gregor.client.wakeup import Wakeup
from gregor.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from gregor.protocol.errors import KafkaError, NetworkError, RequestTimedOutError
from gregor.protocol.schema import Request, Response

Q = TypeVar("Q", bound=Request)

log = logging.getLogger(__name__)

BOOTSTRAP = -1  # the pseudo node id of "some bootstrap server"
# Coordinators get a connection of their own, as in the Java client: a JoinGroup may wait
# for a whole rebalance, and a broker answers a connection's requests in order.
COORDINATOR_BASE = 2**31 - 1


class Backoff:
    """Exponential backoff with jitter, as the Java client computes it."""

    def __init__(self, initial_ms: int, max_ms: int, jitter: float = 0.2) -> None:
        self.initial = initial_ms / 1000
        self.max = max(max_ms, initial_ms) / 1000
        self.jitter = jitter
        self._rng = random.Random()

    def delay(self, attempts: int) -> float:
        """Seconds to wait after `attempts` consecutive failures (0: the initial delay)."""
        base: float = min(self.initial * 2.0 ** min(attempts, 32), self.max)
        return base * self._rng.uniform(1 - self.jitter, 1 + self.jitter)


class _Node:
    """What the client keeps per broker address."""

    __slots__ = (
        "connecting",
        "connection",
        "failures",
        "host",
        "next_attempt",
        "port",
        "throttled_until",
    )

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.connection: BrokerConnection | None = None
        self.connecting: trio.Event | None = None  # set when the attempt in progress ends
        self.failures = 0
        self.next_attempt = 0.0
        self.throttled_until = 0.0


class NetworkClient:
    """Connections to every broker the client talks to, and the cluster's metadata."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        topics: Iterable[str] | None = (),
        allow_auto_topic_creation: bool = True,
        max_in_flight: int = 5,
    ) -> None:
        self.config = config
        self.connection_config = ConnectionConfig(
            client_id=config.client_id,
            request_timeout=config.request_timeout_ms / 1000,
            connect_timeout=config.socket_connection_setup_timeout_ms / 1000,
            max_in_flight=max_in_flight,
            security=config.security(),
            send_buffer=config.send_buffer_bytes,
            receive_buffer=config.receive_buffer_bytes,
        )
        self._bootstrap = [_Node(*parse_host_port(s)) for s in config.bootstrap_servers]
        self._nodes: dict[int, _Node] = {}
        self._owner: dict[BrokerConnection, _Node] = {}
        # The broker that answers "any broker" requests, and the attempt to choose one.
        self._some: _Node | None = None
        self._choosing: trio.Event | None = None
        self._reconnect = Backoff(config.reconnect_backoff_ms, config.reconnect_backoff_max_ms)
        self.retry_backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._nursery: trio.Nursery | None = None
        self.cluster = Cluster()
        self.metadata_version = 0  # how many successful refreshes so far
        # None: every topic (pattern subscriptions); else the topics this client cares about.
        self.topics: set[str] | None = None if topics is None else set(topics)
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self._update_wanted = Wakeup()  # set from any thread (a sync consumer's assign)
        self._updated = trio.Event()  # set (and replaced) by each successful refresh
        # Refreshes started, and the latest started one that succeeded: a caller that asks
        # for fresh metadata waits for one that started after it asked.
        self._refreshes_started = 0
        self._refreshed = 0
        self._last_refresh = -math.inf
        self.metadata_error: Exception | None = None
        # Callbacks run when a connection opens or closes (the sender re-checks readiness).
        self.listeners: list[Callable[[], None]] = []
        self.closed = False

    # -- lifetime --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled: connections' readers and the metadata refresher."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._update_wanted.bind()
                nursery.start_soon(self._metadata_loop)
                if self.config.connections_max_idle_ms >= 0:
                    nursery.start_soon(self._close_idle, self.config.connections_max_idle_ms / 1000)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.closed = True
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        self.closed = True
        for node in [*self._nodes.values(), *self._bootstrap]:
            if node.connection is not None:
                await node.connection.aclose()
                node.connection = None

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the network client is not running")
        return self._nursery

    # -- connections -----------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        node = self._nodes.get(node_id)
        broker = self.cluster.broker(node_id)
        if broker is None:
            if node is None:
                raise NetworkError(f"broker {node_id} is not in the cluster metadata")
            return node
        if node is None or (node.host, node.port) != (broker.host, broker.port):
            if node is not None and node.connection is not None:
                node.connection._close(NetworkError(f"broker {node_id} moved"))
            node = self._nodes[node_id] = _Node(broker.host, broker.port)
        return node

    def coordinator_node(self, node_id: int, host: str, port: int) -> int:
        """The pseudo node id of a dedicated connection to a coordinator."""
        key = COORDINATOR_BASE - node_id
        node = self._nodes.get(key)
        if node is None or (node.host, node.port) != (host, port):
            if node is not None and node.connection is not None:
                node.connection._close(NetworkError(f"coordinator {node_id} moved"))
            self._nodes[key] = _Node(host, port)
        return key

    def is_ready(self, node_id: int) -> bool:
        """Connected, and not throttled."""
        node = self._nodes.get(node_id)
        return (
            node is not None
            and node.connection is not None
            and not node.connection.closed
            and node.throttled_until <= trio.current_time()
        )

    def ready_at(self, node_id: int) -> float:
        """When a request to the node may go out (trio clock); inf while not connected."""
        node = self._nodes.get(node_id)
        if node is None or node.connection is None or node.connection.closed:
            return math.inf
        return node.throttled_until

    def connect_failed(self, node_id: int) -> bool:
        """Not connected, and the last attempt to connect failed (it is backing off)."""
        node = self._nodes.get(node_id)
        return node is not None and node.connection is None and node.failures > 0

    def initiate_connect(self, node_id: int) -> None:
        """Start connecting in the background unless connected, connecting or backing off."""
        try:
            node = self._node(node_id)
        except NetworkError:
            return
        if node.connecting is not None or (node.connection and not node.connection.closed):
            return
        self.nursery.start_soon(self._connect_quietly, node)

    async def _connect_quietly(self, node: _Node) -> None:
        try:
            await self._connect(node)
        except (NetworkError, KafkaError) as exc:
            log.debug("connecting to %s:%s failed: %s", node.host, node.port, exc)

    async def connect(self, node_id: int) -> BrokerConnection:
        """The connection to a broker, opened (after its backoff) if need be."""
        if node_id == BOOTSTRAP:
            return await self._any_bootstrap()
        return await self._connect(self._node(node_id))

    async def _connect(self, node: _Node) -> BrokerConnection:
        if node.connection is not None and not node.connection.closed:
            node.connection.last_used = trio.current_time()  # not idle: about to be used
            return node.connection
        if node.connecting is not None:  # someone else is connecting: share the outcome
            await node.connecting.wait()
            if node.connection is not None and not node.connection.closed:
                return node.connection
            raise NetworkError(f"cannot connect to {node.host}:{node.port}")
        node.connecting = trio.Event()
        try:
            await trio.sleep_until(node.next_attempt)
            if self.closed:
                raise NetworkError("the client is closed")
            connection = await BrokerConnection.open(
                self.nursery, node.host, node.port, self.connection_config
            )
        except (NetworkError, KafkaError) as exc:
            node.failures += 1
            node.next_attempt = trio.current_time() + self._reconnect.delay(node.failures - 1)
            node.connection = None
            # A broker that cannot be reached may have lost its partitions: ask who leads now.
            self.request_update()
            raise exc
        finally:
            event, node.connecting = node.connecting, None
            event.set()
            self._notify()
        node.failures = 0
        node.connection = connection
        self._owner[connection] = node
        return connection

    async def _close_idle(self, idle: float) -> None:
        """Close connections that carried nothing for connections.max.idle.ms, as the Java
        client does (the next request to the broker connects again)."""
        while True:
            await trio.sleep(max(idle / 2, 0.01))
            now = trio.current_time()
            closed = False
            for node in [*self._nodes.values(), *self._bootstrap]:
                connection = node.connection
                if (
                    connection is not None
                    and not connection.closed
                    and not connection.in_flight
                    and now - connection.last_used >= idle
                ):
                    log.debug("closing the idle connection to %s:%s", node.host, node.port)
                    connection._close(NetworkError("idle for connections.max.idle.ms"))
                    node.connection = None
                    self._owner.pop(connection, None)
                    closed = True
            if closed:
                self._notify()

    async def _any_bootstrap(self) -> BrokerConnection:
        """A connection to some broker, the same one while it stays open: a request that
        reads what the one before it changed (ACLs, quotas, configs) is answered by the broker
        that made the change. Callers that find none share one attempt to open it."""
        while True:
            chosen = self._some
            if chosen is not None and chosen.connection and not chosen.connection.closed:
                return chosen.connection
            if self._choosing is None:
                break
            await self._choosing.wait()
        self._choosing = trio.Event()
        try:
            self._some, connection = await self._choose_some()
            return connection
        finally:
            self._choosing.set()
            self._choosing = None

    async def _choose_some(self) -> tuple[_Node, BrokerConnection]:
        """A connected known broker or bootstrap server, else the first reachable of them."""
        for node in [*self._nodes.values(), *self._bootstrap]:
            if node.connection is not None and not node.connection.closed:
                return node, node.connection
        candidates = [self._node(n) for n in self.cluster.brokers] + self._bootstrap
        random.shuffle(candidates)
        candidates.sort(key=lambda n: n.next_attempt)
        errors = []
        for node in candidates:
            try:
                return node, await self._connect(node)
            except AUTHENTICATION_ERRORS:
                raise  # the user's to fix, as the Java client raises AuthenticationException
            except (NetworkError, KafkaError) as exc:
                errors.append(str(exc))
        raise NetworkError(f"no broker is reachable: {'; '.join(errors) or 'none known'}")

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()

    def disconnect(self, node_id: int, reason: str) -> None:
        node = self._nodes.get(node_id)
        if node is not None and node.connection is not None:
            node.connection._close(NetworkError(reason))
            self._notify()

    # -- requests --------------------------------------------------------------------------

    async def request(
        self,
        node_id: int,
        body: Request,
        version: int | None = None,
        *,
        timeout: float | None = None,
    ) -> Response:
        """Send `body` to a broker (BOOTSTRAP: any) and wait for its response."""
        connection = await self.connect(node_id)
        return await self.send(connection, body, version, timeout=timeout)

    async def request_built(
        self,
        node_id: int,
        api: type[Q],
        build: Callable[[int], Q],
        *,
        timeout: float | None = None,
    ) -> Response:
        """Send `build(version)` for the version of `api` negotiated with that broker: for
        requests whose fields differ between versions (a field set in a version that lacks
        it fails to encode, as in Kafka)."""
        connection = await self.connect(node_id)
        version = connection.version_for(api)
        return await self.send(connection, build(version), version, timeout=timeout)

    async def send(
        self,
        connection: BrokerConnection,
        body: Request,
        version: int | None = None,
        *,
        timeout: float | None = None,
        written: Callable[[], object] | None = None,
    ) -> Response:
        """Send on an open connection, honouring the broker's throttle; update it after.
        `written` is called once the request is on the wire."""
        node = self._owner.get(connection)
        if node is not None and node.throttled_until > trio.current_time():
            await trio.sleep_until(node.throttled_until)
        try:
            response: Response = await connection.request(
                body, version, timeout=timeout, written=written
            )
        except NetworkError:
            self.request_update()
            self._notify()
            raise
        throttle = getattr(response, "throttle_time_ms", 0)
        if throttle and node is not None:
            node.throttled_until = trio.current_time() + throttle / 1000
        return response

    def version_for(self, node_id: int, request: type[Request], **bounds: Any) -> int:
        node = self._nodes.get(node_id)
        if node is None or node.connection is None:
            raise NetworkError(f"not connected to broker {node_id}")
        return node.connection.version_for(request, **bounds)

    # -- metadata --------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> None:
        """Care about these topics too; refresh now if any is new."""
        if self.topics is None:
            return
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.request_update()

    def set_topics(self, topics: Iterable[str] | None) -> None:
        """Care about exactly these topics (None: all of them)."""
        wanted = None if topics is None else set(topics)
        if wanted != self.topics:
            self.topics = wanted
            self.request_update()

    def request_update(self) -> None:
        self._update_wanted.set()

    async def update_metadata(self, timeout: float | None = None) -> Cluster:
        """Ask for a refresh and wait for it (or raise the refresh's last error on timeout)."""
        wanted = self._refreshes_started + 1  # not one already under way: it may be stale
        self.request_update()
        limit = self.config.request_timeout_ms / 1000 if timeout is None else timeout
        with trio.move_on_after(limit):
            while self._refreshed < wanted:
                if isinstance(self.metadata_error, AUTHENTICATION_ERRORS):
                    raise self.metadata_error  # no use waiting: the credentials are wrong
                await self._updated.wait()
            return self.cluster
        if self.metadata_error is not None:
            raise self.metadata_error
        raise RequestTimedOutError(f"no metadata from the cluster within {limit:.1f}s")

    async def _metadata_loop(self) -> None:
        max_age = self.config.metadata_max_age_ms / 1000
        failures = 0
        while True:
            await self._update_wanted.wait(self._last_refresh + max_age - trio.current_time())
            self._update_wanted.clear()
            try:
                await self.refresh_metadata()
            except (NetworkError, KafkaError) as exc:
                self.metadata_error = exc
                log.debug("metadata refresh failed: %s", exc)
                if isinstance(exc, AUTHENTICATION_ERRORS):
                    self._wake_waiters()
                await trio.sleep(self.retry_backoff.delay(failures))
                failures += 1
                self._update_wanted.set()
            else:
                failures = 0

    async def refresh_metadata(self) -> Cluster:
        """Fetch metadata now from any broker and install it."""
        self._refreshes_started += 1
        number = self._refreshes_started
        topics = None if self.topics is None else sorted(self.topics)
        connection = await self._any_bootstrap()
        version = connection.version_for(MetadataRequest)
        if topics is None and version == 0:
            request_topics: list[MetadataRequestTopic] | None = []  # v0: empty means all
        elif topics is None:
            request_topics = None
        else:
            request_topics = [MetadataRequestTopic(name=t) for t in topics]
        request = MetadataRequest(
            topics=request_topics, allow_auto_topic_creation=self.allow_auto_topic_creation
        )
        response = await self.send(connection, request, version)
        assert isinstance(response, MetadataResponse)
        self.cluster = Cluster.from_response(response, self.cluster)
        self.metadata_version += 1
        self._refreshed = max(self._refreshed, number)
        self.metadata_error = None
        self._last_refresh = trio.current_time()
        self._wake_waiters()
        self._notify()
        return self.cluster

    def _wake_waiters(self) -> None:
        """Wake whoever waits in `update_metadata` (a refresh succeeded, or authentication
        failed)."""
        updated, self._updated = self._updated, trio.Event()
        updated.set()

    async def wait_for_topic(self, topic: str, timeout: float) -> Cluster:
        """Metadata that knows `topic`'s partitions, refreshing until it does."""
        self.add_topics([topic])
        with trio.move_on_after(timeout):
            while self.cluster.partition_count(topic) is None:
                error = self.cluster.topic_errors.get(topic)
                if error is not None and not KafkaError.for_code(error).retriable:
                    raise KafkaError.for_code(error)(f"topic {topic!r}: metadata error")
                await self.update_metadata(timeout)
            return self.cluster
        error_code = self.cluster.topic_errors.get(topic)
        detail = f" ({KafkaError.for_code(error_code).error_name()})" if error_code else ""
        raise RequestTimedOutError(
            f"topic {topic!r} not present in metadata after {timeout:.1f}s{detail}"
        )
