"""What the admin client takes and returns."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from gregor.client.types import OffsetAndMetadata, TopicPartition


@attrs.frozen
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    replica_assignment: Mapping[int, Sequence[int]] | None = None  # partition -> brokers
    config: Mapping[str, str] = attrs.Factory(dict)


class ResourceType(enum.IntEnum):
    """Kafka's config resource types."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


@attrs.frozen
class ConfigResource:
    type: ResourceType
    name: str  # a topic name, or a broker id as a string


class ConfigSource(enum.IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


@attrs.frozen
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


@attrs.frozen
class GroupListing:
    group_id: str
    protocol_type: str
    state: str = ""  # empty from brokers older than ListGroups v4


@attrs.frozen
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@attrs.frozen
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@attrs.frozen
class GroupOffset:
    """A group's committed offset on a partition, and how far behind the log end it is."""

    committed: OffsetAndMetadata
    log_end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.log_end_offset - self.committed.offset)


@attrs.frozen
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@attrs.frozen
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


@attrs.frozen
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@attrs.frozen
class TopicDescription:
    name: str
    internal: bool
    partitions: tuple[PartitionDescription, ...]


@attrs.frozen
class Reassignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


def _entity_entries(entity: Mapping[str, str | None]) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(entity.items()))


@attrs.frozen
class ClientQuotaEntity:
    """Who a quota is for: {"user": ..., "client-id": ...}, one or both; a None name is the
    default entity (`<default>`). Build it from a mapping: `ClientQuotaEntity({"user": "a"})`."""

    entries: tuple[tuple[str, str | None], ...] = attrs.field(converter=_entity_entries)

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)


class QuotaMatch(enum.IntEnum):
    """How a DescribeClientQuotas filter component matches an entity type's name."""

    EXACT = 0  # this name
    DEFAULT = 1  # the default entity
    ANY = 2  # any name, or the default


@attrs.frozen
class ClientQuotaFilterComponent:
    entity_type: str  # "user" or "client-id"
    match_type: QuotaMatch = QuotaMatch.EXACT
    match: str | None = None  # the name, for EXACT


# -- ACLs ------------------------------------------------------------------------------------


class AclResourceType(enum.IntEnum):
    """What an ACL is on (Kafka's org.apache.kafka.common.resource.ResourceType)."""

    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4  # its one name is "kafka-cluster"
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type
    MATCH = 2  # filters only: every pattern applying to the name (literal, "*", prefixes)
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


@attrs.frozen
class AclBinding:
    """One ACL: `principal` ("User:alice", "User:*") from `host` ("*": any) may (ALLOW) or
    may not (DENY) do `operation` on the resources the pattern names."""

    resource_type: AclResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@attrs.frozen
class AclBindingFilter:
    """Which ACLs describe_acls lists and delete_acls removes: None and ANY match anything."""

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY


# -- SCRAM credentials -----------------------------------------------------------------------


class ScramMechanism(enum.IntEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


@attrs.frozen
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@attrs.frozen
class UserScramCredentialUpsertion:
    """Set `user`'s credential for `mechanism`; the password is salted and hashed here,
    only the salted password goes to the broker (KIP-554)."""

    user: str
    mechanism: ScramMechanism
    password: str = attrs.field(repr=False)
    iterations: int = 4096
    salt: bytes | None = None  # None: 32 random bytes


@attrs.frozen
class UserScramCredentialDeletion:
    user: str
    mechanism: ScramMechanism
