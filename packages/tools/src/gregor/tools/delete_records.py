"""`gregor delete-records`: move partitions' log start offsets forward
(kafka-delete-records.sh, with its --offset-json-file)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gregor.client import TopicPartition
from gregor.tools.common import Output, add_connection, admin, json_partitions


def register(commands: argparse._SubParsersAction[Any]) -> None:
    delete = commands.add_parser("delete-records", help="delete records before offsets")
    add_connection(delete)
    delete.add_argument(
        "--offset-json-file",
        type=Path,
        required=True,
        metavar="FILE",
        help='{"partitions": [{"topic": "t", "partition": 0, "offset": 5}]} (-1: the end)',
    )
    delete.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    wanted = {
        TopicPartition(p["topic"], int(p["partition"])): int(p["offset"])
        for p in json_partitions(args.offset_json_file, "offset")
    }
    with admin(args) as client:
        low = client.delete_records(wanted)
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "low_watermark": offset}
        for tp, offset in sorted(low.items())
    ]
    out = Output(args)
    if out.json:
        out.emit(rows)
    else:
        out.table(["TOPIC", "PARTITION", "LOW-WATERMARK"], [list(r.values()) for r in rows])
    return 0
