"""The history of a Jepsen-style run and its checker.

A workload (`gregor_testing/workload.py`) writes one JSON object a line: each record sent
(`send`: its id, key, producer), acknowledged (`ack`: partition and offset), failed
(`error`), and each record a reader found afterwards (`read`: partition, offset, id). A
record's id is `<producer>:<sequence>`, its producer's sequence counting up from 0.

`check` reads that file and says what went wrong:
- lost: acknowledged, never read (goal 0);
- duplicates: read more than once (0 with idempotence);
- reordered: read before a record its producer sent earlier to the same partition (0);
- phantom: read, never sent (0);
- misplaced: read at another offset than its acknowledgement named (0; an acknowledgement
  may name none: librdkafka reports records it infers were written, from a later batch's
  acknowledgement after a failed request, with no offset);
- resent: the duplicates a broker cannot tell from new records, set aside (`set_aside`)
  once the brokers' logs show it (`evidence.resent_across_epochs`): librdkafka sent them
  again under a new producer epoch (librdkafka#4953). Counted, not failed;
- unavailable_s: seconds of the sending time without a single acknowledgement, counting
  only silences longer than `GAP` (a fault's cost, not the producer's linger).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

GAP = 1.0  # seconds: a shorter silence between acknowledgements is not unavailability


class History:
    """A history file being written, line by line, from any thread."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a")
        self._lock = threading.Lock()

    def write(self, op: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "op": op, **fields})
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def parse_id(record_id: str) -> tuple[str, int]:
    producer, _, sequence = record_id.rpartition(":")
    return producer, int(sequence)


@dataclass
class Report:
    sent: int = 0
    acked: int = 0
    errors: int = 0
    read: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    unavailable_s: float = 0.0
    # What makes the counts unsure: a read that did not reach the end, a producer that
    # closed with records whose outcome it never learned.
    incomplete: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.reordered or self.phantom)

    def add(self, other: Report) -> None:
        self.sent += other.sent
        self.acked += other.acked
        self.errors += other.errors
        self.read += other.read
        for name in (
            "lost",
            "duplicates",
            "reordered",
            "phantom",
            "misplaced",
            "resent",
            "incomplete",
        ):
            getattr(self, name).extend(getattr(other, name))
        self.unavailable_s += other.unavailable_s

    def set_aside(self, resent: list[str]) -> None:
        """Count these records read twice as resent by the client, neither duplicated nor
        misplaced by the brokers."""
        found = set(resent) & set(self.duplicates)
        self.duplicates = [i for i in self.duplicates if i not in found]
        self.misplaced = [i for i in self.misplaced if i not in found]
        self.resent = sorted(set(self.resent) | found)


def check(path: Path) -> Report:
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    report = Report()
    sent: set[str] = set()
    acked: dict[str, tuple[int, int]] = {}  # id -> (partition, offset)
    ack_times: list[float] = []
    send_times: list[float] = []
    reads: list[dict[str, Any]] = []
    for event in events:
        op = event["op"]
        if op == "send":
            sent.add(event["id"])
            send_times.append(event["t"])
        elif op == "ack":
            acked[event["id"]] = (event["partition"], event["offset"])
            ack_times.append(event["t"])
        elif op == "error":
            report.errors += 1
        elif op == "read":
            reads.append(event)
        elif op in ("read-incomplete", "unresolved"):
            report.incomplete.append(json.dumps(event))
    report.sent, report.acked, report.read = len(sent), len(acked), len(reads)

    seen: Counter[str] = Counter(r["id"] for r in reads)
    report.lost = sorted(i for i in acked if i not in seen)
    report.duplicates = sorted(i for i, n in seen.items() if n > 1)
    report.phantom = sorted(i for i in seen if i not in sent)
    report.misplaced = sorted(
        {
            r["id"]
            for r in reads
            if r["id"] in acked
            and acked[r["id"]][1] is not None
            and acked[r["id"]] != (r["partition"], r["offset"])
        }
    )
    last: dict[tuple[int, str], int] = {}  # (partition, producer) -> last sequence read
    for r in sorted(reads, key=lambda r: (r["partition"], r["offset"])):
        producer, sequence = parse_id(r["id"])
        place = (r["partition"], producer)
        if place in last and sequence <= last[place] and seen[r["id"]] == 1:
            report.reordered.append(r["id"])
        last[place] = max(sequence, last.get(place, -1))
    if send_times:
        report.unavailable_s = unavailable(min(send_times), max(send_times), ack_times)
    return report


def unavailable(start: float, end: float, ack_times: list[float]) -> float:
    """Seconds in [start, end] inside silences between acknowledgements longer than GAP."""
    marks = [start, *sorted(t for t in ack_times if start <= t <= end), end]
    return sum(b - a for a, b in pairwise(marks) if b - a > GAP)
