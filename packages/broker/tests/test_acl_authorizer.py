"""The ACL authorizer's decisions, ACL filters, and the ZooKeeper format of ACLs, without a
ZooKeeper (the cluster tests in tests/security cover the store and its notifications)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from gregor.broker.apis import load_handlers, registrations
from gregor.broker.authorization import (
    API_CHECKS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from gregor.broker.security.acl_authorizer import AclAuthorizer, parse_super_users
from gregor.broker.zk import acls as zk_acls
from gregor.broker.zk.znodes import ZNodeDataError

Op, Rt, Pt = AclOperation, ResourceType, PatternType
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def authorizer(
    acls: dict[ResourcePattern, list[AccessControlEntry]],
    allow_if_no_acl: bool = False,
    super_users: str = "User:admin;User:broker",
) -> AclAuthorizer:
    # The decisions only read the cache: no ZooKeeper is needed to fill it.
    found = AclAuthorizer(cast(Any, None), parse_super_users(super_users), allow_if_no_acl)
    for pattern, entries in acls.items():
        found._set(pattern, frozenset(entries))
    return found


def entry(
    operation: AclOperation,
    permission: PermissionType = ALLOW,
    principal: str = ALICE,
    host: str = "*",
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


def topic(name: str, pattern: PatternType = Pt.LITERAL) -> ResourcePattern:
    return ResourcePattern(Rt.TOPIC, name, pattern)


def test_super_users_and_resources_without_acls() -> None:
    closed = authorizer({})
    assert closed.authorize("User:admin", HOST, Op.ALTER, Rt.CLUSTER, "kafka-cluster")
    assert not closed.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")
    opened = authorizer({topic("orders"): [entry(Op.READ, principal=BOB)]}, allow_if_no_acl=True)
    assert opened.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "payments")  # no ACL applies
    assert not opened.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")  # one applies


def test_literal_wildcard_and_prefixed_patterns() -> None:
    found = authorizer(
        {
            topic("orders"): [entry(Op.READ)],
            topic("*"): [entry(Op.DESCRIBE, principal=BOB)],
            topic("logs-", Pt.PREFIXED): [entry(Op.WRITE)],
        }
    )
    assert found.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")
    assert not found.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "orders")
    assert found.authorize(BOB, HOST, Op.DESCRIBE, Rt.TOPIC, "anything")
    assert found.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "logs-eu")
    assert not found.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "logs")
    assert not found.authorize(ALICE, HOST, Op.READ, Rt.GROUP, "orders")  # another type


def test_deny_beats_allow_and_implied_operations() -> None:
    found = authorizer(
        {
            topic("orders"): [entry(Op.ALL), entry(Op.WRITE, DENY)],
            topic("audit"): [entry(Op.ALTER_CONFIGS), entry(Op.WRITE)],
            topic("o", Pt.PREFIXED): [entry(Op.READ, DENY, principal="User:*")],
        }
    )
    assert not found.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "orders")
    assert not found.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")  # User:* denied
    assert found.authorize(ALICE, HOST, Op.DELETE, Rt.TOPIC, "orders")  # ALL allows
    assert found.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "audit")  # WRITE implies it
    assert found.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, Rt.TOPIC, "audit")
    assert not found.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "audit")


def test_hosts_and_principals() -> None:
    found = authorizer({topic("orders"): [entry(Op.READ, host=HOST)]})
    assert found.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")
    assert not found.authorize(ALICE, "10.0.0.2", Op.READ, Rt.TOPIC, "orders")
    assert not found.authorize(BOB, HOST, Op.READ, Rt.TOPIC, "orders")


def test_authorize_any_for_idempotent_producers() -> None:
    write = authorizer({topic("orders"): [entry(Op.WRITE)]})
    assert write.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    assert not write.authorize_any(BOB, HOST, Op.WRITE, Rt.TOPIC)
    denied = authorizer(
        {
            topic("orders"): [entry(Op.WRITE)],
            topic("ord", Pt.PREFIXED): [entry(Op.WRITE, DENY)],
        }
    )
    assert not denied.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    assert authorizer({}, allow_if_no_acl=True).authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)


def test_filters() -> None:
    literal = AclBinding(topic("orders"), entry(Op.READ))
    wildcard = AclBinding(topic("*"), entry(Op.READ))
    prefixed = AclBinding(topic("ord", Pt.PREFIXED), entry(Op.WRITE, DENY))

    def selected(**kwargs: Any) -> list[AclBinding]:
        fields: dict[str, Any] = {
            "resource_type": Rt.ANY,
            "name": None,
            "pattern_type": Pt.ANY,
            "principal": None,
            "host": None,
            "operation": Op.ANY,
            "permission": PermissionType.ANY,
        }
        f = AclBindingFilter(**(fields | kwargs))
        return [b for b in (literal, wildcard, prefixed) if f.matches(b)]

    assert selected() == [literal, wildcard, prefixed]
    assert selected(name="orders", pattern_type=Pt.MATCH) == [literal, wildcard, prefixed]
    assert selected(name="orders") == [literal]
    assert selected(name="ord", pattern_type=Pt.LITERAL) == []
    assert selected(pattern_type=Pt.PREFIXED) == [prefixed]
    assert selected(permission=DENY) == [prefixed]
    assert selected(resource_type=Rt.GROUP) == []


def test_znode_format_is_kafkas() -> None:
    pattern = ResourcePattern(Rt.TRANSACTIONAL_ID, "tx-", Pt.PREFIXED)
    assert zk_acls.resource_path(pattern) == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    assert zk_acls.resource_path(topic("orders")) == "/kafka-acl/Topic/orders"
    acls = frozenset({entry(Op.IDEMPOTENT_WRITE), entry(Op.READ, DENY, host=HOST)})
    encoded = zk_acls.encode_acls(acls)
    assert json.loads(encoded) == {
        "version": 1,
        "acls": [
            {
                "principal": ALICE,
                "permissionType": "Allow",
                "operation": "IdempotentWrite",
                "host": "*",
            },
            {"principal": ALICE, "permissionType": "Deny", "operation": "Read", "host": HOST},
        ],
    }
    assert zk_acls.decode_acls("/x", encoded) == acls
    with pytest.raises(ZNodeDataError):
        zk_acls.decode_acls("/x", b'{"version":1,"acls":[{"principal":"User:a"}]}')


def test_change_notifications() -> None:
    parent, data = zk_acls.encode_change(topic("orders"))
    assert (parent, data) == ("/kafka-acl-changes", b"TOPIC:orders")
    assert zk_acls.decode_change(parent, data) == topic("orders")
    assert zk_acls.decode_change(parent, b"Topic:a:b") == topic("a:b")  # older Kafka's case
    parent, data = zk_acls.encode_change(topic("logs-", Pt.PREFIXED))
    assert parent == "/kafka-acl-extended-changes"
    assert json.loads(data) == {
        "version": 1,
        "resourceType": "TOPIC",
        "name": "logs-",
        "patternType": "PREFIXED",
    }
    assert zk_acls.decode_change(parent, data) == topic("logs-", Pt.PREFIXED)


def test_every_api_has_its_checks_written_down() -> None:
    load_handlers()
    missing = [r.name for r in registrations() if r.api_key not in API_CHECKS]
    assert missing == []
