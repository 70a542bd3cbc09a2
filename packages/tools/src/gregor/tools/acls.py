"""`gregor acls`: list, add and remove ACLs (kafka-acls.sh), with its options and meaning.

A command names resources (--topic, --group, --transactional-id, --cluster) under one
--resource-pattern-type, and ACL entries as principals x operations x hosts, allowed or
denied. --producer and --consumer stand for the operations those clients need. --remove
without a principal removes every ACL of the resources, as kafka-acls does.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from gregor.client import AdminClient
from gregor.client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from gregor.tools.common import Output, ToolError, add_connection, admin

Op = AclOperation
CLUSTER = "kafka-cluster"  # the one name of the cluster resource
# What each resource type's ACLs may name (Kafka's AclEntry.supportedOperations), and ALL.
SUPPORTED = {
    AclResourceType.TOPIC: {
        Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
        Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL,
    },
    AclResourceType.GROUP: {Op.READ, Op.DESCRIBE, Op.DELETE, Op.ALL},
    AclResourceType.CLUSTER: {
        Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.ALL,
    },
    AclResourceType.TRANSACTIONAL_ID: {Op.DESCRIBE, Op.WRITE, Op.ALL},
}  # fmt: skip
PRODUCER_TOPIC = (Op.WRITE, Op.DESCRIBE, Op.CREATE)
PRODUCER_TRANSACTIONAL_ID = (Op.WRITE, Op.DESCRIBE)
CONSUMER_TOPIC = (Op.READ, Op.DESCRIBE)
CONSUMER_GROUP = (Op.READ,)

# A resource pattern (or, listing and removing, a pattern filter): type, name, pattern type.
Resource = tuple[AclResourceType, str, PatternType]
# An ACL entry: principal, host, operation, permission.
Entry = tuple[str, str, AclOperation, AclPermissionType]


def operation(text: str) -> AclOperation:
    """Kafka's names (`Read`, `ClusterAction`, `IdempotentWrite`) or ours (`CLUSTER_ACTION`)."""
    name = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()).upper().replace("-", "_")
    found = AclOperation.__members__.get(name)
    if found is None or found in (Op.ANY, Op.UNKNOWN):
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}")
    return found


def principal(text: str) -> str:
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise argparse.ArgumentTypeError(
            f"expected a principal as Type:name (e.g. User:alice), got {text!r}"
        )
    return f"{kind}:{name}"


def pattern_type(text: str) -> PatternType:
    found = PatternType.__members__.get(text.strip().upper())
    if found is None or found is PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"{text!r}: expected literal, prefixed, match or any")
    return found


def register(commands: argparse._SubParsersAction[Any]) -> None:
    acls = commands.add_parser("acls", help="list, add and remove ACLs")
    add_connection(acls)
    action = acls.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="the ACLs of the resources (or all)")
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    acls.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    acls.add_argument("--group", action="append", default=[], metavar="GROUP")
    acls.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    acls.add_argument("--cluster", action="store_true", help="the cluster resource")
    acls.add_argument(
        "--resource-pattern-type",
        type=pattern_type,
        default=PatternType.LITERAL,
        metavar="literal|prefixed|match|any",
        help="how names match (default literal; match and any filter --list and --remove)",
    )
    for kind in ("allow", "deny"):
        acls.add_argument(
            f"--{kind}-principal", action="append", default=[], type=principal, metavar="TYPE:NAME"
        )
        acls.add_argument(
            f"--{kind}-host", action="append", default=[], metavar="HOST", help="default: *"
        )
    acls.add_argument(
        "--operation", action="append", type=operation, metavar="OP", help="default: All"
    )
    acls.add_argument("--producer", action="store_true", help="Write, Describe, Create on topics")
    acls.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite too"
    )
    acls.add_argument(
        "--consumer", action="store_true", help="Read, Describe on topics; Read on groups"
    )
    acls.add_argument(
        "--principal", action="append", default=[], type=principal, help="--list: only theirs"
    )
    acls.add_argument("--force", action="store_true", help="--remove without asking")
    acls.set_defaults(run=run, parser=acls)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    out = Output(args)
    with admin(args) as client:
        if args.list:
            found = listed(client, resources(args), args.principal)
            if out.json:
                out.emit(as_json(found))
            else:
                show(out, found, "Current ACLs")
            return 0
        wanted = acls_by_resource(args)
        if args.add:
            added = [
                AclBinding(kind, name, pattern, who, host, operation, permission)
                for (kind, name, pattern), entries in wanted.items()
                for who, host, operation, permission in entries
            ]
            client.create_acls(added)
            change = ("added", added)
        else:
            filters = [
                AclBindingFilter(kind, name, pattern, *entry)
                for (kind, name, pattern), entries in wanted.items()
                for entry in entries
            ] + [AclBindingFilter(*r) for r, entries in wanted.items() if not entries]
            if not (args.force or confirmed(filters)):
                raise ToolError("not confirmed: nothing removed")
            change = ("removed", unique(b for done in client.delete_acls(filters) for b in done))
        current = listed(client, list(wanted), [])
    if out.json:
        out.emit({change[0]: as_json(change[1]), "current": as_json(current)})
    else:
        show(out, change[1], change[0].capitalize())
        show(out, current, "Current ACLs")
    return 0


