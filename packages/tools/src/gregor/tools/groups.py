"""`gregor groups`: list, describe (members, assignment, lag), reset-offsets and delete
consumer groups (kafka-consumer-groups.sh)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gregor.client import AdminClient, TopicPartition
from gregor.client.admin.types import GroupDescription
from gregor.tools.common import (
    Output,
    ToolError,
    add_connection,
    admin,
    names,
    topic_partitions,
)

# States in which a group has no members whose commits would overwrite a reset.
INACTIVE = {"Empty", "Dead"}


def register(commands: argparse._SubParsersAction[Any]) -> None:
    groups = commands.add_parser("groups", help="list, describe, reset offsets, delete groups")
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every group of every broker, with its state")
    add_connection(listing)
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="offsets and lag, or members")
    add_connection(describe)
    describe.add_argument("--group", action="append", required=True)
    describe.add_argument("--members", action="store_true", help="the members and their assignment")
    describe.set_defaults(run=run_describe)

    reset = actions.add_parser("reset-offsets", help="move an inactive group's offsets")
    add_connection(reset)
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P]")
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset")
    to.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss[+HH:MM]",
        help="the first offset at or after this time (local time without an offset)",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(run=run_reset)

    delete = actions.add_parser("delete", help="delete groups with no members")
    add_connection(delete)
    delete.add_argument("--group", action="append", required=True)
    delete.set_defaults(run=run_delete)


def run_list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        groups = client.list_groups()
    out = Output(args)
    rows = [
        {"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type} for g in groups
    ]
    if out.json:
        out.emit(rows)
    else:
        out.table(["GROUP", "STATE", "PROTOCOL-TYPE"], [list(r.values()) for r in rows])
    return 0


def describe_group(client: AdminClient, group_id: str) -> dict[str, Any]:
    """A group's state, members, and per partition: committed offset, log end, lag, owner."""
    description = client.describe_groups([group_id])[group_id]
    if description.state == "Dead":
        raise ToolError(f"consumer group {group_id!r} does not exist")
    committed = client.list_group_offsets(group_id)
    owners = {tp: m for m in description.members for tp in m.assignment}
    # Assigned partitions with no commit yet: their log end offset, lag unknown (Kafka's "-").
    uncommitted = [tp for tp in owners if tp not in committed]
    ends = client.list_offsets(dict.fromkeys(uncommitted, "latest")) if uncommitted else {}
    offsets = []
    for tp in sorted({*committed, *owners}):
        member = owners.get(tp)
        if tp in committed:
            current: int | None = committed[tp].committed.offset
            end = committed[tp].log_end_offset
        else:
            current, found = None, ends.get(tp)
            end = found.offset if found is not None else -1
        offsets.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current,
                "log_end_offset": end if end >= 0 else None,
                # Kafka's lag: log end offset minus committed offset.
                "lag": end - current if current is not None and end >= 0 else None,
                "member_id": member.member_id if member else None,
                "host": member.host if member else None,
                "client_id": member.client_id if member else None,
            }
        )
    return {
        "group": group_id,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "members": _members(description),
        "offsets": offsets,
    }


def _members(description: GroupDescription) -> list[dict[str, Any]]:
    return [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "assignment": [f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment)],
        }
        for m in description.members
    ]


def run_describe(args: argparse.Namespace) -> int:
    with admin(args) as client:
        documents = [describe_group(client, g) for g in names(args.group)]
    out = Output(args)
    if out.json:
        out.emit(documents)
        return 0
    for doc in documents:
        title = f"Group {doc['group']} ({doc['state']}, {len(doc['members'])} members)"
        if args.members:
            out.table(
                ["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"],
                [
                    [
                        m["member_id"],
                        m["group_instance_id"],
                        m["client_id"],
                        m["host"],
                        len(m["assignment"]),
                        m["assignment"],
                    ]
                    for m in doc["members"]
                ],
                title=title,
            )
            continue
        columns = ["topic", "partition", "current_offset", "log_end_offset", "lag", "member_id"]
        columns += ["host", "client_id"]
        out.table(
            [c.upper().replace("_", "-") for c in columns],
            [[o[c] for c in columns] for o in doc["offsets"]],
            title=title,
        )
    return 0


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch (local time when the text names no offset, as Kafka)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss") from None
    return int(moment.timestamp() * 1000)


def _scope(
    client: AdminClient, args: argparse.Namespace, committed: Mapping[TopicPartition, Any]
) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed)
    out: list[TopicPartition] = []
    for spec in args.topic:
        topic, partitions = topic_partitions(spec)
        if partitions is None:
            described = client.describe_topics([topic])[topic]
            partitions = [p.partition for p in described.partitions]
        out += [TopicPartition(topic, p) for p in partitions]
    return sorted(set(out))


def plan_reset(client: AdminClient, args: argparse.Namespace) -> dict[TopicPartition, int]:
    """The new offset of each partition in scope, clamped to [log start, log end]."""
    committed = {tp: o.committed.offset for tp, o in client.list_group_offsets(args.group).items()}
    scope = _scope(client, args, committed)
    if not scope:
        raise ToolError(f"group {args.group!r} has no committed offsets to reset")
    earliest = {tp: o.offset for tp, o in _offsets(client, scope, "earliest").items()}
    latest = {tp: o.offset for tp, o in _offsets(client, scope, "latest").items()}
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_datetime is not None:
        found = client.list_offsets(dict.fromkeys(scope, parse_datetime(args.to_datetime)))
        # No record at or after the time: the log end, as Kafka does.
        wanted = {tp: o.offset if (o := found.get(tp)) is not None else latest[tp] for tp in scope}
    elif args.to_offset is not None:
        wanted = dict.fromkeys(scope, args.to_offset)
    else:
        shift = args.shift_by or 0
        # A partition with no commit shifts from... nothing; Kafka starts it at the log end.
        wanted = {tp: committed.get(tp, latest[tp]) + shift for tp in scope}
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in scope}


def _offsets(
    client: AdminClient, scope: list[TopicPartition], spec: str
) -> dict[TopicPartition, Any]:
    found = client.list_offsets(dict.fromkeys(scope, spec))
    missing = [str(tp) for tp in scope if found.get(tp) is None]
    if missing:
        raise ToolError(f"no {spec} offset for {', '.join(missing)}")
    return {tp: o for tp, o in found.items() if o is not None}


def run_reset(args: argparse.Namespace) -> int:
    with admin(args) as client:
        description = client.describe_groups([args.group])[args.group]
        if args.execute and description.state not in INACTIVE:
            raise ToolError(
                f"assignments can only be reset if the group {args.group!r} is inactive, "
                f"but the current state is {description.state}"
            )
        plan = plan_reset(client, args)
        if args.execute:
            client.alter_group_offsets(args.group, plan)
    out = Output(args)
    rows = [
        {"group": args.group, "topic": tp.topic, "partition": tp.partition, "new_offset": offset}
        for tp, offset in plan.items()
    ]
    if out.json:
        out.emit({"executed": bool(args.execute), "offsets": rows})
        return 0
    if not args.execute and not args.dry_run:
        out.line("Neither --execute nor --dry-run given: a dry run (nothing committed).")
    out.table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [list(r.values()) for r in rows])
    return 0


def run_delete(args: argparse.Namespace) -> int:
    groups = names(args.group)
    with admin(args) as client:
        client.delete_groups(groups)
    Output(args).done(
        "\n".join(f"Deleted consumer group {g!r}." for g in groups), {"deleted": groups}
    )
    return 0
