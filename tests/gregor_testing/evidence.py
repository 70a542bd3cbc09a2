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


def _batches(data_dir: Path, topic: str, partition: int, low: int, high: int) -> list[str]:
    folder = data_dir / f"{topic}-{partition}"
    batches = [b for s in sorted(folder.glob("*.log")) for b in read_log(s, False, None)["batches"]]
    rows = [
        f"  {b['base_offset']}..{b['last_offset']} leader_epoch {b['partition_leader_epoch']} "
        f"pid {b['producer_id']} epoch {b['producer_epoch']} "
        f"seq {b['base_sequence']}..{b['last_sequence']}"
        for b in batches
        if b["last_offset"] >= low and b["base_offset"] <= high
    ]
    return rows or ["  (none)"]


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
