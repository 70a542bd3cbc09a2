"""The records of `__transaction_state`: one per transactional id, its latest state.

The transaction coordinator keeps its state in the compacted internal topic
`__transaction_state` as key/value records in Kafka's formats (`TransactionLogKey`,
`TransactionLogValue`), so Kafka's dump tools read our log and we read theirs. Each key and
each value starts with its version as an int16:

- key version 0: the transactional id;
- value versions 0 and 1 (v1 is flexible and adds tagged fields: the previous and next
  producer ids and the client's transaction version): the producer id and epoch, the
  timeout, the state as an int8, the partitions of the transaction (null when there are
  none), and the last-update and start timestamps.

A null value is a tombstone: the transactional id expired. Kafka 3.x writes keys at v0 and
values at v0, which are the defaults here.
"""

# ruff: noqa: RUF012  (message schemas: the generated __init__ copies list defaults)

from __future__ import annotations

from typing import Annotated, Final

from gregor.protocol.errors import DecodeError
from gregor.protocol.primitives import INT16
from gregor.protocol.schema import Int8, Int16, Int32, Int64, Message, Struct, V

TRANSACTION_LOG_KEY_VERSION: Final = 0
TRANSACTION_LOG_VALUE_VERSION: Final = 0


class TransactionLogKey(Message, valid="0", flexible="none"):
    transactional_id: str = ""


class TransactionPartitions(Struct):
    topic: str = ""
    partition_ids: list[Int32] = []


class TransactionLogValue(Message, valid="0-1", flexible="1+"):
    producer_id: Int64 = 0
    previous_producer_id: Annotated[Int64, V("1+", tag=0)] = -1
    next_producer_id: Annotated[Int64, V("1+", tag=1)] = -1
    producer_epoch: Int16 = 0
    transaction_timeout_ms: Int32 = 0
    transaction_status: Int8 = 0
    transaction_partitions: list[TransactionPartitions] | None = None
    transaction_last_update_timestamp_ms: Int64 = 0
    transaction_start_timestamp_ms: Int64 = 0
    client_transaction_version: Annotated[Int16, V("1+", tag=2)] = 0


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise DecodeError(f"{what} of {len(data)} bytes has no version")
    version: int = INT16.unpack_from(data, 0)[0]
    return version


def encode_key(transactional_id: str) -> bytes:
    return INT16.pack(TRANSACTION_LOG_KEY_VERSION) + TransactionLogKey(transactional_id).encode(
        TRANSACTION_LOG_KEY_VERSION
    )


def encode_value(value: TransactionLogValue, version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
    return INT16.pack(version) + value.encode(version)


def decode_key(data: bytes | bytearray | memoryview) -> str:
    """The transactional id; DecodeError for a key of another version."""
    data = bytes(data)
    version = _version(data, "a __transaction_state key")
    if version not in TransactionLogKey.valid_versions:
        raise DecodeError(f"a __transaction_state key of unknown version {version}")
    key: TransactionLogKey = TransactionLogKey.decode(data, version, 2)
    return key.transactional_id


def decode_value(data: bytes | bytearray | memoryview) -> TransactionLogValue:
    """The value at whichever version it was written; DecodeError for an unknown one."""
    data = bytes(data)
    version = _version(data, "a __transaction_state value")
    if version not in TransactionLogValue.valid_versions:
        raise DecodeError(f"TransactionLogValue has versions 0-1, not {version}")
    value: TransactionLogValue = TransactionLogValue.decode(data, version, 2)
    return value
