"""The consumer group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, OffsetDelete, ListGroups, DescribeGroups and DeleteGroups.

Each turns the request into a call of the group coordinator (`ctx.services.group_coordinator`)
and its answer into the response of the request's version, with Kafka's conversions:
JoinGroup v0 has no rebalance timeout (the session timeout serves), LeaveGroup before v3
names one member and answers with one error, OffsetFetch before v8 asks for one group,
SyncGroup from v5 must name the protocol. OffsetCommit and OffsetFetch v0 keep offsets in
ZooKeeper, as a ZooKeeper-mode Kafka broker does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.coordinator.group import zk_offsets
from gregor.broker.coordinator.group.group import TopicPartition
from gregor.broker.coordinator.group.manager import java_length
from gregor.broker.coordinator.group.member import JoinRequest
from gregor.broker.coordinator.group.offsets import FetchedOffset, OffsetAndMetadata
from gregor.broker.coordinator.group.results import JoinResult, Reply, SyncResult
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from gregor.protocol.apis.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from gregor.protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from gregor.protocol.apis.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from gregor.protocol.apis.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
)
from gregor.protocol.apis.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse
from gregor.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from gregor.protocol.apis.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from gregor.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from gregor.protocol.apis.sync_group import SyncGroupRequest, SyncGroupResponse
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

GROUP_REFUSED = ErrorCode.GROUP_AUTHORIZATION_FAILED
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _group_allowed(
    ctx: RequestContext, group_id: str, operation: AclOperation = AclOperation.READ
) -> bool:
    return ctx.authorized(operation, ResourceType.GROUP, group_id)


def _topics_refused(
    ctx: RequestContext, partitions: Iterable[TopicPartition], operation: AclOperation
) -> set[str]:
    """The topics among `partitions` the principal may not do `operation` on."""
    topics = {topic for topic, _ in partitions}
    return {t for t in topics if not ctx.authorized(operation, ResourceType.TOPIC, t)}


def _client_host(ctx: RequestContext) -> str:
    return f"/{ctx.client_host}"  # as Java prints an InetAddress without a host name


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------


@handles(ApiKey.JOIN_GROUP, "0-9")
async def join_group(
    ctx: RequestContext, request: JoinGroupRequest, version: int
) -> JoinGroupResponse:
    if not _group_allowed(ctx, request.group_id):
        return JoinGroupResponse(
            error_code=GROUP_REFUSED, protocol_name="" if version < 7 else None
        )
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=request.session_timeout_ms,
        # v0 has no rebalance timeout: the session timeout serves as one.
        rebalance_timeout_ms=(
            request.session_timeout_ms if version == 0 else request.rebalance_timeout_ms
        ),
        client_id=ctx.client_id,
        client_host=_client_host(ctx),
        require_known_member_id=version >= 4 and request.group_instance_id is None,
        support_skipping_assignment=version >= 9,
        reason=request.reason,
    )
    reply: Reply[JoinResult] = Reply()
    ctx.services.group_coordinator.handle_join_group(join, reply)
    result = await reply.wait()
    protocol_name = result.protocol_name
    # Before v7 the protocol name is not nullable; from v7 an empty one is sent as null.
    if version < 7:
        protocol_name = protocol_name or ""
    elif protocol_name == "":
        protocol_name = None
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata)
            for m in result.members
        ],
    )


@handles(ApiKey.SYNC_GROUP, "0-5")
async def sync_group(
    ctx: RequestContext, request: SyncGroupRequest, version: int
) -> SyncGroupResponse:
    if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return SyncGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if not _group_allowed(ctx, request.group_id):
        return SyncGroupResponse(error_code=GROUP_REFUSED)
    reply: Reply[SyncResult] = Reply()
    ctx.services.group_coordinator.handle_sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.protocol_type,
        request.protocol_name,
        request.group_instance_id,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
        reply,
    )
    result = await reply.wait()
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


@handles(ApiKey.HEARTBEAT, "0-4")
async def heartbeat(
    ctx: RequestContext, request: HeartbeatRequest, version: int
) -> HeartbeatResponse:
    if not _group_allowed(ctx, request.group_id):
        return HeartbeatResponse(error_code=GROUP_REFUSED)
    error = ctx.services.group_coordinator.handle_heartbeat(
        request.group_id, request.member_id, request.group_instance_id, request.generation_id
    )
    return HeartbeatResponse(error_code=error)


@handles(ApiKey.LEAVE_GROUP, "0-5")
async def leave_group(
    ctx: RequestContext, request: LeaveGroupRequest, version: int
) -> LeaveGroupResponse:
    if not _group_allowed(ctx, request.group_id):
        return LeaveGroupResponse(error_code=GROUP_REFUSED)
    leaving: list[tuple[str, str | None, str | None]]
    if version < 3:
        leaving = [(request.member_id, None, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id, m.reason) for m in request.members]
    result = ctx.services.group_coordinator.handle_leave_group(request.group_id, leaving)
    if version < 3:
        # One member, one error: the group's, else the member's.
        error = result.error
        if error == ErrorCode.NONE:
            error = next((m.error for m in result.members if m.error), ErrorCode.NONE)
        return LeaveGroupResponse(error_code=error)
    return LeaveGroupResponse(
        error_code=result.error,
        members=[MemberResponse(m.member_id, m.group_instance_id, m.error) for m in result.members],
    )


# -- offsets ---------------------------------------------------------------------------------


def _known_partitions(
    ctx: RequestContext, requested: Iterable[TopicPartition]
) -> tuple[list[TopicPartition], dict[TopicPartition, int]]:
    """The partitions the cluster has, and UNKNOWN_TOPIC_OR_PARTITION for the others."""
    cache = ctx.services.metadata_cache
    known: list[TopicPartition] = []
    unknown: dict[TopicPartition, int] = {}
    for tp in requested:
        if cache.partition(*tp) is None:
            unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            known.append(tp)
    return known, unknown


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out


@handles(ApiKey.OFFSET_COMMIT, "0-9")
async def offset_commit(
    ctx: RequestContext, request: OffsetCommitRequest, version: int
) -> OffsetCommitResponse:
    now = _now_ms()
    # v2-v4 may set a retention of their own; v1 a commit timestamp.
    expire = None if request.retention_time_ms == -1 else now + request.retention_time_ms
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in request.topics:
        for p in topic.partitions:
            offsets[(topic.name, p.partition_index)] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=None
                if p.committed_leader_epoch == NO_LEADER_EPOCH
                else p.committed_leader_epoch,
                metadata=p.committed_metadata or "",
                commit_timestamp_ms=now
                if p.commit_timestamp == NO_TIMESTAMP
                else p.commit_timestamp,
                expire_timestamp_ms=expire,
            )
    if not _group_allowed(ctx, request.group_id):
        known: list[TopicPartition] = []
        errors = dict.fromkeys(offsets, int(GROUP_REFUSED))
    else:
        refused = _topics_refused(ctx, offsets, AclOperation.READ)
        known, errors = _known_partitions(ctx, (tp for tp in offsets if tp[0] not in refused))
        errors.update(
            (tp, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for tp in offsets if tp[0] in refused
        )
    if known and version == 0:
        errors.update(
            await _commit_to_zookeeper(ctx, request.group_id, {tp: offsets[tp] for tp in known})
        )
    elif known:
        reply: Reply[dict[TopicPartition, int]] = Reply()
        ctx.services.group_coordinator.offsets.commit(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            request.generation_id_or_member_epoch,
            {tp: offsets[tp] for tp in known},
            reply,
        )
        errors.update(await reply.wait())
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name,
                [OffsetCommitResponsePartition(p, errors[(name, p)]) for p in partitions],
            )
            for name, partitions in _by_topic(offsets).items()
        ]
    )


async def _commit_to_zookeeper(
    ctx: RequestContext, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> dict[TopicPartition, int]:
    limit = ctx.services.config.offset_metadata_max_bytes
    errors: dict[TopicPartition, int] = {}
    for (topic, partition), offset in offsets.items():
        if java_length(offset.metadata) > limit:
            errors[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            continue
        try:
            await zk_offsets.commit_offset(
                ctx.services.zk, group_id, topic, partition, offset.offset
            )
        except Exception as exc:
            log.warning("OffsetCommit v0 of group %s to ZooKeeper failed: %s", group_id, exc)
            errors[(topic, partition)] = ErrorCode.UNKNOWN_SERVER_ERROR
            continue
        errors[(topic, partition)] = ErrorCode.NONE
    return errors


@handles(ApiKey.OFFSET_FETCH, "0-9")
async def offset_fetch(
    ctx: RequestContext, request: OffsetFetchRequest, version: int
) -> OffsetFetchResponse:
    if version == 0:
        return await _fetch_from_zookeeper(ctx, request)
    if version < 8:
        partitions = (
            None
            if request.topics is None
            else [(t.name, p) for t in request.topics for p in t.partition_indexes]
        )
        error, found = _fetch_offsets(ctx, request.group_id, request.require_stable, partitions)
        if error == GROUP_REFUSED and version < 2:  # no top-level error: every partition's
            found = {tp: FetchedOffset(error=GROUP_REFUSED) for tp in partitions or ()}
        topics = [
            OffsetFetchResponseTopic(
                name,
                [_old_partition(p, found[(name, p)]) for p in indexes],
            )
            for name, indexes in _by_topic(found).items()
        ]
        return OffsetFetchResponse(topics=topics, error_code=error)
    groups = []
    for group in request.groups:
        partitions = (
            None
            if group.topics is None
            else [(t.name, p) for t in group.topics for p in t.partition_indexes]
        )
        member = (
            None
            if group.member_epoch < 0 and not group.member_id
            else (group.member_id or "", group.member_epoch)
        )
        error, found = _fetch_offsets(
            ctx, group.group_id, request.require_stable, partitions, member
        )
        if error == ErrorCode.STALE_MEMBER_EPOCH and partitions is not None:
            # Kafka answers this with the group's error alone. librdkafka (to 2.16 at
            # least) then leaves the partitions it asked for waiting for their offsets
            # until its assignment next changes, never fetching them; named per partition
            # too, it queries them again after its next heartbeat. Clients that read the
            # group's error first (Kafka's own) see the same answer.
            found = dict.fromkeys(partitions, FetchedOffset(error=error))
        groups.append(
            OffsetFetchResponseGroup(
                group_id=group.group_id,
                error_code=error,
                topics=[
                    OffsetFetchResponseTopics(
                        name,
                        [
                            OffsetFetchResponsePartitions(
                                p,
                                found[(name, p)].offset,
                                _leader_epoch(found[(name, p)]),
                                found[(name, p)].metadata,
                                found[(name, p)].error,
                            )
                            for p in indexes
                        ],
                    )
                    for name, indexes in _by_topic(found).items()
                ],
            )
        )
    return OffsetFetchResponse(groups=groups)


def _fetch_offsets(
    ctx: RequestContext,
    group_id: str,
    require_stable: bool,
    partitions: list[TopicPartition] | None,
    member: tuple[str, int] | None = None,
) -> tuple[int, dict[TopicPartition, FetchedOffset]]:
    """A group's committed offsets, as far as the principal may see them: DESCRIBE on the
    group, and on each topic (named topics refused, the others left out of "all")."""
    if not _group_allowed(ctx, group_id, AclOperation.DESCRIBE):
        return GROUP_REFUSED, {}
    offsets = ctx.services.group_coordinator.offsets
    if partitions is None:
        error, found = offsets.fetch(group_id, require_stable, None, member)
        refused = _topics_refused(ctx, found, AclOperation.DESCRIBE)
        return error, {tp: f for tp, f in found.items() if tp[0] not in refused}
    refused = _topics_refused(ctx, partitions, AclOperation.DESCRIBE)
    if not refused:
        return offsets.fetch(group_id, require_stable, partitions, member)
    allowed = [tp for tp in partitions if tp[0] not in refused]
    error, found = offsets.fetch(group_id, require_stable, allowed, member) if allowed else (0, {})
    denied = FetchedOffset(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return error, {**found, **{tp: denied for tp in partitions if tp[0] in refused}}


def _leader_epoch(found: FetchedOffset) -> int:
    return NO_LEADER_EPOCH if found.leader_epoch is None else found.leader_epoch


def _old_partition(index: int, found: FetchedOffset) -> OffsetFetchResponsePartition:
    return OffsetFetchResponsePartition(
        index, found.offset, _leader_epoch(found), found.metadata, found.error
    )


async def _fetch_from_zookeeper(
    ctx: RequestContext, request: OffsetFetchRequest
) -> OffsetFetchResponse:
    cache = ctx.services.metadata_cache
    topics = []
    group_allowed = _group_allowed(ctx, request.group_id, AclOperation.DESCRIBE)
    for topic in request.topics or ():
        answers = []
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            found = FetchedOffset(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if not group_allowed:
                found = FetchedOffset(error=GROUP_REFUSED)
            elif not allowed:
                found = FetchedOffset(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif cache.partition(topic.name, index) is not None:
                try:
                    offset = await zk_offsets.fetch_offset(
                        ctx.services.zk, request.group_id, topic.name, index
                    )
                except Exception as exc:
                    log.warning("OffsetFetch v0 of group %s failed: %s", request.group_id, exc)
                    found = FetchedOffset(error=ErrorCode.UNKNOWN_SERVER_ERROR)
                else:
                    if offset is not None:
                        found = FetchedOffset(offset)
            answers.append(_old_partition(index, found))
        topics.append(OffsetFetchResponseTopic(topic.name, answers))
    return OffsetFetchResponse(topics=topics)


@handles(ApiKey.OFFSET_DELETE, "0")
async def offset_delete(
    ctx: RequestContext, request: OffsetDeleteRequest, version: int
) -> OffsetDeleteResponse:
    requested = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if not _group_allowed(ctx, request.group_id, AclOperation.DELETE):
        return OffsetDeleteResponse(error_code=GROUP_REFUSED)
    refused = _topics_refused(ctx, requested, AclOperation.READ)
    known, errors = _known_partitions(ctx, (tp for tp in requested if tp[0] not in refused))
    errors.update(
        (tp, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for tp in requested if tp[0] in refused
    )
    error, results = ctx.services.group_coordinator.offsets.delete(request.group_id, known)
    if error != ErrorCode.NONE:
        return OffsetDeleteResponse(error_code=error)
    errors.update(results)
    return OffsetDeleteResponse(
        topics=[
            OffsetDeleteResponseTopic(
                name, [OffsetDeleteResponsePartition(p, errors[(name, p)]) for p in partitions]
            )
            for name, partitions in _by_topic(dict.fromkeys(requested)).items()
        ]
    )


# -- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------------


@handles(ApiKey.LIST_GROUPS, "0-5")
async def list_groups(
    ctx: RequestContext, request: ListGroupsRequest, version: int
) -> ListGroupsResponse:
    error, groups = ctx.services.group_coordinator.admin.list_groups(
        request.states_filter, request.types_filter
    )
    if not ctx.authorized(AclOperation.DESCRIBE):  # else only the groups it may describe
        groups = [g for g in groups if _group_allowed(ctx, g.group_id, AclOperation.DESCRIBE)]
    return ListGroupsResponse(
        error_code=error,
        groups=[ListedGroup(g.group_id, g.protocol_type, g.state, g.group_type) for g in groups],
    )


@handles(ApiKey.DESCRIBE_GROUPS, "0-5")
async def describe_groups(
    ctx: RequestContext, request: DescribeGroupsRequest, version: int
) -> DescribeGroupsResponse:
    coordinator = ctx.services.group_coordinator
    described = []
    for group_id in request.groups:
        if not _group_allowed(ctx, group_id, AclOperation.DESCRIBE):
            described.append(DescribedGroup(error_code=GROUP_REFUSED, group_id=group_id))
            continue
        summary = coordinator.admin.describe_group(group_id)
        ops = ctx.authorized_operations(
            ResourceType.GROUP,
            group_id,
            request.include_authorized_operations and summary.error == ErrorCode.NONE,
        )
        described.append(
            DescribedGroup(
                error_code=summary.error,
                group_id=group_id,
                group_state=summary.state,
                protocol_type=summary.protocol_type,
                protocol_data=summary.protocol,
                members=[
                    DescribedGroupMember(
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.metadata,
                        m.assignment,
                    )
                    for m in summary.members
                ],
                authorized_operations=ops,
            )
        )
    return DescribeGroupsResponse(groups=described)


@handles(ApiKey.DELETE_GROUPS, "0-2")
async def delete_groups(
    ctx: RequestContext, request: DeleteGroupsRequest, version: int
) -> DeleteGroupsResponse:
    allowed = [g for g in request.groups_names if _group_allowed(ctx, g, AclOperation.DELETE)]
    results = ctx.services.group_coordinator.admin.delete_groups(allowed) if allowed else {}
    return DeleteGroupsResponse(
        results=[
            DeletableGroupResult(group_id, results.get(group_id, GROUP_REFUSED))
            for group_id in dict.fromkeys(request.groups_names)
        ]
    )
