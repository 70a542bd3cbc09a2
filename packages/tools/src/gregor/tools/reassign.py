"""`gregor reassign`: generate, execute (optionally throttled), verify and cancel partition
reassignments (kafka-reassign-partitions.sh, with its JSON files)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gregor.client import AdminClient, TopicPartition
from gregor.client.admin import ConfigResource, ConfigSource, ResourceType
from gregor.protocol.errors import KafkaError
from gregor.tools.common import (
    Output,
    ToolError,
    add_connection,
    admin,
    json_partitions,
    read_json,
)

Assignment = dict[TopicPartition, list[int]]
BROKER_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_REPLICAS = (
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)


def register(commands: argparse._SubParsersAction[Any]) -> None:
    reassign = commands.add_parser("reassign", help="move partitions' replicas between brokers")
    actions = reassign.add_subparsers(dest="action", required=True, metavar="ACTION")

    generate = actions.add_parser("generate", help="propose an assignment over these brokers")
    add_connection(generate)
    generate.add_argument(
        "--topics-to-move-json-file",
        type=Path,
        required=True,
        metavar="FILE",
        help='{"topics": [{"topic": "t"}], "version": 1}',
    )
    generate.add_argument("--broker-list", required=True, metavar="ID,ID")
    generate.set_defaults(run=run_generate)

    for name, run, text in (
        ("execute", run_execute, "start the reassignment of a JSON file"),
        ("verify", run_verify, "whether it is done (then remove throttles)"),
        ("cancel", run_cancel, "stop reassignments in progress"),
    ):
        action = actions.add_parser(name, help=text)
        add_connection(action)
        action.add_argument("--reassignment-json-file", type=Path, required=True, metavar="FILE")
        action.set_defaults(run=run)
    actions.choices["execute"].add_argument(
        "--throttle", type=int, metavar="BYTES/S", help="replication throttle while it moves"
    )
    actions.choices["verify"].add_argument(
        "--preserve-throttles", action="store_true", help="leave the throttles in place"
    )


def as_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> dict[str, Any]:
    """Kafka's reassignment file."""
    return {
        "version": 1,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
            for tp, replicas in sorted(assignment.items())
        ],
    }


def read_assignment(path: Path) -> Assignment:
    return {
        TopicPartition(p["topic"], int(p["partition"])): [int(b) for b in p["replicas"]]
        for p in json_partitions(path, "replicas")
    }


def current(client: AdminClient, topics: Iterable[str]) -> Assignment:
    described = client.describe_topics(sorted(set(topics)))
    return {
        TopicPartition(t.name, p.partition): list(p.replicas)
        for t in described.values()
        for p in t.partitions
    }


def propose(now: Assignment, brokers: Sequence[int]) -> Assignment:
    """Each topic's partitions spread round robin over `brokers`, each keeping its
    replication factor (the first replica, the preferred leader, rotating)."""
    out: Assignment = {}
    for index, tp in enumerate(sorted(now)):
        factor = len(now[tp])
        if factor > len(brokers):
            raise ToolError(f"{tp} has {factor} replicas but --broker-list has {len(brokers)}")
        out[tp] = [brokers[(index + i) % len(brokers)] for i in range(factor)]
    return out


def run_generate(args: argparse.Namespace) -> int:
    document = read_json(args.topics_to_move_json_file)
    try:
        topics = [t["topic"] for t in document["topics"]]
        brokers = [int(b) for b in args.broker_list.split(",")]
    except (KeyError, TypeError, ValueError):
        raise ToolError('expected {"topics": [{"topic": ...}]} and --broker-list 0,1,2') from None
    with admin(args) as client:
        known = {b.node_id for b in client.describe_cluster().brokers}
        unknown = sorted(set(brokers) - known)
        if unknown:
            raise ToolError(f"--broker-list names brokers not in the cluster: {unknown}")
        now = current(client, topics)
    proposed = propose(now, brokers)
    out = Output(args)
    if out.json:
        out.emit({"current": as_json(now), "proposed": as_json(proposed)})
    else:
        out.line("Current partition replica assignment")
        out.emit(as_json(now))
        out.line("\nProposed partition reassignment configuration")
        out.emit(as_json(proposed))
    return 0


