"""How the group coordinator reaches `__consumer_offsets`: appends on the leader, a wait for
the ISR, and the local log for loading.

An append happens at once, on the caller's turn of the event loop, so the log holds a
group's records in the order the coordinator decided them; the wait for replication
(acks=all, bounded by `offsets.commit.timeout.ms`) comes after, as a separate step. An error
raised by the append (not the leader any more, the ISR below `min.insync.replicas`, a record
too large) is the append's result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.storage.log import Log

if TYPE_CHECKING:
    from gregor.broker.partition import Partition
    from gregor.broker.replica_manager import ReplicaManager


class Write(Protocol):
    @property
    def error(self) -> int:
        """The error of the append itself (NONE if it was appended)."""

    @property
    def base_offset(self) -> int: ...

    async def replicated(self, timeout_s: float) -> int:
        """Wait until the ISR has the records; the error code of the write as a whole."""


class OffsetsTopic(Protocol):
    def append(self, partition: int, records: bytes, *, wait: bool = True) -> Write:
        """Append a batch to a partition this broker leads (`wait`: acks=all, else 0)."""

    def leader_log(self, partition: int) -> Log | None:
        """The partition's log, if this broker leads it."""


class FailedWrite:
    def __init__(self, error: int) -> None:
        self.error = error
        self.base_offset = -1

    async def replicated(self, timeout_s: float) -> int:
        return self.error


class ReplicaWrite:
    """An append to a leader's log, waiting in the produce purgatory for its high watermark."""

    def __init__(
        self, manager: ReplicaManager, partition: Partition, base: int, end: int, acks_all: bool
    ) -> None:
        self.manager = manager
        self.partition = partition
        self.error = ErrorCode.NONE
        self.base_offset = base
        self._end = end
        # acks=0: nothing to wait for.
        self._result: int | None = None if acks_all else ErrorCode.NONE

    def _check(self) -> bool:
        done, error = self.partition.enough_replicas_reached(self._end)
        if done:
            self._result = error
        return done

    async def replicated(self, timeout_s: float) -> int:
        if self._result is None:
            await self.manager.produce_purgatory.wait([self.partition.key], self._check, timeout_s)
        return ErrorCode.REQUEST_TIMED_OUT if self._result is None else self._result


class ReplicatedOffsetsTopic:
    """`__consumer_offsets` through the broker's replica manager."""

    def __init__(self, manager: ReplicaManager, topic: str = CONSUMER_OFFSETS) -> None:
        self.manager = manager
        self.topic = topic

    def append(self, partition: int, records: bytes, *, wait: bool = True) -> Write:
        try:
            target = self.manager.partition_or_error(self.topic, partition)
            info = target.append_as_leader(records, -1 if wait else 0)
        except KafkaError as exc:
            return FailedWrite(exc.code)
        return ReplicaWrite(self.manager, target, info.first_offset, info.last_offset + 1, wait)

    def leader_log(self, partition: int) -> Log | None:
        found = self.manager.partition(self.topic, partition)
        if found is None or not found.is_leader:
            return None
        return found.log
