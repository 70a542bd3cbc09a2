"""The checks every group request passes first: is this broker the group's coordinator
(and ready), and is the member who it says it is."""

from __future__ import annotations

import logging

from gregor.broker.coordinator.group.group import GroupMetadata
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# APIs that accept the empty group id (old clients commit and fetch offsets with it).
_EMPTY_GROUP_ID_ALLOWED = frozenset(
    {ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS}
)


class RequestChecks:
    def __init__(self, manager: GroupMetadataManager) -> None:
        self.manager = manager
        self.active = False  # the coordinator is running

    def group_status(self, group_id: str, api: ApiKey) -> int | None:
        """The error for a request about this group, or None when this broker serves it."""
        if not group_id and api not in _EMPTY_GROUP_ID_ALLOWED:
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_group_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_group_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    def missing_group(self, group_id: str) -> int:
        """The error for a group that is not there: this broker would have it, or not."""
        return (
            ErrorCode.GROUP_ID_NOT_FOUND
            if self.manager.group_not_exists(group_id)
            else ErrorCode.NOT_COORDINATOR
        )


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