def throttle(client: AdminClient, rate: int, now: Assignment, target: Assignment) -> None:
    """Kafka's throttle: the rates on every broker involved, and per topic the moving
    partitions' current replicas (leader side) and new replicas (follower side)."""
    brokers = {b for tp in target for b in (*now[tp], *target[tp])}
    changes: dict[ConfigResource, dict[str, str | None]] = {
        ConfigResource(ResourceType.BROKER, str(b)): dict.fromkeys(BROKER_RATES, str(rate))
        for b in sorted(brokers)
    }
    try:
        client.alter_configs(changes)
    except KafkaError as exc:
        raise ToolError(f"--throttle is not supported by this cluster: {exc}") from None
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for tp in sorted(target):
        leaders.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in now[tp])
        moving = [b for b in target[tp] if b not in now[tp]]
        followers.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in moving)
    client.alter_configs(
        {
            ConfigResource(ResourceType.TOPIC, topic): {
                TOPIC_REPLICAS[0]: ",".join(leaders[topic]),
                TOPIC_REPLICAS[1]: ",".join(followers[topic]),
            }
            for topic in leaders
        }
    )


def run_execute(args: argparse.Namespace) -> int:
    target = read_assignment(args.reassignment_json_file)
    with admin(args) as client:
        now = current(client, {tp.topic for tp in target})
        missing = sorted(str(tp) for tp in target if tp not in now)
        if missing:
            raise ToolError(f"unknown partitions: {', '.join(missing)}")
        if args.throttle is not None:
            throttle(client, args.throttle, now, target)
        client.alter_partition_reassignments(target)
    rollback = as_json({tp: now[tp] for tp in target})
    out = Output(args)
    if out.json:
        out.emit({"started": as_json(target)["partitions"], "rollback": rollback})
    else:
        out.line("Current partition replica assignment (save it to roll back):")
        out.emit(rollback)
        started = ",".join(str(tp) for tp in sorted(target))
        out.line(f"Successfully started partition reassignments for {started}")
    return 0


def remove_throttles(client: AdminClient, topics: Iterable[str]) -> None:
    client.alter_configs(
        {ConfigResource(ResourceType.TOPIC, t): dict.fromkeys(TOPIC_REPLICAS) for t in topics}
    )
    brokers = [
        ConfigResource(ResourceType.BROKER, str(b.node_id))
        for b in client.describe_cluster().brokers
    ]
    configs = client.describe_configs(brokers)
    throttled = {
        resource: dict.fromkeys(BROKER_RATES)
        for resource, entries in configs.items()
        if any(
            (e := entries.get(name)) is not None and e.source is ConfigSource.DYNAMIC_BROKER_CONFIG
            for name in BROKER_RATES
        )
    }
    if throttled:
        client.alter_configs(throttled)


def run_verify(args: argparse.Namespace) -> int:
    target = read_assignment(args.reassignment_json_file)
    with admin(args) as client:
        moving = client.list_partition_reassignments(list(target))
        now = current(client, {tp.topic for tp in target})
        rows = []
        for tp, replicas in sorted(target.items()):
            if tp in moving:
                status = "in progress"
            elif now.get(tp) == replicas:
                status = "complete"
            else:
                status = "failed"
            rows.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "status": status,
                    "target": replicas,
                    "replicas": now.get(tp),
                }
            )
        done = all(r["status"] == "complete" for r in rows)
        if done and not args.preserve_throttles:
            remove_throttles(client, {tp.topic for tp in target})
    out = Output(args)
    if out.json:
        out.emit({"complete": done, "partitions": rows})
    else:
        out.table(
            ["TOPIC", "PARTITION", "STATUS", "TARGET", "REPLICAS"],
            [list(r.values()) for r in rows],
        )
        if done and not args.preserve_throttles:
            out.line("Throttles removed.")
    return 0 if all(r["status"] != "failed" for r in rows) else 1


def run_cancel(args: argparse.Namespace) -> int:
    target = read_assignment(args.reassignment_json_file)
    with admin(args) as client:
        moving = client.list_partition_reassignments(list(target))
        cancelled = sorted(tp for tp in target if tp in moving)
        if cancelled:
            client.alter_partition_reassignments(dict.fromkeys(cancelled))
    names = [str(tp) for tp in cancelled]
    Output(args).done(
        f"Successfully cancelled partition reassignments for: {','.join(names) or 'none'}",
        {"cancelled": names},
    )
    return 0
