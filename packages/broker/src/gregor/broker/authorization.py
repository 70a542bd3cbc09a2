"""What a request may do: Kafka's ACL model (resources, patterns, operations, permissions),
the `Authorizer` every handler asks, and the table of which API needs which operation on
which resource.

Without `authorizer.class.name` every principal may do everything (`ALLOW_ALL`), and the
"authorized operations" bitfields list every operation a resource type supports, as a Kafka
broker without an authorizer reports them. With Kafka's ZooKeeper authorizer configured, the
ACLs decide (`gregor.broker.security.acl_authorizer`). The enums are gregor-client's (the
admin client's ACL types), under Kafka's names.
"""

from __future__ import annotations

from typing import Final, Protocol

import attrs

from gregor.client.admin.types import AclOperation as AclOperation
from gregor.client.admin.types import AclPermissionType, AclResourceType
from gregor.client.admin.types import PatternType as PatternType
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

ResourceType = AclResourceType
PermissionType = AclPermissionType

CLUSTER_NAME: Final = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD: Final = "*"  # a literal resource name, a host or a principal name matching all
WILDCARD_PRINCIPAL: Final = "User:*"

# An ALLOW of one of these operations also allows the key (Kafka's implied operations).
IMPLIED_BY: Final = {
    AclOperation.DESCRIBE: (
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    ),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}


@attrs.frozen
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether an ACL on this pattern applies to the resource `name`."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)


@attrs.frozen
class AccessControlEntry:
    principal: str  # "User:alice", or "User:*"
    host: str  # an IP address, or "*"
    operation: AclOperation
    permission: PermissionType

    def applies(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (host, WILDCARD)


@attrs.frozen
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@attrs.frozen
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select; None (or ANY) matches anything."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            # The filter names a resource: patterns that would apply to it.
            return self.name is None or pattern.matches(pattern.resource_type, self.name)
        if self.pattern_type not in (PatternType.ANY, pattern.pattern_type):
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission in (PermissionType.ANY, entry.permission)
        )

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


class Authorizer(Protocol):
    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether `principal` connected from `host` may do `operation` on the resource."""
        ...

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type allows `operation` (Kafka's
        authorizeByResourceType, which an idempotent producer with WRITE on a topic uses)."""
        ...


class AllowAll:
    """No authorizer configured: everything is allowed."""

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        return True

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return True


ALLOW_ALL: Final = AllowAll()


# -- which API needs which operation on which resource ----------------------------------
#
# The source is Kafka's KafkaApis (the ZooKeeper-mode broker, 3.x): each handler's
# authorize() calls. One request checks its resources one by one, and each resource refused
# gets the error named here (whole-request checks answer the error in every entry).


@attrs.frozen
class Check:
    operation: AclOperation
    resource_type: ResourceType
    error: ErrorCode
    when: str = ""  # the condition, when the check is not made on every request


_TOPIC = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP = ErrorCode.GROUP_AUTHORIZATION_FAILED
_CLUSTER = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_TXN = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
Op, Rt = AclOperation, ResourceType
_INTER_BROKER = (Check(Op.CLUSTER_ACTION, Rt.CLUSTER, _CLUSTER),)

