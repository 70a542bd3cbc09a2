"""CreateTopics, DeleteTopics and CreatePartitions, on the controller as in ZooKeeper-mode
Kafka (NOT_CONTROLLER elsewhere).

The handler validates and writes ZooKeeper (see `controller.admin`); the controller then
does the work and announces it with UpdateMetadata. The answer waits, up to the request's
timeout, until this broker's metadata shows the result (every new partition has a leader,
deleted topics are gone), and reports REQUEST_TIMED_OUT for what did not get there in time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.controller.admin import NewTopic, TopicAdmin
from gregor.broker.handlers.configs import describe_topic, dynamic_broker_configs
from gregor.broker.metadata_cache import NO_LEADER, ZERO_UUID
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from gregor.protocol.apis.create_topics import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from gregor.protocol.apis.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.broker.services import Services


def topic_admin(services: Services) -> TopicAdmin:
    config = services.config
    return TopicAdmin(
        services.zk, config.num_partitions, config.default_replication_factor, config.log_config
    )


def missing_leaders(
    services: Services, partitions: Iterable[tuple[str, int]]
) -> set[tuple[str, int]]:
    cache = services.metadata_cache
    missing = set()
    for topic, index in partitions:
        state = cache.partition(topic, index)
        if state is None or state.leader == NO_LEADER:
            missing.add((topic, index))
    return missing


async def await_leaders(
    services: Services, partitions: set[tuple[str, int]], timeout_ms: int
) -> set[str]:
    """Wait for every partition to have a leader; the topics still missing one."""
    await services.metadata_cache.wait_until(
        lambda: not missing_leaders(services, partitions), timeout_ms
    )
    return {topic for topic, _ in missing_leaders(services, partitions)}


class _Result(Protocol):
    name: str
    error_code: int
    error_message: str | None


def _answered_not_controller(services: Services, results: Sequence[_Result]) -> bool:
    """Unless this broker is the controller, every result is NOT_CONTROLLER (True)."""
    if services.controller.is_active:
        return False
    for result in results:
        result.error_code = ErrorCode.NOT_CONTROLLER
    return True


async def _await_done(
    services: Services, done: Sequence[_Result], partitions: set[tuple[str, int]], timeout_ms: int
) -> None:
    """Wait for the partitions' leaders; what has none in time is REQUEST_TIMED_OUT (as is
    everything with no time to wait, as Kafka answers)."""
    late = await await_leaders(services, partitions, timeout_ms)
    for result in done:
        if result.name in late or timeout_ms <= 0:
            result.error_code = ErrorCode.REQUEST_TIMED_OUT
            result.error_message = None


def _topic_allowed(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return ctx.authorized(operation, ResourceType.TOPIC, topic)


@handles(ApiKey.CREATE_TOPICS, "0-7")
async def create_topics(
    ctx: RequestContext, request: CreateTopicsRequest, version: int
) -> CreateTopicsResponse:
    services = ctx.services
    response = CreateTopicsResponse()
    results = [CreatableTopicResult(name=t.name, error_message=None) for t in request.topics]
    response.topics = results
    if _answered_not_controller(services, results):
        return response
    admin = topic_admin(services)
    counts = Counter(t.name for t in request.topics)
    waiting: set[tuple[str, int]] = set()
    created: list[CreatableTopicResult] = []
    own, default = await dynamic_broker_configs(services)
    cluster_create = ctx.authorized(AclOperation.CREATE)
    for topic, result in zip(request.topics, results, strict=True):
        if counts[topic.name] > 1:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "Found multiple entries for this topic."
            continue
        if not cluster_create and not _topic_allowed(ctx, AclOperation.CREATE, topic.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
            continue
        new = NewTopic(
            topic.name,
            topic.num_partitions,
            topic.replication_factor,
            {a.partition_index: list(a.broker_ids) for a in topic.assignments},
            {c.name: c.value for c in topic.configs},
        )
        try:
            done = await admin.create_topic(new, request.validate_only)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
            result.configs = []
            continue
        result.num_partitions = done.num_partitions
        result.replication_factor = done.replication_factor
        result.topic_id = done.topic_id or ZERO_UUID
        result.configs = [
            CreatableTopicConfigs(e.name, e.value, e.read_only, e.source, False)
            for e in describe_topic(services, done.configs, own, default)
        ]
        created.append(result)
        waiting |= {(topic.name, p) for p in done.assignment}
    if not request.validate_only:
        await _await_done(services, created, waiting, request.timeout_ms)
    return response


@handles(ApiKey.DELETE_TOPICS, "0-6")
async def delete_topics(
    ctx: RequestContext, request: DeleteTopicsRequest, version: int
) -> DeleteTopicsResponse:
    services = ctx.services
    cache = services.metadata_cache
    wanted = (
        [(t.name, t.topic_id) for t in request.topics]
        if version >= 6
        else [(name, ZERO_UUID) for name in request.topic_names]
    )
    results = [DeletableTopicResult(name=name, topic_id=topic_id) for name, topic_id in wanted]
    response = DeleteTopicsResponse(responses=results)
    if not services.controller.is_active:
        for result in results:
            result.error_code = ErrorCode.NOT_CONTROLLER
        return response
    if not services.config.delete_topic_enable:
        code = ErrorCode.INVALID_REQUEST if version < 3 else ErrorCode.TOPIC_DELETION_DISABLED
        for result in results:
            result.error_code = code
        return response
    admin = topic_admin(services)
    deleting: list[DeletableTopicResult] = []
    for result in results:
        if result.name is not None and result.topic_id != ZERO_UUID:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "Topic name and topic ID can not both be specified."
            continue
        if result.topic_id != ZERO_UUID:
            result.name = cache.topic_name(result.topic_id)
            if result.name is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                continue
        if result.name is not None and not _topic_allowed(ctx, AclOperation.DELETE, result.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if result.name is None or not cache.contains_topic(result.name):
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        try:
            await admin.delete_topic(result.name)
        except KafkaError as exc:
            result.error_code = exc.code
            continue
        deleting.append(result)
    if deleting:
        names = {r.name for r in deleting}
        await cache.wait_until(
            lambda: not any(cache.contains_topic(n) for n in names if n), request.timeout_ms
        )
        for result in deleting:
            if request.timeout_ms <= 0 or (result.name and cache.contains_topic(result.name)):
                result.error_code = ErrorCode.REQUEST_TIMED_OUT
    return response


@handles(ApiKey.CREATE_PARTITIONS, "0-3")
async def create_partitions(
    ctx: RequestContext, request: CreatePartitionsRequest, version: int
) -> CreatePartitionsResponse:
    services = ctx.services
    results = [CreatePartitionsTopicResult(name=t.name) for t in request.topics]
    response = CreatePartitionsResponse(results=results)
    if _answered_not_controller(services, results):
        return response
    admin = topic_admin(services)
    counts = Counter(t.name for t in request.topics)
    waiting: set[tuple[str, int]] = set()
    grown: list[CreatePartitionsTopicResult] = []
    for topic, result in zip(request.topics, results, strict=True):
        if counts[topic.name] > 1:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "Duplicate topic in request."
            continue
        if not _topic_allowed(ctx, AclOperation.ALTER, topic.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "The topic authorization is failed."
            continue
        if services.controller.deletion.is_queued(topic.name):
            result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
            result.error_message = "The topic is queued for deletion."
            continue
        assignments = (
            None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        )
        try:
            await admin.create_partitions(
                topic.name, topic.count, assignments, request.validate_only
            )
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
            continue
        grown.append(result)
        waiting |= {(topic.name, p) for p in range(topic.count)}
    if not request.validate_only:
        await _await_done(services, grown, waiting, request.timeout_ms)
    return response
