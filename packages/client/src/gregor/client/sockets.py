"""Socket reads and writes that go to trio's scheduler only when they must wait.

trio's own socket methods yield to the scheduler after every successful call (each is a
checkpoint), so a request answered in one read and one write costs several trips through
the run loop. These try the system call first and wait for the socket only when the kernel
has no bytes, or no room, yet (`BlockingIOError`): the loop turns over only where the task
really waits. Cancellation still reaches a task that waits here, and the callers' loops
have checkpoints of their own (their channels and events).
"""

from __future__ import annotations

import os

import trio


async def recv_into(sock: trio.socket.SocketType, view: memoryview) -> int:
    """Read into `view`: the bytes read, 0 at the end of the stream."""
    while True:
        try:
            return os.readv(sock.fileno(), [view])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)


async def send_all(sock: trio.socket.SocketType, data: bytes | bytearray | memoryview) -> None:
    """Write all of `data`. OSError (BrokenPipeError, ConnectionResetError...) when the
    peer is gone."""
    view = memoryview(data)
    while view:
        try:
            sent = os.write(sock.fileno(), view)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        view = view[sent:]
