"""Follower fetchers: replicate the leaders' logs by fetching, as consumers do.

Partitions are spread over `num.replica.fetchers` fetchers per leader; each fetcher is a task
with one connection to its leader. A partition starts out *truncating*: the fetcher asks the
leader (OffsetForLeaderEpoch) where the follower's latest leader epoch ends and truncates its
log there, so records a previous leader wrote but the new one never had are gone before
anything is appended (KIP-101/279). Then it *fetches* from its log end offset: Fetch requests
with our broker id as `replica_id`, records appended as they are, the high watermark and log
start offset taken from the leader. Fetches use an incremental fetch session (KIP-227,
`gregor.client.fetch_sessions`): once the leader has cached the partitions, a request names
only those whose fetch offset moved and the response carries only those with something new,
so an idle partition costs neither side a thing per round. Building the request costs what
moved too: while every partition is fetched and none was added, removed or delayed, a
fetcher rebuilds only the partitions the last response moved (`_Steady`), and looks at them
all once a second.

Errors per partition: an out-of-range offset resets from the leader's log start or end
(ListOffsets); a fenced epoch drops the partition until the next LeaderAndIsr; other
retriable errors back off `replica.fetch.backoff.ms`. A broken connection is reopened after
the same backoff.
"""

from __future__ import annotations

import enum
import logging
import zlib
from collections.abc import Iterable
from typing import Protocol

import attrs
import trio

from gregor.broker.config import BrokerConfig
from gregor.broker.partition import Partition
from gregor.broker.replication_quotas import ReplicationQuotas
from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.client.fetch_sessions import SESSION_ERRORS, FetchSessionHandler
from gregor.client.security import SecuritySettings
from gregor.protocol.apis.fetch import FetchPartition as FetchPartitionRequest
from gregor.protocol.apis.fetch import FetchRequest, FetchResponse, PartitionData
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from gregor.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from gregor.protocol.errors import ErrorCode, KafkaError, NetworkError, ProtocolError

log = logging.getLogger(__name__)

Key = tuple[str, int]
# The highest versions the fetcher speaks: Fetch by topic name (v13 moved to topic ids).
FETCH_MAX_VERSION = 12
LATEST = -1
EARLIEST = -2


