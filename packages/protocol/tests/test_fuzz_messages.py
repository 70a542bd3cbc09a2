"""Fuzzing: random and mutated frames of every API, both directions, every version.

Whatever the bytes, decoding either succeeds or raises one of gregor.protocol's own
exceptions (`ProtocolError`): never IndexError, struct.error, UnicodeDecodeError, or a
MemoryError or hang from a huge length prefix. What decodes must also encode again, and
what that writes must read back to the same bytes.

Each API gets a few thousand cases in the default run; the nox session fuzz_protocol
multiplies them with GREGOR_FUZZ_SCALE.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.protocol.apis import REQUESTS, RESPONSES, ApiKey, api_name
from gregor.protocol.errors import ProtocolError
from gregor.protocol.framing import (
    FrameReader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from gregor.protocol.schema import Message, Request
from gregor_testing.message_strategies import message_settings, messages

MUTATIONS_PER_MESSAGE = 40
MAX_FRAME = 1 << 20

# Values that make a length, count or size prefix claim far more than the frame holds.
_HUGE = [
    bytes.fromhex(h)
    for h in (
        "7fff",
        "8000",
        "ffff",
        "7fffffff",
        "80000000",
        "fffffffe",
        "ffffffff0f",
        "8080808010",
    )
]


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


def _flip_bits(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _huge_prefix(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    huge = rng.choice(_HUGE)
    return data[:at] + huge + data[at + len(huge) :]


def _insert_random(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 8)) + data[at:]


def _overwrite_random(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    chunk = rng.randbytes(rng.randint(1, 16))
    return data[:at] + chunk + data[at + len(chunk) :]


def _random_bytes(data: bytes, rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 2 * len(data) + 8))


MUTATORS: list[Callable[[bytes, random.Random], bytes]] = [
    _truncate,
    _flip_bits,
    _huge_prefix,
    _insert_random,
    _overwrite_random,
    _random_bytes,
]


def mutate(data: bytes, rng: random.Random) -> bytes:
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        data = rng.choice(MUTATORS)(data, rng)
    return data


def check_body(cls: type[Message], version: int, body: bytes) -> None:
    """Decoding raises only ProtocolError; what decodes re-encodes stably."""
    try:
        message = cls.decode(body, version)
    except ProtocolError:
        return
    except Exception as exc:
        raise AssertionError(f"{cls.__name__} v{version} body {body.hex()}: {exc!r}") from exc
    again = message.encode(version)
    assert cls.decode(again, version).encode(version) == again, body.hex()


def check_frame(cls: type[Message], version: int, stream: bytes, chunk: int) -> None:
    """A mutated stream through FrameReader, then the frame decoders."""
    reader = FrameReader(MAX_FRAME)
    try:
        for start in range(0, len(stream), chunk):
            reader.feed(stream[start : start + chunk])
            while (frame := reader.next_frame()) is not None:
                if isinstance(cls, type) and issubclass(cls, Request):
                    decode_request(frame, strict=True)
                else:
                    decode_response(frame, cls.api_key, version, strict=True)
    except ProtocolError:
        return
    except Exception as exc:
        raise AssertionError(f"{cls.__name__} v{version} stream {stream.hex()}: {exc!r}") from exc


@pytest.mark.parametrize("key", sorted(REQUESTS), ids=api_name)
@message_settings(3)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_mutated_frames_raise_only_protocol_errors(
    key: int, data: st.DataObject, seed: int
) -> None:
    rng = random.Random(seed)
    for cls in (REQUESTS[key], RESPONSES[key]):
        for version in cls.valid_versions:
            message = data.draw(messages(cls, version), label=f"{cls.__name__} v{version}")
            body = message.encode(version)
            if isinstance(message, Request):
                frame = encode_request(message, version, rng.randrange(2**31), "fuzz")
            else:
                frame = encode_response(message, version, rng.randrange(2**31))
            for _ in range(MUTATIONS_PER_MESSAGE // 2):
                check_body(cls, version, mutate(body, rng))
                check_frame(cls, version, mutate(frame, rng), rng.choice((1, 7, len(frame) + 1)))


def test_every_api_is_fuzzed() -> None:
    assert {ApiKey(key) for key in REQUESTS} == {ApiKey(key) for key in RESPONSES}
