"""Cross-check against kafka-python's message classes, which it builds at run time from its
own copy of Kafka's JSON with its own codec (tagged fields included).

Our messages encode to what kafka-python decodes to the same field values, and kafka-python
encodes the same values to bytes that decode with ours to them. Fields are paired in wire
order, both sides walked at once. The hand-written classes kafka-python keeps for old
versions are checked in test_crosscheck_messages_classic.
"""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from typing import Any

import kafka.protocol
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import BitField

from gregor.protocol.apis import REQUESTS, RESPONSES
from gregor.protocol.apis.api_versions import ApiVersionsResponse
from gregor.protocol.schema import UUID, ArrayOf, Field, Message, Struct, StructOf
from gregor_testing.message_strategies import as_tree, message_settings, messages

INT32_MIN = -(2**31)


def _their_classes() -> dict[tuple[int, bool], type[Any]]:
    """(api key, is request) -> kafka-python's class."""
    found: dict[tuple[int, bool], type[Any]] = {}
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if info.name.startswith(("kafka.protocol.old", "kafka.protocol.generate_stubs")):
            continue
        for obj in vars(importlib.import_module(info.name)).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found[(obj.API_KEY, obj.is_request())] = obj
    return found


def _their_versions(theirs: type[Any]) -> range:
    # Their classes claim every version from 0; the JSON they come from starts later
    # where Kafka 4 dropped old versions.
    lo, _, hi = theirs.json["validVersions"].partition("-")
    return range(int(lo), int(hi or lo) + 1)


CASES = [
    pytest.param(ours, version, theirs, id=f"{ours.__name__}-v{version}")
    for (key, is_request), theirs in sorted(_their_classes().items())
    if (ours := (REQUESTS if is_request else RESPONSES).get(key)) is not None
    for version in _their_versions(theirs)
    if version in ours.valid_versions
]


class Unrepresentable(Exception):
    """A value their classes cannot hold (the test then draws another message)."""


def _pairs(cls: type[Struct], struct: Any, version: int) -> list[tuple[Field, Any]]:
    ours = [f for f in cls.fields() if version in f.versions]
    theirs = [f for f in struct.fields.values() if f.for_version_q(version)]
    # Paired by position: kafka-python renames a few fields (e.g. Metadata's
    # cluster_authorized_operations), and a count mismatch fails the zip.
    return list(zip(ours, theirs, strict=True))


def their_tree(cls: type[Struct], struct: Any, obj: Any, version: int) -> list[Any]:
    """Field values of their object in wire order, mapped to the values on the wire."""
    return [
        _their_value(ours, theirs, getattr(obj, theirs.name), version)
        for ours, theirs in _pairs(cls, struct, version)
    ]


def _their_value(ours: Field, theirs: Any, value: Any, version: int) -> Any:
    kind = ours.kind
    if isinstance(kind, StructOf):
        if value is None and version not in ours.nullable:
            return as_tree(ours.default, version)  # their tagged structs default to None
        return None if value is None else their_tree(kind.cls, theirs, value, version)
    if isinstance(kind, ArrayOf) and isinstance(kind.element, StructOf) and value is not None:
        return [their_tree(kind.element.cls, theirs, item, version) for item in value]
    if kind is UUID and value is None:
        return uuid.UUID(int=0)  # their zero UUID
    if getattr(theirs, "_type", None) is BitField:  # a set of bit numbers
        if value is None:
            return INT32_MIN
        bits = sum(1 << bit for bit in value)
        return bits - (1 << 32) if bits >= 1 << 31 else bits
    return value


def their_object(cls: type[Struct], struct: Any, message: Struct, version: int) -> dict[str, Any]:
    """Keyword arguments for their class holding the values of our struct."""
    kwargs = {}
    for ours, theirs in _pairs(cls, struct, version):
        value = getattr(message, ours.name)
        if version in ours.tagged and value == ours.default:
            continue  # their classes write the tagged fields they are given
        kwargs[theirs.name] = _their_input(ours, theirs, value, version)
    return kwargs


def _their_input(ours: Field, theirs: Any, value: Any, version: int) -> Any:
    kind = ours.kind
    if isinstance(kind, StructOf) and value is not None:
        return theirs.data_class(**their_object(kind.cls, theirs, value, version))
    if isinstance(kind, ArrayOf) and isinstance(kind.element, StructOf) and value is not None:
        element = kind.element.cls
        return [theirs.data_class(**their_object(element, theirs, item, version)) for item in value]
    if getattr(theirs, "_type", None) is BitField:
        if value == INT32_MIN:
            return None
        if value < 0:
            raise Unrepresentable(f"kafka-python's BitField cannot hold {value}")
        return {bit for bit in range(31) if value >> bit & 1}
    return value


def drop_unknown_tags(value: Any) -> None:
    """Unknown tags, which kafka-python refuses inside a struct held by a tagged field (and
    which the round-trip tests cover)."""
    if isinstance(value, Struct):
        value.unknown_tagged_fields = None
        for f in type(value).fields():
            drop_unknown_tags(getattr(value, f.name))
    elif isinstance(value, list):
        for item in value:
            drop_unknown_tags(item)


@pytest.mark.parametrize(("cls", "version", "theirs"), CASES)
@message_settings(3)
@given(data=st.data())
def test_kafka_python_and_gregor_read_each_other(
    cls: type[Message], version: int, theirs: type[Any], data: st.DataObject
) -> None:
    message = data.draw(messages(cls, version))
    drop_unknown_tags(message)
    if isinstance(message, ApiVersionsResponse):
        # kafka-python reads and writes any ApiVersions answer with an error as a v0 body
        # (Kafka's rule is for UNSUPPORTED_VERSION only; test_framing covers ours).
        message.error_code = 0
    tree = as_tree(message, version)
    try:
        their_message = theirs(
            version=version, **their_object(cls, theirs._struct, message, version)
        )
    except Unrepresentable:
        reject()
    our_bytes = message.encode(version)

    decoded = theirs.decode(our_bytes, version=version)
    assert their_tree(cls, theirs._struct, decoded, version) == tree

    their_bytes = their_message.encode(version=version)
    assert as_tree(cls.decode(their_bytes, version), version) == tree


def test_most_versions_are_covered() -> None:
    assert len(CASES) >= 400
