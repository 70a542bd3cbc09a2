"""The codecs beyond gzip are optional extras: one whose library is missing raises
UnsupportedCompressionTypeError naming the extra to install (not CorruptRecordError)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from gregor.protocol import compression
from gregor.protocol.compression import Compression
from gregor.protocol.errors import UnsupportedCompressionTypeError

MISSING = [  # codec, the module that goes missing, the extra named
    (Compression.SNAPPY, "snappy", "snappy"),
    (Compression.LZ4, "lz4.block", "lz4"),
    (Compression.ZSTD, "zstandard", "zstd"),
]


@pytest.fixture(autouse=True)
def fresh_imports() -> Iterator[None]:
    compression._library.cache_clear()
    yield
    compression._library.cache_clear()


@pytest.mark.parametrize(("codec", "module", "extra"), MISSING)
def test_a_missing_codec_library_names_its_extra(
    codec: Compression, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"some record data " * 100
    compressed = compression.compress(codec, data)  # with the library installed
    monkeypatch.setitem(sys.modules, module, None)  # an import of it now fails
    compression._library.cache_clear()
    for attempt in (
        lambda: compression.require(codec),
        lambda: compression.compress(codec, data),
        lambda: compression.decompress(codec, compressed),
    ):
        with pytest.raises(UnsupportedCompressionTypeError, match=rf"gregor-client\[{extra}\]"):
            attempt()
    # The others do not need it.
    for other in (Compression.NONE, Compression.GZIP):
        compression.require(other)
        assert compression.decompress(other, compression.compress(other, data)) == data


def test_every_codec_is_there_with_the_all_extra() -> None:
    for codec in Compression:
        compression.require(codec)
