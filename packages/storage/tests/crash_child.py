"""The child process of the crash tests: append to a log until killed.

Usage: crash_child.py <log dir> <flush every N batches>. Each record's value is its own
offset, so the parent can tell a prefix from a corrupt or reordered log. After every flush it
prints the recovery point, which must survive any kill.

crash_child.py <log dir> <flush every N> txn <seed> <recovery point>: transactions instead.
Four transactional producers begin, extend, commit and abort transactions at random (the
markers written as a partition leader writes them), between plain batches; each run goes on
from the transactions the reopened log says are open.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from gregor.protocol.records import BatchBuilder, ControlType
from gregor.storage import LogConfig, open_log

TXN_CONFIG = {
    "segment.bytes": "3000",
    "index.interval.bytes": "256",
    "flush.messages": "1000000000",
}


def transactions(directory: Path, flush_every: int, seed: int, recovery_point: int) -> None:
    log = open_log(directory, LogConfig.from_properties(TXN_CONFIG), recovery_point=recovery_point)
    print(f"opened {log.log_end_offset}", flush=True)
    rng = random.Random(seed)
    ops = 0
    while True:
        pid = rng.randrange(1, 5)
        ongoing = log.ongoing_transactions()
        if pid in ongoing and rng.random() < 0.4:
            kind = ControlType.ABORT if rng.random() < 0.5 else ControlType.COMMIT
            log.append_txn_marker(pid, 0, kind, coordinator_epoch=0, leader_epoch=1)
        elif rng.random() < 0.2:
            plain = BatchBuilder()
            plain.append(b"plain", key=b"p")
            log.append_as_leader(plain.build(), leader_epoch=1)
        else:
            entry = log.producer_state.last_entry(pid)
            sequence = entry.last_seq + 1 if entry is not None else 0
            builder = BatchBuilder(
                producer_id=pid, producer_epoch=0, base_sequence=sequence, is_transactional=True
            )
            for i in range(rng.randrange(1, 4)):
                builder.append(b"p%d-%d" % (pid, sequence + i), key=b"k%d" % pid)
            log.append_as_leader(builder.build(), leader_epoch=1)
        ops += 1
        if ops % flush_every == 0:
            log.flush()
            print(f"flushed {log.recovery_point}", flush=True)


def main() -> None:
    directory, flush_every = Path(sys.argv[1]), int(sys.argv[2])
    if sys.argv[3:4] == ["txn"]:
        transactions(directory, flush_every, int(sys.argv[4]), int(sys.argv[5]))
        return
    config = LogConfig.from_properties(
        {"segment.bytes": "20000", "index.interval.bytes": "512", "flush.messages": "1000000000"}
    )
    log = open_log(directory, config, recovery_point=0)  # always recover: we were killed
    print(f"opened {log.log_end_offset}", flush=True)
    batches = 0
    while True:
        builder = BatchBuilder(
            producer_id=77, producer_epoch=0, base_sequence=log.log_end_offset % 2**31
        )
        offset = log.log_end_offset
        for i in range(1 + batches % 5):
            builder.append(str(offset + i).encode() * 10, key=b"k%d" % (batches % 7))
        log.append_as_leader(builder.build(), leader_epoch=1)
        batches += 1
        if batches % flush_every == 0:
            log.flush()
            print(f"flushed {log.recovery_point}", flush=True)


if __name__ == "__main__":
    main()
