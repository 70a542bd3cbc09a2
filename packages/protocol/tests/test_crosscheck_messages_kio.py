"""Cross-check against Aiven's kio, whose classes are generated per API and version by
code nobody here wrote: messages kio encodes decode with ours to the same field values,
and ours encode to what kio decodes back to the message it started from.

Values are drawn by kio's own hypothesis support, so they are what kio can represent
(e.g. its error codes are an enum of the known codes). Fields are compared in wire order,
so the comparison does not depend on the two libraries naming fields alike.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map as kio_api_names
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from gregor.protocol.apis import REQUESTS, RESPONSES
from gregor.protocol.schema import Message
from gregor_testing.message_strategies import as_tree, message_settings

# kio leaves record data to the user's strategies; it is opaque bytes at this layer.
st.register_type_strategy(Records, st.binary(max_size=48).map(Records))

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


def _kio_class(cls: type[Message], version: int) -> type[Any] | None:
    if cls.api_key not in kio_api_names:
        return None  # the ZooKeeper-era inter-broker APIs are gone from Kafka 4, so from kio
    load = load_request_schema if cls in REQUESTS.values() else load_response_schema
    try:
        return load(cls.api_key, version)
    except UnknownEntity:  # versions Kafka 4 dropped
        return None


CASES = [
    pytest.param(cls, version, kio_cls, id=f"{cls.__name__}-v{version}")
    for key in sorted(REQUESTS)
    for cls in (REQUESTS[key], RESPONSES[key])
    for version in cls.valid_versions
    if (kio_cls := _kio_class(cls, version)) is not None
]


def kio_as_tree(value: Any, kafka_type: str | None = None) -> Any:
    """Field values of a kio entity, in wire order, as the plain values on the wire."""
    if dataclasses.is_dataclass(value):
        return [
            kio_as_tree(getattr(value, f.name), f.metadata.get("kafka_type"))
            for f in dataclasses.fields(value)
        ]
    if isinstance(value, tuple):
        return [kio_as_tree(item, kafka_type) for item in value]
    # kio gives some wire values richer types; these map them back to the wire.
    if value is None and kafka_type == "uuid":
        return uuid.UUID(int=0)
    if value is None and kafka_type == "datetime_i64":
        return -1
    if isinstance(value, datetime.datetime):
        return (value - _EPOCH) // _MS
    if isinstance(value, datetime.timedelta):
        return value // _MS
    if isinstance(value, enum.Enum):
        return value.value
    for plain in (bool, int, float, str, bytes):
        if isinstance(value, plain):
            return plain(value)
    return value


def kio_encode(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def kio_decode(kio_cls: type[Any], data: bytes) -> Any:
    entity, size = entity_reader(kio_cls)(data, 0)
    assert size == len(data)
    return entity


@pytest.mark.parametrize(("cls", "version", "kio_cls"), CASES)
@message_settings(3)
@given(data=st.data())
def test_kio_and_gregor_read_each_other(
    cls: type[Message], version: int, kio_cls: type[Any], data: st.DataObject
) -> None:
    theirs = data.draw(st.from_type(kio_cls))
    their_bytes = kio_encode(theirs)
    ours = cls.decode(their_bytes, version)
    assert as_tree(ours, version) == kio_as_tree(theirs)

    our_bytes = ours.encode(version)
    # Both write the same bytes: same field order, lengths, null markers and tag sections.
    assert our_bytes == their_bytes
    try:
        back = kio_decode(kio_cls, our_bytes)
    except ValueError:
        # kio draws durations up to the int64 limit that its own reader cannot turn back
        # into timedeltas; then it cannot read what it wrote itself either.
        with pytest.raises(ValueError, match="overflow"):
            kio_decode(kio_cls, their_bytes)
        return
    # Compared with kio's reading of its own bytes: a drawn datetime in an ambiguous hour of
    # some zone never equals the same instant read back in UTC (Python's fold rule).
    assert back == kio_decode(kio_cls, their_bytes)


def test_kio_covers_most_versions() -> None:
    assert len(CASES) >= 400