def check_args(args: argparse.Namespace) -> None:
    """Kafka's AclCommand checks, as a bad argument (exit status 2)."""
    fail = args.parser.error
    entries = args.allow_principal or args.deny_principal or args.allow_host or args.deny_host
    if args.list and (args.producer or args.consumer or entries):
        fail("--list takes no --producer, --consumer, or --allow/--deny options")
    if (args.producer or args.consumer) and (
        args.operation or args.deny_principal or args.deny_host
    ):
        fail("--producer and --consumer take no --operation, --deny-principal or --deny-host")
    if args.principal and not args.list:
        fail("--principal is only for --list")
    if args.producer and not args.topic:
        fail("with --producer you must give a --topic")
    if args.idempotent and not args.producer:
        fail("--idempotent is only for --producer")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        fail("with --consumer give a --topic and a --group (no --cluster, --transactional-id)")
    if args.add and args.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        kind = args.resource_pattern_type.name.lower()
        fail(f"--resource-pattern-type {kind} is not valid when adding ACLs")
    if not args.list and not resources(args):
        fail("give at least one resource: --topic, --group, --transactional-id or --cluster")


def resources(args: argparse.Namespace) -> list[Resource]:
    pattern: PatternType = args.resource_pattern_type
    # The cluster has one name: a prefix of it means nothing, a filter may still match it.
    cluster = PatternType.LITERAL if pattern is PatternType.PREFIXED else pattern
    return list(
        dict.fromkeys(
            [
                *((AclResourceType.TOPIC, t, pattern) for t in args.topic),
                *((AclResourceType.CLUSTER, CLUSTER, cluster) for _ in range(args.cluster)),
                *((AclResourceType.GROUP, g, pattern) for g in args.group),
                *((AclResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id),
            ]
        )
    )


def acls_by_resource(args: argparse.Namespace) -> dict[Resource, list[Entry]]:
    """The entries to add or remove on each resource (none: --remove every ACL of it)."""
    every = resources(args)
    wanted: dict[Resource, list[Entry]] = {}

    def give(kind: AclResourceType, operations: Sequence[AclOperation]) -> None:
        for resource in every:
            if resource[0] is kind:
                wanted.setdefault(resource, []).extend(entries(args, operations))

    if args.producer:
        give(AclResourceType.TOPIC, PRODUCER_TOPIC)
        give(AclResourceType.TRANSACTIONAL_ID, PRODUCER_TRANSACTIONAL_ID)
        if args.idempotent:
            cluster = (AclResourceType.CLUSTER, CLUSTER, PatternType.LITERAL)
            wanted[cluster] = entries(args, [Op.IDEMPOTENT_WRITE])
    if args.consumer:
        give(AclResourceType.TOPIC, CONSUMER_TOPIC)
        give(AclResourceType.GROUP, CONSUMER_GROUP)
    if not (args.producer or args.consumer):
        wanted = {r: entries(args, args.operation or [Op.ALL]) for r in every}
    for (kind, _, _), acl_entries in wanted.items():
        refused = {e[2] for e in acl_entries} - SUPPORTED[kind]
        if refused:
            supported = ", ".join(sorted(o.name for o in SUPPORTED[kind]))
            args.parser.error(f"{kind.name} ACLs only take the operations {supported}")
    if args.add and not all(wanted.values()):
        args.parser.error("adding ACLs needs --allow-principal or --deny-principal")
    return {r: list(dict.fromkeys(e)) for r, e in wanted.items()}


def entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> list[Entry]:
    """principals x operations x hosts, allowed then denied (hosts default to `*`)."""
    out: list[Entry] = []
    operations = list(operations)
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        out += [
            (p, h.strip(), o, permission)
            for p in principals
            for o in operations
            for h in hosts or ["*"]
        ]
    return out


def listed(
    client: AdminClient, wanted: Sequence[Resource], principals: Sequence[str | None]
) -> list[AclBinding]:
    """The ACLs each resource filter selects (no resource: every ACL), of these principals
    (none: anyone's)."""
    filters = [
        AclBindingFilter(kind, name, pattern, principal=p)
        for kind, name, pattern in wanted
        for p in principals or [None]
    ] or [AclBindingFilter(principal=p) for p in principals or [None]]
    return unique(b for f in filters for b in client.describe_acls(f))


def unique(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    return sorted(
        set(bindings),
        key=lambda b: (
            b.resource_type,
            b.name,
            b.pattern_type,
            b.principal,
            b.operation,
            b.permission_type,
            b.host,
        ),
    )


def confirmed(filters: Sequence[AclBindingFilter]) -> bool:
    """Ask on the terminal, as kafka-acls does without --force."""
    print("Are you sure you want to remove the ACLs matching:", file=sys.stderr)
    for f in filters:
        print(f"  {describe_filter(f)}", file=sys.stderr)
    print("(y/n) ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


def describe_filter(f: AclBindingFilter) -> str:
    who = "anyone" if f.principal is None else f"{f.principal} from {f.host}"
    what = "any operation" if f.operation is Op.ANY else f"{f.operation.name}"
    how = "" if f.permission_type is AclPermissionType.ANY else f" ({f.permission_type.name})"
    return f"{f.resource_type.name} {f.name} ({f.pattern_type.name}): {what} by {who}{how}"


def as_json(bindings: Sequence[AclBinding]) -> list[dict[str, str]]:
    return [
        {
            "resource_type": b.resource_type.name,
            "name": b.name,
            "pattern_type": b.pattern_type.name,
            "principal": b.principal,
            "host": b.host,
            "operation": b.operation.name,
            "permission_type": b.permission_type.name,
        }
        for b in bindings
    ]


def show(out: Output, bindings: Sequence[AclBinding], title: str) -> None:
    columns = ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    out.table(columns, [list(acl.values()) for acl in as_json(bindings)], title=title)
