"""Which source topic ACLs the mirror copies, and how it rewrites them (MM2's rules)."""

from __future__ import annotations

from gregor.client.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from gregor.mirror.acls import should_replicate_acl, target_acl
from gregor.mirror.config import FlowConfig, MirrorConfig

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, LITERAL = AclResourceType.TOPIC, PatternType.LITERAL


BASE = {"clusters": "A, B", "A.bootstrap.servers": "a:1", "B.bootstrap.servers": "b:1"}


def flow(**settings: str) -> FlowConfig:
    """A->B mirroring `orders.*` (unless told otherwise)."""
    props = {**BASE, "A->B.topics": "orders.*", "sync.topic.acls.interval.seconds": "5"}
    return MirrorConfig.from_properties({**props, **settings}).flows[0]


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    resource: AclResourceType = TOPIC,
    pattern: PatternType = LITERAL,
) -> AclBinding:
    return AclBinding(resource, name, pattern, "User:alice", "*", operation, permission)


def test_the_interval_and_mm2s_default() -> None:
    assert flow().sync_topic_acls and flow().sync_topic_acls_interval == 5
    assert MirrorConfig.from_properties(BASE).flows[0].sync_topic_acls_interval == 600


def test_literal_topic_bindings_of_mirrored_topics_but_not_allow_write() -> None:
    f = flow()
    copied = [
        acl("orders", AclOperation.READ),
        acl("orders", AclOperation.ALL),
        acl("orders", AclOperation.DESCRIBE),
        acl("orders", AclOperation.WRITE, DENY),
        acl("orders", AclOperation.ALL, DENY),
    ]
    left = [
        acl("orders", AclOperation.WRITE),  # only the mirror writes a remote topic
        acl("orders", AclOperation.READ, pattern=PatternType.PREFIXED),
        acl("payments", AclOperation.READ),  # not mirrored
        acl("B.orders", AclOperation.READ),  # came from B: would loop
        acl("__consumer_offsets", AclOperation.READ),
        acl("orders", AclOperation.READ, resource=AclResourceType.GROUP),
    ]
    assert [should_replicate_acl(f, b) for b in copied] == [True] * len(copied)
    assert [should_replicate_acl(f, b) for b in left] == [False] * len(left)
    # The wildcard would name the target's own topics too (MM2 copies it as `A.*`).
    every_topic = MirrorConfig.from_properties(BASE).flows[0]
    assert should_replicate_acl(every_topic, acl("orders", AclOperation.READ))
    assert not should_replicate_acl(every_topic, acl("*", AclOperation.READ))


def test_renamed_by_the_policy_and_allow_all_downgraded_to_read() -> None:
    f = flow()
    assert target_acl(f, acl("orders", AclOperation.ALL)) == acl("A.orders", AclOperation.READ)
    assert target_acl(f, acl("orders", AclOperation.DESCRIBE)) == acl(
        "A.orders", AclOperation.DESCRIBE
    )
    assert target_acl(f, acl("orders", AclOperation.ALL, DENY)) == acl(
        "A.orders", AclOperation.ALL, DENY
    )
    identity = flow(**{"replication.policy.class": "IdentityReplicationPolicy"})
    assert target_acl(identity, acl("orders", AclOperation.READ)) == acl(
        "orders", AclOperation.READ
    )
