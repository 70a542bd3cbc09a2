"""ReplicaManager: the partitions this broker hosts, and everything that reads or writes them.

- LeaderAndIsr and StopReplica from the controller decide which partitions are here and
  who leads them (epoch-fenced); followers get fetchers (`fetcher.FetcherManager`).
- Produce appends to leaders; acks=all then waits in the produce purgatory until the high
  watermark passes the appended records.
- Fetch reads from leaders (consumers up to the high watermark, followers up to the log end
  offset, recording each follower's position) and long-polls in the fetch purgatory. A
  consumer's Fetch v11+ may read a follower up to its high watermark, and a leader with a
  `replica.selector.class` may send it to another replica (`replica_selector`, KIP-392).
- Background tasks: the ISR expiration check (every half `replica.lag.time.max.ms`), the
  propagation of ISR changes to the controller (/isr_change_notification), and the high
  watermark checkpoint.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

import attrs
import trio

from gregor.broker.config import BrokerConfig
from gregor.broker.control_requests import (
    Key,
    leader_and_isr_response,
    partition_states,
    stop_replica_response,
    stop_replica_states,
)
from gregor.broker.fetcher import FetcherManager
from gregor.broker.metadata_cache import MetadataCache
from gregor.broker.metrics import Metrics
from gregor.broker.partition import Partition, ReadResult, now_ms
from gregor.broker.purgatory import Delayed, Purgatory, Subscription
from gregor.broker.replica_selector import SELECTORS, preferred_read_replica
from gregor.broker.replication_quotas import ReplicationQuotas
from gregor.broker.topic_names import INTERNAL_TOPICS
from gregor.broker.txn_verification import VerificationGuard
from gregor.broker.zk import LeaderAndIsr, TopicPartition
from gregor.client.security import SecuritySettings
from gregor.protocol.apis.leader_and_isr import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from gregor.protocol.apis.stop_replica import StopReplicaRequest, StopReplicaResponse
from gregor.protocol.apis.update_metadata import UpdateMetadataRequest
from gregor.protocol.errors import (
    ErrorCode,
    InvalidRecordError,
    InvalidTopicError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from gregor.storage.files import EMPTY_SLICE
from gregor.storage.log import Log
from gregor.storage.results import AppendInfo, FetchIsolation

log = logging.getLogger(__name__)

# ISR changes are told to the controller in batches: once no change came for this long, or
# at the latest this long after the first pending one (Kafka: 5 s and 60 s; a cluster this
# size wants its metadata fresher).
ISR_PROPAGATION_QUIET_MS = 500
ISR_PROPAGATION_MAX_DELAY_MS = 5_000
ISR_PROPAGATION_CHECK_S = 0.25
# Told, after each LeaderAndIsr or StopReplica, which partitions this broker now leads and
# which it no longer leads (followed or stopped): the coordinators load and unload theirs.
LeadershipListener = Callable[[Sequence[Partition], Sequence[Partition]], None]


class ReplicaLogs(Protocol):
    """Where the partitions' logs come from (gregor-storage's manager, with topic configs)."""

    def open_log(self, topic: str, partition: int, topic_id: uuid.UUID | None) -> Log: ...
    def delete_log(self, topic: str, partition: int) -> None: ...


class IsrStore(Protocol):
    """Where a leader writes its ISR changes (the partition state znodes) and tells the
    controller of them (/isr_change_notification)."""

    async def update_leader_and_isr(
        self, tp: TopicPartition, state: LeaderAndIsr, expected_zk_version: int
    ) -> int | None: ...
    async def get_partition_state(
        self, tp: TopicPartition, watch: bool = False
    ) -> LeaderAndIsr | None: ...
    async def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> None: ...


@attrs.frozen(slots=True)
class ProduceResult:
    error: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    # KIP-467: the records of the batch that failed (index in the batch, why).
    record_errors: tuple[tuple[int, str | None], ...] = ()


class Appended:
    """What an append did, and the wait for the ISR that acks=all asks for."""

    __slots__ = ("manager", "results", "waiting")

    def __init__(
        self, manager: ReplicaManager, results: dict[Key, ProduceResult], waiting: dict[Key, int]
    ) -> None:
        self.manager = manager
        self.results = results
        self.waiting = waiting  # partition -> the offset its high watermark must reach

    def replication(self, timeout_ms: int) -> Delayed[dict[Key, ProduceResult]]:
        """acks=all: registered in the produce purgatory until the ISR has the records."""
        return self.manager.replication(self.waiting, self.results, timeout_ms)

    async def replicated(self, timeout_ms: int) -> dict[Key, ProduceResult]:
        if self.waiting:
            return await self.replication(timeout_ms).result()
        return self.results


@attrs.frozen(slots=True)
class FetchParams:
    replica_id: int  # -1 for consumers
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation
    hard_max_bytes_limit: bool = False  # Fetch v0-v2: no partial first batch beyond limits
    # An incremental fetch session's test: the partition has nothing new for this fetcher
    # (nothing to read, nothing it was not told): it is neither read nor answered.
    quiet: Callable[[FetchParams, FetchPartition, Partition | None], bool] | None = None
    # The session's standing watch on its partitions in the fetch purgatory: its `changed`
    # holds those notified, or not found quiet, since its last fetch. The fetch looks at
    # those only (the others are still quiet), and parks on it.
    watch: Subscription[Key] | None = None
    # A consumer's Fetch v11+ (KIP-392): its rack ("" if none) and the listener it came on.
    # It may read from a follower, and the leader may name it a preferred read replica.
    client_rack: str | None = None
    listener: str = ""

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_only_from_leader(self) -> bool:
        return self.client_rack is None


@attrs.frozen(slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@attrs.frozen(slots=True)
class FetchResult:
    error: int
    read: ReadResult | None = None
    message: str | None = None
    preferred_read_replica: int = -1  # read from this follower instead (nothing was read)

    @property
    def size(self) -> int:
        info = self.read.info if self.read is not None else None
        return 0 if info is None else info.records.length


# What a fetch read: the partitions not quiet, in order, and their results.
Fetched = tuple[list[FetchPartition], list[FetchResult]]


class ReplicaManager:
    def __init__(
        self,
        config: BrokerConfig,
        metadata_cache: MetadataCache,
        metrics: Metrics,
        logs: ReplicaLogs,
        isr_store: IsrStore,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metadata_cache = metadata_cache
        self.metrics = metrics
        self.logs = logs
        self.isr_store = isr_store
        # The replication throttles (the broker installs its own, fed by dynamic configs).
        self.replication_quotas = ReplicationQuotas(config.broker_id)
        # How the fetchers connect to leaders (the broker installs its reloadable one).
        self.inter_broker_security: SecuritySettings = config.inter_broker_security
        # replica.selector.class (KIP-392): None keeps consumers on the leaders.
        self.replica_selector = SELECTORS.get(config.replica_selector_class)
        self.partitions: dict[Key, Partition] = {}
        self.controller_epoch = -1
        self.produce_purgatory: Purgatory[Key] = Purgatory("produce")
        self.fetch_purgatory: Purgatory[Key] = Purgatory("fetch")
        self.delete_records_purgatory: Purgatory[Key] = Purgatory("delete-records")
        self.fetchers = FetcherManager(self)
        # Leaders' endpoints as the last LeaderAndIsr named them (the metadata cache may not
        # know a leader yet when a test or a new controller sends LeaderAndIsr first).
        self.leader_endpoints: dict[int, tuple[str, int]] = {}
        self._isr_changes: set[TopicPartition] = set()
        self._first_isr_change_ms = 0
        self._last_isr_change_ms = 0
        self._nursery: trio.Nursery | None = None
        self.shutting_down = False
        self.metrics.under_replicated = self.under_replicated_count
        self.metrics.purgatories.update(
            produce=self.produce_purgatory,
            fetch=self.fetch_purgatory,
            delete_records=self.delete_records_purgatory,
        )
        self.leadership_listeners: list[LeadershipListener] = []

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The manager's background work; cancel to stop (then call `shutdown`)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._isr_expiration)
            nursery.start_soon(self._propagate_isr_changes)
            await nursery.start(self.fetchers.run)
            task_status.started()

    def shutdown(self) -> None:
        """Stop fetching and answer waiting requests; the logs are closed by their manager."""
        self.shutting_down = True
        self.fetchers.remove_all()
        self.produce_purgatory.notify_all()
        self.fetch_purgatory.notify_all()

    def start_soon(self, fn: object, *args: object) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)  # type: ignore[arg-type]

    # -- lookups -----------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def partition_or_error(self, topic: str, partition: int) -> Partition:
        found = self.partitions.get((topic, partition))
        if found is not None and found.log is not None:
            return found
        if self.metadata_cache.partition(topic, partition) is not None:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not host {topic}-{partition}"
            )
        raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        return self.partition_or_error(topic, partition).local_log(current_leader_epoch)

    def leader_endpoint(self, leader_id: int) -> tuple[str, int] | None:
        """Where a leader's followers fetch from: its inter-broker listener."""
        node = self.metadata_cache.node(leader_id, self.config.inter_broker_listener_name)
        if node is not None:
            return node.host, node.port
        return self.leader_endpoints.get(leader_id)

    @property
    def replica_lag_time_max_ms(self) -> int:
        return self.config.replica_lag_time_max_ms

    def is_alive(self, broker_id: int) -> bool:
        return self.metadata_cache.is_alive(broker_id)

    def under_replicated_count(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_under_replicated)

    # -- notifications from partitions -------------------------------------------------------

    def partition_changed(self, partition: Partition) -> None:
        """Leadership or role changed: every waiting request on it looks again."""
        self.produce_purgatory.notify(partition.key)
        self.fetch_purgatory.notify(partition.key)
        self.delete_records_purgatory.notify(partition.key)

    def notify_end_offset(self, partition: Partition) -> None:
        self.fetch_purgatory.notify(partition.key)  # followers read to the log end

    def notify_high_watermark(self, partition: Partition) -> None:
        self.produce_purgatory.notify(partition.key)
        self.fetch_purgatory.notify(partition.key)

    def notify_follower_progress(self, partition: Partition) -> None:
        self.delete_records_purgatory.notify(partition.key)

    # -- the controller's requests -----------------------------------------------------------

    def update_metadata(self, request: UpdateMetadataRequest) -> int:
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring UpdateMetadata from controller %d of epoch %d (ours is %d)",
                request.controller_id,
                request.controller_epoch,
                self.controller_epoch,
            )
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self.controller_epoch = request.controller_epoch
        deleted = self.metadata_cache.update(request)
        for topic, index in deleted:
            self.fetch_purgatory.notify((topic, index))
        return ErrorCode.NONE

    def become_leader_or_follower(
        self, request: LeaderAndIsrRequest, version: int
    ) -> LeaderAndIsrResponse:
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring LeaderAndIsr from controller %d of epoch %d (ours is %d)",
                request.controller_id,
                request.controller_epoch,
                self.controller_epoch,
            )
            return LeaderAndIsrResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = request.controller_epoch
        for leader in request.live_leaders:
            self.leader_endpoints[leader.broker_id] = (leader.host_name, leader.port)
        topic_ids = {t.topic_name: t.topic_id for t in request.topic_states}
        errors: dict[Key, int] = {}
        to_lead: list[tuple[Partition, LeaderAndIsrPartitionState]] = []
        to_follow: list[tuple[Partition, LeaderAndIsrPartitionState]] = []
        for topic, state in partition_states(request):
            key = (topic, state.partition_index)
            partition = self.partitions.get(key)
            if partition is None:
                partition = self.partitions[key] = Partition(self, topic, state.partition_index)
            if state.leader_epoch > partition.leader_epoch:
                if self.broker_id not in state.replicas:
                    log.warning(
                        "%s-%d: LeaderAndIsr without this broker among its replicas %s",
                        topic,
                        state.partition_index,
                        list(state.replicas),
                    )
                    errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif state.leader == self.broker_id:
                    to_lead.append((partition, state))
                else:
                    to_follow.append((partition, state))
            else:
                # An old or repeated decision: the controller learns it changed nothing.
                errors[key] = ErrorCode.STALE_CONTROLLER_EPOCH
        for partition, state in to_lead:
            errors[partition.key] = self._make_leader(partition, state, topic_ids)
        followed: list[Partition] = []
        for partition, state in to_follow:
            code, restarted = self._make_follower(partition, state, topic_ids)
            errors[partition.key] = code
            if restarted:
                followed.append(partition)
        self.fetchers.remove([p.key for p, _ in to_lead] + [p.key for p in followed])
        if not self.shutting_down:
            self.fetchers.add(followed)
        self._tell_leadership(
            [p for p, _ in to_lead if errors[p.key] == ErrorCode.NONE],
            [p for p, _ in to_follow if errors[p.key] == ErrorCode.NONE],
        )
        return leader_and_isr_response(version, errors, topic_ids)

    def _tell_leadership(self, led: Sequence[Partition], resigned: Sequence[Partition]) -> None:
        if not (led or resigned):
            return
        for listener in self.leadership_listeners:
            try:
                listener(led, resigned)
            except Exception:
                log.exception("leadership listener %r failed", listener)

    def _log_for(self, partition: Partition, topic_ids: Mapping[str, uuid.UUID]) -> Log:
        topic_id = topic_ids.get(partition.topic)
        return self.logs.open_log(
            partition.topic,
            partition.partition,
            topic_id if topic_id is not None and topic_id.int else None,
        )

    def _make_leader(
        self,
        partition: Partition,
        state: LeaderAndIsrPartitionState,
        topic_ids: Mapping[str, uuid.UUID],
    ) -> int:
        try:
            local = self._log_for(partition, topic_ids)
            partition.make_leader(state, local)
        except KafkaError as exc:
            log.error("%s-%d: cannot become leader: %s", partition.topic, partition.partition, exc)
            return exc.code
        return ErrorCode.NONE

    def _make_follower(
        self,
        partition: Partition,
        state: LeaderAndIsrPartitionState,
        topic_ids: Mapping[str, uuid.UUID],
    ) -> tuple[int, bool]:
        try:
            local = self._log_for(partition, topic_ids)
            restarted = partition.make_follower(state, local)
        except KafkaError as exc:
            log.error(
                "%s-%d: cannot become follower: %s", partition.topic, partition.partition, exc
            )
            return exc.code, False
        return ErrorCode.NONE, restarted

    def stop_replicas(self, request: StopReplicaRequest, version: int) -> StopReplicaResponse:
        if request.controller_epoch < self.controller_epoch:
            return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = request.controller_epoch
        errors: dict[Key, int] = {}
        doomed: list[Key] = []
        stopped: list[Key] = []
        for topic, index, leader_epoch, delete in stop_replica_states(request):
            key = (topic, index)
            partition = self.partitions.get(key)
            code = ErrorCode.NONE
            if partition is not None and 0 <= leader_epoch < partition.leader_epoch:
                code = ErrorCode.FENCED_LEADER_EPOCH  # a newer decision was already taken
            else:
                stopped.append(key)
                if delete:
                    doomed.append(key)
            errors[key] = code
        self.fetchers.remove(stopped)
        resigned = []
        for key in stopped:
            partition = self.partitions.get(key)
            if partition is not None:
                partition.stop()
                resigned.append(partition)
            if key in doomed:
                self.partitions.pop(key, None)
        self._tell_leadership([], resigned)
        for topic, index in doomed:
            try:
                self.logs.delete_log(topic, index)
            except KafkaError as exc:
                errors[(topic, index)] = exc.code
        return stop_replica_response(errors.items())

    # -- produce -----------------------------------------------------------------------------

    async def append_records(
        self,
        entries: Mapping[Key, bytes | bytearray | memoryview],
        acks: int,
        timeout_ms: int,
        *,
        internal_allowed: bool = False,
    ) -> dict[Key, ProduceResult]:
        """Append to the leaders and, for acks=all, wait until the ISR has the records."""
        appended = self.append(entries, acks, internal_allowed=internal_allowed)
        return await appended.replicated(timeout_ms)

    def append(
        self,
        entries: Mapping[Key, bytes | bytearray | memoryview],
        acks: int,
        *,
        internal_allowed: bool = False,
        txn_guards: Mapping[Key, VerificationGuard] | None = None,
    ) -> Appended:
        """Append to the leaders now (in the order of the calls); `replicated` waits.

        `txn_guards`, for a producer's Produce: the transaction verification guard of each
        partition that had one (see `Partition.append_as_leader`); None for the broker's
        own writers, which are not verified."""
        results: dict[Key, ProduceResult] = {}
        waiting: dict[Key, int] = {}  # for acks=all: the offset the HW must reach
        for key, records in entries.items():
            topic, index = key
            if topic in INTERNAL_TOPICS and not internal_allowed:
                error = InvalidTopicError(f"cannot append to internal topic {topic}")
                results[key] = ProduceResult(error.code, message=str(error))
                continue
            try:
                partition = self.partition_or_error(topic, index)
                if txn_guards is None:
                    info = partition.append_as_leader(records, acks)
                else:
                    info = partition.append_as_leader(
                        records, acks, verified=True, guard=txn_guards.get(key)
                    )
            except KafkaError as exc:
                self.metrics.failed_produce_requests.mark()
                bad = exc.record_errors if isinstance(exc, InvalidRecordError) else ()
                results[key] = ProduceResult(exc.code, message=str(exc), record_errors=bad)
                continue
            except Exception as exc:
                log.exception("append to %s-%d failed", topic, index)
                results[key] = ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, message=repr(exc))
                continue
            self.metrics.appended(topic, len(records), 0 if info.duplicate else info.records_count)
            results[key] = _produce_result(info)
            if acks == -1 and info.records_count:
                waiting[key] = info.last_offset + 1
        return Appended(self, results, waiting)

    def replication(
        self, waiting: dict[Key, int], results: dict[Key, ProduceResult], timeout_ms: int
    ) -> Delayed[dict[Key, ProduceResult]]:
        """The wait until each partition's high watermark reaches its offset in `waiting`;
        its result is `results`, with the errors of those that did not (in time)."""
        done: dict[Key, int] = {}

        def check(changed: Collection[Key]) -> bool:
            for key in changed:
                if key in done:
                    continue
                partition = self.partitions.get(key)
                if partition is None:
                    done[key] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    continue
                finished, error = partition.enough_replicas_reached(waiting[key])
                if finished:
                    done[key] = error
            return len(done) == len(waiting)

        def finish(_completed: bool) -> dict[Key, ProduceResult]:
            for key in waiting:
                error = done.get(key, ErrorCode.REQUEST_TIMED_OUT)
                if error != ErrorCode.NONE:
                    results[key] = attrs.evolve(results[key], error=error, message=None)
            return results

        return Delayed(self.produce_purgatory.register(waiting, check, timeout_ms / 1000), finish)

    # -- fetch -------------------------------------------------------------------------------

    def read(self, params: FetchParams, requests: Sequence[FetchPartition]) -> list[FetchResult]:
        """Read every partition once (Kafka's readFromLog): the response byte limit shrinks
        as partitions return data, and only the first non-empty one may exceed it."""
        limit = params.max_bytes
        min_one = not params.hard_max_bytes_limit
        isolation = FetchIsolation.LOG_END if params.from_follower else params.isolation
        out = []
        for request in requests:
            result = self._read_one(
                params, request, isolation, min(limit, request.max_bytes), min_one
            )
            size = result.size
            if size:
                min_one = False
            limit = max(0, limit - size)
            out.append(result)
        return out

    def _read_one(
        self,
        params: FetchParams,
        request: FetchPartition,
        isolation: FetchIsolation,
        max_bytes: int,
        min_one: bool,
    ) -> FetchResult:
        try:
            partition = self.partition_or_error(request.topic, request.partition)
            preferred = self._preferred_read_replica(params, request, partition)
            if preferred is not None:
                return preferred
            read = partition.read(
                request.fetch_offset,
                max_bytes,
                isolation,
                current_leader_epoch=request.current_leader_epoch,
                last_fetched_epoch=request.last_fetched_epoch if params.from_follower else -1,
                min_one_batch=min_one,
                require_leader=params.fetch_only_from_leader,
            )
        except KafkaError as exc:
            return FetchResult(exc.code, message=str(exc))
        info = read.info
        if info is not None and info.first_entry_incomplete and not params.hard_max_bytes_limit:
            # A batch larger than the limit: an empty answer lets the consumer go on (v3+).
            read = attrs.evolve(read, info=info._replace(records=EMPTY_SLICE))
        return FetchResult(ErrorCode.NONE, read)

    def _preferred_read_replica(
        self, params: FetchParams, request: FetchPartition, partition: Partition
    ) -> FetchResult | None:
        """KIP-392: a consumer in another replica's rack is sent there, with no records."""
        selector = self.replica_selector
        if selector is None or not params.client_rack or not partition.is_leader:
            return None
        cache, listener = self.metadata_cache, params.listener
        found = preferred_read_replica(
            selector,
            partition,
            params.client_rack,
            request.fetch_offset,
            lambda broker_id: cache.node(broker_id, listener),
            now_ms(),
        )
        if found is None:
            return None
        local = partition.local_log(request.current_leader_epoch)
        offsets = ReadResult(
            None,
            local.high_watermark,
            local.log_start_offset,
            local.log_end_offset,
            local.last_stable_offset,
        )
        return FetchResult(ErrorCode.NONE, offsets, preferred_read_replica=found)

    def record_follower_fetches(
        self, replica_id: int, requests: Sequence[FetchPartition], results: Sequence[FetchResult]
    ) -> None:
        """What a follower's fetch says about its log: its LEO is the offset it asked for."""
        for request, result in zip(requests, results, strict=True):
            read = result.read
            if result.error != ErrorCode.NONE or read is None or read.diverging_epoch:
                continue
            partition = self.partitions.get((request.topic, request.partition))
            if partition is not None:
                partition.update_follower_fetch_state(
                    replica_id, request.fetch_offset, request.log_start_offset, read.log_end_offset
                )

    def audible(
        self, params: FetchParams, requests: Sequence[FetchPartition]
    ) -> list[FetchPartition]:
        """The partitions a fetch reads: those its session's `quiet` test does not pass. A
        quiet partition costs one test, so a follower's round over a session of many
        partitions costs what moved in them, not their number."""
        quiet = params.quiet
        if quiet is None or (params.client_rack and self.replica_selector is not None):
            return list(requests)  # a consumer may be sent to a follower, quiet or not
        partitions = self.partitions
        return [r for r in requests if not quiet(params, r, partitions.get((r.topic, r.partition)))]

    def _read_audible(self, params: FetchParams, requests: Sequence[FetchPartition]) -> Fetched:
        wanted = self.audible(params, requests)
        return wanted, self.read(params, wanted)

    def _watch(self, params: FetchParams) -> Subscription[Key] | None:
        if params.quiet is None or (params.client_rack and self.replica_selector is not None):
            return None  # every partition is read
        return params.watch

    def fetch_now(
        self, params: FetchParams, requests: Sequence[FetchPartition]
    ) -> tuple[Fetched, bool]:
        """What the fetch reads, its results, and whether to answer with them now (else
        `fetch_later`, given the partitions read here).

        A follower's fetch records its position here, once per request, as Kafka does. Its
        quiet partitions' positions (at the log end, so caught up) are recorded when its
        session's context turns the quiet test off, once a second.
        """
        watch = self._watch(params)
        if watch is None:
            wanted = self.audible(params, requests)
        else:
            changed = watch.take()
            wanted = self.audible(
                params, [r for r in requests if (r.topic, r.partition) in changed]
            )
        if params.from_follower:
            for request in wanted:
                partition = self.partitions.get((request.topic, request.partition))
                if partition is not None and partition.is_leader:
                    partition.follower_or_error(params.replica_id, request.current_leader_epoch)
        results = self.read(params, wanted)
        if params.from_follower:
            self.record_follower_fetches(params.replica_id, wanted, results)
        return (wanted, results), self._respond_now(params, requests, results)

    def fetch_later(
        self,
        params: FetchParams,
        requests: Sequence[FetchPartition],
        heard: Sequence[FetchPartition],
    ) -> Delayed[Fetched]:
        """Registered until there is `min_bytes` to read (or an error, or `max_wait_ms`).

        `heard` are the partitions `fetch_now` read. A wake-up looks only at the partitions
        notified since the last look, and reads those and the ones read before: the others
        have not moved, so they are still quiet. (Kafka's DelayedFetch looks at them all; a
        follower's session of many idle partitions made that the leader's main cost.) A
        fetch without a session read them all, so reads them all again. A fetch in a
        session parks on the session's watch, which is registered on its partitions
        already, rather than on each of them.
        """
        wanted = list(heard)
        latest: list[FetchResult] = []
        keys = [(r.topic, r.partition) for r in requests]
        watch = self._watch(params)
        # A session's fetch: every partition it looked at (those it reads when it answers).
        looking = {(r.topic, r.partition) for r in heard} if watch is not None else set()

        def among(chosen: Collection[Key]) -> Sequence[FetchPartition]:
            """The requests for `chosen`, in request order (all of them on the first look)."""
            if len(chosen) == len(requests):
                return requests
            return [r for r, k in zip(requests, keys, strict=True) if k in chosen]

        def check(changed: Collection[Key]) -> bool:
            nonlocal wanted, latest
            if self.shutting_down:
                # Not ours to answer any more: the fetcher asks the next leader.
                wanted = list(requests)
                latest = [FetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)] * len(wanted)
                return True
            if watch is not None:
                looking.update(changed)
            if self._nothing_new(params, among(changed)):  # the cheaper test first
                return False
            if watch is None:
                moved = {*changed, *((r.topic, r.partition) for r in wanted)}
            else:
                moved = looking  # with those a wake-up found nothing new in: their HW moved
            wanted, latest = self._read_audible(params, among(moved))
            return self._respond_now(params, requests, latest)

        timeout = params.max_wait_ms / 1000
        if watch is None:

            def finish(completed: bool) -> Fetched:
                if completed:
                    return wanted, latest
                return self._read_audible(params, requests)  # max_wait passed: what there is

            # fetch_now has just looked at them all
            waiter = self.fetch_purgatory.register(keys, check, timeout, tried=True)
            return Delayed(waiter, finish)

        session = watch

        def finish_in_session(completed: bool) -> Fetched:
            if completed:
                return wanted, latest
            looking.update(session.take())
            return self._read_audible(params, among(looking))

        def cancelled() -> None:
            session.changed |= looking  # not answered: looked at next time

        waiter = self.fetch_purgatory.register_on(watch, check, timeout)
        return Delayed(waiter, finish_in_session, cancelled)

    def _nothing_new(self, params: FetchParams, requests: Sequence[FetchPartition]) -> bool:
        """A parked fetch woken up with nothing to read yet: every partition still leads
        here in the same epoch and ends (at the fetch's isolation) at its fetch offset. Then
        reading them all again is skipped, as Kafka's DelayedFetch compares offsets before
        it reads: a follower's fetch covers every partition it follows from this leader, and
        each high watermark move wakes it."""
        if params.min_bytes > 1:
            return False  # some data may not be enough: only a read can tell
        for request in requests:
            partition = self.partitions.get((request.topic, request.partition))
            if partition is None or partition.log is None:
                return False
            if params.fetch_only_from_leader and not partition.is_leader:
                return False
            if 0 <= request.current_leader_epoch != partition.leader_epoch:
                return False
            local = partition.log
            if params.from_follower:
                end = local.log_end_offset
            elif params.isolation is FetchIsolation.TXN_COMMITTED:
                end = local.last_stable_offset
            else:
                end = local.high_watermark
            if end != request.fetch_offset or request.fetch_offset < local.log_start_offset:
                return False
        return True

    @staticmethod
    def _respond_now(
        params: FetchParams, requests: Sequence[FetchPartition], results: Sequence[FetchResult]
    ) -> bool:
        if params.max_wait_ms <= 0 or not requests:
            return True
        total = 0
        for result in results:
            if result.error != ErrorCode.NONE:
                return True
            if result.read is not None and result.read.diverging_epoch is not None:
                return True
            if result.preferred_read_replica >= 0:
                return True
            total += result.size
        return total >= params.min_bytes

    # -- delete records ----------------------------------------------------------------------

    async def delete_records(
        self, offsets: Mapping[Key, int], timeout_ms: int
    ) -> dict[Key, tuple[int, int]]:
        """(error code, low watermark) per partition, after the replicas caught up (or not)."""
        results: dict[Key, tuple[int, int]] = {}
        waiting: dict[Key, int] = {}
        for key, offset in offsets.items():
            try:
                partition = self.partition_or_error(*key)
                local = partition.local_log()
                target = local.high_watermark if offset == -1 else offset
                if target < 0:
                    results[key] = (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
                    continue
                start = local.delete_records(target)
            except KafkaError as exc:
                results[key] = (exc.code, -1)
                continue
            results[key] = (ErrorCode.NONE, start)
            waiting[key] = start
        if not waiting:
            return results
        done: dict[Key, tuple[int, int]] = {}

        def check(changed: Collection[Key]) -> bool:
            for key in changed:
                if key in done:
                    continue
                partition = self.partitions.get(key)
                if partition is None or not partition.is_leader:
                    done[key] = (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
                    continue
                low = partition.low_watermark()
                if low >= waiting[key]:
                    done[key] = (ErrorCode.NONE, low)
            return len(done) == len(waiting)

        await self.delete_records_purgatory.wait(waiting, check, timeout_ms / 1000)
        for key, required in waiting.items():
            results[key] = done.get(key, (ErrorCode.REQUEST_TIMED_OUT, required))
        return results

    # -- ISR maintenance ---------------------------------------------------------------------

    async def _isr_expiration(self) -> None:
        interval = max(self.config.replica_lag_time_max_ms / 2, 1) / 1000
        while True:
            await trio.sleep(interval)
            for partition in list(self.partitions.values()):
                if partition.is_leader:
                    partition.maybe_shrink_isr()

    def submit_isr_change(
        self, partition: Partition, new_isr: frozenset[int], expand: bool
    ) -> None:
        """Write a leader's ISR change to its state znode (compare-and-set), in the background."""
        if self._nursery is None:
            partition.isr_change_failed()
            return
        self._nursery.start_soon(self._write_isr, partition, new_isr, expand)

    async def _write_isr(self, partition: Partition, new_isr: frozenset[int], expand: bool) -> None:
        tp = TopicPartition(partition.topic, partition.partition)
        epoch, version = partition.leader_epoch, partition.partition_epoch
        state = LeaderAndIsr(
            leader=self.broker_id,
            leader_epoch=epoch,
            isr=tuple(sorted(new_isr)),
            controller_epoch=partition.controller_epoch,
            zk_version=version,
        )
        try:
            written = await self.isr_store.update_leader_and_isr(tp, state, version)
            if written is None:
                written = await self._resolve_isr_conflict(partition, tp, state)
        except Exception as exc:
            log.warning("%s: writing ISR %s failed: %s", tp, sorted(new_isr), exc)
            written = None
        if partition.leader_epoch != epoch or not partition.is_leader:
            return  # a LeaderAndIsr came meanwhile and decided
        if written is None:
            log.info("%s: ISR change to %s lost to a concurrent update", tp, sorted(new_isr))
            partition.isr_change_failed()
            return
        partition.isr_change_written(new_isr, written)
        (self.metrics.isr_expands if expand else self.metrics.isr_shrinks).mark()
        now = now_ms()
        if not self._isr_changes:
            self._first_isr_change_ms = now
        self._isr_changes.add(tp)
        self._last_isr_change_ms = now

    async def _resolve_isr_conflict(
        self, partition: Partition, tp: TopicPartition, wanted: LeaderAndIsr
    ) -> int | None:
        """Another write won. If it kept us leader in the same epoch (the znode only moved
        version), adopt its ISR and version, and retry once on top of it."""
        current = await self.isr_store.get_partition_state(tp)
        if (
            current is None
            or current.leader != self.broker_id
            or current.leader_epoch != wanted.leader_epoch
        ):
            return None  # leadership is moving: the controller's LeaderAndIsr will say how
        if set(current.isr) == set(wanted.isr):
            return current.zk_version
        partition.isr = frozenset(current.isr)
        partition.partition_epoch = current.zk_version
        retry = attrs.evolve(wanted, zk_version=current.zk_version)
        return await self.isr_store.update_leader_and_isr(tp, retry, current.zk_version)

    async def _propagate_isr_changes(self) -> None:
        while True:
            await trio.sleep(ISR_PROPAGATION_CHECK_S)
            if not self._isr_changes:
                continue
            now = now_ms()
            if (
                now - self._last_isr_change_ms < ISR_PROPAGATION_QUIET_MS
                and now - self._first_isr_change_ms < ISR_PROPAGATION_MAX_DELAY_MS
            ):
                continue
            changes, self._isr_changes = self._isr_changes, set()
            try:
                await self.isr_store.propagate_isr_changes(sorted(changes))
            except Exception as exc:
                log.warning("cannot notify the controller of ISR changes: %s", exc)
                self._isr_changes |= changes

    def leader_keys(self) -> Iterable[Key]:
        return [k for k, p in self.partitions.items() if p.is_leader]


def _produce_result(info: AppendInfo) -> ProduceResult:
    return ProduceResult(
        ErrorCode.NONE,
        base_offset=info.first_offset,
        log_append_time=info.log_append_time,
        log_start_offset=info.log_start_offset,
    )
