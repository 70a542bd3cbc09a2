"""How a coordinator reaches its internal topic (`__consumer_offsets`, and
`__transaction_state` next): appends on the leader, a wait for the ISR, and the local log
for loading.

An append happens at once, on the caller's turn of the event loop, so the log holds the
records in the order the coordinator decided them; the wait for replication (acks=all,
bounded by the coordinator's timeout) comes after, as a separate step. An error raised by
the append (not the leader any more, the ISR below `min.insync.replicas`, a record too
large) is the append's result. The broker's implementation is
`gregor.broker.replicated_topic.ReplicatedTopic`; unit tests use the logs alone.

Which partitions of the topic this broker leads, the broker announces to the coordinator's
`on_leadership_change(led, resigned)` as `PartitionRole`s.
"""

from __future__ import annotations

from typing import Protocol

from gregor.protocol.errors import ErrorCode
from gregor.storage.log import Log

# What a failed append of a coordinator's records is answered as (Kafka's mapping of a
# coordinator operation's error; the classic group coordinator has its own for its writes).
APPEND_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class Write(Protocol):
    @property
    def error(self) -> int:
        """The error of the append itself (NONE if it was appended)."""

    @property
    def base_offset(self) -> int: ...

    async def replicated(self, timeout_s: float) -> int:
        """Wait until the ISR has the records; the error code of the write as a whole."""


class TopicLog(Protocol):
    def append(self, partition: int, records: bytes, *, wait: bool = True) -> Write:
        """Append a batch to a partition this broker leads (`wait`: acks=all, else 0)."""

    def leader_log(self, partition: int) -> Log | None:
        """The partition's log, if this broker leads it."""


class PartitionRole(Protocol):
    """What the broker announces of a partition whose leadership changed."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def leader_epoch(self) -> int: ...


class FailedWrite:
    def __init__(self, error: int) -> None:
        self.error = error
        self.base_offset = -1

    async def replicated(self, timeout_s: float) -> int:
        return self.error
