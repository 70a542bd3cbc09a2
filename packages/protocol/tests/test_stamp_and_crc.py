"""CRC-32C and `stamp_produced_batch`: the C extension against the pure-Python reference."""

from __future__ import annotations

import importlib
import random
import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.protocol import checksums, records
from gregor.protocol.records import (
    STAMPED_PREFIX,
    BatchBuilder,
    Compression,
    ControlType,
    StampedBatch,
    build_control_batch,
    patch_base_offset,
    patch_leader_epoch,
    read_batch_header,
)

CRCS = [checksums.crc32c_reference]
if checksums.crc32c is not checksums.crc32c_reference:
    CRCS.append(checksums.crc32c)
STAMPS = [records._stamp_produced_batch_py]
if records.stamp_produced_batch is not records._stamp_produced_batch_py:
    STAMPS.append(records.stamp_produced_batch)

Stamp = Callable[[bytes, int, int, int], StampedBatch | None]


def test_the_extension_is_used_when_built() -> None:
    native = records.native_function("stamp_produced_batch")
    assert (records.stamp_produced_batch is native) == (native is not None)


@pytest.mark.skipif(len(STAMPS) == 1, reason="the C extension was not built")
def test_the_extension_exports_its_batch_check_in_a_capsule() -> None:
    module = importlib.import_module("gregor.protocol._records_speedups")
    assert type(module.produced_batch_api).__name__ == "PyCapsule"
    assert "produced_batch_api" in repr(module.produced_batch_api)


@pytest.mark.parametrize("crc", CRCS)
def test_crc32c_check_value_and_continuation(crc: Callable[..., int]) -> None:
    assert crc(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc(b"") == 0
    assert crc(b"6789", crc(b"12345")) == 0xE3069283


@pytest.mark.skipif(len(CRCS) == 1, reason="the C extension was not built")
def test_crc32c_matches_the_reference_at_every_block_boundary() -> None:
    rng = random.Random(3)
    # Around the three-stream block sizes (3 x 2048 and 3 x 256 bytes) and unaligned starts.
    sizes = [*range(80), 767, 768, 769, 6143, 6144, 6145, 16_291, 70_000, 300_000]
    for size in sizes:
        for skip in range(3):
            data = memoryview(rng.randbytes(size + skip))[skip:]
            value = rng.randrange(2**32)
            assert checksums.crc32c(data) == checksums.crc32c_reference(data)
            assert checksums.crc32c(data, value) == checksums.crc32c_reference(data, value)


def produced_batch(count: int = 3, **kwargs: object) -> bytes:
    builder = BatchBuilder(**kwargs)  # type: ignore[arg-type]
    for i in range(count):
        builder.append(b"value-%d" % i, key=b"k", timestamp=1_000 + 7 * i)
    return builder.build()


@pytest.fixture(params=STAMPS, ids=lambda f: "py" if f is STAMPS[0] else "c")
def stamp(request: pytest.FixtureRequest) -> Stamp:
    function: Stamp = request.param
    return function


def test_stamp_sets_offset_and_epoch_and_returns_the_header(stamp: Stamp) -> None:
    batch = produced_batch(4, producer_id=9, producer_epoch=2, base_sequence=40)
    result = stamp(batch, 123_456_789_012, 17, 1 << 20)
    assert result is not None
    prefix, delta, first_ts, max_ts, pid, producer_epoch, sequence = result
    expected = bytearray(batch)
    patch_base_offset(expected, 0, 123_456_789_012)
    patch_leader_epoch(expected, 0, 17)
    assert isinstance(prefix, bytes) and len(prefix) == STAMPED_PREFIX
    stamped = prefix + batch[STAMPED_PREFIX:]
    assert stamped == bytes(expected)
    assert (delta, first_ts, max_ts) == (3, 1_000, 1_021)
    assert (pid, producer_epoch, sequence) == (9, 2, 40)
    header = read_batch_header(stamped)
    assert (header.base_offset, header.partition_leader_epoch) == (123_456_789_012, 17)


def test_stamp_takes_any_buffer_and_compressed_batches(stamp: Stamp) -> None:
    batch = produced_batch(5, compression=Compression.GZIP)
    for buf in (batch, bytearray(batch), memoryview(b"xx" + batch)[2:]):
        result = stamp(buf, 5, -1, len(batch))  # type: ignore[arg-type]
        assert result is not None
        header = read_batch_header(result[0] + batch[STAMPED_PREFIX:])
        assert (header.base_offset, header.partition_leader_epoch) == (5, -1)


def _patched(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def unfit_inputs() -> dict[str, tuple[bytes, int, int]]:
    """(buffer, leader epoch, max size) that stamping must refuse."""
    good = produced_batch()
    flipped = bytearray(good)
    flipped[-1] ^= 1
    return {
        "empty": (b"", 0, 1 << 20),
        "short header": (good[:60], 0, 1 << 20),
        "truncated": (good[:-1], 0, 1 << 20),
        "two batches": (good + good, 0, 1 << 20),
        "bad crc": (bytes(flipped), 0, 1 << 20),
        "magic 1": (_patched(good, ">b", 16, 1), 0, 1 << 20),
        "base offset set": (_patched(good, ">q", 0, 3), 0, 1 << 20),
        "count mismatch": (_patched(good, ">i", 57, 2), 0, 1 << 20),
        "too large": (good, 0, len(good) - 1),
        "epoch over int32": (good, 2**31, 1 << 20),
        "epoch under int32": (good, -(2**31) - 1, 1 << 20),
        "control batch": (
            build_control_batch(
                ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0
            ),
            0,
            1 << 20,
        ),
        "transactional, no producer": (produced_batch(is_transactional=True), 0, 1 << 20),
        "unknown codec": (_patched(good, ">h", 21, 5), 0, 1 << 20),
        "no records": (_patched(_patched(good, ">i", 57, 0), ">i", 23, -1), 0, 1 << 20),
    }


@pytest.mark.parametrize("case", sorted(unfit_inputs()))
def test_stamp_refuses_what_the_checking_path_must_judge(stamp: Stamp, case: str) -> None:
    buf, epoch, max_size = unfit_inputs()[case]
    assert stamp(buf, 0, epoch, max_size) is None


@pytest.mark.skipif(len(STAMPS) == 1, reason="the C extension was not built")
@given(st.binary(max_size=200), st.integers(0, 120), st.integers(0, 255))
def test_c_and_python_stamp_agree_on_mutated_batches(noise: bytes, at: int, value: int) -> None:
    batch = bytearray(produced_batch(2) + noise[: len(noise) % 3])
    if at < len(batch):
        batch[at] = value
    python, native = STAMPS
    assert native(bytes(batch), 42, 7, 1 << 20) == python(bytes(batch), 42, 7, 1 << 20)
