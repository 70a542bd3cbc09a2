"""ACLs in ZooKeeper as Kafka's ZooKeeper-mode authorizer keeps them, so Kafka's tools and
Gregor share them on one ZooKeeper:

    /kafka-acl/<ResourceType>/<name>                    literal patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  prefixed patterns
      {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                            "operation":"Read","host":"*"}]}

and a sequential notification per change, which every broker follows:

    /kafka-acl-changes/acl_changes_N                "Topic:orders" (type:name, literal)
    /kafka-acl-extended-changes/acl_changes_N       {"version":1,"resourceType":"TOPIC",
                                                     "name":"orders","patternType":"PREFIXED"}

`ZkAclStore` reads and writes them: each resource's ACL set is replaced by compare-and-set
on the znode version, so concurrent changes through two brokers both land.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from gregor.broker.authorization import (
    AccessControlEntry,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.znodes import ZNodeDataError

LITERAL_ROOT: Final = "/kafka-acl"
EXTENDED_ROOT: Final = "/kafka-acl-extended"
LITERAL_CHANGES: Final = "/kafka-acl-changes"
EXTENDED_CHANGES: Final = "/kafka-acl-extended-changes"
CHANGE_PREFIX: Final = "acl_changes_"
CHANGE_PATHS: Final = (LITERAL_CHANGES, EXTENDED_CHANGES)
STORED_PATTERNS: Final = (PatternType.LITERAL, PatternType.PREFIXED)
STORED_TYPES: Final = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN,
    ResourceType.USER,
)

Acls = frozenset[AccessControlEntry]


def camel_name(member: ResourceType | AclOperation | PermissionType) -> str:
    """Kafka's names in znodes: TRANSACTIONAL_ID -> TransactionalId, READ -> Read."""
    return "".join(word.capitalize() for word in member.name.split("_"))


def _parse_name(enum: Any, text: object, what: str) -> Any:
    # Kafka reads these names case-insensitively, with or without underscores.
    wanted = str(text).replace("_", "").lower()
    for member in enum:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise ZNodeDataError(f"{what}: {text!r} is not a {enum.__name__}")


def pattern_root(pattern_type: PatternType) -> str:
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ROOT
    return f"{EXTENDED_ROOT}/{pattern_type.name.lower()}"


def resource_path(pattern: ResourcePattern) -> str:
    return (
        f"{pattern_root(pattern.pattern_type)}/{camel_name(pattern.resource_type)}/{pattern.name}"
    )


def encode_acls(acls: Acls) -> bytes:
    entries = [
        {
            "principal": e.principal,
            "permissionType": camel_name(e.permission),
            "operation": camel_name(e.operation),
            "host": e.host,
        }
        for e in sorted(acls, key=lambda e: (e.principal, e.host, e.operation, e.permission))
    ]
    return json.dumps({"version": 1, "acls": entries}, separators=(",", ":")).encode()


def decode_acls(path: str, data: bytes | None) -> Acls:
    if not data:
        return frozenset()
    try:
        obj = json.loads(data)
        entries = obj["acls"]
        return frozenset(
            AccessControlEntry(
                str(entry["principal"]),
                str(entry["host"]),
                _parse_name(AclOperation, entry["operation"], path),
                _parse_name(PermissionType, entry["permissionType"], path),
            )
            for entry in entries
        )
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ZNodeDataError(f"{path} does not hold Kafka's ACL JSON: {data[:200]!r}") from exc


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The notification's parent path and data for a change of `pattern`'s ACLs."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.name}:{pattern.name}".encode()
    event = {
        "version": 1,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return EXTENDED_CHANGES, json.dumps(event, separators=(",", ":")).encode()


def decode_change(parent: str, data: bytes) -> ResourcePattern:
    what = f"ACL change notification under {parent}"
    try:
        text = data.decode()
        if parent == LITERAL_CHANGES:
            type_name, sep, name = text.partition(":")
            if not sep:
                raise ValueError("expected ResourceType:name")
            return ResourcePattern(_parse_name(ResourceType, type_name, what), name)
        event = json.loads(text)
        return ResourcePattern(
            _parse_name(ResourceType, event["resourceType"], what),
            str(event["name"]),
            _parse_name(PatternType, event["patternType"], what),
        )
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ZNodeDataError(f"{what}: {data[:200]!r}: {exc}") from None


class ZkAclStore:
    """Kafka's ACL znodes through one `KafkaZkClient`."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk

    async def create_paths(self) -> None:
        """The roots, one parent per resource type, and the change paths, as Kafka's
        authorizer creates them when it starts."""
        paths = [
            f"{pattern_root(p)}/{camel_name(t)}" for p in STORED_PATTERNS for t in STORED_TYPES
        ]
        kazoo = self.zk.session.kazoo

        def create() -> None:
            for path in (*paths, *CHANGE_PATHS):
                kazoo.ensure_path(path)

        await self.zk.session.run(create)

    async def read(self, pattern: ResourcePattern) -> tuple[Acls, int]:
        """The pattern's ACLs and the znode version (-1: no znode)."""
        path = resource_path(pattern)
        found = await self.zk.get_data(path)
        if found is None:
            return frozenset(), -1
        return decode_acls(path, found[0]), int(found[1].version)

    async def read_all(self) -> dict[ResourcePattern, Acls]:
        out: dict[ResourcePattern, Acls] = {}
        for pattern_type in STORED_PATTERNS:
            for resource_type in STORED_TYPES:
                parent = f"{pattern_root(pattern_type)}/{camel_name(resource_type)}"
                for name in await self.zk.get_children(parent):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    acls, _version = await self.read(pattern)
                    if acls:
                        out[pattern] = acls
        return out

    async def write(self, pattern: ResourcePattern, acls: Acls, version: int) -> bool:
        """Replace the pattern's ACLs if the znode is still at `version` (-1: absent); an
        empty set deletes the znode. False when someone else changed it first."""
        path = resource_path(pattern)
        kazoo = self.zk.session.kazoo

        def write() -> bool:
            try:
                if not acls:
                    if version >= 0:
                        kazoo.delete(path, version=version)
                elif version < 0:
                    kazoo.create(path, encode_acls(acls), makepath=True)
                else:
                    kazoo.set(path, encode_acls(acls), version=version)
            except (BadVersionError, NodeExistsError):
                return False
            except NoNodeError:
                return not acls and version < 0
            return True

        return await self.zk.session.run(write)

    async def notify(self, pattern: ResourcePattern) -> None:
        parent, data = encode_change(pattern)
        kazoo = self.zk.session.kazoo
        await self.zk.session.run(
            lambda: kazoo.create(f"{parent}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)
        )
