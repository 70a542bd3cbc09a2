"""Fuzzing the record formats: mutated batches, message sets and compressed payloads raise
only gregor.protocol's exceptions, and the C and pure-Python record decoders agree on every
input, valid or not.

GREGOR_FUZZ_SCALE multiplies the case counts (the fuzz nox sessions set it); the default
run is a few thousand cases per test. Seeds are fixed, so a failure names its case.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Callable, Iterator

import crc32c
import pytest

from gregor.protocol import records
from gregor.protocol.compression import Compression, compress, decompress
from gregor.protocol.errors import CorruptRecordError, ProtocolError
from gregor.protocol.legacy import (
    LegacyBatch,
    MessageSetBuilder,
    batches_to_message_set,
    message_set_to_batch,
)
from gregor.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchBuilder,
    ControlType,
    RecordBatch,
    build_control_batch,
    iter_batches,
    read_batch_header,
    scan_batches,
)

SCALE = max(1, int(os.environ.get("GREGOR_FUZZ_SCALE", "1")))
CASES = 2_000 * SCALE


def sample_batch(codec: Compression, rng: random.Random, records_count: int) -> bytes:
    builder = BatchBuilder(
        codec, base_offset=rng.randrange(1 << 40), producer_id=rng.randrange(-1, 1 << 20)
    )
    delta = -1
    for _ in range(records_count):
        delta += rng.choice([1, 1, 70])
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 100, 300]))
        headers = [(f"h{j}", rng.randbytes(3) if j else None) for j in range(rng.randrange(3))]
        builder.append(
            value,
            key=key,
            headers=headers,
            timestamp=1_700_000_000_000 + rng.randrange(-5000, 5000),
            offset_delta=delta,
        )
    return builder.build()


def corpus() -> list[bytes]:
    rng = random.Random(1)
    out = [sample_batch(codec, rng, n) for codec in Compression for n in (1, 3, 40)]
    out.append(
        build_control_batch(
            ControlType.COMMIT, producer_id=5, producer_epoch=1, coordinator_epoch=2
        )
    )
    for magic in (0, 1):
        for codec in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
            builder = MessageSetBuilder(magic, codec, base_offset=10)
            for i in range(4):
                builder.append(rng.randbytes(i * 9), key=b"k%d" % i, timestamp=i)
            out.append(builder.build())
    out.append(out[0] + out[-1] + out[5])  # v2, legacy, v2 in one blob
    return out


CORPUS = corpus()


def refresh_crc(data: bytearray) -> None:
    """Give a mutated v2 batch a valid CRC, so the mutation reaches the record decoder."""
    if len(data) >= BATCH_HEADER_SIZE and data[16] == 2:
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    kind = rng.randrange(7)
    if kind == 0:  # truncation
        del out[rng.randrange(len(out) + 1) :]
    elif kind == 1:  # bit flips
        for _ in range(rng.randrange(1, 9)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 2:  # a run of random bytes
        at = rng.randrange(len(out))
        out[at : at + rng.randrange(1, 16)] = rng.randbytes(rng.randrange(1, 16))
    elif kind == 3:  # huge or negative int32 fields: lengths, counts, deltas
        at = rng.choice([8, 23, 57, rng.randrange(max(1, len(out) - 4))])
        value = rng.choice([0x7FFFFFFF, -1, -2, 1 << 30, 0x7FFFFFF0, 48, 49])
        if at + 4 <= len(out):
            struct.pack_into(">i", out, at, value)
    elif kind == 4:  # a huge varint where a record length or field length sits
        at = rng.randrange(BATCH_HEADER_SIZE, max(BATCH_HEADER_SIZE + 1, len(out)))
        big = rng.choice([(1 << 32) - 2, (1 << 31) - 2, 1 << 40, (1 << 70) - 1])
        out[at : at + rng.randrange(1, 3)] = varint(big)
    elif kind == 5:  # a garbage compressed payload behind a valid header
        out[BATCH_HEADER_SIZE:] = rng.randbytes(rng.randrange(0, 200))
        if len(out) >= 12:
            struct.pack_into(">i", out, 8, len(out) - 12)
    else:  # an unrelated blob
        out = bytearray(rng.randbytes(rng.randrange(0, 300)))
    if rng.random() < 0.7:
        refresh_crc(out)
    return bytes(out)


def consume(data: bytes) -> None:
    """Everything a client, a broker or the cleaner does with record data."""
    for batch in iter_batches(data):
        header = batch.header
        _ = (header.compression, header.timestamp_type, header.last_sequence)
        batch.verify_crc()
        for record in batch:
            assert isinstance(record.value, bytes | None) and isinstance(record.offset, int)
        if header.is_control:
            batch.control_record()
    for _ in scan_batches(data):
        pass
    if data[16:17] == b"\x02":
        RecordBatch.from_bytes(data)
    elif data[16:17] in (b"\x00", b"\x01"):
        LegacyBatch.from_bytes(data)
        message_set_to_batch(data)
    batches_to_message_set(data, 1)


def cases(seed: int) -> Iterator[tuple[int, bytes]]:
    rng = random.Random(seed)
    for case in range(CASES):
        data = rng.choice(CORPUS)
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = mutate(data, rng) if data else data
        yield case, data


def expect_only_protocol_errors(action: Callable[[bytes], object], seed: int) -> int:
    failures = 0
    for case, data in cases(seed):
        try:
            action(data)
        except ProtocolError:
            failures += 1
        except Exception as exc:
            raise AssertionError(f"case {case} of seed {seed}: {data!r}") from exc
    return failures


@pytest.mark.parametrize("decoder", ["py", "c"])
def test_mutated_record_data_raises_only_protocol_errors(
    decoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if decoder == "c":
        if records._decode_records_c is None:
            pytest.skip("the C extension was not built")
        monkeypatch.setattr(records, "_decode_records", records._decode_records_c)
    else:
        monkeypatch.setattr(records, "_decode_records", records._decode_records_py)
    rejected = expect_only_protocol_errors(consume, seed=7)
    # The mutations must mostly hit something, and some inputs must survive them.
    assert CASES // 4 < rejected < CASES


@pytest.mark.parametrize(
    "codec", [c for c in Compression if c is not Compression.NONE], ids=lambda c: c.name
)
def test_garbage_and_mutated_compressed_payloads(codec: Compression) -> None:
    rng = random.Random(int(codec))
    valid = compress(codec, rng.randbytes(3000) + bytes(3000))
    for case in range(CASES // 4):
        data = bytearray(valid)
        if case % 3 == 0:
            data = bytearray(rng.randbytes(rng.randrange(1, 400)))
        elif case % 3 == 1:
            del data[rng.randrange(len(data)) :]
        else:
            for _ in range(rng.randrange(1, 5)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        try:
            result = decompress(codec, bytes(data), max_size=1 << 20)
        except CorruptRecordError:
            continue
        except Exception as exc:
            raise AssertionError(f"{codec.name} case {case}: {bytes(data)!r}") from exc
        assert len(result) <= 1 << 20


def record_sections() -> list[tuple[bytes, int]]:
    """(uncompressed records section, records count) of the corpus's v2 batches."""
    out = []
    for data in CORPUS:
        if data[16] != 2:
            continue
        header = read_batch_header(data)
        section = decompress(header.compression, data[BATCH_HEADER_SIZE : header.size])
        out.append((section, header.records_count))
    return out