class State(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@attrs.define
class PartitionFetchState:
    fetch_offset: int
    leader_epoch: int
    state: State = State.TRUNCATING
    delayed_until: float = 0.0  # trio.current_time() before which the partition rests
    # The partition's part of the last Fetch, reused while unchanged: the fetch session
    # then knows it unchanged by identity.
    request: FetchPartitionRequest | None = attrs.field(default=None, eq=False)


THROTTLED_RETRY_S = 0.1
# The longest a steady fetcher goes without looking at every partition: what changes no
# state here (a follower's own log start, a throttle or fetch size configured) is sent then.
FULL_PASS_S = 1.0


@attrs.define(slots=True)
class _Steady:
    """A full pass's fetch, kept while every partition is fetched and none is added,
    removed, delayed or throttled (`version`, until `until`): the next fetches send it again,
    with only the partitions the last response moved rebuilt."""

    wanted: dict[Key, FetchPartitionRequest]
    sent: dict[Key, tuple[PartitionFetchState, int]]  # the state and the offset asked
    version: int
    until: float


def fetcher_id(topic: str, partition: int, fetchers: int) -> int:
    return (zlib.crc32(topic.encode()) * 31 + partition) % fetchers


class FetcherHost(Protocol):
    """What the fetchers use of the broker: its settings, where a leader is, and the
    partitions it hosts (a replica lookup)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def broker_id(self) -> int: ...
    def leader_endpoint(self, leader_id: int) -> tuple[str, int] | None: ...
    def partition(self, topic: str, partition: int) -> Partition | None: ...
    @property
    def replication_quotas(self) -> ReplicationQuotas: ...
    @property
    def inter_broker_security(self) -> SecuritySettings: ...


class FetcherManager:
    def __init__(self, manager: FetcherHost) -> None:
        self.manager = manager
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def add(self, partitions: Iterable[Partition]) -> None:
        count = self.manager.config.num_replica_fetchers
        for partition in partitions:
            assert partition.log is not None
            key = (partition.leader_id, fetcher_id(partition.topic, partition.partition, count))
            fetcher = self.fetchers.get(key)
            if fetcher is None or fetcher.stopped:
                fetcher = self.fetchers[key] = ReplicaFetcher(self.manager, *key)
                if self._nursery is not None:
                    self._nursery.start_soon(fetcher.run)
            fetcher.add(
                partition.key,
                PartitionFetchState(partition.log.log_end_offset, partition.leader_epoch),
            )

    def remove(self, keys: Iterable[Key]) -> None:
        wanted = set(keys)
        for fetcher_key, fetcher in list(self.fetchers.items()):
            fetcher.remove(wanted)
            if not fetcher.states:
                fetcher.stop()
                del self.fetchers[fetcher_key]

    def remove_all(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()

    def fetch_state(self, key: Key) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            found = fetcher.states.get(key)
            if found is not None:
                return found
        return None


class ReplicaFetcher:
    """Fetches the partitions one leader leads for us, over one connection."""

    def __init__(self, manager: FetcherHost, leader_id: int, index: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        self.states: dict[Key, PartitionFetchState] = {}
        self._version = 0  # moves with every partition added, removed or delayed
        self._steady: _Steady | None = None
        self._moved: set[Key] = set()  # the partitions the last response was processed for
        self.stopped = False
        self._cancel = trio.CancelScope()
        self._changed = trio.Event()
        self.session = FetchSessionHandler(f"broker {manager.broker_id} from {leader_id}")
        config = manager.config
        self.backoff = config.replica_fetch_backoff_ms / 1000
        self.connection_config = ConnectionConfig(
            client_id=f"broker-{manager.broker_id}-fetcher-{index}",
            request_timeout=(config.replica_socket_timeout_ms + config.replica_fetch_wait_max_ms)
            / 1000,
            connect_timeout=config.replica_socket_timeout_ms / 1000,
            max_in_flight=1,
            security=manager.inter_broker_security,
            caller_reads=True,  # the fetch loop reads its own responses: one wake-up a round
        )

    def __repr__(self) -> str:
        return f"<ReplicaFetcher {self.index} of leader {self.leader_id}>"

    def add(self, key: Key, state: PartitionFetchState) -> None:
        self.states[key] = state
        self._version += 1
        self._changed.set()

    def remove(self, keys: set[Key]) -> None:
        for key in keys & self.states.keys():
            del self.states[key]
            self._version += 1

    def stop(self) -> None:
        self.stopped = True
        self._cancel.cancel()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        with self._cancel:
            while not self.stopped:
                endpoint = self._leader_endpoint()
                if endpoint is None:
                    log.info("%r: leader %d has no known endpoint yet", self, self.leader_id)
                    await trio.sleep(self.backoff)
                    continue
                failures: list[Exception] = []
                try:
                    async with trio.open_nursery() as nursery:
                        connection = await BrokerConnection.open(
                            nursery, *endpoint, self.connection_config
                        )
                        try:
                            await self._replicate(connection)
                        finally:
                            self.session.handle_error()  # the next connection's is new
                            self._steady = None
                            await connection.aclose()
                except* (NetworkError, ProtocolError, OSError) as group:
                    failures += group.exceptions
                except* Exception as group:
                    # A bug must stop this fetcher's round, never the broker.
                    log.error("%r failed", self, exc_info=group)
                    failures += group.exceptions
                if failures:
                    log.info("%r: %s; retrying in %.1fs", self, failures[0], self.backoff)
                    await trio.sleep(self.backoff)

    def _leader_endpoint(self) -> tuple[str, int] | None:
        return self.manager.leader_endpoint(self.leader_id)

    async def _replicate(self, connection: BrokerConnection) -> None:
        while not self.stopped:
            now = trio.current_time()
            steady = self._steady
            if steady is not None and steady.version == self._version and now < steady.until:
                await self._fetch_steady(connection, steady)
                continue
            self._steady = None
            ready = {k: s for k, s in self.states.items() if s.delayed_until <= now}
            if not ready:
                await self._rest(now)
                continue
            truncating = {k: s for k, s in ready.items() if s.state is State.TRUNCATING}
            if truncating:
                await self._truncate(connection, truncating)
                continue
            await self._fetch(connection, ready)

    async def _rest(self, now: float) -> None:
        wake = min((s.delayed_until for s in self.states.values()), default=now + 3600)
        self._changed = trio.Event()
        with trio.move_on_at(wake):
            await self._changed.wait()

    def _delay(self, key: Key, state: PartitionFetchState, seconds: float | None = None) -> None:
        if self.states.get(key) is state:
            state.delayed_until = trio.current_time() + (
                self.backoff if seconds is None else seconds
            )
            self._version += 1

    def _current(self, key: Key, state: PartitionFetchState) -> Partition | None:
        """The partition, if the fetcher still follows it in the same epoch.

        If the partition moved on (gone, led here, another epoch) while its state is still
        held, the state rests a backoff until the broker replaces or removes it: nothing is
        sent for it, so the loop must wait rather than spin (which starves the broker)."""
        if self.states.get(key) is not state:
            return None
        partition = self.manager.partition(*key)
        if (
            partition is None
            or partition.log is None
            or partition.is_leader
            or partition.leader_epoch != state.leader_epoch
        ):
            self._delay(key, state)
            return None
        return partition

    # -- truncation ----------------------------------------------------------------------------

    async def _truncate(
        self, connection: BrokerConnection, states: dict[Key, PartitionFetchState]
    ) -> None:
        asks: dict[Key, int] = {}
        for key, state in states.items():
            partition = self._current(key, state)
            if partition is None:
                continue
            assert partition.log is not None
            latest = partition.log.epoch_cache.latest_epoch()
            if latest is None:
                # No epochs known: nothing can be compared; the high watermark is safe.
                self._truncate_to(partition, partition.log.high_watermark)
                self._start_fetching(partition, state)
            else:
                asks[key] = latest
        if not asks:
            return
        by_topic: dict[str, list[OffsetForLeaderPartition]] = {}
        for (topic, index), epoch in asks.items():
            by_topic.setdefault(topic, []).append(
                OffsetForLeaderPartition(index, states[(topic, index)].leader_epoch, epoch)
            )
        request = OffsetForLeaderEpochRequest(
            replica_id=self.manager.broker_id,
            topics=[OffsetForLeaderTopic(t, parts) for t, parts in by_topic.items()],
        )
        response = await connection.request(
            request,
            connection.version_for(OffsetForLeaderEpochRequest, min_version=3),
            response_type=OffsetForLeaderEpochResponse,
        )
        for result in response.topics:
            for answer in result.partitions:
                key = (result.topic, answer.partition)
                asked = states.get(key)
                if asked is None:
                    continue
                partition = self._current(key, asked)
                if partition is None:
                    continue
                if answer.error_code == ErrorCode.NONE:
                    self._apply_epoch_end(partition, asked, answer.leader_epoch, answer.end_offset)
                else:
                    self._partition_error(key, asked, answer.error_code, "OffsetForLeaderEpoch")

    def _apply_epoch_end(
        self, partition: Partition, state: PartitionFetchState, epoch: int, end_offset: int
    ) -> None:
        """Kafka's truncation rule for the leader's answer (epoch, end offset)."""
        local = partition.log
        assert local is not None
        leo = local.log_end_offset
        if end_offset < 0:
            target, complete = state.fetch_offset, True  # the leader knows no such epoch
        elif epoch < 0:
            target, complete = min(end_offset, leo), True
        else:
            ours = local.end_offset_for_epoch(epoch)
            if ours is None:
                target, complete = min(end_offset, leo), True
            elif ours[0] != epoch:
                # We do not know the leader's epoch: cut to the end of our last epoch before
                # it and ask again about that one.
                target, complete = min(ours[1], leo), False
            else:
                target, complete = min(ours[1], end_offset, leo), True
        self._truncate_to(partition, target)
        if complete:
            self._start_fetching(partition, state)

    def _truncate_to(self, partition: Partition, offset: int) -> None:
        local = partition.log
        assert local is not None
        if offset < local.log_end_offset:
            log.info(
                "%s-%d: truncating from %d to %d (leader %d, epoch %d)",
                partition.topic,
                partition.partition,
                local.log_end_offset,
                offset,
                self.leader_id,
                partition.leader_epoch,
            )
            local.truncate_to(offset)

    def _start_fetching(self, partition: Partition, state: PartitionFetchState) -> None:
        assert partition.log is not None
        state.state = State.FETCHING
        state.fetch_offset = partition.log.log_end_offset

    # -- fetching ------------------------------------------------------------------------------

    async def _fetch(
        self, connection: BrokerConnection, states: dict[Key, PartitionFetchState]
    ) -> None:
        """A full pass: look at every partition ready to fetch."""
        quota = self.manager.replication_quotas.follower
        wanted: dict[Key, FetchPartitionRequest] = {}
        sent: dict[Key, tuple[PartitionFetchState, int]] = {}
        throttled: set[Key] = set()
        held_back = False
        for key, state in states.items():
            partition = self._current(key, state)
            if partition is None:
                continue
            if quota.is_throttled(*key) and self.manager.broker_id not in partition.isr:
                # A replica catching up under follower.replication.throttled.rate.
                if quota.exceeded():
                    held_back = True
                    continue
                throttled.add(key)
            sent[key] = (state, state.fetch_offset)
            wanted[key] = self._request(key, state, partition)
        if not sent:
            if held_back:
                await trio.sleep(quota.throttle_s())
            return
        if not throttled and not held_back and len(sent) == len(self.states):
            now = trio.current_time()
            self._steady = _Steady(wanted, sent, self._version, now + FULL_PASS_S)
        await self._exchange(connection, wanted, sent, throttled)

    async def _fetch_steady(self, connection: BrokerConnection, steady: _Steady) -> None:
        """The last fetch again, with the partitions its response moved rebuilt."""
        changed: dict[Key, FetchPartitionRequest] = {}
        for key in self._moved:
            state = self.states.get(key)
            entry = steady.sent.get(key)
            partition = None if state is None else self._current(key, state)
            if partition is None or entry is None or entry[0] is not state:
                self._steady = None  # it moved on: a full pass says what to send
                return
            steady.sent[key] = (state, state.fetch_offset)
            asked = self._request(key, state, partition)
            if steady.wanted[key] is not asked:
                steady.wanted[key] = changed[key] = asked
        await self._exchange(connection, steady.wanted, steady.sent, set(), changed)

    def _request(
        self, key: Key, state: PartitionFetchState, partition: Partition
    ) -> FetchPartitionRequest:
        """The partition's part of the Fetch: the last one's while unchanged."""
        assert partition.log is not None
        max_bytes = self.manager.config.replica_fetch_max_bytes
        asked = state.request
        log_start = partition.log.log_start_offset
        if (
            asked is None
            or asked.fetch_offset != state.fetch_offset
            or asked.log_start_offset != log_start
            or asked.current_leader_epoch != state.leader_epoch
            or asked.partition_max_bytes != max_bytes
        ):
            asked = state.request = FetchPartitionRequest(
                partition=key[1],
                current_leader_epoch=state.leader_epoch,
                fetch_offset=state.fetch_offset,
                log_start_offset=log_start,
                partition_max_bytes=max_bytes,
            )
        return asked

    async def _exchange(
        self,
        connection: BrokerConnection,
        wanted: dict[Key, FetchPartitionRequest],
        sent: dict[Key, tuple[PartitionFetchState, int]],
        throttled: set[Key],
        changed: dict[Key, FetchPartitionRequest] | None = None,
    ) -> None:
        """Send the Fetch for `wanted` (of which only `changed` moved, if known) and
        process its response."""
        config = self.manager.config
        quota = self.manager.replication_quotas.follower
        self._moved = set()
        version = connection.version_for(FetchRequest, max_version=FETCH_MAX_VERSION, min_version=4)
        session = None
        if changed is not None and version >= 7:
            session = self.session.build_changed(changed)
        if session is None:
            session = self.session.build(wanted, sessions=version >= 7)
        request = FetchRequest(
            replica_id=self.manager.broker_id,
            max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes,
            max_bytes=config.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=session.session_id,
            session_epoch=session.session_epoch,
            topics=session.topics,
            forgotten_topics_data=session.forgotten,
        )
        response = await connection.request(request, version, response_type=FetchResponse)
        if not self.session.handle_response(session, response):
            if response.error_code in SESSION_ERRORS:
                return  # nothing was read; the next fetch, a full one, goes at once
            log.warning("%r: fetch failed with error %d", self, response.error_code)
            for key, (state, _) in sent.items():
                self._delay(key, state)
            return
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                entry = sent.get(key)
                if entry is None:
                    continue
                state, offset = entry
                if key in throttled and data.records is not None:
                    quota.record(len(data.records))
                partition = self._current(key, state)
                if partition is None or state.fetch_offset != offset:
                    continue  # removed, re-added or moved meanwhile
                self._moved.add(key)
                try:
                    await self._process(connection, key, partition, state, data)
                except KafkaError as exc:
                    log.warning("%s-%d: %s", key[0], key[1], exc)
                    self._delay(key, state)

    async def _process(
        self,
        connection: BrokerConnection,
        key: Key,
        partition: Partition,
        state: PartitionFetchState,
        data: PartitionData,
    ) -> None:
        local = partition.log
        assert local is not None
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._reset_out_of_range(connection, key, partition, state)
            return
        if data.error_code != ErrorCode.NONE:
            self._partition_error(key, state, data.error_code, "Fetch")
            return
        records = data.records
        if isinstance(records, bytes | bytearray | memoryview) and len(records):
            local.append_as_follower(records)
            state.fetch_offset = local.log_end_offset
        elif (
            data.high_watermark > state.fetch_offset
            and self.manager.replication_quotas.leader_throttled(key[0])
        ):
            # Behind the high watermark and sent nothing, on a topic with a leader-side
            # replication throttle: the leader holds this replica back; ask again shortly
            # rather than at once.
            self._delay(key, state, THROTTLED_RETRY_S)
        high_watermark = local.high_watermark
        local.update_high_watermark(min(data.high_watermark, local.log_end_offset))
        if local.high_watermark != high_watermark:
            # Consumers reading this follower (KIP-392) may be waiting for it.
            partition.host.notify_high_watermark(partition)
        leader_start = min(data.log_start_offset, local.high_watermark)
        if leader_start > local.log_start_offset:
            local.delete_records(leader_start)

    async def _reset_out_of_range(
        self,
        connection: BrokerConnection,
        key: Key,
        partition: Partition,
        state: PartitionFetchState,
    ) -> None:
        local = partition.log
        assert local is not None
        leo = local.log_end_offset
        leader_end = await self._leader_offset(connection, key, state, LATEST)
        if leader_end is None:
            return
        if leader_end < leo:
            # An unclean election left the leader behind us: follow its log from its end.
            self._truncate_to(partition, leader_end)
            state.fetch_offset = local.log_end_offset
            return
        leader_start = await self._leader_offset(connection, key, state, EARLIEST)
        if leader_start is None:
            return
        if leader_start > leo:
            log.info(
                "%s-%d: our end %d is below the leader's log start %d: starting over there",
                key[0],
                key[1],
                leo,
                leader_start,
            )
            local.truncate_fully_and_start_at(leader_start)
        state.fetch_offset = max(leader_start, local.log_end_offset)

    async def _leader_offset(
        self, connection: BrokerConnection, key: Key, state: PartitionFetchState, timestamp: int
    ) -> int | None:
        request = ListOffsetsRequest(
            replica_id=self.manager.broker_id,
            topics=[
                ListOffsetsTopic(
                    key[0], [ListOffsetsPartition(key[1], state.leader_epoch, timestamp)]
                )
            ],
        )
        version = connection.version_for(ListOffsetsRequest, min_version=1)
        response = await connection.request(request, version, response_type=ListOffsetsResponse)
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.error_code != ErrorCode.NONE:
                    self._partition_error(key, state, answer.error_code, "ListOffsets")
                    return None
                return answer.offset
        self._delay(key, state)
        return None

    def _partition_error(self, key: Key, state: PartitionFetchState, error: int, what: str) -> None:
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            # The leader has moved on; the controller's next LeaderAndIsr will tell us more.
            log.info("%s-%d: %s fenced at epoch %d", key[0], key[1], what, state.leader_epoch)
            if self.states.get(key) is state:
                del self.states[key]
                self._version += 1
            return
        log.info("%s-%d: %s answered error %d; backing off", key[0], key[1], what, error)
        self._delay(key, state)
