"""What the group coordinator answers, and the one-shot replies parked requests wait on.

A JoinGroup or SyncGroup may have to wait for other members (the rest of the group to join,
the leader's assignment, a write to be replicated). Its handler gives the coordinator a
`Reply` and waits on it; whoever completes the step (another member's request, a timer, the
end of a write) sets it, as Kafka's coordinator invokes a member's response callback.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs
import trio

T = TypeVar("T")

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""


class Reply(Generic[T]):
    """A value delivered once; later deliveries are ignored."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def result(self) -> T:
        if not self._event.is_set():
            raise RuntimeError("the reply has not been delivered yet")
        assert self._value is not None
        return self._value

    async def wait(self) -> T:
        await self._event.wait()
        return self.result()


@attrs.frozen(slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@attrs.frozen(slots=True)
class JoinResult:
    member_id: str
    error: int
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()

    @classmethod
    def failed(cls, member_id: str, error: int) -> JoinResult:
        return cls(member_id, error)


@attrs.frozen(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""

    @classmethod
    def failed(cls, error: int) -> SyncResult:
        return cls(error)


@attrs.frozen(slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: int


@attrs.frozen(slots=True)
class LeaveResult:
    error: int
    members: tuple[LeftMember, ...] = ()


@attrs.frozen(slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@attrs.frozen(slots=True)
class GroupSummary:
    """What DescribeGroups reports of a group."""

    error: int
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberSummary, ...] = ()


@attrs.frozen(slots=True)
class GroupOverview:
    """What ListGroups reports of a group."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"
