"""`gregor topics`: list, describe, create, alter and delete topics (kafka-topics.sh)."""

from __future__ import annotations

import argparse
from typing import Any

from gregor.client import NewTopic
from gregor.client.admin import ConfigResource, ConfigSource, ResourceType
from gregor.client.admin.types import TopicDescription
from gregor.tools.common import (
    Output,
    ToolError,
    add_connection,
    admin,
    key_values,
    names,
)


def register(commands: argparse._SubParsersAction[Any]) -> None:
    topics = commands.add_parser("topics", help="list, describe, create, alter, delete topics")
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="topic names")
    add_connection(listing)
    listing.add_argument("--exclude-internal", action="store_true")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="partitions, leaders, replicas, ISR, configs")
    add_connection(describe)
    describe.add_argument("--topic", action="append", help="these topics (default: all)")
    describe.add_argument("--exclude-internal", action="store_true")
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replicas",
    )
    describe.add_argument(
        "--unavailable-partitions", action="store_true", help="only partitions with no leader"
    )
    describe.set_defaults(run=run_describe)

    create = actions.add_parser("create", help="create a topic")
    add_connection(create)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="replicas per partition: partitions comma-separated, brokers colon-separated",
    )
    create.add_argument("--config", action="append", metavar="K=V", help="topic configs")
    create.add_argument("--if-not-exists", action="store_true")
    create.set_defaults(run=run_create)

    alter = actions.add_parser("alter", help="add partitions, set or delete configs")
    add_connection(alter)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, help="the new (larger) partition count")
    alter.add_argument("--config", action="append", metavar="K=V", help="configs to set")
    alter.add_argument("--delete-config", action="append", metavar="K", help="configs to reset")
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", help="delete topics")
    add_connection(delete)
    delete.add_argument("--topic", action="append", required=True)
    delete.add_argument("--if-exists", action="store_true")
    delete.set_defaults(run=run_delete)


def run_list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        described = client.describe_topics(None)
    found = [t.name for t in described.values() if not (args.exclude_internal and t.internal)]
    out = Output(args)
    if out.json:
        out.emit(found)
    else:
        for name in found:
            out.line(name)
    return 0


def _partition_row(p: Any) -> dict[str, Any]:
    return {
        "partition": p.partition,
        "leader": p.leader if p.leader >= 0 else None,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "under_replicated": len(p.isr) < len(p.replicas),
    }


def run_describe(args: argparse.Namespace) -> int:
    wanted = names(args.topic) or None
    with admin(args) as client:
        described = client.describe_topics(wanted)
        topics = [t for t in described.values() if not (args.exclude_internal and t.internal)]
        configs = client.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t.name) for t in topics]
        )
    document: list[dict[str, Any]] = []
    for topic in topics:
        entries = configs.get(ConfigResource(ResourceType.TOPIC, topic.name), {})
        overrides = {
            name: e.value
            for name, e in sorted(entries.items())
            if e.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
        }
        partitions = [_partition_row(p) for p in topic.partitions]
        if args.under_replicated_partitions:
            partitions = [p for p in partitions if p["under_replicated"]]
        if args.unavailable_partitions:
            partitions = [p for p in partitions if p["leader"] is None]
        document.append(
            {
                "topic": topic.name,
                "internal": topic.internal,
                "partition_count": len(topic.partitions),
                "replication_factor": _replication_factor(topic),
                "configs": overrides,
                "partitions": partitions,
            }
        )
    out = Output(args)
    if out.json:
        out.emit(document)
        return 0
    for topic_doc in document:
        configs_text = ",".join(f"{k}={v}" for k, v in topic_doc["configs"].items()) or "-"
        out.line(
            f"Topic: {topic_doc['topic']}\tPartitionCount: {topic_doc['partition_count']}\t"
            f"ReplicationFactor: {topic_doc['replication_factor']}\tConfigs: {configs_text}"
        )
        out.table(
            ["Partition", "Leader", "Replicas", "Isr", "Under-replicated"],
            [
                [p["partition"], p["leader"], p["replicas"], p["isr"], p["under_replicated"]]
                for p in topic_doc["partitions"]
            ],
        )
    return 0


def _replication_factor(topic: TopicDescription) -> int:
    return max((len(p.replicas) for p in topic.partitions), default=0)


def parse_assignment(text: str) -> dict[int, list[int]]:
    try:
        return {
            partition: [int(b) for b in replicas.split(":")]
            for partition, replicas in enumerate(text.split(","))
        }
    except ValueError:
        raise ToolError(f"--replica-assignment {text!r}: expected e.g. 0:1,1:2,2:0") from None


def run_create(args: argparse.Namespace) -> int:
    assignment = parse_assignment(args.replica_assignment) if args.replica_assignment else None
    if assignment is not None and (args.partitions != -1 or args.replication_factor != -1):
        raise ToolError("--replica-assignment replaces --partitions and --replication-factor")
    topic = NewTopic(
        args.topic,
        args.partitions,
        args.replication_factor,
        assignment,
        key_values(args.config, "--config"),
    )
    with admin(args) as client:
        if args.if_not_exists and args.topic in client.list_topics():
            return 0
        client.create_topics([topic])
    Output(args).done(f"Created topic {args.topic}.", {"created": args.topic})
    return 0


def run_alter(args: argparse.Namespace) -> int:
    sets = key_values(args.config, "--config")
    deletes = names(args.delete_config)
    if args.partitions is None and not sets and not deletes:
        raise ToolError("nothing to alter: give --partitions, --config or --delete-config")
    with admin(args) as client:
        client.describe_topics([args.topic])  # UNKNOWN_TOPIC_OR_PARTITION, named, first
        if args.partitions is not None:
            client.create_partitions({args.topic: args.partitions})
        if sets or deletes:
            changes: dict[str, str | None] = {**sets, **dict.fromkeys(deletes)}
            client.alter_configs({ConfigResource(ResourceType.TOPIC, args.topic): changes})
    Output(args).done(f"Altered topic {args.topic}.", {"altered": args.topic})
    return 0


def run_delete(args: argparse.Namespace) -> int:
    wanted = names(args.topic)
    with admin(args) as client:
        if args.if_exists:
            existing = set(client.list_topics())
            wanted = [t for t in wanted if t in existing]
        if wanted:
            client.delete_topics(wanted)
    text = "\n".join(f"Deleted topic {topic}." for topic in wanted) or "Nothing to delete."
    Output(args).done(text, {"deleted": wanted})
    return 0
