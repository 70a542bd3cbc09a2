"""gregor.client.sockets over a real socket pair: all bytes arrive when the buffer fills, the
end of the stream reads as 0, and a peer that is gone raises."""

from __future__ import annotations

import os

import pytest
import trio

from gregor.client.frames import FRAMES_PER_CHECKPOINT, FrameReceiver
from gregor.client.sockets import recv_into, send_all


async def test_send_all_waits_for_room_and_recv_into_reads_everything() -> None:
    left, right = trio.socket.socketpair()
    data = os.urandom(8 * 1024 * 1024)  # far above the socket buffers: send_all must wait
    got = bytearray()
    with left, right:
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                await send_all(left, data)
                left.shutdown(trio.socket.SHUT_WR)

            nursery.start_soon(send)
            buffer = memoryview(bytearray(100_000))
            while n := await recv_into(right, buffer):
                got += buffer[:n]
    assert got == data


async def test_send_all_to_a_closed_peer_raises_oserror() -> None:
    left, right = trio.socket.socketpair()
    right.close()
    with left, pytest.raises(OSError):
        await send_all(left, b"x" * (4 * 1024 * 1024))


async def test_a_full_buffer_of_frames_still_lets_other_tasks_run() -> None:
    """The receiver reads without checkpoints while bytes are there, and yields every
    FRAMES_PER_CHECKPOINT frames: another task runs while a long burst is being read."""
    left, right = trio.socket.socketpair()
    count = 10 * FRAMES_PER_CHECKPOINT
    left.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, 1 << 20)
    await send_all(left, b"".join((1).to_bytes(4, "big") + bytes([i % 256]) for i in range(count)))
    receiver = FrameReceiver(right, 1 << 20)
    turns: list[int] = []
    received = 0

    async def other() -> None:
        while True:
            turns.append(received)
            await trio.sleep(0)

    with left, right:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.sleep(0)
            turns.clear()
            for _ in range(count):
                assert await receiver.receive() is not None
                received += 1
            nursery.cancel_scope.cancel()
    assert len(turns) >= count // FRAMES_PER_CHECKPOINT - 1
    assert all(0 < t < count for t in turns[:-1])
