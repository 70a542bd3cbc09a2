"""The admin client's operations, on the I/O loop.

Where each request goes, as the Java admin client sends it:
- topic and partition changes, leader elections and reassignments: the controller (a
  NOT_CONTROLLER answer refreshes metadata and asks the new one);
- DeleteRecords and ListOffsets: each partition's leader;
- configs: any broker for topics, the broker itself for broker configs;
- client quotas: any broker;
- groups: each group's coordinator; ListGroups: every broker.

Every operation takes a timeout (default.api.timeout.ms) within which retriable errors
are retried. A per-resource error is raised with the resource named; the first one wins.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import trio

from gregor.client.admin.types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    BrokerDescription,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ElectionType,
    GroupDescription,
    GroupListing,
    GroupOffset,
    MemberDescription,
    NewTopic,
    PartitionDescription,
    PatternType,
    Reassignment,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    TopicDescription,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from gregor.client.config import AdminConfig
from gregor.client.consumer.group_membership import commit_topics, fetch_committed
from gregor.client.coordinator_lookup import CoordinatorType, find_coordinator
from gregor.client.network import BOOTSTRAP, NetworkClient
from gregor.client.offsets import EARLIEST, LATEST, list_offsets
from gregor.client.types import (
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    as_offsets,
    partitions_by_topic,
)
from gregor.protocol.apis.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    EntityData,
    OpData,
    RequestEntryData,
)
from gregor.protocol.apis.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ReassignablePartition,
    ReassignableTopic,
)
from gregor.protocol.apis.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from gregor.protocol.apis.create_acls import AclCreation, CreateAclsRequest, CreateAclsResponse
from gregor.protocol.apis.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
)
from gregor.protocol.apis.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from gregor.protocol.apis.delete_acls import (
    DeleteAclsFilter,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from gregor.protocol.apis.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from gregor.protocol.apis.delete_records import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopic,
)
from gregor.protocol.apis.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
)
from gregor.protocol.apis.describe_acls import (
    AclDescription,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from gregor.protocol.apis.describe_client_quotas import (
    ComponentData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from gregor.protocol.apis.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from gregor.protocol.apis.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from gregor.protocol.apis.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    UserName,
)
from gregor.protocol.apis.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from gregor.protocol.apis.elect_leaders import TopicPartitions as ElectTopicPartitions
from gregor.protocol.apis.incremental_alter_configs import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from gregor.protocol.apis.list_groups import ListGroupsRequest, ListGroupsResponse
from gregor.protocol.apis.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsTopics,
)
from gregor.protocol.apis.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from gregor.protocol.consumer_protocol import PROTOCOL_TYPE, decode_assignment
from gregor.protocol.errors import (
    DecodeError,
    ErrorCode,
    KafkaError,
    NetworkError,
    RequestTimedOutError,
)
from gregor.protocol.schema import Request, Response

T = TypeVar("T")

_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
_COORDINATOR_RETRY = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def _raise(code: int, what: str, message: str | None = None) -> None:
    """A resource's error is the operation's answer: it is not retried (Kafka's admin
    retries only when the request went to the wrong broker, which raises _Again)."""
    if code != ErrorCode.NONE:
        error = KafkaError.for_code(code)
        raise _Failed(error(f"{what}: {error.error_name()}" + (f": {message}" if message else "")))


class _Again(Exception):
    """Retry the operation after a backoff (the controller or coordinator moved)."""


class _Failed(Exception):
    """Carries a resource's error out of the retry loop."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


