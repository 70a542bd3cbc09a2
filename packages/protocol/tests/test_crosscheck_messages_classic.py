"""Cross-check against the hand-written protocol classes of aiokafka and kafka-python.

Both libraries describe each API version as a positional `Schema` of (name, type) pairs,
written by hand long before Kafka published its JSON. For every API and version they have,
our messages encode to what their classes decode to the same field values, and what their
classes encode (the same values) decodes with ours, byte for byte the same.

Their schemas keep tagged fields as an opaque `tags` dict, so messages here leave tagged
fields at their defaults; the kio cross-check covers tagged fields.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from gregor.protocol.apis import REQUESTS, RESPONSES
from gregor.protocol.schema import Message, Struct, StructOf
from gregor_testing.message_strategies import message_settings, messages

INT32_MIN = -(2**31)

LIBRARIES = {"aiokafka": "aiokafka.protocol", "kafka-python": "kafka.protocol.old"}

# Where their hand-written schemas disagree with Kafka's, on the wire; ours follow Kafka.
THEIR_MISTAKES = {
    # current_leader_epoch is an int32 in Kafka; aiokafka writes an int64.
    "aiokafka-OffsetRequest_v4",
    "aiokafka-OffsetRequest_v5",
    # Kafka made DescribeAcls v2 flexible (compact strings, tagged fields); theirs is not.
    "aiokafka-DescribeAclsRequest_v2",
    "aiokafka-DescribeAclsResponse_v2",
    "kafka-python-DescribeAclsRequest_v2",
    "kafka-python-DescribeAclsResponse_v2",
    # partitions is an array of int32 in Kafka; kafka-python has a single int32.
    "kafka-python-DescribeLogDirsRequest_v0",
}


class Unrepresentable(Exception):
    """A value their classes cannot hold (the test then draws another message)."""


def _classic_classes(package: str) -> dict[tuple[int, str, int], type[Any]]:
    """(api key, "Request"/"Response", version) -> the library's class for it."""
    found: dict[tuple[int, str, int], type[Any]] = {}
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, obj in vars(module).items():
            # The version comes from the class name: both libraries' ListGroupsRequest_v2
            # claims API_VERSION 1 (its schema is the same as v1's).
            match = re.fullmatch(r"\w+(Request|Response)(?:Struct)?_v(\d+)", name)
            if match and isinstance(obj, type) and hasattr(obj, "SCHEMA"):
                found[(obj.API_KEY, match[1], int(match[2]))] = obj
    return found


def _cases() -> list[Any]:
    cases = []
    for library, package in LIBRARIES.items():
        types = importlib.import_module(f"{package}.types")
        for (key, side, version), theirs in sorted(_classic_classes(package).items()):
            ours = (REQUESTS if side == "Request" else RESPONSES).get(key)
            case_id = f"{library}-{theirs.__name__}"
            if ours and version in ours.valid_versions and case_id not in THEIR_MISTAKES:
                cases.append(pytest.param(ours, version, theirs.SCHEMA, types, id=case_id))
    return cases


CASES = _cases()

# The two sides group the same wire fields differently: their schemas inline some structs
# into others (CreatePartitions' new_partitions) and write a one-field struct as its field
# (Metadata v0-8 topics as an array of strings). Both sides are compared in a normal form:
# inline structs spliced into their parent, and a struct of one field written as that field.


def _collapse(items: list[Any]) -> Any:
    return items[0] if len(items) == 1 else items


def ours_normal(value: Any, version: int) -> Any:
    if isinstance(value, Struct):
        return _collapse(_our_items(value, version))
    if isinstance(value, list):
        return [ours_normal(item, version) for item in value]
    return value


def _our_items(struct: Struct, version: int) -> list[Any]:
    items: list[Any] = []
    for f in type(struct).fields():
        if version not in f.versions or version in f.tagged:
            continue
        value = getattr(struct, f.name)
        if isinstance(f.kind, StructOf) and value is not None:
            items += _our_items(value, version)
        else:
            items.append(ours_normal(value, version))
    return items


def theirs_normal(kind: Any, value: Any, types: ModuleType) -> Any:
    if isinstance(kind, types.Schema):
        return _collapse(_their_items(kind, value, types))
    if isinstance(kind, types.Array):
        return None if value is None else [theirs_normal(kind.array_of, v, types) for v in value]
    if kind is getattr(types, "BitField", None):  # kafka-python: a set of bit numbers
        return _int32_of_bits(value)
    return value


def _int32_of_bits(bits: set[int] | None) -> int:
    if bits is None:
        return INT32_MIN  # kafka-python's null: bit 31 alone
    value = sum(1 << bit for bit in bits)
    return value - (1 << 32) if value >= 1 << 31 else value


def _their_items(schema: Any, values: Any, types: ModuleType) -> list[Any]:
    items: list[Any] = []
    # kafka-python's decoder drops a struct's trailing tags dict when it is empty.
    values = [*values, {}] if len(values) < len(schema.fields) else values
    for kind, value in zip(schema.fields, values, strict=True):
        if kind is types.TaggedFields:
            continue
        if isinstance(kind, types.Schema):
            items += _their_items(kind, value, types)
        else:
            items.append(theirs_normal(kind, value, types))
    return items


def their_input(kind: Any, value: Any, types: ModuleType) -> Any:
    """Their value for a field, from the normal form (the inverse of theirs_normal)."""
    if isinstance(kind, types.Schema):
        items = iter([value] if _leaves(kind, types) == 1 else value)
        out = _their_input_items(kind, items, types)
        assert next(items, items) is items, "our struct has more fields than their schema"
        return out
    if isinstance(kind, types.Array):
        return None if value is None else [their_input(kind.array_of, v, types) for v in value]
    if kind is getattr(types, "BitField", None):
        if value == INT32_MIN:
            return None
        if value < 0:  # its decoder would loop forever on these
            raise Unrepresentable(f"kafka-python's BitField cannot hold {value}")
        return {bit for bit in range(31) if value >> bit & 1}
    return value


def _their_input_items(schema: Any, items: Iterator[Any], types: ModuleType) -> tuple[Any, ...]:
    out: list[Any] = []
    for kind in schema.fields:
        if kind is types.TaggedFields:
            out.append({})
        elif isinstance(kind, types.Schema):
            out.append(_their_input_items(kind, items, types))
        else:
            out.append(their_input(kind, next(items), types))
    return tuple(out)


def _leaves(schema: Any, types: ModuleType) -> int:
    return sum(
        _leaves(kind, types) if isinstance(kind, types.Schema) else 1
        for kind in schema.fields
        if kind is not types.TaggedFields
    )


@pytest.mark.parametrize(("cls", "version", "schema", "types"), CASES)
@message_settings(3)
@given(data=st.data())
def test_classic_classes_and_gregor_read_each_other(
    cls: type[Message], version: int, schema: Any, types: ModuleType, data: st.DataObject
) -> None:
    message = data.draw(messages(cls, version, tagged=False))
    normal = ours_normal(message, version)
    try:
        their_values = their_input(schema, normal, types)
    except Unrepresentable:
        reject()
    our_bytes = message.encode(version)

    stream = io.BytesIO(our_bytes)
    assert theirs_normal(schema, schema.decode(stream), types) == normal
    assert stream.tell() == len(our_bytes)

    their_bytes = schema.encode(their_values)
    assert ours_normal(cls.decode(their_bytes, version), version) == normal
    assert their_bytes == our_bytes


def test_both_libraries_are_covered() -> None:
    libraries = {str(case.id).split("-")[0] for case in CASES}
    assert libraries == {"aiokafka", "kafka"}
    assert len(CASES) >= 250
