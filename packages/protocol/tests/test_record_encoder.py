"""The C record encoder (`append_record`, and `builder_append`: BatchBuilder.append in C)
against the pure-Python reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.protocol import records
from gregor.protocol.errors import EncodeError
from gregor.protocol.records import BatchBuilder, iter_batches

native = records._append_record
needs_native = pytest.mark.skipif(native is None, reason="the C extension was not built")

fields = st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=8190, max_size=8200))
offset_deltas = st.one_of(st.integers(0, 200), st.integers(0, 2**31 - 1))
timestamp_deltas = st.one_of(st.integers(-(2**20), 2**20), st.integers(-(2**63), 2**63 - 1))


def reference(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    buf = bytearray()
    records._append_record_py(buf, offset_delta, timestamp_delta, key, value, ())
    return bytes(buf)


@needs_native
@given(offset_deltas, timestamp_deltas, fields, fields)
def test_the_c_encoder_writes_the_reference_bytes(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> None:
    assert native is not None
    buf = bytearray(b"prefix")
    size = native(buf, offset_delta, timestamp_delta, key, value)
    expected = reference(offset_delta, timestamp_delta, key, value)
    assert size == len(expected)
    assert bytes(buf) == b"prefix" + expected


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (2**31, 0, None, b"v"),  # an offset delta beyond int32
        (-1, 0, None, b"v"),
        (0, 2**64, None, b"v"),  # a timestamp delta beyond int64
        (0, 0, "text", b"v"),  # str is not bytes
        (0, 0, None, 5),
        (0.5, 0, None, b"v"),
    ],
)
def test_the_c_encoder_leaves_the_rest_to_the_reference(args: tuple[object, ...]) -> None:
    assert native is not None
    buf = bytearray(b"untouched")
    assert native(buf, *args) is None
    assert buf == b"untouched"


def test_builders_with_and_without_the_extension_build_the_same_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def build() -> bytes:
        builder = BatchBuilder(base_timestamp=1_000)
        builder.append(b"v" * 100, timestamp=1_005)
        builder.append(b"v", key=b"k", timestamp=900)  # before the base: a negative delta
        builder.append(None, key=b"tombstone", timestamp=1_000)
        builder.append(b"h", headers=[("name", b"x"), ("null", None)], timestamp=1_001)
        builder.append(
            bytearray(b"buffer"), key=memoryview(b"key"), timestamp=1_002, offset_delta=70_000
        )
        return builder.build()

    with_native = build()
    monkeypatch.setattr(records, "_append_record", None)
    monkeypatch.setattr(records, "_builder_append", None)
    assert build() == with_native
    [batch] = list(iter_batches(with_native))
    assert [(r.offset, r.key, r.value) for r in batch.records()] == [
        (0, None, b"v" * 100),
        (1, b"k", b"v"),
        (2, b"tombstone", None),
        (3, None, b"h"),
        (70_000, b"key", b"buffer"),
    ]


def test_a_value_of_the_wrong_type_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="must be bytes"):
        BatchBuilder().append("text")  # type: ignore[arg-type]


small_fields = st.one_of(st.none(), st.binary(max_size=300))
timestamps = st.one_of(st.integers(0, 2**41), st.integers(-(2**62), 2**62))  # deltas fit int64


@needs_native
@given(st.lists(st.tuples(small_fields, small_fields, timestamps), min_size=1, max_size=8))
def test_the_c_builder_append_builds_the_reference_batch(
    appends: list[tuple[bytes | None, bytes | None, int]],
) -> None:
    """Each append is taken by the C twin or, where a delta leaves int64, by the reference;
    either way the batch and the builder's state are the reference's."""
    builder_append = records._builder_append
    assert builder_append is not None
    native_builder, reference_builder = BatchBuilder(), BatchBuilder()
    for key, value, timestamp in appends:
        if builder_append(native_builder, value, key, timestamp) is None:
            native_builder.append(value, key, timestamp=timestamp)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records, "_append_record", None)
        patch.setattr(records, "_builder_append", None)
        for key, value, timestamp in appends:
            reference_builder.append(value, key, timestamp=timestamp)
    assert len(native_builder) == len(reference_builder) == len(appends)
    assert native_builder.estimated_size() == reference_builder.estimated_size()
    assert native_builder.build() == reference_builder.build()


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        ("text", None, 1),  # str is not bytes
        (b"v", 5, 1),
        (b"v", None, 2**63),  # a timestamp beyond int64
        (b"v", None, 1.5),
        (b"v", None, -(2**63)),  # its delta from the base does not fit int64
    ],
)
def test_the_c_builder_append_leaves_the_rest_to_the_reference(args: tuple[object, ...]) -> None:
    builder_append = records._builder_append
    assert builder_append is not None
    builder = BatchBuilder(base_timestamp=2**62)
    assert builder_append(builder, *args) is None
    assert (len(builder), builder.estimated_size()) == (0, records.BATCH_HEADER_SIZE)


@needs_native
def test_the_c_builder_append_takes_only_a_batch_builder() -> None:
    builder_append = records._builder_append
    assert builder_append is not None

    class Subclass(BatchBuilder):
        __slots__ = ()

    assert builder_append(Subclass(), b"v", None, 1) is None
    assert builder_append(object(), b"v", None, 1) is None
