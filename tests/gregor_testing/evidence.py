"""What a fault run keeps when its checker finds records read twice or away from where they
were acknowledged: enough to tell afterwards which broker wrote the second copy and why,
since the brokers' disks (tmpfs) are gone once the topology is down.

`gather` writes `evidence-<n>.txt` beside the history:
- the history's events of the first few such records (send, ack, read);
- each broker's batches of the partitions they were read from, around the offsets read
  (offsets, leader epoch, producer id and epoch, sequences), read from its log directory;
- each broker's log lines about those partitions;
- the producers' librdkafka `eos` debug lines about them (`producer-<n>.log`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gregor.tools.dumplog import read_log

IDS = 5  # records followed
MARGIN = 20  # offsets shown either side of those read
LINES = 80  # log lines kept per file


def _history_events(history: Path, ids: set[str]) -> list[dict[str, Any]]:
    events = (json.loads(line) for line in history.read_text().splitlines() if line.strip())
    return [e for e in events if e.get("id") in ids]


def _all_batches(data_dir: Path, topic: str, partition: int) -> list[dict[str, Any]]:
    folder = data_dir / f"{topic}-{partition}"
    return [b for s in sorted(folder.glob("*.log")) for b in read_log(s, False, None)["batches"]]


def _batches(data_dir: Path, topic: str, partition: int, low: int, high: int) -> list[str]:
    batches = _all_batches(data_dir, topic, partition)
    rows = [
        f"  {b['base_offset']}..{b['last_offset']} leader_epoch {b['partition_leader_epoch']} "
        f"pid {b['producer_id']} epoch {b['producer_epoch']} "
        f"seq {b['base_sequence']}..{b['last_sequence']}"
        for b in batches
        if b["last_offset"] >= low and b["base_offset"] <= high
    ]
    return rows or ["  (none)"]


# What librdkafka's eos debug says when it bumps its producer epoch after an
# OUT_OF_ORDER_SEQUENCE_NUMBER answer, the path of librdkafka#4953.
EPOCH_BUMP = "skipped sequence numbers"


def resent_across_epochs(
    history: Path, ids: list[str], topic: str, data_dirs: list[Path], producer_log: Path
) -> list[str]:
    """Of the records read twice (`ids`), those the producer sent again under a new epoch.

    Their copies are batches of the same producer id in as many of its epochs, and the
    producer's librdkafka bumped the older epoch after an OUT_OF_ORDER_SEQUENCE_NUMBER (its
    eos debug says "skipped sequence numbers" for that producer id and epoch). librdkafka
    then sends what it has not seen acknowledged again from sequence 0, also a request that
    failed after the leader wrote it (librdkafka#4953; Kafka's Java producer retries those
    without the bump). A new epoch's batch is a new batch to any broker, Kafka's too: within
    an epoch, duplicates are the brokers' to catch, and stay counted as such."""
    reads: dict[str, list[tuple[int, int]]] = {}
    for event in _history_events(history, set(ids)):
        if event["op"] == "read":
            reads.setdefault(event["id"], []).append((event["partition"], event["offset"]))
    cache: dict[tuple[Path, int], list[dict[str, Any]]] = {}

    def owner(partition: int, offset: int) -> tuple[int, int] | None:
        for data_dir in data_dirs:
            key = (data_dir, partition)
            if key not in cache:
                cache[key] = _all_batches(data_dir, topic, partition)
            for b in cache[key]:
                if b["base_offset"] <= offset <= b["last_offset"]:
                    return b["producer_id"], b["producer_epoch"]
        return None

    log = producer_log.read_text(errors="replace") if producer_log.exists() else ""
    bumped = {
        line.split("(PID{Id:", 1)[1].split("}", 1)[0]
        for line in log.splitlines()
        if EPOCH_BUMP in line and "(PID{Id:" in line
    }  # "10,Epoch:0": each producer id and epoch librdkafka bumped that way
    resent = []
    for record, copies in sorted(reads.items()):
        owners = [owner(p, o) for p, o in copies]
        known = [found for found in owners if found is not None]
        if len(known) != len(owners) or len({pid for pid, _ in known}) != 1:
            continue
        pid, epochs = known[0][0], sorted(epoch for _, epoch in known)
        if len(set(epochs)) == len(epochs) and all(
            f"{pid},Epoch:{e}" in bumped for e in epochs[:-1]
        ):
            resent.append(record)
    return resent


def _lines(path: Path, needles: Iterable[str], routine: Iterable[str] = ()) -> list[str]:
    """The last lines of `path` holding one of `needles` and none of `routine`."""
    if not path.exists():
        return [f"({path} missing)"]
    wanted, skipped = tuple(needles), tuple(routine)
    found = [
        line
        for line in path.read_text(errors="replace").splitlines()
        if any(n in line for n in wanted) and not any(r in line for r in skipped)
    ]
    return found[-LINES:]


def gather(
    out: Path,
    history: Path,
    ids: list[str],
    topic: str,
    brokers: Mapping[str, tuple[Path, Path]],
    producer_log: Path,
) -> Path:
    """Write the evidence of `ids` to `out`; `brokers`: host -> (data dir, log file)."""
    followed = set(ids[:IDS])
    events = _history_events(history, followed)
    reads = [e for e in events if e["op"] == "read"]
    partitions = sorted({e["partition"] for e in reads})
    text = [f"records followed: {sorted(followed)}", "history:"]
    text += [f"  {json.dumps(e)}" for e in events]
    for p in partitions:
        offsets = [e["offset"] for e in reads if e["partition"] == p]
        low, high = min(offsets) - MARGIN, max(offsets) + MARGIN
        for host, (data_dir, log_file) in sorted(brokers.items()):
            text.append(f"{host}: batches of {topic}-{p} in [{low}, {high}]")
            text += _batches(data_dir, topic, p, low, high)
            text.append(f"{host}: log lines about {topic}-{p}")
            text += [f"  {line}" for line in _lines(log_file, [f"{topic}-{p}:", f"{topic}-{p} "])]
        text.append(f"producers (librdkafka eos debug) about {topic} [{p}]")
        about = [f"{topic} [{p}]", "IDEMPSTATE", "REQERR"]
        routine = ["Produce MessageSet", ") delivered"]  # every batch's
        text += [f"  {line}" for line in _lines(producer_log, about, routine)]
    out.write_text("\n".join(text) + "\n")
    return out
