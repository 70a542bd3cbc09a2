"""The I/O thread: a trio event loop in a background thread, for sync and asyncio callers.

The client's core is trio code. The sync API and the asyncio bridge run it here, in a
daemon thread of its own, and talk to it in three ways:
- `call(fn, *args)`: run an async function on the loop and block the calling thread for
  its result (control operations: commit, seek, metadata, flush of transactions);
- `call_soon(fn, *args)`: schedule a plain function on the loop without waiting (wake-ups);
- `call_async(fn, *args)`: for asyncio callers, an asyncio future resolved from the loop.
Hot paths (appending records, handing over fetched batches) do not go through here: they
use thread-safe structures directly.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import trio

from gregor.protocol.errors import KafkaError

T = TypeVar("T")
P = ParamSpec("P")
C = TypeVar("C")

Service = Callable[..., Awaitable[None]]  # async def service(*, task_status) -> None


class ClientClosedError(KafkaError):
    """The client was closed, or its I/O thread stopped."""


class IOThread:
    """Runs one service (and whatever it starts) on a trio loop in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self.error: BaseException | None = None
        self.stopped = threading.Event()

    def start(self, service: Service, timeout: float = 30.0) -> None:
        """Start the thread and wait until `service` has started (reported task_status)."""
        self._thread = threading.Thread(
            target=self._run, args=(service,), name=self.name, daemon=True
        )
        self._thread.start()
        if not self._started.wait(timeout):
            raise ClientClosedError(f"{self.name}: the I/O thread did not start in {timeout}s")
        if self.error is not None:
            raise ClientClosedError(f"{self.name} failed to start: {self.error}") from self.error

    def _run(self, service: Service) -> None:
        try:
            trio.run(self._main, service)
        except BaseException as exc:  # reported to the callers
            self.error = exc
        finally:
            self._started.set()
            self.stopped.set()

    async def _main(self, service: Service) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(service)
            self._started.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    @property
    def token(self) -> trio.lowlevel.TrioToken:
        if self._token is None or self.stopped.is_set():
            raise ClientClosedError(f"{self.name} is not running" + self._why())
        return self._token

    def _why(self) -> str:
        return f": {self.error}" if self.error is not None else ""

    def in_io_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)` on the loop; block until it returns (or raise what it raised)."""
        if self.in_io_thread():
            raise RuntimeError("a blocking client call from the client's own I/O thread")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self.token)
        except trio.RunFinishedError:
            raise ClientClosedError(f"{self.name} stopped" + self._why()) from None

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Schedule `fn(*args)` on the loop, without waiting."""
        try:
            self.token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            raise ClientClosedError(f"{self.name} stopped" + self._why()) from None

    def call_async(self, fn: Callable[..., Awaitable[T]], *args: Any) -> asyncio.Future[T]:
        """Run `fn(*args)` on the loop as a task; its result arrives in an asyncio future of
        the running asyncio loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(outcome: Callable[[], T]) -> None:
            if future.cancelled():
                return
            try:
                future.set_result(outcome())
            except BaseException as exc:  # handed to the awaiting caller
                future.set_exception(exc)

        async def task() -> None:
            try:
                result = await fn(*args)
            except Exception as exc:
                error = exc
                loop.call_soon_threadsafe(settle, lambda: _raise(error))
            else:
                loop.call_soon_threadsafe(settle, lambda: result)

        def spawn() -> None:
            assert self._nursery is not None
            self._nursery.start_soon(task)

        self.call_soon(spawn)
        return future

    def stop(self, timeout: float | None = None) -> None:
        """Cancel everything on the loop and wait for the thread to end."""
        if self._token is not None and not self.stopped.is_set():
            try:
                self._token.run_sync_soon(self._request_stop)
            except trio.RunFinishedError:
                pass
        if self._thread is not None and not self.in_io_thread():
            self._thread.join(timeout)

    def _request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()


def _raise(error: BaseException) -> Any:
    raise error


class BlockingFacade(Protocol):
    """A sync wrapper: a core whose async methods run on an I/O thread."""

    _io: IOThread
    _core: Any


def blocking(method: Callable[Concatenate[C, P], Awaitable[T]]) -> Callable[Concatenate[Any, P], T]:
    """The sync form of a core's async method: run it on the I/O thread and wait."""

    def call(self: BlockingFacade, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._io.call(functools.partial(method, self._core, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call
