"""The codecs: what we write is what the Java client writes, and we read what every client
writes (kafka-python's and aiokafka's codecs, the codec libraries' own frame options)."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import aiokafka.codec
import kafka.codec
import lz4.block
import lz4.frame
import pytest
import snappy
import xxhash
import zstandard

from gregor.protocol.compression import (
    LZ4_MAGIC,
    XERIAL_MAGIC,
    Compression,
    compress,
    decompress,
    xxh32,
)
from gregor.protocol.errors import CorruptRecordError, UnsupportedCompressionTypeError

CODECS = list(Compression)
# Compressible and incompressible parts, over the 64 KiB lz4 and 32 KiB snappy block sizes.
PAYLOADS = {
    "empty": b"",
    "small": b"hello kafka",
    "text": b"".join(b"record %d of many; " % i for i in range(20_000)),
    "random": os.urandom(150_000),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trip(codec: Compression, name: str) -> None:
    data = PAYLOADS[name]
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(bytearray(compress(codec, data)))) == data


def test_gzip_writes_a_gzip_stream_and_reads_concatenated_members() -> None:
    data = PAYLOADS["text"]
    out = compress(Compression.GZIP, data)
    assert out[:2] == b"\x1f\x8b"
    assert gzip.decompress(out) == data
    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_snappy_writes_the_xerial_framing_of_the_java_client() -> None:
    data = PAYLOADS["text"]
    out = compress(Compression.SNAPPY, data)
    assert out[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        blocks.append(snappy.uncompress(out[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert [len(b) for b in blocks[:-1]] == [32 * 1024] * (len(blocks) - 1)
    assert b"".join(blocks) == data


def test_snappy_reads_raw_blocks_as_librdkafka_writes_them() -> None:
    data = PAYLOADS["text"]
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data


def test_lz4_writes_the_java_clients_frame() -> None:
    data = PAYLOADS["text"]
    out = compress(Compression.LZ4, data)
    # magic, FLG (version 1, independent blocks, no size or checksums), BD (64 KiB)
    assert out[:6] == LZ4_MAGIC + b"\x60\x40"
    assert out[6] == (xxhash.xxh32(out[4:6]).intdigest() >> 8) & 0xFF
    assert out.endswith(b"\x00\x00\x00\x00")
    assert lz4.frame.decompress(out) == data  # the reference decoder checks the header too


def test_lz4_for_magic_0_has_the_old_kafka_header_checksum() -> None:
    out = compress(Compression.LZ4, b"old", magic=0)
    assert out[6] == (xxhash.xxh32(out[:6]).intdigest() >> 8) & 0xFF
    assert out[6] != (xxhash.xxh32(out[4:6]).intdigest() >> 8) & 0xFF
    assert decompress(Compression.LZ4, out) == b"old"
    assert kafka.codec.lz4_decode_old_kafka(out) == b"old"
    assert decompress(Compression.LZ4, kafka.codec.lz4_encode_old_kafka(b"older")) == b"older"


@pytest.mark.parametrize("linked", [True, False])
@pytest.mark.parametrize("content_checksum", [True, False])
@pytest.mark.parametrize("block_checksum", [True, False])
@pytest.mark.parametrize("store_size", [True, False])
@pytest.mark.parametrize("block_size", [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX4MB])
def test_lz4_reads_every_frame_option(
    linked: bool, content_checksum: bool, block_checksum: bool, store_size: bool, block_size: int
) -> None:
    data = PAYLOADS["text"] + PAYLOADS["random"] + PAYLOADS["text"]
    frame = lz4.frame.compress(
        data,
        block_linked=linked,
        content_checksum=content_checksum,
        block_checksum=block_checksum,
        store_size=store_size,
        block_size=block_size,
    )
    assert decompress(Compression.LZ4, frame) == data


def test_xxh32_matches_the_reference() -> None:
    for data in (b"", b"a", b"abc", b"Nobody inspects the spammish repetition", os.urandom(77)):
        assert xxh32(data) == xxhash.xxh32(data).intdigest()
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_zstd_reads_frames_with_and_without_sizes_and_several_frames() -> None:
    data = PAYLOADS["text"]
    streamed = zstandard.ZstdCompressor().compressobj()
    no_size = streamed.compress(data) + streamed.flush()
    assert decompress(Compression.ZSTD, no_size) == data
    sized = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    assert decompress(Compression.ZSTD, sized + sized) == data + data


CLIENT_CODECS = {
    Compression.GZIP: ("gzip_encode", "gzip_decode"),
    Compression.SNAPPY: ("snappy_encode", "snappy_decode"),
    Compression.LZ4: ("lz4_encode", "lz4_decode"),
    Compression.ZSTD: ("zstd_encode", "zstd_decode"),
}


@pytest.mark.parametrize("module", [kafka.codec, aiokafka.codec], ids=["kafka-python", "aiokafka"])
@pytest.mark.parametrize("codec", list(CLIENT_CODECS))
def test_client_libraries_read_ours_and_we_read_theirs(module: object, codec: Compression) -> None:
    encode_name, decode_name = CLIENT_CODECS[codec]
    data = PAYLOADS["text"]
    assert decompress(codec, getattr(module, encode_name)(data)) == data
    assert getattr(module, decode_name)(compress(codec, data)) == data


def test_raw_snappy_from_kafka_python() -> None:
    data = PAYLOADS["text"]
    assert decompress(Compression.SNAPPY, kafka.codec.snappy_encode(data, False)) == data


GARBAGE = [b"\x07", os.urandom(64), b"\xff" * 40]


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
@pytest.mark.parametrize("data", GARBAGE, ids=["one-byte", "random", "ff"])
def test_garbage_is_corrupt(codec: Compression, data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, data)


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
def test_truncated_data_is_corrupt(codec: Compression) -> None:
    out = compress(codec, PAYLOADS["random"])
    with pytest.raises(CorruptRecordError):
        decompress(codec, out[: len(out) // 2])


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
def test_output_is_bounded(codec: Compression) -> None:
    bomb = compress(codec, bytes(3_000_000))
    with pytest.raises(CorruptRecordError, match="exceeds 1000000 bytes"):
        decompress(codec, bomb, max_size=1_000_000)
    assert len(decompress(codec, bomb, max_size=3_000_000)) == 3_000_000


def test_forged_sizes_do_not_allocate() -> None:
    # snappy: a raw block claiming 2**32 - 1 bytes
    with pytest.raises(CorruptRecordError, match="exceeds"):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)
    # zstd: a frame header claiming an 8 TiB content size
    header = b"\x28\xb5\x2f\xfd" + bytes([0xC0]) + struct.pack("<Q", 1 << 43)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, header + b"\x01\x00\x00")
    # lz4: a block length beyond the frame's maximum block size
    frame = bytearray(compress(Compression.LZ4, b"x" * 100))
    struct.pack_into("<I", frame, 7, 0x7FFFFFFF)
    with pytest.raises(CorruptRecordError, match="exceeds the frame"):
        decompress(Compression.LZ4, bytes(frame))


def test_lz4_header_problems() -> None:
    good = compress(Compression.LZ4, b"data")
    for index, byte, message in [
        (0, 0, "frame magic"),
        (4, 0xA0, "version 2"),
        (5, 0x10, "block size id"),
        (6, good[6] ^ 0xFF, "header checksum"),
    ]:
        bad = bytearray(good)
        bad[index] = byte
        with pytest.raises(CorruptRecordError, match=message):
            decompress(Compression.LZ4, bytes(bad))


def test_unknown_and_unsupported_codecs() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec 6"):
        decompress(6, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(6, b"x")
    with pytest.raises(UnsupportedCompressionTypeError, match="magic 2"):
        compress(Compression.ZSTD, b"x", magic=1)


def test_gzip_reads_zlib_streams_too() -> None:
    assert decompress(Compression.GZIP, zlib.compress(b"zlib")) == b"zlib"
    with pytest.raises(CorruptRecordError, match="truncated"):
        decompress(Compression.GZIP, gzip.compress(b"x" * 1000)[:-10])


def test_lz4_block_api_is_what_the_reader_uses() -> None:
    # Linked blocks refer back into the previous 64 KiB: the dict argument must exist.
    block = lz4.block.compress(b"abcabcabc", store_size=False)
    assert lz4.block.decompress(block, uncompressed_size=100, dict=b"") == b"abcabcabc"
