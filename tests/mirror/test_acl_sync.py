"""Topic ACL sync between two secured clusters (SASL, Kafka's AclAuthorizer, no access
without an ACL): gregor-mirror signs in to both as User:broker with MM2's per-cluster
settings (`A.security.protocol`, `A.sasl.jaas.config`, ...).

ACLs added on A while the mirror runs appear on B, rewritten as MM2 rewrites them: for the
remote topic `A.<topic>`, literal topic bindings only, ALLOW WRITE left out and ALLOW ALL
downgraded to READ, DENY as it is. Then confluent-kafka as alice (granted on A) reads the
mirrored topic on B, and may not write it; bob (no grant) gets TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError as CkError
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import AdminClient as CkAdmin

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, wait_for, wait_for_topic
from gregor_testing.mirror import MirrorProcess
from gregor_testing.security import (
    BROKER_USER,
    MODE,
    USERS,
    acl_cluster_fixture,
    ck_conf,
    ck_consume,
    ck_produce,
    jaas_plain,
    pki_fixture,
    settled,
)

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
INTERVAL = 2  # sync.topic.acls.interval.seconds

pki = pki_fixture("module")
secured_a = acl_cluster_fixture("secured_a", "module")
secured_b = acl_cluster_fixture("secured_b", "module")


def read_as(cluster: LocalCluster, user: str, topic: str, wanted: int) -> list[bytes] | int:
    """What `user` reads of the topic from the start (sorted: the partitions interleave),
    or the first error code."""
    read = ck_consume(cluster, topic, f"readers-{uuid.uuid4().hex[:8]}", wanted, user)
    return read if isinstance(read, int) else sorted(read)


def topic_acls(admin: CkAdmin) -> set[tuple[Any, ...]]:
    """Every topic ACL of the cluster as (name, pattern, principal, operation, permission)."""
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=30)
    return {
        (b.name, b.resource_pattern_type, b.principal, b.operation, b.permission_type)
        for b in found
    }


def create_acls(cluster: LocalCluster, admin: CkAdmin, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        assert future.result(timeout=30) is None
    settled(cluster)


def acl(
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    resource: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = LITERAL,
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def test_topic_acls_follow_rewritten_and_are_enforced_for_real_clients(
    secured_a: LocalCluster, secured_b: LocalCluster, start_mirror: Callable[..., MirrorProcess]
) -> None:
    a, b = secured_a, secured_b
    admin_a, admin_b = CkAdmin(ck_conf(a, "broker")), CkAdmin(ck_conf(b, "broker"))
    suffix = uuid.uuid4().hex[:6]
    orders, ledger, other = f"orders-{suffix}", f"ledger-{suffix}", f"other-{suffix}"
    for topic in (orders, ledger, other):
        create_topic(a, topic, 2, 2)
    sent = [b"order-%d" % i for i in range(40)]
    producer = Producer(ck_conf(a, "broker"))
    for value in sent:
        producer.produce(orders, value)
    assert producer.flush(30) == 0
    # Consumers on B need READ on their group too; group ACLs are not mirrored.
    create_acls(
        b,
        admin_b,
        [
            acl(
                "readers-",
                f"User:{user}",
                AclOperation.READ,
                resource=ResourceType.GROUP,
                pattern=PREFIXED,
            )
            for user in USERS
        ],
    )

    login = {
        f"{alias}.{key}": value
        for alias, cluster in (("A", a), ("B", b))
        for key, value in {
            "bootstrap.servers": cluster.bootstrap_servers_of(MODE),
            "security.protocol": MODE,
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas_plain({}, BROKER_USER),
        }.items()
    }
    start_mirror(
        {
            "clusters": "A, B",
            **login,
            "A->B.enabled": "true",
            "A->B.topics": f"{orders}, {ledger}",
            "replication.factor": "2",
            "refresh.topics.interval.seconds": "2",
            "sync.topic.acls.enabled": "true",
            "sync.topic.acls.interval.seconds": str(INTERVAL),
        },
        ["B"],
    )
    remote = f"A.{orders}"
    wait_for_topic(b, remote, 2, timeout=60, full_isr=False)
    # The copy is there (read by the super user); nobody has an ACL for it yet.
    assert read_as(b, "broker", remote, len(sent)) == sorted(sent)
    assert read_as(b, "alice", remote, len(sent)) == CkError.TOPIC_AUTHORIZATION_FAILED

    added = time.monotonic()
    create_acls(
        a,
        admin_a,
        [
            acl(orders, "User:alice", AclOperation.READ),
            acl(orders, "User:alice", AclOperation.WRITE),  # not copied: the mirror writes
            acl(ledger, "User:alice", AclOperation.ALL),  # copied as READ
            acl(orders, "User:mallory", AclOperation.WRITE, DENY),  # copied as it is
            acl("orders-", "User:alice", AclOperation.READ, pattern=PREFIXED),  # not copied
            acl(other, "User:alice", AclOperation.READ),  # not mirrored
            acl("*", "User:bob", AclOperation.DESCRIBE),  # the wildcard: not copied
            acl(orders, "User:alice", AclOperation.READ, resource=ResourceType.GROUP),
        ],
    )
    expected = {
        (remote, LITERAL, "User:alice", AclOperation.READ, ALLOW),
        (f"A.{ledger}", LITERAL, "User:alice", AclOperation.READ, ALLOW),
        (remote, LITERAL, "User:mallory", AclOperation.WRITE, DENY),
    }
    wait_for(lambda: topic_acls(admin_b) >= expected, 60, "the source's ACLs on B")
    print(f"ACLs on B {time.monotonic() - added:.1f}s after they were added on A")
    settled(b)
    assert topic_acls(admin_b) == expected  # nothing else came

    # alice reads the mirrored topic on B, and may not write it; bob may not read it.
    assert read_as(b, "alice", remote, len(sent)) == sorted(sent)
    assert ck_produce(b, remote, 1, user="alice") == [CkError.TOPIC_AUTHORIZATION_FAILED]
    assert read_as(b, "bob", remote, len(sent)) == CkError.TOPIC_AUTHORIZATION_FAILED