@pytest.mark.skipif(records._decode_records_c is None, reason="the C extension was not built")
def test_c_and_python_decoders_agree_on_every_input() -> None:
    sections = record_sections()
    rng = random.Random(11)
    c_decoder, py_decoder = records._decode_records_c, records._decode_records_py
    agreed_valid = 0
    for case in range(CASES):
        section, count = rng.choice(sections)
        data = bytearray(section)
        if case % 5:
            for _ in range(rng.randrange(1, 4)):
                if rng.random() < 0.5:
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                else:
                    at = rng.randrange(len(data))
                    data[at : at + 2] = varint(rng.choice([0, 1, 127, 128, 300, (1 << 32) - 1]))
        count += rng.choice([0, 0, 0, 1, -1])
        append_time = rng.choice([None, None, 1_234])
        args = (bytes(data), count, 1 << 40, 1_700_000_000_000, append_time)
        results = []
        for decoder in (py_decoder, c_decoder):
            try:
                results.append(decoder(*args))
            except CorruptRecordError:
                results.append("corrupt")
            except Exception as exc:
                raise AssertionError(f"case {case}: {args!r}") from exc
        assert results[0] == results[1], f"case {case}: {args!r}"
        agreed_valid += results[0] != "corrupt"
    assert 0 < agreed_valid < CASES


