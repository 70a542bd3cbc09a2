"""The child process of the crash tests: append to a log until killed.

Usage: crash_child.py <log dir> <flush every N batches>. Each record's value is its own
offset, so the parent can tell a prefix from a corrupt or reordered log. After every flush it
prints the recovery point, which must survive any kill.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gregor.protocol.records import BatchBuilder
from gregor.storage import LogConfig, open_log


def main() -> None:
    directory, flush_every = Path(sys.argv[1]), int(sys.argv[2])
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
