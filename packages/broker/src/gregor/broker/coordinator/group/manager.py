"""GroupMetadataManager: the groups this broker coordinates and their place in
`__consumer_offsets`.

- A group belongs to partition `abs(hashCode(group id)) % partitions`; this broker
  coordinates the groups of the partitions it leads.
- Becoming leader of a partition starts a load: the partition is read from its start to
  its end and the groups and offsets it holds are rebuilt. Until that is done the groups
  of the partition answer COORDINATOR_LOAD_IN_PROGRESS. Losing leadership unloads them
  (their parked requests answer NOT_COORDINATOR). Loads and unloads carry the leader epoch
  that caused them, and one from an older epoch than the last seen is ignored.
- Writes: a group's metadata after each rebalance, offsets on commit (acks=all, answered
  once replicated), tombstones for deleted and expired offsets and dead groups (acks=0,
  rewritten by the next cleanup if lost); a KIP-848 group's changes after each heartbeat
  that made any (`consumer_records`; the heartbeat is answered once they are replicated).
- Expiry: every `offsets.retention.check.interval.ms` the offsets past
  `offsets.retention.minutes` are removed (see `GroupMetadata.remove_expired_offsets`), and
  an Empty group without offsets dies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial

import trio

from gregor.broker.coordinator.group import consumer_records
from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.group import GroupMetadata, TopicPartition
from gregor.broker.coordinator.group.offsets import (
    CommittedOffset,
    FetchedOffset,
    OffsetAndMetadata,
)
from gregor.broker.coordinator.group.records import (
    LoadedState,
    consumer_group_batch,
    group_metadata_batch,
    offset_commit_batch,
    tombstone_batch,
)
from gregor.broker.coordinator.group.state import GroupState
from gregor.broker.coordinator.loading import record_epoch, replay_log
from gregor.broker.coordinator.partitioning import partition_for
from gregor.broker.coordinator.topic_log import TopicLog, Write
from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

GroupCallback = Callable[[GroupMetadata], None]

# What a failed append of group metadata is reported as (Kafka's mapping).
_STORE_GROUP_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
# ... and of offsets.
_STORE_OFFSETS_ERRORS: dict[int, int] = {
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}

# APIs that accept the empty group id (old clients commit and fetch offsets with it).
_EMPTY_GROUP_ID_ALLOWED = frozenset(
    {ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS}
)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def java_length(text: str) -> int:
    """String.length(): UTF-16 code units, which is what Kafka's metadata limit counts."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class GroupMetadataManager:
    def __init__(
        self,
        config: GroupConfig,
        topic: TopicLog,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.topic = topic
        # How many partitions `__consumer_offsets` has: fixed when the coordinator starts
        # (the topic's if it exists, else the configured number), as in Kafka.
        self.partitions = config.offsets_topic_partitions
        self.now_ms = wall_clock
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: set[int] = set()
        self.loading: dict[int, int] = {}  # partition -> the leader epoch being loaded
        self.epochs: dict[int, int] = {}
        self._nursery: trio.Nursery | None = None
        self.active = False  # the coordinator is running
        self.shutting_down = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Writes, loads and the periodic expiry run here; cancel to stop."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._expire_periodically)
            task_status.started()
            await trio.sleep_forever()

    def _spawn(self, fn: Callable[..., object], *args: object) -> None:
        if self._nursery is None:
            raise RuntimeError("the group metadata manager is not running")
        self._nursery.start_soon(fn, *args)  # type: ignore[arg-type]

    # -- partitions ----------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self.owned

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    @property
    def is_loading(self) -> bool:
        return bool(self.loading)

    def group_not_exists(self, group_id: str) -> bool:
        """This broker coordinates the group, and it does not exist (or is dying)."""
        if not self.is_group_local(group_id):
            return False
        group = self.groups.get(group_id)
        return group is None or group.is_(GroupState.DEAD)

    def group_status(self, group_id: str, api: ApiKey) -> int | None:
        """The error for a request about this group, or None when this broker serves it."""
        if not group_id and api not in _EMPTY_GROUP_ID_ALLOWED:
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.is_group_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.is_group_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    def missing_group(self, group_id: str) -> int:
        """The error for a group that is not there: this broker would have it, or not."""
        return (
            ErrorCode.GROUP_ID_NOT_FOUND
            if self.group_not_exists(group_id)
            else ErrorCode.NOT_COORDINATOR
        )

    # -- the cache -----------------------------------------------------------------------

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def get_or_maybe_create_group(self, group_id: str, create: bool) -> GroupMetadata | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = GroupMetadata(group_id, GroupState.EMPTY, self.now_ms())
        return group

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Add a group unless one of that id is there already; the group now cached."""
        return self.groups.setdefault(group.group_id, group)

    # -- writes --------------------------------------------------------------------------

    def _await_write(self, write: Write, done: Callable[[int, int], None]) -> None:
        """Call `done(error, base offset)` once the write is replicated (or failed)."""

        async def wait() -> None:
            error = await write.replicated(self.config.offset_commit_timeout_ms / 1000)
            done(error, write.base_offset)

        self._spawn(wait)

    def store_group(
        self,
        group: GroupMetadata,
        assignment: Mapping[str, bytes],
        callback: Callable[[int], None],
    ) -> None:
        """Write the group (each member with `assignment[member]`); then `callback(error)`."""
        partition = self.partition_for(group.group_id)
        batch = group_metadata_batch(group, assignment, self.now_ms())
        write = self.topic.append(partition, batch)
        generation = group.generation_id

        def done(error: int, _base_offset: int) -> None:
            if error != ErrorCode.NONE:
                # A warning: the members are answered with an error and must rejoin, and a
                # client that gives up its member id then leaves the group waiting for it.
                log.warning(
                    "group %s: writing generation %d to %s-%d failed: %s",
                    group.group_id,
                    generation,
                    CONSUMER_OFFSETS,
                    partition,
                    ErrorCode(error).name,
                )
                if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
                    log.error(
                        "group %s: the metadata of generation %d is too large to write (%d bytes)",
                        group.group_id,
                        generation,
                        len(batch),
                    )
                error = _STORE_GROUP_ERRORS.get(error, error)
            callback(error)

        self._await_write(write, done)

    def store_consumer_group(self, group: GroupMetadata, *, wait: bool = True) -> Write | None:
        """Append what changed in the group's KIP-848 part since it was last written (None:
        nothing did). An append that fails leaves `logged` as it was, so the next write
        carries these changes too."""
        cg = group.consumer
        if cg is None:
            return None
        batch = consumer_group_batch(consumer_records.changes(group.group_id, cg), self.now_ms())
        if batch is None:
            return None
        write = self.topic.append(self.partition_for(group.group_id), batch, wait=wait)
        if write.error == ErrorCode.NONE:
            cg.mark_logged()
        else:
            log.warning(
                "group %s: writing its consumer group records failed: %s",
                group.group_id,
                ErrorCode(write.error).name,
            )
        return write

    def drop_consumer_group(self, group: GroupMetadata) -> None:
        """The group leaves the consumer protocol (an empty one converts to classic): its
        KIP-848 records get tombstones."""
        cg = group.consumer
        group.consumer = None
        if cg is None or cg.logged.group_epoch == 0:
            return  # nothing of it was written
        batch = tombstone_batch(group.group_id, (), False, self.now_ms(), consumer=cg)
        if batch is not None:
            self.topic.append(self.partition_for(group.group_id), batch, wait=False)

    def drop_classic_group(self, group: GroupMetadata) -> None:
        """An empty classic group converts to the consumer protocol: its metadata record (if
        a rebalance ever wrote one) gets a tombstone."""
        if group.generation_id == 0:
            return
        batch = tombstone_batch(group.group_id, (), True, self.now_ms())
        if batch is not None:
            self.topic.append(self.partition_for(group.group_id), batch, wait=False)

    def store_offsets(
        self,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, int]], None],
    ) -> None:
        """Write the offsets (those with metadata under the limit); once replicated, cache
        them, then `callback` with the error of each partition."""
        limit = self.config.offset_metadata_max_bytes
        valid = {tp: o for tp, o in offsets.items() if java_length(o.metadata) <= limit}
        if not valid:
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
            return
        partition = self.partition_for(group.group_id)
        write = self.topic.append(
            partition, offset_commit_batch(group.group_id, valid, self.now_ms())
        )
        group.prepare_offset_commit(valid)

        def done(error: int, base_offset: int) -> None:
            if error == ErrorCode.NONE:
                if not group.is_(GroupState.DEAD):
                    for tp, offset in valid.items():
                        group.on_offset_commit_append(tp, CommittedOffset(base_offset, offset))
            else:
                if not group.is_(GroupState.DEAD):
                    for tp, offset in valid.items():
                        group.fail_pending_offset_write(tp, offset)
                error = _STORE_OFFSETS_ERRORS.get(error, error)
            callback(
                {
                    tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE
                    for tp in offsets
                }
            )

        self._await_write(write, done)

    def store_txn_offsets(
        self,
        group: GroupMetadata,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, int]], None],
    ) -> None:
        """TxnOffsetCommit: write the offsets in the producer's transaction; they stay
        pending until its marker (`handle_txn_completion`)."""
        limit = self.config.offset_metadata_max_bytes
        valid = {tp: o for tp, o in offsets.items() if java_length(o.metadata) <= limit}
        if not valid:
            callback({tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets})
            return
        partition = self.partition_for(group.group_id)
        batch = offset_commit_batch(
            group.group_id, valid, self.now_ms(), producer=(producer_id, producer_epoch)
        )
        write = self.topic.append(partition, batch)
        group.prepare_txn_offset_commit(producer_id, valid)

        def done(error: int, base_offset: int) -> None:
            for tp, offset in valid.items():
                if error == ErrorCode.NONE:
                    group.on_txn_offset_commit_append(
                        producer_id, tp, CommittedOffset(base_offset, offset)
                    )
                else:
                    group.fail_pending_txn_offset_write(producer_id, tp, offset)
            if error != ErrorCode.NONE:
                error = _STORE_OFFSETS_ERRORS.get(error, error)
            callback(
                {
                    tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE
                    for tp in offsets
                }
            )

        self._await_write(write, done)

    def handle_txn_completion(self, producer_id: int, partitions: set[int], commit: bool) -> None:
        """A COMMIT/ABORT marker of the producer was written to these `__consumer_offsets`
        partitions: its pending offsets in their groups become visible, or are dropped."""
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) in partitions and group.has_pending_txn_offsets(
                producer_id
            ):
                applied = group.complete_pending_txn_offsets(producer_id, commit)
                log.debug(
                    "group %s: %s of producer %d (%d offsets)",
                    group.group_id,
                    "commit" if commit else "abort",
                    producer_id,
                    applied,
                )

    # -- reads ---------------------------------------------------------------------------

    def get_offsets(
        self, group_id: str, require_stable: bool, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, FetchedOffset]:
        """The committed offsets (all of them for None); never one still being written."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return {tp: FetchedOffset() for tp in partitions or ()}
        wanted = list(group.offsets) if partitions is None else list(partitions)
        out = {}
        for tp in wanted:
            if require_stable and group.has_pending_offset_commit(tp):
                out[tp] = FetchedOffset(error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            found = group.offset(tp)
            out[tp] = (
                FetchedOffset()
                if found is None
                else FetchedOffset(found.offset, found.leader_epoch, found.metadata)
            )
        return out

    # -- loading and unloading -----------------------------------------------------------

    def schedule_load(self, partition: int, epoch: int, on_loaded: GroupCallback) -> None:
        if not record_epoch(self.epochs, partition, epoch):
            log.info(
                "not loading %s-%d of epoch %d: epoch %d was seen",
                CONSUMER_OFFSETS,
                partition,
                epoch,
                self.epochs[partition],
            )
            return
        if partition in self.owned or self.loading.get(partition) == epoch:
            return  # still the coordinator: the cache is current
        self.loading[partition] = epoch
        log.info(
            "loading groups and offsets of %s-%d (epoch %d)", CONSUMER_OFFSETS, partition, epoch
        )
        self._spawn(self._load, partition, epoch, on_loaded)

    async def _load(self, partition: int, epoch: int, on_loaded: GroupCallback) -> None:
        started = time.monotonic()
        state = LoadedState()
        name = f"{CONSUMER_OFFSETS}-{partition}"
        source = self.topic.leader_log(partition)
        if source is None:
            log.warning("%s: not the leader any more; not loading it", name)
            if self.loading.get(partition) == epoch:
                del self.loading[partition]
            return
        try:
            await replay_log(
                source,
                partial(state.replay, partition_name=name),
                lambda: self.loading.get(partition) == epoch and not self.shutting_down,
                self.config.load_buffer_size,
            )
        except Exception:
            log.exception("%s: loading groups and offsets failed", name)
        if self.loading.get(partition) != epoch:
            log.info("%s: the load of epoch %d was overtaken; dropping it", name, epoch)
            return
        del self.loading[partition]
        self.owned.add(partition)
        loaded = 0
        for group in state.build_groups(self.now_ms()):
            if self.add_group(group) is group:
                loaded += 1
                on_loaded(group)
        log.info(
            "%s: loaded %d groups and %d offsets in %.0f ms (epoch %d%s)",
            name,
            loaded,
            len(state.offsets),
            (time.monotonic() - started) * 1000,
            epoch,
            f", {state.skipped} unreadable records skipped" if state.skipped else "",
        )

    def remove_groups_for_partition(
        self, partition: int, epoch: int | None, on_unloaded: GroupCallback
    ) -> None:
        if not record_epoch(self.epochs, partition, epoch):
            log.info(
                "not unloading %s-%d of epoch %s: epoch %d was seen",
                CONSUMER_OFFSETS,
                partition,
                epoch,
                self.epochs[partition],
            )
            return
        self.loading.pop(partition, None)
        was_owned = partition in self.owned
        self.owned.discard(partition)
        removed = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        offsets = 0
        for group in removed:
            on_unloaded(group)
            del self.groups[group.group_id]
            offsets += len(group.offsets)
        if was_owned or removed:
            log.info(
                "unloaded %s-%d (epoch %s): %d groups and %d offsets",
                CONSUMER_OFFSETS,
                partition,
                epoch,
                len(removed),
                offsets,
            )

    # -- deletion and expiry -------------------------------------------------------------

    def cleanup_group_metadata(
        self,
        groups: Iterable[GroupMetadata],
        selector: Callable[[GroupMetadata], Mapping[TopicPartition, OffsetAndMetadata]],
    ) -> int:
        """Remove the offsets `selector` picks from each group and write their tombstones;
        an Empty group left without offsets dies and its metadata gets a tombstone too.
        Returns how many offsets were removed."""
        removed_count = 0
        now = self.now_ms()
        for group in list(groups):
            removed = selector(group)
            if (
                group.is_(GroupState.EMPTY)
                and not group.has_offsets
                and not group.has_consumer_members
            ):
                log.info("group %s is dead in generation %d", group.group_id, group.generation_id)
                group.transition_to(GroupState.DEAD, now)
            partition = self.partition_for(group.group_id)
            if self.topic.leader_log(partition) is None:
                log.info(
                    "no longer the coordinator of group %s; cleaning up the others",
                    group.group_id,
                )
                continue
            dropped = group.is_(GroupState.DEAD) and self.groups.get(group.group_id) is group
            if dropped:
                del self.groups[group.group_id]
            # An offsets-only group (generation 0) never had a metadata record.
            batch = tombstone_batch(
                group.group_id,
                removed,
                dropped and group.generation_id > 0,
                now,
                group.consumer if dropped else None,
            )
            if batch is None:
                continue
            write = self.topic.append(partition, batch, wait=False)
            if write.error != ErrorCode.NONE:
                log.error(
                    "group %s: writing %d tombstones failed: %s",
                    group.group_id,
                    len(removed),
                    ErrorCode(write.error).name,
                )
                continue
            removed_count += len(removed)
        return removed_count

    def expire_offsets(self) -> int:
        now = self.now_ms()
        retention = self.config.offsets_retention_ms
        removed = self.cleanup_group_metadata(
            list(self.groups.values()), lambda g: g.remove_expired_offsets(now, retention)
        )
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed

    async def _expire_periodically(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            try:
                self.expire_offsets()
            except Exception:
                log.exception("the expiry of offsets failed")
            await trio.sleep(interval)
