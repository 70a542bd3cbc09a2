"""File and directory names of a Kafka log directory."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Final

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
SNAPSHOT_SUFFIX: Final = ".snapshot"
DELETED_SUFFIX: Final = ".deleted"  # a file waiting for file.delete.delay.ms
CLEANED_SUFFIX: Final = ".cleaned"  # the cleaner's output before it is swapped in
SWAP_SUFFIX: Final = ".swap"  # a cleaned segment half-way through its swap
DELETE_DIR_SUFFIX: Final = "-delete"  # a deleted partition directory
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"

_DELETE_DIR = re.compile(r"^(?P<tp>.+)\.(?P<id>[0-9a-f]{32})-delete$")
_OFFSET_NAME = re.compile(r"^(\d{20})(\.[a-z]+)(\.(?:deleted|cleaned|swap))?$")

TopicPartition = tuple[str, int]


def offset_name(offset: int) -> str:
    """The 20-digit, zero-padded file name stem of a base offset."""
    return f"{offset:020d}"


def segment_file(directory: Path, base_offset: int, suffix: str, extra: str = "") -> Path:
    return directory / f"{offset_name(base_offset)}{suffix}{extra}"


def parse_offset_file(name: str) -> tuple[int, str, str] | None:
    """(base offset, suffix, extra suffix) of `00000000000000000042.log.deleted`, else None."""
    match = _OFFSET_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3) or ""


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    """The topic-partition of a `<topic>-<partition>` directory name, else None."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for a deleted partition directory waiting to be removed."""
    return f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"


def is_delete_dir(name: str) -> bool:
    return _DELETE_DIR.match(name) is not None