class AdminCore:
    def __init__(self, config: AdminConfig) -> None:
        self.config = config
        self.client = NetworkClient(config, topics=(), allow_auto_topic_creation=False)
        self.api_timeout = config.default_api_timeout_ms / 1000

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.client.run)
            task_status.started()

    # -- plumbing --------------------------------------------------------------------------

    async def _retrying(
        self, timeout: float | None, what: str, attempt: Callable[[], Awaitable[T]]
    ) -> T:
        """Run `attempt` until it succeeds, a non-retriable error, or the timeout."""
        limit = self.api_timeout if timeout is None else timeout
        last: Exception | None = None
        attempts = 0
        with trio.move_on_after(limit):
            while True:
                try:
                    return await attempt()
                except _Failed as failed:
                    raise failed.error from None
                except _Again as exc:
                    last = exc
                    await self.client.update_metadata()
                except (NetworkError, RequestTimedOutError) as exc:
                    last = exc
                await trio.sleep(self.client.retry_backoff.delay(attempts))
                attempts += 1
        raise RequestTimedOutError(
            f"{what} did not complete within {limit:.1f}s" + (f": {last}" if last else "")
        )

    async def _controller(
        self, request: Request | Callable[[int], Request], api: type[Request] | None = None
    ) -> Response:
        """Send to the controller: a request, or `request(version)` of type `api` where its
        fields differ between versions (the version is the one the connection negotiates)."""
        cluster = (
            self.client.cluster
            if self.client.metadata_version
            else await self.client.update_metadata()
        )
        if cluster.controller_id < 0:
            raise _Again("no controller known")
        if isinstance(request, Request):
            return await self.client.request(cluster.controller_id, request)
        assert api is not None
        return await self.client.request_built(cluster.controller_id, api, request)

    @staticmethod
    def _controller_moved(code: int) -> None:
        if code == ErrorCode.NOT_CONTROLLER:
            raise _Again("the controller moved")

    async def _coordinator(self, group_id: str, timeout: float | None) -> int:
        return await find_coordinator(
            self.client,
            group_id,
            CoordinatorType.GROUP,
            self.api_timeout if timeout is None else timeout,
        )

    # -- topics and partitions -------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], timeout: float | None = None, validate_only: bool = False
    ) -> None:
        """Create topics (all of them, or raise the first failure)."""
        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions if t.replica_assignment is None else -1,
                    replication_factor=t.replication_factor if t.replica_assignment is None else -1,
                    assignments=[
                        CreatableReplicaAssignment(p, list(brokers))
                        for p, brokers in sorted((t.replica_assignment or {}).items())
                    ],
                    configs=[CreatableTopicConfig(k, v) for k, v in t.config.items()],
                )
                for t in topics
            ],
            timeout_ms=int(1000 * (self.api_timeout if timeout is None else timeout)),
            validate_only=validate_only,
        )
        pending = {t.name for t in topics}

        async def attempt() -> None:
            request.topics = [t for t in request.topics if t.name in pending]
            response = await self._controller(request)
            assert isinstance(response, CreateTopicsResponse)
            for result in response.topics:
                self._controller_moved(result.error_code)
            for result in response.topics:
                _raise(result.error_code, f"creating topic {result.name!r}", result.error_message)
                pending.discard(result.name)

        await self._retrying(timeout, "CreateTopics", attempt)

    async def delete_topics(self, topics: Sequence[str], timeout: float | None = None) -> None:
        limit = self.api_timeout if timeout is None else timeout

        def request(version: int) -> DeleteTopicsRequest:
            # v6 names topics in `topics`, v0-5 in `topic_names`.
            if version >= 6:
                states = [DeleteTopicState(name=name) for name in topics]
                return DeleteTopicsRequest(topics=states, timeout_ms=int(limit * 1000))
            return DeleteTopicsRequest(topic_names=list(topics), timeout_ms=int(limit * 1000))

        async def attempt() -> None:
            response = await self._controller(request, DeleteTopicsRequest)
            assert isinstance(response, DeleteTopicsResponse)
            for result in response.responses:
                self._controller_moved(result.error_code)
                _raise(result.error_code, f"deleting topic {result.name!r}", result.error_message)
            unanswered = set(topics) - {result.name for result in response.responses}
            if unanswered:
                raise KafkaError(f"DeleteTopics did not answer for {sorted(unanswered)}")

        await self._retrying(timeout, "DeleteTopics", attempt)

    async def create_partitions(
        self,
        new_counts: Mapping[str, int],
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topics to these partition counts."""
        limit = self.api_timeout if timeout is None else timeout

        async def attempt() -> None:
            response = await self._controller(
                CreatePartitionsRequest(
                    topics=[CreatePartitionsTopic(t, n, None) for t, n in new_counts.items()],
                    timeout_ms=int(limit * 1000),
                    validate_only=validate_only,
                )
            )
            assert isinstance(response, CreatePartitionsResponse)
            for result in response.results:
                self._controller_moved(result.error_code)
                _raise(
                    result.error_code,
                    f"adding partitions to {result.name!r}",
                    result.error_message,
                )

        await self._retrying(timeout, "CreatePartitions", attempt)

    async def delete_records(
        self, before: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Delete records before these offsets (-1: the high watermark); the new log start
        offsets."""
        pending = dict(before)
        done: dict[TopicPartition, int] = {}
        limit = self.api_timeout if timeout is None else timeout

        async def attempt() -> dict[TopicPartition, int]:
            self.client.add_topics({tp.topic for tp in pending})
            cluster = await self.client.update_metadata()
            by_leader: dict[int, dict[str, list[DeleteRecordsPartition]]] = {}
            for tp, offset in pending.items():
                leader = cluster.leader_for(tp)
                if leader < 0:
                    raise _Again(f"no leader for {tp}")
                by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    DeleteRecordsPartition(tp.partition, offset)
                )
            for leader, topics in by_leader.items():
                response = await self.client.request(
                    leader,
                    DeleteRecordsRequest(
                        topics=[DeleteRecordsTopic(t, ps) for t, ps in topics.items()],
                        timeout_ms=int(limit * 1000),
                    ),
                )
                assert isinstance(response, DeleteRecordsResponse)
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        if KafkaError.for_code(p.error_code).invalid_metadata and p.error_code:
                            raise _Again(f"{tp} moved")
                        _raise(p.error_code, f"deleting records of {tp}")
                        done[tp] = p.low_watermark
                        pending.pop(tp, None)
            return done

        return await self._retrying(timeout, "DeleteRecords", attempt)

    async def describe_topics(
        self, topics: Sequence[str] | None = None, timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISR of these topics (None: every topic)."""

        async def attempt() -> dict[str, TopicDescription]:
            previous = self.client.topics
            self.client.set_topics(None if topics is None else topics)
            try:
                cluster = await self.client.update_metadata()
            finally:
                self.client.topics = previous
            out = {}
            for name in topics if topics is not None else sorted(cluster.topics):
                error = cluster.topic_errors.get(name)
                if error and name not in cluster.topics:
                    _raise(error, f"describing topic {name!r}")
                info = cluster.topics.get(name)
                if info is None:
                    raise _Again(f"no metadata for {name!r}")
                out[name] = TopicDescription(
                    name,
                    info.is_internal,
                    tuple(
                        PartitionDescription(p.partition, p.leader, p.replicas, p.isr)
                        for p in info.partitions
                    ),
                )
            return out

        return await self._retrying(timeout, "describing topics", attempt)

    async def list_topics(self, timeout: float | None = None) -> list[str]:
        return sorted(await self.describe_topics(None, timeout))

    # -- configs ---------------------------------------------------------------------------

    def _config_node(self, resource: ConfigResource) -> int:
        if resource.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) and resource.name:
            return int(resource.name)
        return BOOTSTRAP

    async def describe_configs(
        self, resources: Sequence[ConfigResource], timeout: float | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}

        async def attempt() -> dict[ConfigResource, dict[str, ConfigEntry]]:
            if not self.client.metadata_version:
                await self.client.update_metadata()
            by_node: dict[int, list[ConfigResource]] = {}
            for resource in resources:
                by_node.setdefault(self._config_node(resource), []).append(resource)
            for node, asked in by_node.items():
                response = await self.client.request(
                    node,
                    DescribeConfigsRequest(
                        resources=[DescribeConfigsResource(r.type, r.name, None) for r in asked]
                    ),
                )
                assert isinstance(response, DescribeConfigsResponse)
                for result in response.results:
                    resource = ConfigResource(
                        ResourceType(result.resource_type), result.resource_name
                    )
                    _raise(
                        result.error_code, f"describing configs of {resource}", result.error_message
                    )
                    out[resource] = {
                        c.name: ConfigEntry(
                            c.name,
                            c.value,
                            _source(c.config_source, c.is_default),
                            c.read_only,
                            c.is_sensitive,
                        )
                        for c in result.configs
                    }
            return out

        return await self._retrying(timeout, "DescribeConfigs", attempt)

    async def alter_configs(
        self,
        changes: Mapping[ConfigResource, Mapping[str, str | None]],
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> None:
        """Set configs (a None value deletes the override: back to the default), leaving
        the others as they are (IncrementalAlterConfigs)."""

        async def attempt() -> None:
            if not self.client.metadata_version:
                await self.client.update_metadata()
            by_node: dict[int, list[AlterConfigsResource]] = {}
            for resource, entries in changes.items():
                by_node.setdefault(self._config_node(resource), []).append(
                    AlterConfigsResource(
                        resource.type,
                        resource.name,
                        [
                            AlterableConfig(name, _DELETE if value is None else _SET, value)
                            for name, value in entries.items()
                        ],
                    )
                )
            for node, asked in by_node.items():
                response = await self.client.request(
                    node,
                    IncrementalAlterConfigsRequest(resources=asked, validate_only=validate_only),
                )
                assert isinstance(response, IncrementalAlterConfigsResponse)
                for result in response.responses:
                    _raise(
                        result.error_code,
                        f"altering configs of {ResourceType(result.resource_type).name.lower()} "
                        f"{result.resource_name!r}",
                        result.error_message,
                    )

        await self._retrying(timeout, "IncrementalAlterConfigs", attempt)

    # -- offsets ---------------------------------------------------------------------------

    async def list_offsets(
        self, specs: Mapping[TopicPartition, int | str], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Offsets by timestamp, or "earliest" / "latest"."""
        timestamps = {
            tp: EARLIEST if spec == "earliest" else LATEST if spec == "latest" else int(spec)
            for tp, spec in specs.items()
        }
        return await list_offsets(
            self.client, timestamps, self.api_timeout if timeout is None else timeout
        )

    # -- groups ----------------------------------------------------------------------------

    async def list_groups(self, timeout: float | None = None) -> list[GroupListing]:
        """Every group of every broker."""

        async def attempt() -> list[GroupListing]:
            cluster = await self.client.update_metadata()
            found: dict[str, GroupListing] = {}
            for node in cluster.brokers:
                response = await self.client.request(node, ListGroupsRequest())
                assert isinstance(response, ListGroupsResponse)
                _raise(response.error_code, f"listing groups on broker {node}")
                for g in response.groups:
                    found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state)
            return sorted(found.values(), key=lambda g: g.group_id)

        return await self._retrying(timeout, "ListGroups", attempt)

    async def describe_groups(
        self, group_ids: Sequence[str], timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        out: dict[str, GroupDescription] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> GroupDescription:
                node = await self._coordinator(group_id, timeout)
                response = await self.client.request(node, DescribeGroupsRequest(groups=[group_id]))
                assert isinstance(response, DescribeGroupsResponse)
                group = response.groups[0]
                if group.error_code in (
                    ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ):
                    raise _Again("the coordinator moved")
                _raise(group.error_code, f"describing group {group_id!r}")
                return GroupDescription(
                    group.group_id,
                    group.group_state,
                    group.protocol_type,
                    group.protocol_data,
                    tuple(
                        MemberDescription(
                            m.member_id,
                            m.group_instance_id,
                            m.client_id,
                            m.client_host,
                            _assignment(group.protocol_type, m.member_assignment),
                        )
                        for m in group.members
                    ),
                )

            out[group_id] = await self._retrying(timeout, f"describing group {group_id!r}", attempt)
        return out

    async def delete_groups(self, group_ids: Sequence[str], timeout: float | None = None) -> None:
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> None:
                node = await self._coordinator(group_id, timeout)
                response = await self.client.request(
                    node, DeleteGroupsRequest(groups_names=[group_id])
                )
                assert isinstance(response, DeleteGroupsResponse)
                for result in response.results:
                    if result.error_code in (
                        ErrorCode.NOT_COORDINATOR,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ):
                        raise _Again("the coordinator moved")
                    _raise(result.error_code, f"deleting group {result.group_id!r}")

            await self._retrying(timeout, f"deleting group {group_id!r}", attempt)

    async def list_group_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, GroupOffset]:
        """A group's committed offsets (of these partitions, or all), with each partition's
        log end offset and so the group's lag."""
        limit = self.api_timeout if timeout is None else timeout
        node: list[int] = []

        async def locate() -> int:
            if not node:
                node.append(await self._coordinator(group_id, limit))
            return node[0]

        committed = await fetch_committed(
            self.client, group_id, partitions, limit, locate, node.clear
        )
        ends = await list_offsets(self.client, dict.fromkeys(committed, LATEST), limit)
        return {
            tp: GroupOffset(meta, end.offset if (end := ends.get(tp)) is not None else -1)
            for tp, meta in sorted(committed.items())
        }

    async def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        timeout: float | None = None,
    ) -> None:
        """Commit these offsets for a group that has no active members (as Kafka's
        alterConsumerGroupOffsets: an OffsetCommit outside any generation, which the
        coordinator refuses with UNKNOWN_MEMBER_ID while the group has members)."""
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=commit_topics(as_offsets(offsets)),
        )

        async def attempt() -> None:
            node = await self._coordinator(group_id, timeout)
            response = await self.client.request(node, request)
            assert isinstance(response, OffsetCommitResponse)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code in _COORDINATOR_RETRY:
                        raise _Again("the coordinator moved")
            for topic in response.topics:
                for p in topic.partitions:
                    _raise(
                        p.error_code,
                        f"committing offsets of group {group_id!r} on "
                        f"{topic.name}-{p.partition_index}",
                    )

        await self._retrying(timeout, f"altering offsets of group {group_id!r}", attempt)

    # -- cluster and leadership ------------------------------------------------------------

    async def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        async def attempt() -> ClusterDescription:
            cluster = await self.client.update_metadata()
            return ClusterDescription(
                cluster.cluster_id,
                cluster.controller_id,
                tuple(
                    BrokerDescription(b.node_id, b.host, b.port, b.rack)
                    for b in sorted(cluster.brokers.values(), key=lambda b: b.node_id)
                ),
            )

        return await self._retrying(timeout, "describing the cluster", attempt)

    async def elect_leaders(
        self,
        election: ElectionType = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Elect leaders (of these partitions, or all); per partition, None or the error
        (ELECTION_NOT_NEEDED when the preferred leader already leads)."""
        limit = self.api_timeout if timeout is None else timeout
        topics = None
        if partitions is not None:
            grouped = partitions_by_topic(partitions)
            topics = [ElectTopicPartitions(t, ps) for t, ps in grouped.items()]

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            response = await self._controller(
                ElectLeadersRequest(
                    election_type=election, topic_partitions=topics, timeout_ms=int(limit * 1000)
                )
            )
            assert isinstance(response, ElectLeadersResponse)
            self._controller_moved(response.error_code)
            _raise(response.error_code, "ElectLeaders")
            out: dict[TopicPartition, KafkaError | None] = {}
            for topic in response.replica_election_results:
                for p in topic.partition_result:
                    tp = TopicPartition(topic.topic, p.partition_id)
                    out[tp] = (
                        KafkaError.for_code(p.error_code)(
                            f"electing a leader for {tp}: {p.error_message}"
                        )
                        if p.error_code
                        else None
                    )
            return out

        return await self._retrying(timeout, "ElectLeaders", attempt)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        timeout: float | None = None,
    ) -> None:
        """Move partitions to these replicas (None: cancel an ongoing reassignment)."""
        limit = self.api_timeout if timeout is None else timeout
        grouped: dict[str, list[ReassignablePartition]] = {}
        for tp, replicas in reassignments.items():
            grouped.setdefault(tp.topic, []).append(
                ReassignablePartition(tp.partition, None if replicas is None else list(replicas))
            )

        async def attempt() -> None:
            response = await self._controller(
                AlterPartitionReassignmentsRequest(
                    timeout_ms=int(limit * 1000),
                    topics=[ReassignableTopic(t, ps) for t, ps in grouped.items()],
                )
            )
            assert isinstance(response, AlterPartitionReassignmentsResponse)
            self._controller_moved(response.error_code)
            _raise(response.error_code, "AlterPartitionReassignments", response.error_message)
            for topic in response.responses:
                for p in topic.partitions:
                    _raise(
                        p.error_code,
                        f"reassigning {topic.name}-{p.partition_index}",
                        p.error_message,
                    )

        await self._retrying(timeout, "AlterPartitionReassignments", attempt)

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, Reassignment]:
        limit = self.api_timeout if timeout is None else timeout
        topics = None
        if partitions is not None:
            grouped = partitions_by_topic(partitions)
            topics = [ListPartitionReassignmentsTopics(t, ps) for t, ps in grouped.items()]

        async def attempt() -> dict[TopicPartition, Reassignment]:
            response = await self._controller(
                ListPartitionReassignmentsRequest(timeout_ms=int(limit * 1000), topics=topics)
            )
            assert isinstance(response, ListPartitionReassignmentsResponse)
            self._controller_moved(response.error_code)
            _raise(response.error_code, "ListPartitionReassignments", response.error_message)
            return {
                TopicPartition(t.name, p.partition_index): Reassignment(
                    tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
                )
                for t in response.topics
                for p in t.partitions
            }

        return await self._retrying(timeout, "ListPartitionReassignments", attempt)

    # -- client quotas ---------------------------------------------------------------------

    async def describe_client_quotas(
        self,
        components: Sequence[ClientQuotaFilterComponent] = (),
        strict: bool = False,
        timeout: float | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of the entities that match every component (none: all entities);
        with `strict`, only entities naming no other entity type."""
        request = DescribeClientQuotasRequest(
            components=[ComponentData(c.entity_type, c.match_type, c.match) for c in components],
            strict=strict,
        )

        async def attempt() -> dict[ClientQuotaEntity, dict[str, float]]:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, DescribeClientQuotasResponse)
            _raise(response.error_code, "DescribeClientQuotas", response.error_message)
            return {
                ClientQuotaEntity({e.entity_type: e.entity_name for e in entry.entity}): {
                    v.key: v.value for v in entry.values
                }
                for entry in response.entries or ()
            }

        return await self._retrying(timeout, "DescribeClientQuotas", attempt)

    async def alter_client_quotas(
        self,
        alterations: Mapping[ClientQuotaEntity, Mapping[str, float | None]],
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Set quotas (a None value removes that quota), leaving the entity's others."""
        request = AlterClientQuotasRequest(
            entries=[
                RequestEntryData(
                    [EntityData(t, n) for t, n in entity.entries],
                    [
                        OpData(key, 0.0 if value is None else value, value is None)
                        for key, value in ops.items()
                    ],
                )
                for entity, ops in alterations.items()
            ],
            validate_only=validate_only,
        )

        async def attempt() -> None:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, AlterClientQuotasResponse)
            for entry in response.entries:
                entity = {e.entity_type: e.entity_name for e in entry.entity}
                _raise(entry.error_code, f"altering the quotas of {entity}", entry.error_message)

        await self._retrying(timeout, "AlterClientQuotas", attempt)

    # -- ACLs --------------------------------------------------------------------------------

    async def create_acls(self, acls: Sequence[AclBinding], timeout: float | None = None) -> None:
        """Create every ACL, or raise the first refusal (the others may be created)."""
        request = CreateAclsRequest(
            creations=[
                AclCreation(
                    a.resource_type,
                    a.name,
                    a.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission_type,
                )
                for a in acls
            ]
        )

        async def attempt() -> None:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, CreateAclsResponse)
            for acl, result in zip(acls, response.results, strict=True):
                _raise(result.error_code, f"creating {acl}", result.error_message)

        await self._retrying(timeout, "CreateAcls", attempt)

    async def describe_acls(
        self, selected: AclBindingFilter, timeout: float | None = None
    ) -> list[AclBinding]:
        """The ACLs the filter selects."""
        request = DescribeAclsRequest(
            resource_type_filter=selected.resource_type,
            resource_name_filter=selected.name,
            pattern_type_filter=selected.pattern_type,
            principal_filter=selected.principal,
            host_filter=selected.host,
            operation=selected.operation,
            permission_type=selected.permission_type,
        )

        async def attempt() -> list[AclBinding]:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, DescribeAclsResponse)
            _raise(response.error_code, "DescribeAcls", response.error_message)
            return [
                _acl(r.resource_type, r.resource_name, r.pattern_type, a)
                for r in response.resources
                for a in r.acls
            ]

        return await self._retrying(timeout, "DescribeAcls", attempt)

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter], timeout: float | None = None
    ) -> list[list[AclBinding]]:
        """Delete what each filter selects; per filter, the ACLs deleted."""
        request = DeleteAclsRequest(
            filters=[
                DeleteAclsFilter(
                    f.resource_type,
                    f.name,
                    f.pattern_type,
                    f.principal,
                    f.host,
                    f.operation,
                    f.permission_type,
                )
                for f in filters
            ]
        )

        async def attempt() -> list[list[AclBinding]]:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, DeleteAclsResponse)
            out = []
            for f, result in zip(filters, response.filter_results, strict=True):
                _raise(result.error_code, f"deleting ACLs matching {f}", result.error_message)
                out.append(
                    [
                        _acl(m.resource_type, m.resource_name, m.pattern_type, m)
                        for m in result.matching_acls
                    ]
                )
            return out

        return await self._retrying(timeout, "DeleteAcls", attempt)

    # -- SCRAM credentials -------------------------------------------------------------------

    async def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None, timeout: float | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iterations (None: every user that has one)."""
        request = DescribeUserScramCredentialsRequest(
            users=None if users is None else [UserName(u) for u in users]
        )

        async def attempt() -> dict[str, list[ScramCredentialInfo]]:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, DescribeUserScramCredentialsResponse)
            _raise(response.error_code, "DescribeUserScramCredentials", response.error_message)
            out = {}
            for result in response.results:
                _raise(result.error_code, f"describing user {result.user!r}", result.error_message)
                out[result.user] = [
                    ScramCredentialInfo(ScramMechanism(i.mechanism), i.iterations)
                    for i in result.credential_infos
                ]
            return out

        return await self._retrying(timeout, "DescribeUserScramCredentials", attempt)

    async def alter_user_scram_credentials(
        self,
        alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        timeout: float | None = None,
    ) -> None:
        """Set and delete users' SCRAM credentials, or raise the first refusal."""
        upsertions = []
        for a in alterations:
            if isinstance(a, UserScramCredentialUpsertion):
                salt = a.salt if a.salt is not None else os.urandom(32)
                digest = "sha256" if a.mechanism == ScramMechanism.SCRAM_SHA_256 else "sha512"
                salted = hashlib.pbkdf2_hmac(digest, a.password.encode(), salt, a.iterations)
                upsertions.append(
                    ScramCredentialUpsertion(a.user, a.mechanism, a.iterations, salt, salted)
                )
        request = AlterUserScramCredentialsRequest(
            deletions=[
                ScramCredentialDeletion(a.user, a.mechanism)
                for a in alterations
                if isinstance(a, UserScramCredentialDeletion)
            ],
            upsertions=upsertions,
        )

        async def attempt() -> None:
            response = await self.client.request(BOOTSTRAP, request)
            assert isinstance(response, AlterUserScramCredentialsResponse)
            for result in response.results:
                _raise(result.error_code, f"altering user {result.user!r}", result.error_message)

        await self._retrying(timeout, "AlterUserScramCredentials", attempt)


def _source(code: int, is_default: bool) -> ConfigSource:
    if code < 0:  # DescribeConfigs v0 only says whether it is the default
        return ConfigSource.DEFAULT_CONFIG if is_default else ConfigSource.UNKNOWN
    try:
        return ConfigSource(code)
    except ValueError:
        return ConfigSource.UNKNOWN


def _acl(
    resource_type: int, name: str, pattern_type: int, acl: AclDescription | DeleteAclsMatchingAcl
) -> AclBinding:
    return AclBinding(
        AclResourceType(resource_type),
        name,
        PatternType(pattern_type),
        acl.principal,
        acl.host,
        AclOperation(acl.operation),
        AclPermissionType(acl.permission_type),
    )


def _assignment(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    """A consumer group member's partitions (other protocol types: none we can read)."""
    if protocol_type != PROTOCOL_TYPE or not data:
        return ()
    try:
        _, assignment = decode_assignment(data)
    except DecodeError:
        return ()
    return tuple(
        TopicPartition(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions
    )


__all__ = ["AdminCore"]
