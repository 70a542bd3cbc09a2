"""FrameReceiver over a real socket pair: small and large frames, however the bytes arrive."""

from __future__ import annotations

import os

import pytest
import trio

from gregor.client.frames import SMALL, FrameReceiver
from gregor.protocol.errors import DecodeError, FrameTooLargeError, ProtocolError


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


async def receive_all(data: bytes, limit: int = 1 << 24, pieces: int = 1) -> list[bytes]:
    """Send `data` in `pieces` writes through a socket pair and read every frame back."""
    left, right = trio.socket.socketpair()
    receiver = FrameReceiver(right, limit)
    frames: list[bytes] = []
    failure: ProtocolError | None = None

    async def send() -> None:
        with left:
            step = max(1, len(data) // pieces)
            for start in range(0, len(data), step):
                view = memoryview(data)[start : start + step]
                while view:
                    view = view[await left.send(view) :]
                await trio.sleep(0)

    with right:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            try:
                while (frame := await receiver.receive()) is not None:
                    frames.append(frame)
            except ProtocolError as exc:
                failure = exc
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return frames


@pytest.mark.parametrize("pieces", [1, 7, 1000])
async def test_frames_of_every_size_arrive_whole(pieces: int) -> None:
    payloads = [b"", b"x", os.urandom(SMALL - 4), os.urandom(SMALL), os.urandom(SMALL + 1)]
    payloads += [os.urandom(3 * SMALL + 17), b"tail"]
    frames = await receive_all(b"".join(framed(p) for p in payloads), pieces=pieces)
    assert frames == payloads


async def test_a_size_above_the_limit_is_refused_before_reading_the_frame() -> None:
    with pytest.raises(FrameTooLargeError, match="exceeds the limit of 100"):
        await receive_all((101).to_bytes(4, "big") + b"x" * 10, limit=100)


async def test_a_negative_size_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="negative frame size"):
        await receive_all(b"\xff\xff\xff\xfe")


@pytest.mark.parametrize(
    "data",
    [b"\x00\x00", framed(b"abcdef")[:-2], framed(os.urandom(SMALL * 2))[:-1]],
    ids=["in-prefix", "in-small-frame", "in-large-frame"],
)
async def test_a_stream_ending_inside_a_frame_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError, match="ended inside"):
        await receive_all(data)


async def test_a_drained_socket_is_waited_for_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames that come one at a time are each read once: after a read that did not fill
    the buffer the socket is drained, and the receiver waits for it before reading again,
    rather than read, fail (EAGAIN) and wait."""
    left, right = trio.socket.socketpair()
    receiver = FrameReceiver(right, 1 << 20)
    reads: list[int] = []
    real_readv = os.readv

    def readv(fd: int, buffers: list[memoryview]) -> int:
        try:
            got = real_readv(fd, buffers)
        except BlockingIOError:
            reads.append(-1)
            raise
        reads.append(got)
        return got

    with left, right:
        await left.send(framed(b"first"))
        assert await receiver.receive() == b"first"  # a short read: drained
        monkeypatch.setattr(os, "readv", readv)
        for payload in (b"one", b"three"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(left.send, framed(payload))
                assert await receiver.receive() == payload
    assert reads == [7, 9]  # one read a frame, none of them failed
