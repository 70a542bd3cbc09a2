"""One member of a classic group: its protocols, timeouts, assignment, and the requests of its
that wait for the group (a parked JoinGroup or SyncGroup)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from gregor.broker.coordinator.group.results import (
    JoinResult,
    MemberSummary,
    Reply,
    SyncResult,
)
from gregor.client.timeouts import Timeout

Protocols = Sequence[tuple[str, bytes]]


@attrs.frozen(slots=True)
class JoinRequest:
    """A JoinGroup, as the coordinator needs it."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+ of a dynamic member
    support_skipping_assignment: bool = False  # JoinGroup v9+
    reason: str | None = None

    @property
    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    @property
    def why(self) -> str:
        return self.reason or "not provided"


class MemberMetadata:
    __slots__ = (
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_satisfied",
        "heartbeat_timer",
        "is_new",
        "member_id",
        "protocol_type",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "supported_protocols",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols: list[tuple[str, bytes]] = list(supported_protocols)
        self.assignment = assignment
        self.awaiting_join: Reply[JoinResult] | None = None
        self.awaiting_sync: Reply[SyncResult] | None = None
        # A member that joined and has not yet completed a rebalance: its JoinGroup may
        # expire (the client may have given up on it) even while it is parked.
        self.is_new = False
        # Set by anything that proves the member alive; the session timer checks it.
        self.heartbeat_satisfied = False
        self.heartbeat_timer: Timeout | None = None

    @classmethod
    def joining(cls, member_id: str, join: JoinRequest) -> MemberMetadata:
        return cls(
            member_id,
            join.group_instance_id,
            join.client_id,
            join.client_host,
            join.rebalance_timeout_ms,
            join.session_timeout_ms,
            join.protocol_type,
            join.protocols,
        )

    def __repr__(self) -> str:
        return (
            f"<Member {self.member_id} instance={self.group_instance_id} "
            f"client={self.client_id} session={self.session_timeout_ms}ms "
            f"protocols={[name for name, _ in self.supported_protocols]}>"
        )

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    @property
    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol!r}")

    @property
    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied
        # A member parked in a rebalance needs no heartbeat: the rebalance times it out.
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def matches(self, protocols: Protocols) -> bool:
        """Whether it would join with the same protocols and metadata, in the same order."""
        return list(protocols) == self.supported_protocols

    def vote(self, candidates: set[str]) -> str:
        """Its most preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def summary(self, protocol: str | None) -> MemberSummary:
        """For DescribeGroups: metadata and assignment only once the group is stable."""
        if protocol is None:
            metadata, assignment = b"", b""
        else:
            metadata, assignment = self.metadata(protocol), self.assignment
        return MemberSummary(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            metadata,
            assignment,
        )
