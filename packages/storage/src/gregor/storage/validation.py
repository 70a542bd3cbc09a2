"""Checking the batches of an append and assigning their offsets (Kafka's LogValidator).

Only batch headers are read (and CRCs checked): no record is decoded, except on compacted
topics, where Kafka requires a key on every record. The leader's offsets and epoch are
patched into a copy of each 61-byte header; the records are written from the caller's
buffer as they came (the CRC does not cover the patched fields), unless LogAppendTime
rewrites the timestamps and with them the CRC.
"""

from __future__ import annotations

import operator
from typing import Final, NamedTuple

from gregor.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    UnknownServerError,
)
from gregor.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    RecordBatch,
    patch_base_offset,
    patch_leader_epoch,
    patch_log_append_time,
    read_batch_header,
    verify_crc,
)
from gregor.storage.config import LONG_MAX, LogConfig
from gregor.storage.producer_state import AppendOrigin

NO_TIMESTAMP: Final = -1
_CONTROL_OR_TRANSACTIONAL: Final = 0x30  # batch attribute bits: checked together
_KEY: Final = operator.attrgetter("key")

Records = bytes | bytearray | memoryview
Headers = list[tuple[int, BatchHeader]]  # (position in the append, header) per batch


class OffsetsOutOfOrderError(UnknownServerError):
    """A follower append whose batches' offsets do not increase."""


class Assigned(NamedTuple):
    """The batches of an append as they will be written, with their offsets."""

    parts: list[Records]  # written in order with one pwritev
    bases: list[int]  # each batch's base offset
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int


def validate_batches(
    buf: Records, name: str, max_message_bytes: int, origin: AppendOrigin, *, strict: bool
) -> Headers:
    """Headers of the batches in `buf`, each checked for magic, size and CRC (and a client's
    for what only brokers may write). Not `strict` (followers): a partial batch at the end,
    as a fetch response may carry, is left out."""
    size = len(buf)
    pos = 0
    headers: Headers = []
    while pos < size:
        if size - pos < BATCH_HEADER_SIZE:
            if strict or (size - pos > 16 and buf[pos + 16] != 2):
                raise CorruptRecordError(
                    f"append to {name} ends with a partial batch of {size - pos} bytes"
                )
            break
        header = read_batch_header(buf, pos)
        batch_size = header.batch_length + 12
        if pos + batch_size > size:
            if strict:
                raise CorruptRecordError(
                    f"batch at {pos} of the append to {name} declares {batch_size} "
                    f"bytes, {size - pos} present"
                )
            break
        if batch_size > max_message_bytes:
            raise MessageTooLargeError(
                f"the record batch in the append to {name} is {batch_size} bytes, "
                f"over the maximum of {max_message_bytes} (max.message.bytes)"
            )
        verify_crc(buf, pos, header)
        if origin is AppendOrigin.CLIENT and (
            header.base_offset
            or header.attributes & _CONTROL_OR_TRANSACTIONAL
            or header.last_offset_delta != header.records_count - 1
        ):
            check_client_batch(header, name)
        headers.append((pos, header))
        pos += batch_size
    return headers


def check_client_batch(header: BatchHeader, name: str) -> None:
    """What a producer's batch must be: offsets from 0, no control batch, a producer id
    when transactional."""
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"the base offset of a produced batch must be 0, not {header.base_offset} "
            f"(append to {name})"
        )
    if header.is_control:
        raise InvalidRecordError(f"clients may not write control batches (append to {name})")
    if header.records_count == 0:
        raise InvalidRecordError(f"an empty batch cannot be produced ({name})")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"batch of {header.records_count} records has last offset delta "
            f"{header.last_offset_delta} (append to {name})"
        )
    if header.is_transactional and header.producer_id < 0:
        raise InvalidRecordError(f"a transactional batch needs a producer id ({name})")


