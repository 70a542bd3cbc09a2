"""Partition: one partition hosted by this broker, as its leader or as a follower.

The leader keeps, for each follower, what the follower's fetches said (its log end offset,
when it was last caught up) and from that:

- the ISR: a follower leaves it when it has not caught up to the leader's log end offset
  for `replica.lag.time.max.ms`, and rejoins once it has reached the high watermark (and
  the start of the current leader epoch). The leader writes each change to the partition's
  state znode by compare-and-set on the znode version it knows, and tells the controller
  through /isr_change_notification;
- the high watermark: the smallest log end offset among the ISR (counting a pending
  expansion, and followers caught up enough to be about to join), never advanced while
  the ISR is smaller than `min.insync.replicas` (KIP-966's rule, as Kafka 3.9).

Every state change is decided by LeaderAndIsr requests (epoch-fenced: a request whose
partition epoch is older than ours is ignored). Errors are Kafka's exceptions, raised for the
handler to turn into the partition's error code.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Final, Protocol

import attrs

from gregor.broker.txn_verification import VerificationGuard
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrPartitionState
from gregor.protocol.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    InvalidTxnStateError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    UnknownLeaderEpochError,
)
from gregor.protocol.records import BATCH_HEADER_SIZE, ControlType, read_batch_header
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin
from gregor.storage.results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AppendInfo,
    FetchDataInfo,
    FetchIsolation,
    TimestampAndOffset,
)

log = logging.getLogger(__name__)

NO_LEADER: Final = -1
UNKNOWN_OFFSET: Final = -1


def now_ms() -> int:
    """Monotonic milliseconds: lag measurements must not jump with the wall clock."""
    return time.monotonic_ns() // 1_000_000


@attrs.define(slots=True)
class FollowerState:
    """The leader's view of one follower, from the follower's fetches."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def is_caught_up(self, leader_end_offset: int, now: int, max_lag_ms: int) -> bool:
        return (
            self.log_end_offset == leader_end_offset
            or now - self.last_caught_up_time_ms <= max_lag_ms
        )

    def update(
        self, fetch_offset: int, log_start_offset: int, fetch_time: int, leader_end_offset: int
    ) -> None:
        # Caught up now if it asked for the leader's end; or as of its previous fetch if it
        # now asks for what the leader's end was then (Kafka's Replica.updateFetchState).
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(
            leader_end_offset, self.last_fetch_leader_log_end_offset
        )
        self.last_fetch_time_ms = fetch_time

    def reset(self, now: int, leader_end_offset: int, new_leader: bool, in_sync: bool) -> None:
        self.last_caught_up_time_ms = now if in_sync else 0
        if new_leader:
            self.log_end_offset = self.log_start_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now


@attrs.frozen(slots=True)
class ReadResult:
    """A read of a partition's log and the offsets the Fetch response reports with it."""

    info: FetchDataInfo | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for the follower


class PartitionHost(Protocol):
    """What a partition asks of the broker hosting it, and what it announces to it: its
    leadership and role changes, its offsets moving, its ISR changes to write. The host
    decides who else hears of them (waiting requests, coordinators)."""

    @property
    def broker_id(self) -> int: ...
    @property
    def replica_lag_time_max_ms(self) -> int: ...
    def is_alive(self, broker_id: int) -> bool: ...
    def partition_changed(self, partition: Partition) -> None: ...
    def notify_end_offset(self, partition: Partition) -> None: ...
    def notify_high_watermark(self, partition: Partition) -> None: ...
    def notify_follower_progress(self, partition: Partition) -> None: ...
    def submit_isr_change(
        self, partition: Partition, new_isr: frozenset[int], expand: bool
    ) -> None: ...


