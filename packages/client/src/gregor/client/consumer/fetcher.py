"""The prefetching fetcher: Fetch requests to every leader stay in flight while the
application works through what already arrived.

Each leader gets at most one Fetch in flight (as in the Java client), for every partition it
leads that is assigned, not paused, has a fetch offset, and has fewer than `PREFETCH`
responses waiting to be consumed. A response's data goes into the `FetchBuffer` as one
`CompletedFetch` per partition, and the partition's fetch offset moves past it at once, so
the next request is already on its way while the application decodes this one. Requests
to each leader go in an incremental fetch session (KIP-227, `gregor.client.fetch_sessions`):
after the first, a request names only the partitions that moved, and the response carries
only those with something new.

With `client.rack` set, a leader with a `replica.selector.class` may answer a partition with
`preferred_read_replica` (KIP-392): the partition is then fetched from that replica (up to
its high watermark) for `metadata.max.age.ms`, after which the leader is asked again. A
failure of that replica (an error, a lost connection, an offset out of its range), its
leaving the partition's ISR or the cluster in the metadata, sends the partition back to the
leader at once. A replica that cannot be reached stays shunned for `reconnect.backoff.max.ms`:
meanwhile requests to the leaders of the partitions it holds carry no rack, so the leader
serves them itself instead of naming the dead replica again (which it does until that
replica leaves its ISR; asking it again at once would be a busy loop of empty answers).

Errors: a moved leader or an unknown partition refreshes metadata and the partition is
fetched again from its leader; an offset out of range resets the position as
auto.offset.reset says (or, with `none`, surfaces the error on the next poll); other errors
surface on the next poll, naming the partition and broker.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

import trio

from gregor.client.config import ConsumerConfig
from gregor.client.consumer.records import CompletedFetch, next_offset_after
from gregor.client.consumer.subscription import PartitionState, ResetStrategy, SubscriptionState
from gregor.client.fetch_sessions import (
    SESSION_ERRORS,
    FetchSessionHandler,
    FetchSessionRequest,
    Key,
)
from gregor.client.network import NetworkClient
from gregor.client.types import TopicPartition
from gregor.client.wakeup import Wakeup
from gregor.protocol.apis.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from gregor.protocol.errors import (
    ErrorCode,
    KafkaError,
    NetworkError,
    OffsetOutOfRangeError,
    ProtocolError,
    RequestTimedOutError,
)

log = logging.getLogger(__name__)

PREFETCH = 2  # responses per partition that may wait for the application
MAX_FETCH_VERSION = 12  # v13+ name topics by id only
MIN_FETCH_VERSION = 4  # isolation level, last stable offset, aborted transactions
READ_COMMITTED = 1


def release(fetch: CompletedFetch) -> None:
    """A fetch leaves the buffer: its partition may fetch again (under the lock)."""
    if fetch.owner is not None:
        fetch.owner.buffered = max(0, fetch.owner.buffered - 1)
        fetch.owner = None


class FetchBuffer:
    """Completed fetches between the fetcher (I/O side) and poll (the application's side).

    Shares the subscription's lock, so that checking a fetch's epoch against its
    partition and taking it happen in one step.
    """

    def __init__(self, subscriptions: SubscriptionState) -> None:
        self.subscriptions = subscriptions
        self.changed = threading.Condition(subscriptions.lock)
        self._fetches: collections.deque[CompletedFetch] = collections.deque()
        self.listeners: list[Callable[[], None]] = []  # told when data arrives

    def put(self, fetches: list[CompletedFetch]) -> None:
        if not fetches:
            return
        with self.changed:
            self._fetches.extend(fetches)
            self.changed.notify_all()
        for listener in self.listeners:
            listener()

    def next_fetch(self) -> CompletedFetch | None:
        """The oldest fetch still current (assigned, same epoch) and not paused; stale ones
        are dropped on the way."""
        with self.changed:
            assignment = self.subscriptions.assignment
            fetches = self._fetches
            for _ in range(len(fetches)):
                fetch = fetches.popleft()
                state = assignment.get(fetch.tp)
                if state is None or state is not fetch.owner or state.epoch != fetch.epoch:
                    release(fetch)
                    continue
                if state.paused:
                    fetches.append(fetch)  # kept for when it is resumed
                    continue
                return fetch
            return None

    def drop(self, tp: TopicPartition) -> None:
        """Forget what was fetched for a partition (it was sought or reset)."""
        with self.changed:
            keep: collections.deque[CompletedFetch] = collections.deque()
            for fetch in self._fetches:
                if fetch.tp == tp:
                    release(fetch)
                else:
                    keep.append(fetch)
            self._fetches = keep

    def has_data(self) -> bool:
        with self.changed:
            assignment = self.subscriptions.assignment
            return any(
                (s := assignment.get(f.tp)) is not None and s.epoch == f.epoch and not s.paused
                for f in self._fetches
            )

    def clear(self) -> None:
        with self.changed:
            self._fetches.clear()


class Fetcher:
    def __init__(
        self,
        config: ConsumerConfig,
        client: NetworkClient,
        subscriptions: SubscriptionState,
        buffer: FetchBuffer,
    ) -> None:
        self.config = config
        self.client = client
        self.subscriptions = subscriptions
        self.buffer = buffer
        self.read_committed = config.isolation_level == "read_committed"
        self._busy: set[int] = set()
        self._sessions: dict[int, FetchSessionHandler] = {}  # by broker
        self._shunned: dict[int, float] = {}  # unreachable read replica -> until (monotonic)
        self._wakeup = Wakeup()

    def wake(self) -> None:
        """Re-check what to fetch; safe from any thread."""
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._wakeup.bind()
        self.client.listeners.append(self.wake)
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                self._wakeup.clear()
                self._start_fetches(nursery)
                await self._wakeup.wait(1.0)

    def _start_fetches(self, nursery: trio.Nursery) -> None:
        plan: dict[int, list[tuple[TopicPartition, int, int]]] = {}
        unknown_leader = False
        subscriptions = self.subscriptions
        with subscriptions.lock:
            for tp, state in subscriptions.assignment.items():
                if (
                    state.paused
                    or state.in_flight
                    or state.fetch_offset is None
                    or state.buffered >= PREFETCH
                ):
                    continue
                node = self._read_replica(tp, state)
                if node < 0:
                    unknown_leader = True
                    continue
                if node in self._busy:
                    continue
                if not self.client.is_ready(node):
                    self.client.initiate_connect(node)
                    continue
                plan.setdefault(node, []).append((tp, state.epoch, state.fetch_offset))
            for parts in plan.values():
                for tp, _, _ in parts:
                    subscriptions.assignment[tp].in_flight = True
        if unknown_leader:
            self.client.add_topics(subscriptions.topics)
            self.client.request_update()
        for node, parts in plan.items():
            self._busy.add(node)
            nursery.start_soon(self._fetch, node, parts)

    def _read_replica(self, tp: TopicPartition, state: PartitionState) -> int:
        """The node to fetch `tp` from: its preferred read replica while that lasts, is in
        the partition's ISR and reachable; else its leader (-1: unknown)."""
        cluster = self.client.cluster
        replica = state.preferred_read_replica
        if replica >= 0:
            info = cluster.partition_info(tp)
            now = time.monotonic()
            if (
                now < state.preferred_until
                and info is not None
                and replica in info.isr
                and cluster.broker(replica) is not None
                and not self.client.connect_failed(replica)
            ):
                return replica
            log.debug("%s: back from replica %d to the leader", tp, replica)
            if self.client.connect_failed(replica) and self._shunned.get(replica, 0) <= now:
                self._shun(replica)
                self.client.initiate_connect(replica)  # to go back to it once it answers
            state.preferred_read_replica = -1
        return cluster.leader_for(tp)

    def _shun(self, replica: int) -> None:
        self._shunned[replica] = time.monotonic() + self.config.reconnect_backoff_max_ms / 1000

    def _rack_for(self, parts: list[tuple[TopicPartition, int, int]]) -> str:
        """`client.rack`, unless a partition asked for has a replica that is shunned."""
        rack = self.config.client_rack
        if not rack or not self._shunned:
            return rack
        now = time.monotonic()
        self._shunned = {node: until for node, until in self._shunned.items() if until > now}
        cluster = self.client.cluster
        for tp, _, _ in parts:
            info = cluster.partition_info(tp)
            if info is not None and any(r in self._shunned for r in info.replicas):
                return ""
        return rack

    def _request(self, session: FetchSessionRequest, rack: str) -> FetchRequest:
        config = self.config
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            isolation_level=READ_COMMITTED if self.read_committed else 0,
            session_id=session.session_id,
            session_epoch=session.session_epoch,
            topics=session.topics,
            forgotten_topics_data=session.forgotten,
            rack_id=rack,
        )

    def _wanted(self, parts: list[tuple[TopicPartition, int, int]]) -> dict[Key, FetchPartition]:
        cluster = self.client.cluster
        wanted = {}
        for tp, _, offset in parts:
            info = cluster.partition_info(tp)
            wanted[(tp.topic, tp.partition)] = FetchPartition(
                partition=tp.partition,
                current_leader_epoch=info.leader_epoch if info is not None else -1,
                fetch_offset=offset,
                partition_max_bytes=self.config.max_partition_fetch_bytes,
            )
        return wanted

    async def _fetch(self, node: int, parts: list[tuple[TopicPartition, int, int]]) -> None:
        where = str(self.client.cluster.broker(node) or f"broker {node}")
        failed = True  # until the response is handled
        try:
            connection = await self.client.connect(node)
            version = connection.version_for(
                FetchRequest, max_version=MAX_FETCH_VERSION, min_version=MIN_FETCH_VERSION
            )
            timeout = (self.config.request_timeout_ms + self.config.fetch_max_wait_ms) / 1000
            handler = self._sessions.get(node)
            if handler is None:
                handler = self._sessions[node] = FetchSessionHandler(where)
            session = handler.build(self._wanted(parts), sessions=version >= 7)
            try:
                response = await self.client.send(
                    connection,
                    self._request(session, self._rack_for(parts)),
                    version,
                    timeout=timeout,
                )
            except BaseException:
                handler.handle_error()
                raise
            assert isinstance(response, FetchResponse)
            if not handler.handle_response(session, response):
                if response.error_code in SESSION_ERRORS:
                    failed = False
                    return  # nothing was read: the next fetch, a full one, goes at once
                raise KafkaError.for_code(response.error_code)(f"fetch from {where}")
            self._handle(response, parts, node, where)
            failed = False
        except (NetworkError, RequestTimedOutError) as exc:
            log.debug("fetch from %s failed: %s", where, exc)
            self.client.request_update()
        except (KafkaError, ProtocolError) as exc:
            log.warning("fetch from %s failed: %s", where, exc)
            self.client.request_update()
        finally:
            self._busy.discard(node)
            with self.subscriptions.lock:
                for tp, _, _ in parts:
                    state = self.subscriptions.assignment.get(tp)
                    if state is not None:
                        state.in_flight = False
                        if failed and state.preferred_read_replica == node:
                            state.preferred_read_replica = -1  # the leader, next
                            self._shun(node)
            self.wake()

    def _handle(
        self,
        response: FetchResponse,
        parts: list[tuple[TopicPartition, int, int]],
        node: int,
        where: str,
    ) -> None:
        asked = {tp: (epoch, offset) for tp, epoch, offset in parts}
        completed: list[CompletedFetch] = []
        refresh = False
        with self.subscriptions.lock:
            for topic in response.responses:
                for data in topic.partitions:
                    tp = TopicPartition(topic.topic, data.partition_index)
                    if tp not in asked:
                        continue
                    epoch, offset = asked[tp]
                    state = self.subscriptions.assignment.get(tp)
                    if state is None or state.epoch != epoch:
                        continue  # sought or revoked while the fetch was out
                    if state.preferred_read_replica == node and data.error_code:
                        # The replica failed us: the leader decides what comes next (an
                        # offset out of this replica's range is not reset).
                        state.preferred_read_replica = -1
                        refresh = True
                        continue
                    refresh |= self._partition(tp, state, epoch, offset, data, where, completed)
        if refresh:
            self.client.request_update()
        self.buffer.put(completed)

    def _partition(
        self,
        tp: TopicPartition,
        state: PartitionState,
        epoch: int,
        offset: int,
        data: PartitionData,
        where: str,
        completed: list[CompletedFetch],
    ) -> bool:
        """Settle one partition of a response (under the lock); True to refresh metadata."""
        code = data.error_code
        if code == ErrorCode.NONE:
            state.high_watermark = data.high_watermark
            state.last_stable_offset = data.last_stable_offset
            state.log_start_offset = data.log_start_offset
            replica = data.preferred_read_replica
            if replica >= 0:
                # No records: read them from that replica for metadata.max.age.ms.
                state.preferred_read_replica = replica
                state.preferred_until = time.monotonic() + self.config.metadata_max_age_ms / 1000
                # A replica our metadata does not show in the ISR: it is newer than ours.
                info = self.client.cluster.partition_info(tp)
                return info is None or replica not in info.isr
            if not data.records or not isinstance(data.records, bytes | memoryview):
                return False  # (a decoded response never holds a file region)
            records = memoryview(data.records)
            next_offset = next_offset_after(records, offset)
            if next_offset == offset:
                return False  # only part of a batch: it must be fetched again, whole
            aborted = (
                [(a.first_offset, a.producer_id) for a in data.aborted_transactions or ()]
                if self.read_committed
                else None
            )
            fetch = CompletedFetch(
                tp,
                epoch,
                offset,
                records,
                next_offset,
                read_committed=self.read_committed,
                aborted=aborted,
            )
            fetch.owner = state
            completed.append(fetch)
            state.fetch_offset = next_offset
            state.buffered += 1
            return False
        error_class = KafkaError.for_code(code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.subscriptions.default_reset is ResetStrategy.NONE:
                self._surface(
                    tp,
                    epoch,
                    offset,
                    OffsetOutOfRangeError(
                        f"offset {offset} of {tp} is out of range on {where} and "
                        "auto.offset.reset=none"
                    ),
                    completed,
                    state,
                )
            else:
                log.info("offset %d of %s is out of range; resetting", offset, tp)
                self.subscriptions.request_reset(tp)
            return False
        if error_class.invalid_metadata or error_class.retriable:
            return True
        self._surface(
            tp,
            epoch,
            offset,
            error_class(f"fetching {tp} from {where}: {error_class.error_name()}"),
            completed,
            state,
        )
        return False

    @staticmethod
    def _surface(
        tp: TopicPartition,
        epoch: int,
        offset: int,
        error: KafkaError,
        completed: list[CompletedFetch],
        state: PartitionState,
    ) -> None:
        """Hand an error to the application through the buffer (raised by poll)."""
        fetch = CompletedFetch(tp, epoch, offset, b"", offset, error=error)
        fetch.owner = state
        completed.append(fetch)
        state.buffered += 1
