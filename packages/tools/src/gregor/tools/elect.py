"""`gregor elect`: preferred or unclean leader election (kafka-leader-election.sh)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gregor.client import TopicPartition
from gregor.client.admin import ElectionType
from gregor.protocol.errors import ErrorCode
from gregor.tools.common import Output, ToolError, add_connection, admin, json_partitions


def register(commands: argparse._SubParsersAction[Any]) -> None:
    elect = commands.add_parser("elect", help="preferred or unclean leader election")
    add_connection(elect)
    elect.add_argument("--election-type", required=True, choices=["preferred", "unclean"])
    scope = elect.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", help="with --partition")
    scope.add_argument("--all-topic-partitions", action="store_true")
    scope.add_argument("--path-to-json-file", type=Path, metavar="FILE")
    elect.add_argument("--partition", type=int)
    elect.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    partitions: list[TopicPartition] | None = None
    if args.topic is not None:
        if args.partition is None:
            raise ToolError("--topic needs --partition")
        partitions = [TopicPartition(args.topic, args.partition)]
    elif args.path_to_json_file is not None:
        partitions = [
            TopicPartition(p["topic"], int(p["partition"]))
            for p in json_partitions(args.path_to_json_file)
        ]
    election = ElectionType[args.election_type.upper()]
    with admin(args) as client:
        results = client.elect_leaders(election, partitions)
    rows = []
    for tp, error in sorted(results.items()):
        outcome = "elected" if error is None else error.error_name()
        if error is not None and error.code == ErrorCode.ELECTION_NOT_NEEDED:
            outcome = "not needed"
        rows.append({"topic": tp.topic, "partition": tp.partition, "result": outcome})
        if error is not None and outcome != "not needed":
            rows[-1]["error"] = str(error)
    out = Output(args)
    if out.json:
        out.emit(rows)
    else:
        out.table(
            ["TOPIC", "PARTITION", "RESULT"],
            [[r["topic"], r["partition"], r.get("error", r["result"])] for r in rows],
        )
    failed = [r for r in rows if "error" in r]
    return 1 if failed else 0