def check_leader_append(
    buf: Records, headers: Headers, config: LogConfig, name: str, now: int
) -> int:
    """The checks that depend on the topic's config; returns the LogAppendTime to write
    (now) or NO_TIMESTAMP when the batches keep their CreateTime."""
    if config.compact:
        check_keys(buf, headers, name)
    if config.log_append_time:
        return now
    if (
        config.message_timestamp_before_max_ms < LONG_MAX
        or config.message_timestamp_after_max_ms < LONG_MAX
    ):
        check_timestamps(headers, config, name, now)
    return NO_TIMESTAMP


def check_timestamps(headers: Headers, config: LogConfig, name: str, now: int) -> None:
    # Kafka checks each record; the first and the largest timestamp bound them closely
    # enough without decoding records.
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    for _pos, header in headers:
        for ts in (header.base_timestamp, header.max_timestamp):
            if ts >= 0 and (now - ts > before or ts - now > after):
                raise InvalidTimestampError(
                    f"timestamp {ts} of a batch in the append to {name} is out of range "
                    f"(now {now}, message.timestamp.before.max.ms {before}, "
                    f"message.timestamp.after.max.ms {after})"
                )


def check_keys(buf: Records, headers: Headers, name: str) -> None:
    """A compacted topic needs a key on every record (control batches excepted)."""
    view = memoryview(buf)
    for pos, header in headers:
        if header.is_control:
            continue
        batch = RecordBatch(header, view[pos : pos + header.batch_length + 12])
        if None in map(_KEY, batch):  # C all the way: no Python work per record
            # KIP-467: each bad record by its index in the batch, so the producer can fail
            # exactly those (Kafka's messages, word for word).
            why = f"Compacted topic cannot accept message without key in topic partition {name}."
            raise InvalidRecordError.for_records(
                [(i, why) for i, key in enumerate(map(_KEY, batch)) if key is None]
            )


def assign_offsets(
    buf: Records, headers: Headers, first_offset: int, leader_epoch: int, append_time: int
) -> Assigned:
    """A leader's append: consecutive offsets from `first_offset` and the leader epoch
    stamped on each batch (and the LogAppendTime, when not NO_TIMESTAMP)."""
    view = memoryview(buf)
    offset = first_offset
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    parts: list[Records] = []
    bases: list[int] = []
    for pos, header in headers:
        end = pos + header.batch_length + 12
        if append_time == NO_TIMESTAMP:
            # Only the header is copied and patched; the records go from the caller's buffer.
            head = bytearray(view[pos : pos + BATCH_HEADER_SIZE])
            patch_base_offset(head, 0, offset)
            patch_leader_epoch(head, 0, leader_epoch)
            parts.append(head)
            parts.append(view[pos + BATCH_HEADER_SIZE : end])
            batch_max = header.max_timestamp
        else:
            batch = bytearray(view[pos:end])
            patch_base_offset(batch, 0, offset)
            patch_leader_epoch(batch, 0, leader_epoch)
            patch_log_append_time(batch, 0, append_time)  # re-CRCs the batch
            parts.append(batch)
            batch_max = append_time
        bases.append(offset)
        offset += header.last_offset_delta + 1
        if batch_max > max_ts:
            max_ts, offset_of_max = batch_max, offset - 1
    return Assigned(parts, bases, offset - 1, max_ts, offset_of_max)


def follower_offsets(buf: Records, headers: Headers, name: str) -> Assigned:
    """A follower's append: the offsets the leader gave, which must increase."""
    previous = -1
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    for _pos, header in headers:
        last = header.base_offset + header.last_offset_delta
        if last <= previous:
            raise OffsetsOutOfOrderError(
                f"out of order offsets in the follower append to {name}: {last} after {previous}"
            )
        previous = last
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max = header.max_timestamp, last
    end = headers[-1][0] + headers[-1][1].batch_length + 12
    return Assigned(
        [memoryview(buf)[:end]],
        [h.base_offset for _p, h in headers],
        previous,
        max_ts,
        offset_of_max,
    )