class Partition:
    def __init__(self, host: PartitionHost, topic: str, partition: int) -> None:
        self.host = host
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.local_id = host.broker_id
        self.log: Log | None = None
        self.topic_id: uuid.UUID | None = None
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.leader_epoch_start_offset: int | None = None
        self.partition_epoch = -1  # the state znode's version
        self.controller_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        # While an ISR change is being written: the ISR as it will be if the write succeeds,
        # for an expansion (the stricter one for the HW); the current one for a shrink.
        self.pending_isr: frozenset[int] | None = None
        self.followers: dict[int, FollowerState] = {}
        # The leader's transaction verifications under way, by producer id.
        self.verifying: dict[int, VerificationGuard] = {}

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (
            f"<Partition {self.topic}-{self.partition} {role} epoch={self.leader_epoch} "
            f"isr={sorted(self.isr)}>"
        )

    # -- state ------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id and self.log is not None

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.pending_isr if self.pending_isr is not None else self.isr

    @property
    def update_in_flight(self) -> bool:
        return self.pending_isr is not None

    def effective_min_isr(self) -> int:
        assert self.log is not None
        return min(self.log.config.min_insync_replicas, len(self.followers) + 1)

    @property
    def is_under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr()

    def _accept_state(self, state: LeaderAndIsrPartitionState, role: str) -> bool:
        if state.partition_epoch < self.partition_epoch:
            log.info(
                "%s-%d: ignoring become-%s with partition epoch %d, older than ours (%d)",
                self.topic,
                self.partition,
                role,
                state.partition_epoch,
                self.partition_epoch,
            )
            return False
        return True

    def make_leader(self, state: LeaderAndIsrPartitionState, local_log: Log) -> bool:
        """Become (or stay) leader; returns whether the leader epoch changed."""
        if not self._accept_state(state, "leader"):
            return False
        now = now_ms()
        new_leader = not self.is_leader
        new_epoch = state.leader_epoch > self.leader_epoch
        # The epoch's start first, the one step that writes: if the disk fails it, the
        # partition stays as it was (and KafkaStorageError reaches the caller).
        # A follower with entries of a later epoch than this log has can then truncate.
        start = local_log.begin_epoch(state.leader_epoch) if new_epoch else 0
        self.log = local_log
        self.controller_epoch = state.controller_epoch
        self.replicas = tuple(state.replicas)
        self.isr = frozenset(state.isr)
        self.pending_isr = None
        followers = [r for r in self.replicas if r != self.local_id]
        self.followers = {r: self.followers.get(r) or FollowerState(r) for r in followers}
        if new_epoch:
            for follower in self.followers.values():
                follower.reset(now, start, new_leader, follower.broker_id in self.isr)
            self.leader_epoch = state.leader_epoch
            self.leader_epoch_start_offset = start
            log.info(
                "%s-%d: leader at epoch %d from offset %d, ISR %s, high watermark %d",
                self.topic,
                self.partition,
                state.leader_epoch,
                start,
                sorted(self.isr),
                local_log.high_watermark,
            )
        if new_leader:
            self.verifying.clear()
        self.partition_epoch = state.partition_epoch
        self.leader_id = self.local_id
        self.maybe_increment_high_watermark(now)
        self.host.partition_changed(self)
        return new_epoch

    def make_follower(self, state: LeaderAndIsrPartitionState, local_log: Log) -> bool:
        """Follow `state.leader`; returns whether the leader epoch changed (fetcher restart)."""
        if not self._accept_state(state, "follower"):
            return False
        new_epoch = state.leader_epoch > self.leader_epoch
        self.log = local_log
        self.controller_epoch = state.controller_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.leader_epoch_start_offset = None
        self.partition_epoch = state.partition_epoch
        self.replicas = tuple(state.replicas)
        self.isr = frozenset()
        self.pending_isr = None
        self.followers = {}
        self.verifying.clear()
        if new_epoch:
            log.info(
                "%s-%d: follower of %d at epoch %d from offset %d, high watermark %d",
                self.topic,
                self.partition,
                state.leader,
                state.leader_epoch,
                local_log.log_end_offset,
                local_log.high_watermark,
            )
        self.host.partition_changed(self)
        return new_epoch

    def stop(self) -> None:
        """StopReplica: no longer a replica here (its log may stay or be deleted)."""
        self.leader_id = NO_LEADER
        self.isr = frozenset()
        self.pending_isr = None
        self.followers = {}
        self.verifying.clear()
        self.host.partition_changed(self)

    # -- leader epoch checks -------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """The fencing of KIP-320: a request's view of the epoch must be ours (-1: no check)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: epoch {current_leader_epoch} in the request "
                f"is older than the current {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.topic}-{self.partition}: epoch {current_leader_epoch} in the request "
                f"is newer than the current {self.leader_epoch}"
            )

    def local_log(self, current_leader_epoch: int = -1, require_leader: bool = True) -> Log:
        self.check_leader_epoch(current_leader_epoch)
        if (require_leader and not self.is_leader) or self.log is None:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader {self.leader_id}, epoch {self.leader_epoch})"
            )
        return self.log

    # -- appends (leader) -------------------------------------------------------------------

    def start_txn_verification(self, producer_id: int) -> VerificationGuard | None:
        """The guard a transactional append of the producer must present once the
        coordinator has confirmed the partition; None when its transaction is already
        ongoing here (nothing to ask). A verification under way is joined, not restarted."""
        producer = self.local_log().producer_state.producers.get(producer_id)
        if producer is not None and producer.current_txn_first_offset is not None:
            return None
        return self.verifying.setdefault(producer_id, VerificationGuard())

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        *,
        verified: bool = False,
        guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """`verified`: a producer's Produce, whose transactional batch may start a
        transaction here only with the guard the verification handed out (still kept)."""
        leader_log = self._leader_log_for(acks)
        txn_producer = None
        if verified and len(records) >= BATCH_HEADER_SIZE:
            header = read_batch_header(records)
            if header.is_transactional:
                txn_producer = header.producer_id
                producer = leader_log.producer_state.producers.get(txn_producer)
                ongoing = producer is not None and producer.current_txn_first_offset is not None
                if not ongoing and (guard is None or self.verifying.get(txn_producer) is not guard):
                    raise InvalidTxnStateError("Record was not part of an ongoing transaction")
        info = leader_log.append_as_leader(records, self.leader_epoch, origin)
        if txn_producer is not None:
            self.verifying.pop(txn_producer, None)  # the transaction is ongoing here now
        self._appended()
        return info

    def append_txn_marker(
        self, producer_id: int, producer_epoch: int, control: ControlType, coordinator_epoch: int
    ) -> AppendInfo:
        """WriteTxnMarkers on the leader: the marker, with acks=all's ISR check."""
        leader_log = self._leader_log_for(-1)
        info = leader_log.append_txn_marker(
            producer_id, producer_epoch, control, coordinator_epoch, self.leader_epoch
        )
        self.verifying.pop(producer_id, None)  # a verification under way is now stale
        self._appended()
        return info

    def _leader_log_for(self, acks: int) -> Log:
        leader_log = self.local_log()
        min_isr = self.effective_min_isr()
        if acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"the ISR {sorted(self.isr)} of {self.topic}-{self.partition} is smaller "
                f"than min.insync.replicas {min_isr}"
            )
        return leader_log

    def _appended(self) -> None:
        self.host.notify_end_offset(self)  # followers waiting in Fetch can go on
        self.maybe_increment_high_watermark()

    def enough_replicas_reached(self, required_offset: int) -> tuple[bool, int]:
        """For acks=all: (done, error code) once the high watermark reaches the offset."""
        if not self.is_leader or self.log is None:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if self.effective_min_isr() <= len(self.maximal_isr):
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    # -- high watermark ----------------------------------------------------------------------

    def maybe_increment_high_watermark(self, now: int | None = None) -> bool:
        """Move the HW to the smallest LEO of the (maximal) ISR; returns whether it moved."""
        leader_log = self.log
        if leader_log is None or not self.is_leader or self.is_under_min_isr:
            return False
        now = now_ms() if now is None else now
        leo = leader_log.log_end_offset
        new_hw = leo
        max_lag = self.host.replica_lag_time_max_ms
        maximal = self.maximal_isr
        for follower in self.followers.values():
            if follower.log_end_offset >= new_hw:
                continue
            # A follower caught up enough to join the ISR is waited for, else it might never
            # reach a HW that keeps moving without it.
            if follower.broker_id in maximal or (
                follower.is_caught_up(leo, now, max_lag) and self.host.is_alive(follower.broker_id)
            ):
                new_hw = follower.log_end_offset
        if new_hw < 0 or not leader_log.maybe_increment_high_watermark(new_hw):
            return False
        self.host.notify_high_watermark(self)
        return True

    # -- follower fetches (leader) ----------------------------------------------------------

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, leader_end_offset: int
    ) -> None:
        follower = self.followers.get(replica_id)
        if follower is None:
            return
        previous_end, previous_start = follower.log_end_offset, follower.log_start_offset
        follower.update(fetch_offset, log_start_offset, now_ms(), leader_end_offset)
        self.maybe_expand_isr(follower)
        if previous_end != follower.log_end_offset:
            self.maybe_increment_high_watermark()
        if (previous_end, previous_start) != (follower.log_end_offset, follower.log_start_offset):
            self.host.notify_follower_progress(self)  # DeleteRecords waits on log starts

    def follower_or_error(self, replica_id: int, current_leader_epoch: int) -> FollowerState:
        follower = self.followers.get(replica_id)
        if follower is None:
            error = (
                UnknownLeaderEpochError if current_leader_epoch >= 0 else NotLeaderOrFollowerError
            )
            raise error(
                f"replica {replica_id} is not a replica of {self.topic}-{self.partition} "
                f"in leader epoch {self.leader_epoch}"
            )
        return follower

    # -- ISR changes (leader) ----------------------------------------------------------------

    def _in_sync(self, follower: FollowerState) -> bool:
        assert self.log is not None
        start = self.leader_epoch_start_offset
        return (
            follower.log_end_offset >= self.log.high_watermark
            and start is not None
            and follower.log_end_offset >= start
        )

    def maybe_expand_isr(self, follower: FollowerState) -> None:
        if (
            not self.is_leader
            or self.update_in_flight
            or follower.broker_id in self.isr
            or not self.host.is_alive(follower.broker_id)
            or not self._in_sync(follower)
        ):
            return
        new_isr = self.isr | {follower.broker_id}
        log.info(
            "%s-%d: expanding ISR from %s to %s",
            self.topic,
            self.partition,
            sorted(self.isr),
            sorted(new_isr),
        )
        self.pending_isr = new_isr
        self.host.submit_isr_change(self, new_isr, expand=True)

    def out_of_sync_replicas(self, now: int | None = None) -> set[int]:
        if not self.is_leader or self.update_in_flight or self.log is None:
            return set()
        now = now_ms() if now is None else now
        leo = self.log.log_end_offset
        max_lag = self.host.replica_lag_time_max_ms
        out = set()
        for replica in self.isr - {self.local_id}:
            follower = self.followers.get(replica)
            if follower is None or not follower.is_caught_up(leo, now, max_lag):
                out.add(replica)
        return out

    def maybe_shrink_isr(self) -> None:
        lagging = self.out_of_sync_replicas()
        if not lagging:
            return
        assert self.log is not None
        new_isr = self.isr - lagging
        log.info(
            "%s-%d: shrinking ISR from %s to %s (high watermark %d, end offset %d; out of "
            "sync: %s)",
            self.topic,
            self.partition,
            sorted(self.isr),
            sorted(new_isr),
            self.log.high_watermark,
            self.log.log_end_offset,
            ", ".join(
                f"{r} at {self.followers[r].log_end_offset if r in self.followers else '?'}"
                for r in sorted(lagging)
            ),
        )
        self.pending_isr = self.isr  # a shrink counts only once written
        self.host.submit_isr_change(self, new_isr, expand=False)

    def isr_change_written(self, new_isr: frozenset[int], zk_version: int) -> None:
        """The state znode now holds `new_isr` at `zk_version`."""
        self.isr = new_isr
        self.pending_isr = None
        self.partition_epoch = zk_version
        self.maybe_increment_high_watermark()
        self.host.notify_high_watermark(self)  # acks=all may now fail or complete

    def isr_change_failed(self) -> None:
        """The write lost (the controller changed the state): keep the committed ISR and wait
        for its LeaderAndIsr."""
        self.pending_isr = None

    # -- reads ---------------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        *,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
        min_one_batch: bool = True,
        require_leader: bool = True,
    ) -> ReadResult:
        local = self.local_log(current_leader_epoch, require_leader)
        hw, start, leo = local.high_watermark, local.log_start_offset, local.log_end_offset
        lso = local.last_stable_offset
        if last_fetched_epoch >= 0:
            found = local.end_offset_for_epoch(last_fetched_epoch)
            if found is not None and fetch_offset >= start:
                epoch, end = found
                if epoch < last_fetched_epoch or end < fetch_offset:
                    return ReadResult(None, hw, start, leo, lso, (epoch, end))
        info = local.read(fetch_offset, max_bytes, isolation, min_one_batch)
        return ReadResult(info, hw, start, leo, lso)

    def offset_for_timestamp(
        self,
        timestamp: int,
        isolation: FetchIsolation | None,
        current_leader_epoch: int = -1,
        require_leader: bool = True,
    ) -> TimestampAndOffset | None:
        """ListOffsets. `isolation` None: a follower asking (bounded by the log end)."""
        local = self.local_log(current_leader_epoch, require_leader)
        if isolation is None:
            last = local.log_end_offset
        elif isolation is FetchIsolation.TXN_COMMITTED:
            last = local.last_stable_offset
        else:
            last = local.high_watermark
        start = self.leader_epoch_start_offset
        lagging = isolation is not None and start is not None and start > local.high_watermark
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return local.offset_for_timestamp(timestamp)
        found = None if timestamp == LATEST_TIMESTAMP else local.offset_for_timestamp(timestamp)
        if found is not None and (isolation is None or found.offset < last):
            return found
        if lagging:
            # A new leader whose HW has not yet reached the start of its epoch cannot say.
            raise OffsetNotAvailableError(
                f"the high watermark {local.high_watermark} of {self.topic}-{self.partition} "
                f"is behind the start {start} of leader epoch {self.leader_epoch}"
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, last, self.leader_epoch)
        return None

    def end_offset_for_epoch(
        self, leader_epoch: int, current_leader_epoch: int, require_leader: bool
    ) -> tuple[int, int] | None:
        local = self.local_log(current_leader_epoch, require_leader)
        return local.end_offset_for_epoch(leader_epoch)

    def low_watermark(self) -> int:
        """The smallest log start offset among the live replicas (DeleteRecords waits on it)."""
        local = self.local_log()
        low = local.log_start_offset
        for follower in self.followers.values():
            if self.host.is_alive(follower.broker_id):
                low = min(low, follower.log_start_offset)
        return low
