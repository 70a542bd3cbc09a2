"""Sending an encoded response: bytes and file regions (zero-copy fetch) in order, and a
region that its file can no longer fill closes the connection."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from gregor.broker.apis import CloseConnection
from gregor.broker.network import send_chunks
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


async def test_a_region_past_the_end_of_its_file_closes_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "truncated.log"
    path.write_bytes(b"x" * 100)
    left, right = trio.socket.socketpair()
    sender = trio.SocketStream(left)
    with path.open("rb") as f, pytest.raises(CloseConnection, match="30 bytes short"):
        await send_chunks(sender, [b"head", Region(f.fileno(), 50, 80)])
    await sender.aclose()
    # What went out before the file ran short: the frame can never be completed.
    received = trio.SocketStream(right)
    assert await received.receive_some() == b"head" + b"x" * 50
    await received.aclose()
