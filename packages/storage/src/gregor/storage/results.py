"""What appends, reads and offset lookups return."""

from __future__ import annotations

import enum
from typing import Final, NamedTuple

import attrs

from gregor.storage.files import FileSlice
from gregor.storage.txn_index import AbortedTxn

NO_TIMESTAMP: Final = -1

# ListOffsets' special timestamps.
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4
LATEST_TIERED_TIMESTAMP: Final = -5


class FetchIsolation(enum.Enum):
    LOG_END = "log_end"  # followers read everything
    HIGH_WATERMARK = "high_watermark"  # read_uncommitted consumers
    TXN_COMMITTED = "txn_committed"  # read_committed consumers: up to the last stable offset


class AppendInfo(NamedTuple):
    """The outcome of an append. A duplicate batch reports its original offsets.

    A named tuple rather than an attrs class: one is made per append, on the hot path.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # the time written into LogAppendTime batches, else -1
    log_start_offset: int
    valid_bytes: int
    records_count: int
    last_leader_epoch: int | None = None
    duplicate: bool = False


class FetchDataInfo(NamedTuple):
    """A read: the records (a file slice for `os.sendfile`) and what a Fetch response needs."""

    records: FileSlice
    fetch_offset: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    log_end_offset: int
    aborted_transactions: list[AbortedTxn] | None = None
    # The first batch is larger than max_bytes and min_one_batch was off: nothing returned.
    first_entry_incomplete: bool = False


@attrs.frozen(slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None
