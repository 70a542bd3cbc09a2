"""Hypothesis strategies for gregor-protocol messages, built from the schema itself.

`messages(cls, version)` draws instances of a request or response class holding only
what is valid at that version: fields absent from the version keep their defaults, None
appears only where the field is nullable at that version, integers stay within their wire
width, and in flexible versions some structs carry unknown tagged fields (which a decoder
must keep and write back). With `tagged=False` tagged fields keep their defaults and no
unknown tags appear, for libraries that leave tagged fields to their users.

`as_tree(message, version)` lists a message's field values in wire order, the neutral form
in which the cross-checks compare our messages with other libraries' objects.
"""

from __future__ import annotations

import functools
import os
import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gregor.protocol import schema
from gregor.protocol.schema import ArrayOf, Field, Kind, Message, Struct, StructOf

# GREGOR_FUZZ_SCALE multiplies the example counts of the property and fuzz tests (the nox
# session fuzz_protocol sets it); the default keeps the CI run short.
FUZZ_SCALE = max(1, int(os.environ.get("GREGOR_FUZZ_SCALE", "1")))


def scaled(examples: int) -> int:
    return examples * FUZZ_SCALE


def message_settings(examples: int) -> settings:
    """Settings of a property test over messages: `examples` per run, times the scale.

    No deadline (this machine is slow and shared), and large drawn messages are fine.
    """
    return settings(
        max_examples=scaled(examples),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _int_range(bits: int, signed: bool) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return st.integers(0, (1 << bits) - 1)


_SCALARS: dict[Kind, st.SearchStrategy[Any]] = {
    schema.INT8: _int_range(8, True),
    schema.INT16: _int_range(16, True),
    schema.INT32: _int_range(32, True),
    schema.INT64: _int_range(64, True),
    schema.UINT16: _int_range(16, False),
    schema.UINT32: _int_range(32, False),
    # NaN is a valid float64 on the wire but never equal to itself, so round-trip
    # comparisons could not see it survive; the fuzz tests still feed it to the decoders.
    schema.FLOAT64: st.floats(allow_nan=False),
    schema.BOOL: st.booleans(),
    schema.UUID: st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b)),
    schema.STRING: st.text(max_size=12),
    schema.BYTES: st.binary(max_size=16),
    # Record data is opaque at this layer (gregor.protocol.records parses it).
    schema.RECORDS: st.binary(max_size=48),
}

# Unknown tags: anything a uvarint holds that the struct does not know at this version.
_UNKNOWN_TAG = st.integers(0, 2**32 - 1)


def messages(cls: type[Message], version: int, *, tagged: bool = True) -> st.SearchStrategy[Any]:
    """Instances of a request or response class, valid at `version`."""
    return structs(cls, version, cls.is_flexible(version), tagged)


@functools.cache
def structs(
    cls: type[Struct], version: int, flexible: bool, tagged: bool = True
) -> st.SearchStrategy[Any]:
    """Instances of any struct, valid inside a message of `version`."""
    present = [
        f for f in cls.fields() if version in f.versions and (tagged or version not in f.tagged)
    ]
    values = st.fixed_dictionaries(
        {f.name: field_values(f, version, flexible, tagged) for f in present}
    )
    if not flexible or not tagged:
        return values.map(lambda kw: cls(**kw))
    known = {f.tag for f in present if version in f.tagged}
    unknown = st.none() | st.lists(
        st.tuples(_UNKNOWN_TAG.filter(lambda tag: tag not in known), st.binary(max_size=8)),
        min_size=1,
        max_size=2,
        unique_by=lambda item: item[0],
    ).map(sorted)  # written in tag order, so decoded in tag order
    return st.builds(_with_unknown_tags, st.just(cls), values, unknown)


def _with_unknown_tags(
    cls: type[Struct], values: dict[str, Any], unknown: list[tuple[int, bytes]] | None
) -> Struct:
    struct = cls(**values)
    struct.unknown_tagged_fields = unknown
    return struct


def field_values(
    field: Field, version: int, flexible: bool, tagged: bool = True
) -> st.SearchStrategy[Any]:
    """Values of one field at `version`: None only where the field is nullable."""
    kind = field.kind
    if isinstance(kind, ArrayOf):
        element = _kind_values(kind.element, version, flexible, tagged)
        size = 3 if isinstance(kind.element, StructOf) else 5
        values: st.SearchStrategy[Any] = st.lists(element, max_size=size)
    else:
        values = _kind_values(kind, version, flexible, tagged)
    if version in field.nullable:
        return st.none() | values
    return values


def _kind_values(
    kind: Kind | StructOf, version: int, flexible: bool, tagged: bool
) -> st.SearchStrategy[Any]:
    if isinstance(kind, StructOf):
        return st.deferred(lambda: structs(kind.cls, version, flexible, tagged))
    return _SCALARS[kind]


def as_tree(value: Any, version: int, *, tagged: bool = True) -> Any:
    """A message's field values at `version` in wire order, nested structs as lists.

    With `tagged=False` the tagged fields of flexible versions are left out.
    """
    if isinstance(value, Struct):
        return [
            as_tree(getattr(value, f.name), version, tagged=tagged)
            for f in type(value).fields()
            if version in f.versions and (tagged or version not in f.tagged)
        ]
    if isinstance(value, list):
        return [as_tree(item, version, tagged=tagged) for item in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value
