"""The controller's events and the queue they are processed from, one at a time, in order.

Everything that can change what the controller knows (a ZooKeeper watch, a broker's
answer, an admin request, a timer) becomes an event. Events that an admin request waits on
carry a `Reply`; when the queue is cleared because the session expired, they are answered
NOT_CONTROLLER.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Generic, TypeVar

import attrs
import trio

from gregor.broker.zk.znodes import ReplicaAssignment, TopicPartition
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrResponse
from gregor.protocol.errors import ErrorCode, NotControllerError

T = TypeVar("T")


@attrs.frozen
class ApiError:
    """An error code and message for one item of an admin response."""

    code: int
    message: str | None = None

    @property
    def is_success(self) -> bool:
        return self.code == ErrorCode.NONE


NONE = ApiError(ErrorCode.NONE)
NOT_CONTROLLER = ApiError(ErrorCode.NOT_CONTROLLER)


class Reply(Generic[T]):
    """The answer to an event an admin request waits for."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def set(self, value: T) -> None:
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    async def wait(self) -> T:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


class ElectionTrigger(enum.Enum):
    AUTO = "auto"
    ZOOKEEPER = "zookeeper"
    ADMIN = "admin client"


class Event:
    """Something for the controller to process."""

    def preempt(self) -> None:
        """Called instead of processing when the queue is cleared."""


@attrs.define
class Startup(Event):
    pass


@attrs.define
class Reelect(Event):
    """/controller changed: resign if it is no longer us, elect if it is gone."""


@attrs.define
class RegisterBrokerAndReelect(Event):
    """A new ZooKeeper session started: register the broker again, then re-elect."""


@attrs.define
class Expire(Event):
    """The ZooKeeper session expired: resign."""


@attrs.define
class BrokerChange(Event):
    pass


@attrs.define
class TopicChange(Event):
    pass


@attrs.define
class PartitionModifications(Event):
    topic: str


@attrs.define
class TopicDeletion(Event):
    pass


@attrs.define
class ZkPartitionReassignment(Event):
    pass


@attrs.define
class PartitionReassignmentIsrChange(Event):
    tp: TopicPartition


@attrs.define
class IsrChangeNotification(Event):
    pass


@attrs.define
class AutoPreferredReplicaLeaderElection(Event):
    pass


@attrs.define
class UncleanLeaderElectionEnable(Event):
    topic: str | None = None  # None: the broker-wide default was enabled


@attrs.define
class LeaderAndIsrResponseReceived(Event):
    broker_id: int
    response: LeaderAndIsrResponse
    version: int


@attrs.define
class TopicDeletionStopReplicaResponseReceived(Event):
    broker_id: int
    error_code: int
    partition_errors: dict[TopicPartition, int]


@attrs.define
class ReplicaLeaderElection(Event):
    """Elect leaders: of the partitions an admin asked for, or of those in the znode."""

    partitions: set[TopicPartition] | None
    election_type: ElectionType
    trigger: ElectionTrigger
    reply: Reply[dict[TopicPartition, int | ApiError]] | None = None

    def preempt(self) -> None:
        if self.reply is not None:
            self.reply.set(dict.fromkeys(self.partitions or (), NOT_CONTROLLER))


@attrs.define
class ControlledShutdown(Event):
    broker_id: int
    broker_epoch: int
    reply: Reply[set[TopicPartition]]

    def preempt(self) -> None:
        self.reply.fail(NotControllerError("the controller moved to another broker"))


@attrs.define
class ApiPartitionReassignment(Event):
    reassignments: dict[TopicPartition, list[int] | None]  # None: cancel
    reply: Reply[dict[TopicPartition, ApiError] | ApiError]

    def preempt(self) -> None:
        self.reply.set(NOT_CONTROLLER)


@attrs.define
class ListPartitionReassignments(Event):
    partitions: set[TopicPartition] | None
    reply: Reply[dict[TopicPartition, ReplicaAssignment] | ApiError]

    def preempt(self) -> None:
        self.reply.set(NOT_CONTROLLER)


class EventQueue:
    def __init__(self) -> None:
        self._events: deque[Event] = deque()
        self._wakeup = trio.Event()

    def __len__(self) -> int:
        return len(self._events)

    def put(self, event: Event) -> None:
        self._events.append(event)
        self._wakeup.set()

    def clear_and_put(self, event: Event) -> None:
        """Drop everything queued (answering who waits), then queue `event`."""
        while self._events:
            self._events.popleft().preempt()
        self.put(event)

    async def get(self) -> Event:
        while not self._events:
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        return self._events.popleft()
