"""Sending an encoded response: bytes and file regions (zero-copy fetch) in order, small
regions in one write with the bytes around them, and a region that its file can no longer
fill closes the connection."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest
import trio

from gregor.broker.apis import CloseConnection
from gregor.broker.network import SMALL_REGION, send_chunks
from gregor.protocol.primitives import FileRegion


@attrs.frozen
class Region:
    """A FileRegion of our own, as any log implementation may hand one over."""

    file: int
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.file


async def sent_through_a_socket(chunks: list[bytes | FileRegion]) -> bytes:
    left, right = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(left), trio.SocketStream(right)
    received = bytearray()

    async def receive() -> None:
        while data := await receiver.receive_some():
            received.extend(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        try:
            await send_chunks(sender, chunks)
        finally:
            await sender.aclose()
    await receiver.aclose()
    return bytes(received)


async def test_bytes_and_regions_go_out_in_order(tmp_path: Path) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB: more than a socket buffer, so sendfile waits
    path = tmp_path / "segment.log"
    path.write_bytes(body)
    with path.open("rb") as f:
        chunks: list[bytes | FileRegion] = [
            b"size",
            b"+header",
            Region(f.fileno(), 10, 100_000),
            b"between",
            Region(f.fileno(), 0, 0),  # an empty region sends nothing
            Region(f.fileno(), 500_000, len(body) - 500_000),
            b"tail",
        ]
        sent = await sent_through_a_socket(chunks)
    assert sent == b"size+header" + body[10:100_010] + b"between" + body[500_000:] + b"tail"


async def test_small_regions_go_out_in_one_write_with_the_bytes_around_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A region up to SMALL_REGION is read (one pread) and written with its header and
    trailer, so the peer gets the frame in one segment and wakes once."""
    body = bytes(range(256)) * 1024
    path = tmp_path / "segment.log"
    path.write_bytes(body)
    left, right = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(left), trio.SocketStream(right)
    writes: list[int] = []
    real_write = os.write

    def write(fd: int, data: bytes | memoryview) -> int:
        if fd == left.fileno():
            writes.append(len(memoryview(data)))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with path.open("rb") as f:
        small = Region(f.fileno(), 3, SMALL_REGION)
        await send_chunks(sender, [b"head", small, b"tail", Region(f.fileno(), 9, 0)])
    frame = b"head" + body[3 : 3 + SMALL_REGION] + b"tail"
    assert writes == [len(frame)]
    assert await receiver.receive_some(len(frame) + 1) == frame
    await sender.aclose()
    await receiver.aclose()


@pytest.mark.parametrize("length", [80, SMALL_REGION + 80])
async def test_a_region_past_the_end_of_its_file_closes_the_connection(
    tmp_path: Path, length: int
) -> None:
    size = length - 30
    path = tmp_path / "truncated.log"
    path.write_bytes(b"x" * (size + 50))
    left, right = trio.socket.socketpair()
    sender = trio.SocketStream(left)
    with path.open("rb") as f, pytest.raises(CloseConnection, match="30 bytes short"):
        await send_chunks(sender, [b"head", Region(f.fileno(), 50, length), b"tail"])
    await sender.aclose()
    # The frame can never be completed: a small region fails before its frame's bytes are
    # written, a sendfile after those before it went out.
    received = trio.SocketStream(right)
    sent = bytearray()
    while data := await received.receive_some():
        sent += data
    assert sent == (b"" if length <= SMALL_REGION else b"head" + b"x" * size)
    await received.aclose()
