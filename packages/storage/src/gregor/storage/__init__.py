"""gregor-storage: the segmented on-disk log engine, in Kafka's formats.

`LogManager` owns the log directories and the background tasks; `Log` is one partition's
log; `LogConfig` its settings under Kafka's topic config names.
"""

from gregor.storage.config import LogConfig, LogManagerConfig
from gregor.storage.files import FileSlice
from gregor.storage.loader import open_log
from gregor.storage.log import Log, UnexpectedAppendOffsetError
from gregor.storage.manager import LogManager
from gregor.storage.producer_state import AppendOrigin
from gregor.storage.results import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    FetchDataInfo,
    FetchIsolation,
    TimestampAndOffset,
)
from gregor.storage.txn_index import AbortedTxn
from gregor.storage.validation import OffsetsOutOfOrderError

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AbortedTxn",
    "AppendInfo",
    "AppendOrigin",
    "FetchDataInfo",
    "FetchIsolation",
    "FileSlice",
    "Log",
    "LogConfig",
    "LogManager",
    "LogManagerConfig",
    "OffsetsOutOfOrderError",
    "TimestampAndOffset",
    "UnexpectedAppendOffsetError",
    "open_log",
]
