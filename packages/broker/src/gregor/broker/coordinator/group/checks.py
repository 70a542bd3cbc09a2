"""Is the member of a group request who it says it is (the check of a request about its
group, is this broker its coordinator and ready, is `GroupMetadataManager.group_status`)."""

from __future__ import annotations

import logging

from gregor.broker.coordinator.group.group import GroupMetadata
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def member_error(
    group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
) -> int | None:
    """An instance id must map to this member id; the member id must be in the group."""
    if group_instance_id is not None:
        current = group.current_static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != member_id:
            log.info(
                "group %s: %s of member %s with instance id %s is fenced by member %s",
                group.group_id,
                operation,
                member_id,
                group_instance_id,
                current,
            )
            return ErrorCode.FENCED_INSTANCE_ID
        return None
    return None if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID


def consumer_member_error(group: GroupMetadata, member_id: str, member_epoch: int) -> int | None:
    """A commit or fetch of offsets in a consumer-protocol group: from a current member at
    its current epoch, or (epoch -1, no member id) from outside while it has no members."""
    members = group.consumer.members if group.consumer is not None else {}
    if member_epoch < 0 and not member_id:
        return ErrorCode.UNKNOWN_MEMBER_ID if members else None
    member = members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None if member_epoch == member.member_epoch else ErrorCode.STALE_MEMBER_EPOCH
