"""What a request may do. There is no authorizer yet: every principal may do everything, and
the "authorized operations" bitfields list every operation a resource type supports, as a
Kafka broker without an authorizer reports them."""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class AclOperation(IntEnum):
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
# The value of an authorized-operations field that was not asked for.
NOT_REQUESTED: Final = -(2**31)


def operations_bitfield(operations: tuple[AclOperation, ...]) -> int:
    bits = 0
    for operation in operations:
        bits |= 1 << operation
    return bits


TOPIC_AUTHORIZED: Final = operations_bitfield(TOPIC_OPERATIONS)
CLUSTER_AUTHORIZED: Final = operations_bitfield(CLUSTER_OPERATIONS)