@pytest.mark.skipif(records._decode_columns_c is None, reason="the C extension was not built")
def test_c_and_python_column_decoders_agree_on_every_input() -> None:
    """decode_columns, in C and in Python, on one to three mutated sections at a time with
    random [start, end) windows: the same columns, or both corrupt."""
    sections = record_sections()
    rng = random.Random(12)
    agreed_valid = 0
    for case in range(CASES):
        args = []
        for _ in range(rng.randrange(1, 4)):
            section, count = rng.choice(sections)
            data = bytearray(section)
            if case % 4 == 0:
                at = rng.randrange(len(data))
                if rng.random() < 0.5:
                    data[at] ^= 1 << rng.randrange(8)
                else:
                    data[at : at + 2] = varint(rng.choice([0, 1, 127, 128, 300, (1 << 31) - 1]))
            base = rng.choice([0, 1 << 40, (1 << 63) - 20])  # the last overflows
            start = base + rng.randrange(-2, 5)
            end = min(start + rng.choice([0, 3, 10, 1_000]), (1 << 63) - 1)
            append_time = rng.choice([None, None, 1_234])
            kind = rng.randrange(2)
            args.append(
                (bytes(data), count, base, 1_700_000_000_000, append_time, kind, start, end)
            )
        results: list[object] = []
        for decoder in (records._decode_columns_py, records._decode_columns_c):
            try:
                results.append(tuple(x if isinstance(x, int) else bytes(x) for x in decoder(args)))
            except CorruptRecordError:
                results.append("corrupt")
            except Exception as exc:
                raise AssertionError(f"case {case}: {args!r}") from exc
        assert results[0] == results[1], f"case {case}: {args!r}"
        agreed_valid += results[0] != "corrupt"
    assert 0 < agreed_valid < CASES


@pytest.mark.skipif(records._decode_records_c is None, reason="the C extension was not built")
def test_c_decoder_checks_its_arguments() -> None:
    decode = records._decode_records_c
    with pytest.raises(TypeError):
        decode(bytearray(b"\x00"), 1, 0, 0, None)
    with pytest.raises(TypeError):
        decode(b"", 0, 0, 0, "now")
    with pytest.raises(CorruptRecordError, match="declares 1 records in 0 bytes"):
        decode(b"", 1, 0, 0, None)
    with pytest.raises(CorruptRecordError, match="declares -1 records"):
        decode(b"", -1, 0, 0, None)
    assert decode(b"", 0, 0, 0, None) == []
    # Offsets and timestamps past int64 come out exact, as the Python decoder's do.
    builder = BatchBuilder()
    builder.append(b"v", timestamp=0, offset_delta=5)
    section = builder.build()[BATCH_HEADER_SIZE:]
    huge = (1 << 63) - 2
    for decoder in (decode, records._decode_records_py):
        [record] = decoder(section, 1, huge, huge, None)
        assert (record.offset, record.timestamp) == (huge + 5, huge)
