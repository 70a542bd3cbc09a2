"""ListGroups, DescribeGroups and DeleteGroups."""

from __future__ import annotations

import logging
from collections.abc import Collection

from gregor.broker.coordinator.group.group import GroupMetadata
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.broker.coordinator.group.results import GroupOverview, GroupSummary
from gregor.broker.coordinator.group.state import GroupState
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupAdmin:
    def __init__(self, manager: GroupMetadataManager) -> None:
        self.manager = manager

    def delete_groups(self, group_ids: Collection[str]) -> dict[str, int]:
        errors: dict[str, int] = {}
        doomed: list[GroupMetadata] = []
        for group_id in dict.fromkeys(group_ids):
            error = self.manager.group_status(group_id, ApiKey.DELETE_GROUPS)
            if error is not None:
                errors[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.is_(GroupState.DEAD):
                errors[group_id] = self.manager.missing_group(group_id)
            elif group.is_(GroupState.EMPTY) and not group.has_consumer_members:
                group.transition_to(GroupState.DEAD, self.manager.now_ms())
                doomed.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if doomed:
            removed = self.manager.cleanup_group_metadata(doomed, lambda g: g.remove_all_offsets())
            for group in doomed:
                errors[group.group_id] = ErrorCode.NONE
            log.info(
                "deleted groups %s (%d offsets removed)", [g.group_id for g in doomed], removed
            )
        return errors

    def list_groups(
        self, states: Collection[str], types: Collection[str]
    ) -> tuple[int, list[GroupOverview]]:
        if not self.manager.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.is_loading else ErrorCode.NONE
        )
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        groups = [
            overview
            for overview in (group.overview() for group in self.manager.groups.values())
            if (not wanted_states or overview.state.lower() in wanted_states)
            and (not wanted_types or overview.group_type in wanted_types)
        ]
        return error, groups

    def describe_group(self, group_id: str) -> GroupSummary:
        error = self.manager.group_status(group_id, ApiKey.DESCRIBE_GROUPS)
        if error is not None:
            return GroupSummary(error, "")
        group = self.manager.get_group(group_id)
        if group is None:
            return GroupSummary(ErrorCode.NONE, str(GroupState.DEAD))
        return group.summary()
