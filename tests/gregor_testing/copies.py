"""The copies of a datacenter's topic that the topology's services make, checked against the
history of what was sent to it and acknowledged (`history.py`): a copy's records are written
into a copy of that history (its sends, acknowledgements and errors, not the source's own
reads) as a reader's reads, and the checker reads that.

- the mirror's: `<source>.<topic>` in the other datacenter, read there by its client host
  (read_committed: an exactly-once mirror's aborted copies are not records);
- the ETL's: the rows of its Parquet warehouse, each with the source's partition and offset.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from gregor.devcluster.etl import EtlProcess
from gregor.devcluster.netns import NetnsTopology
from gregor.spark.etl import checkpoint_offsets
from gregor_testing.clienthosts import CLIENTS, ends, finish, workload_argv
from gregor_testing.history import History, Report, check
from gregor_testing.nemesis import wait_until

READS = ("read", "read-error", "read-incomplete")  # a reader's events


def mirrored(
    topology: NetnsTopology, topic: str, history: Path, copy: Path, timeout: float = 180.0
) -> Report:
    """dc2's copy of dc1's `topic` checked against dc1's `history` (in `copy`). The mirror
    may still be copying: it is read again, a few seconds apart, while acknowledged records
    are missing, until `timeout`."""
    remote = f"dc1.{topic}"  # MirrorMaker 2's DefaultReplicationPolicy
    deadline = time.monotonic() + timeout
    source = sum(ends(topology, topic, "dc1").values())
    # Once each record is there (an exactly-once copy also holds transaction markers).
    while sum(ends(topology, remote, "dc2").values()) < source and time.monotonic() < deadline:
        time.sleep(2)
    while True:
        sends_of(history, copy)
        argv = workload_argv(
            topology, "read", "--topic", remote, "--history", str(copy), "--committed",
            host=CLIENTS["dc2"], datacenter="dc2",
        )  # fmt: skip
        finish(subprocess.Popen(argv, stdin=subprocess.DEVNULL), "mirror's reader", 180)
        report = check(copy)
        if not report.lost or time.monotonic() > deadline:
            return report
        time.sleep(5)


def loading(etl: EtlProcess, topic: str) -> bool:
    """Whether the ETL service has started loading `topic` (as its log says)."""
    log = etl.log_path.read_text(errors="replace")
    return re.search(rf"gregor-etl: (loading {topic} too|serving .*{topic}\b)", log) is not None


def loaded(
    topology: NetnsTopology, etl: EtlProcess, topic: str, history: Path, copy: Path,
    timeout: float = 300.0,
) -> Report:  # fmt: skip
    """The ETL's warehouse table of dc1's `topic` checked against dc1's `history` (in
    `copy`), once the ETL's checkpoint has reached the topic's end (within `timeout`)."""
    high = {(topic, p): end for p, end in ends(topology, topic, "dc1").items()}
    checkpoint = etl.warehouse / "_checkpoints" / topic
    wait_until(lambda: checkpoint_offsets(checkpoint) == high, timeout, f"the ETL to load {high}")
    sends_of(history, copy)
    warehouse_reads(etl.warehouse / topic, copy)
    return check(copy)


def sends_of(history: Path, copy: Path) -> None:
    """Write `copy`: `history` without its reads (what the producers did)."""
    lines = history.read_text().splitlines(keepends=True)
    copy.write_text("".join(line for line in lines if json.loads(line)["op"] not in READS))


def warehouse_reads(table: Path, history: Path) -> list[dict[str, Any]]:
    """Append a warehouse table's rows to `history` as a reader's reads (each record's id
    is its value); the rows (partition, offset, value)."""
    rows = ds.dataset(table, format="parquet", partitioning="hive").to_table(
        columns=["partition", "offset", "value"]
    )
    found: list[dict[str, Any]] = rows.to_pylist()
    reads = History(history)
    for row in found:
        reads.write(
            "read", id=row["value"].decode(), partition=row["partition"], offset=row["offset"]
        )
    reads.close()
    return found
