"""Size-prefixed frames read from a trio socket with as few copies as possible.

`FrameReader` (gregor-protocol, sans-IO) is fed chunks and slices frames out of its buffer:
three copies of every byte after the kernel's. Here small frames are read ahead into one
reusable buffer and large ones straight into a buffer of their own size (`recv_into`), so a
megabyte of records is copied once by the kernel and once into the `bytes` the decoder
takes. Limits are checked on the size prefix, before anything of the frame is buffered.
"""

from __future__ import annotations

import trio

from gregor.client.sockets import recv_into
from gregor.protocol.errors import DecodeError, FrameTooLargeError
from gregor.protocol.framing import FrameReader

SMALL = 64 * 1024  # frames up to this size are read ahead in one buffer
# The socket is read without trio's checkpoints (`gregor.client.sockets`): a peer that keeps
# the buffer full must still let the other tasks run, once every this many frames.
FRAMES_PER_CHECKPOINT = 16


class FrameReceiver:
    def __init__(self, sock: trio.socket.SocketType, max_frame_size: int) -> None:
        self.sock = sock
        self.max_frame_size = max_frame_size
        self._buf = bytearray(SMALL)
        self._start = 0  # buffered bytes are _buf[_start:_end]
        self._end = 0
        self._unyielded = 0  # frames received since the last checkpoint
        # Whether the socket may hold more bytes: found readable, or the last read filled
        # all the room it had. After a short read it is drained, so an empty buffer waits for
        # it first (a read of an empty socket is a system call that fails).
        self._readable = True

    def buffered(self) -> int:
        return self._end - self._start

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)
        self._unyielded = 0
        self._readable = True

    async def _fill(self, wanted: int) -> bool:
        """Read until `wanted` bytes are buffered; False on end of stream."""
        if len(self._buf) - self._start < wanted:
            remaining = self._buf[self._start : self._end]
            self._buf[: len(remaining)] = remaining
            self._start, self._end = 0, len(remaining)
        view = memoryview(self._buf)
        while self._end - self._start < wanted:
            if self._end == self._start and not self._readable:
                await self.wait_readable()
            room = len(view) - self._end
            got = await recv_into(self.sock, view[self._end :])
            self._readable = got == room
            if not got:
                return False
            self._end += got
        return True

    async def receive(self) -> bytes | None:
        """The next frame without its size prefix; None when the stream ends between frames.

        Raises FrameTooLargeError for a size above the limit, DecodeError for a negative
        size or a stream that ends inside a frame.
        """
        self._unyielded += 1
        if self._unyielded >= FRAMES_PER_CHECKPOINT:
            self._unyielded = 0
            await trio.lowlevel.checkpoint()
        if not await self._fill(4):
            if self.buffered():
                raise DecodeError(
                    f"the stream ended inside a size prefix ({self.buffered()} bytes)"
                )
            return None
        size = int.from_bytes(self._buf[self._start : self._start + 4], "big", signed=True)
        if size < 0:
            raise DecodeError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds the limit of {self.max_frame_size}"
            )
        self._start += 4
        if size <= SMALL:
            if not await self._fill(size):
                raise DecodeError(f"the stream ended inside a frame of {size} bytes")
            frame = bytes(memoryview(self._buf)[self._start : self._start + size])
            self._start += size
            return frame
        frame_buf = bytearray(size)
        have = self._end - self._start
        frame_buf[:have] = memoryview(self._buf)[self._start : self._end]
        self._start = self._end = 0
        view = memoryview(frame_buf)
        while have < size:
            got = await recv_into(self.sock, view[have:])
            if not got:
                raise DecodeError(f"the stream ended inside a frame of {size} bytes")
            have += got
        self._readable = True  # read to the frame's end, not to the socket's: more may be there
        return bytes(frame_buf)


class StreamFrameReceiver:
    """The same interface over any trio stream (TLS, where the socket's bytes are not the
    frames'): decrypted chunks fed to a sans-IO `FrameReader`."""

    def __init__(self, stream: trio.abc.ReceiveStream, max_frame_size: int) -> None:
        self.stream = stream
        self._reader = FrameReader(max_frame_size)
        self._eof = False

    @property
    def max_frame_size(self) -> int:
        return self._reader.max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, size: int) -> None:
        self._reader.max_frame_size = size

    def buffered(self) -> int:
        return self._reader.buffered()

    async def wait_readable(self) -> None:
        """Until some bytes are buffered (read here: TLS may hold decrypted bytes that no
        longer show on the socket) or the stream ended."""
        if not self.buffered() and not self._eof:
            await self._fill()

    async def _fill(self) -> None:
        data = await self.stream.receive_some(SMALL)
        if data:
            self._reader.feed(data)
        else:
            self._eof = True

    async def receive(self) -> bytes | None:
        """As `FrameReceiver.receive`."""
        while (frame := self._reader.next_frame()) is None:
            if self._eof:
                if self.buffered():
                    raise DecodeError(f"the stream ended inside a frame ({self.buffered()} bytes)")
                return None
            await self._fill()
        return frame