API_CHECKS: Final[dict[int, tuple[Check, ...]]] = {
    ApiKey.PRODUCE: (
        Check(Op.WRITE, Rt.TRANSACTIONAL_ID, _TXN, "transactional"),
        Check(Op.WRITE, Rt.TOPIC, _TOPIC),
    ),
    ApiKey.FETCH: (
        Check(Op.CLUSTER_ACTION, Rt.CLUSTER, _TOPIC, "from a follower"),
        Check(Op.READ, Rt.TOPIC, _TOPIC, "from a consumer"),
    ),
    ApiKey.LIST_OFFSETS: (Check(Op.DESCRIBE, Rt.TOPIC, _TOPIC),),
    ApiKey.METADATA: (
        Check(Op.DESCRIBE, Rt.TOPIC, _TOPIC, "listed topics; all-topics requests omit them"),
        Check(Op.CREATE, Rt.CLUSTER, _TOPIC, "auto-creation, else CREATE on the topic"),
    ),
    ApiKey.LEADER_AND_ISR: _INTER_BROKER,
    ApiKey.STOP_REPLICA: _INTER_BROKER,
    ApiKey.UPDATE_METADATA: _INTER_BROKER,
    ApiKey.CONTROLLED_SHUTDOWN: _INTER_BROKER,
    ApiKey.WRITE_TXN_MARKERS: _INTER_BROKER,
    ApiKey.OFFSET_COMMIT: (Check(Op.READ, Rt.GROUP, _GROUP), Check(Op.READ, Rt.TOPIC, _TOPIC)),
    ApiKey.OFFSET_FETCH: (
        Check(Op.DESCRIBE, Rt.GROUP, _GROUP),
        Check(Op.DESCRIBE, Rt.TOPIC, _TOPIC, "listed topics; all-topics requests omit them"),
    ),
    ApiKey.FIND_COORDINATOR: (
        Check(Op.DESCRIBE, Rt.GROUP, _GROUP, "group coordinator"),
        Check(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, _TXN, "transaction coordinator"),
    ),
    ApiKey.JOIN_GROUP: (Check(Op.READ, Rt.GROUP, _GROUP),),
    ApiKey.HEARTBEAT: (Check(Op.READ, Rt.GROUP, _GROUP),),
    ApiKey.LEAVE_GROUP: (Check(Op.READ, Rt.GROUP, _GROUP),),
    ApiKey.SYNC_GROUP: (Check(Op.READ, Rt.GROUP, _GROUP),),
    ApiKey.DESCRIBE_GROUPS: (Check(Op.DESCRIBE, Rt.GROUP, _GROUP),),
    ApiKey.LIST_GROUPS: (
        Check(Op.DESCRIBE, Rt.CLUSTER, ErrorCode.NONE, "else only groups with DESCRIBE"),
    ),
    ApiKey.SASL_HANDSHAKE: (),
    ApiKey.API_VERSIONS: (),
    ApiKey.CREATE_TOPICS: (Check(Op.CREATE, Rt.CLUSTER, _TOPIC, "else CREATE on the topic"),),
    ApiKey.DELETE_TOPICS: (Check(Op.DELETE, Rt.TOPIC, _TOPIC),),
    ApiKey.DELETE_RECORDS: (Check(Op.DELETE, Rt.TOPIC, _TOPIC),),
    ApiKey.INIT_PRODUCER_ID: (
        Check(Op.WRITE, Rt.TRANSACTIONAL_ID, _TXN, "transactional"),
        Check(Op.IDEMPOTENT_WRITE, Rt.CLUSTER, _CLUSTER, "idempotent, else WRITE on a topic"),
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        Check(Op.DESCRIBE, Rt.TOPIC, _TOPIC, "unless CLUSTER_ACTION on the cluster"),
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        Check(Op.WRITE, Rt.TRANSACTIONAL_ID, _TXN),
        Check(Op.WRITE, Rt.TOPIC, _TOPIC),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        Check(Op.WRITE, Rt.TRANSACTIONAL_ID, _TXN),
        Check(Op.READ, Rt.GROUP, _GROUP),
    ),
    ApiKey.END_TXN: (Check(Op.WRITE, Rt.TRANSACTIONAL_ID, _TXN),),
    ApiKey.TXN_OFFSET_COMMIT: (
        Check(Op.WRITE, Rt.TRANSACTIONAL_ID, _TXN),
        Check(Op.READ, Rt.GROUP, _GROUP),
        Check(Op.READ, Rt.TOPIC, _TOPIC),
    ),
    ApiKey.DESCRIBE_ACLS: (Check(Op.DESCRIBE, Rt.CLUSTER, _CLUSTER),),
    ApiKey.CREATE_ACLS: (Check(Op.ALTER, Rt.CLUSTER, _CLUSTER),),
    ApiKey.DELETE_ACLS: (Check(Op.ALTER, Rt.CLUSTER, _CLUSTER),),
    ApiKey.DESCRIBE_CONFIGS: (
        Check(Op.DESCRIBE_CONFIGS, Rt.CLUSTER, _CLUSTER, "broker resources"),
        Check(Op.DESCRIBE_CONFIGS, Rt.TOPIC, _TOPIC, "topic resources"),
    ),
    ApiKey.ALTER_CONFIGS: (
        Check(Op.ALTER_CONFIGS, Rt.CLUSTER, _CLUSTER, "broker resources"),
        Check(Op.ALTER_CONFIGS, Rt.TOPIC, _TOPIC, "topic resources"),
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        Check(Op.ALTER_CONFIGS, Rt.CLUSTER, _CLUSTER, "broker resources"),
        Check(Op.ALTER_CONFIGS, Rt.TOPIC, _TOPIC, "topic resources"),
    ),
    ApiKey.SASL_AUTHENTICATE: (),
    ApiKey.CREATE_PARTITIONS: (Check(Op.ALTER, Rt.TOPIC, _TOPIC),),
    ApiKey.DELETE_GROUPS: (Check(Op.DELETE, Rt.GROUP, _GROUP),),
    ApiKey.ELECT_LEADERS: (Check(Op.ALTER, Rt.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (Check(Op.ALTER, Rt.CLUSTER, _CLUSTER),),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (Check(Op.DESCRIBE, Rt.CLUSTER, _CLUSTER),),
    ApiKey.OFFSET_DELETE: (Check(Op.DELETE, Rt.GROUP, _GROUP), Check(Op.READ, Rt.TOPIC, _TOPIC)),
    ApiKey.DESCRIBE_CLUSTER: (),  # only its authorized-operations field depends on ACLs
    ApiKey.DESCRIBE_PRODUCERS: (Check(Op.READ, Rt.TOPIC, _TOPIC),),
    ApiKey.DESCRIBE_TRANSACTIONS: (Check(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, _TXN),),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (Check(Op.READ, Rt.GROUP, _GROUP),),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (Check(Op.DESCRIBE, Rt.GROUP, _GROUP),),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (Check(Op.DESCRIBE_CONFIGS, Rt.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_CLIENT_QUOTAS: (Check(Op.ALTER_CONFIGS, Rt.CLUSTER, _CLUSTER),),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (Check(Op.DESCRIBE, Rt.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (Check(Op.ALTER, Rt.CLUSTER, _CLUSTER),),
    ApiKey.LIST_TRANSACTIONS: (
        Check(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, ErrorCode.NONE, "only ids with DESCRIBE"),
    ),
}
del Op, Rt


# -- authorized-operations bitfields (Metadata, DescribeGroups, DescribeCluster) ------------

TOPIC_OPERATIONS: Final = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
)
CLUSTER_OPERATIONS: Final = (
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
)
GROUP_OPERATIONS: Final = (
    AclOperation.READ,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
)
OPERATIONS: Final = {
    ResourceType.TOPIC: TOPIC_OPERATIONS,
    ResourceType.CLUSTER: CLUSTER_OPERATIONS,
    ResourceType.GROUP: GROUP_OPERATIONS,
}
# The value of an authorized-operations field that was not asked for.
NOT_REQUESTED: Final = -(2**31)


def operations_bitfield(operations: tuple[AclOperation, ...]) -> int:
    bits = 0
    for operation in operations:
        bits |= 1 << operation
    return bits


TOPIC_AUTHORIZED: Final = operations_bitfield(TOPIC_OPERATIONS)
CLUSTER_AUTHORIZED: Final = operations_bitfield(CLUSTER_OPERATIONS)
