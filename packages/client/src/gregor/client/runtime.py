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
import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, Protocol, Self, TypeVar

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
        except trio.Cancelled:  # the loop stopped while `fn` ran (close on another thread)
            raise ClientClosedError(f"{self.name} stopped during the call") from None

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Schedule `fn(*args)` on the loop, without waiting."""
        try:
            self.token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            raise ClientClosedError(f"{self.name} stopped" + self._why()) from None

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Start `fn(*args)` as a background task on the loop, without waiting."""

        def start() -> None:
            if self._nursery is not None:
                self._nursery.start_soon(fn, *args)

        self.call_soon(start)

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
            except trio.Cancelled:  # the loop is stopping: the caller must not wait forever
                stopped = ClientClosedError(f"{self.name} stopped during the call")
                loop.call_soon_threadsafe(settle, lambda: _raise(stopped))
                raise
            except Exception as exc:
                error = exc
                loop.call_soon_threadsafe(settle, lambda: _raise(error))
            else:
                loop.call_soon_threadsafe(settle, lambda: result)

        self.spawn(task)
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


def current_library() -> str:
    """ "trio" or "asyncio": which event loop the caller runs on."""
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        pass
    else:
        return "trio"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("the async clients run under trio or asyncio") from None
    return "asyncio"


class Signal:
    """Set from the client's I/O side (any thread), awaited on the caller's event loop."""

    def __init__(self, library: str) -> None:
        self.library = library
        if library == "trio":
            self._trio = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
        else:
            self._loop = asyncio.get_running_loop()
            self._asyncio = asyncio.Event()

    def set(self) -> None:
        if self.library == "trio":
            try:
                in_loop = trio.lowlevel.current_trio_token() is self._token
            except RuntimeError:
                in_loop = False
            if in_loop:
                self._trio.set()
            else:
                try:
                    self._token.run_sync_soon(self._trio.set)
                except trio.RunFinishedError:
                    pass
        elif self._loop.is_closed():
            return
        else:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                self._asyncio.set()
            else:
                self._loop.call_soon_threadsafe(self._asyncio.set)

    def clear(self) -> None:
        if self.library == "trio":
            if self._trio.is_set():
                self._trio = trio.Event()
        else:
            self._asyncio.clear()

    async def wait(self, timeout: float | None) -> bool:
        """True when set within `timeout` seconds (None: no limit)."""
        if self.library == "trio":
            with trio.move_on_after(math.inf if timeout is None else timeout):
                await self._trio.wait()
                return True
            return False
        try:
            await asyncio.wait_for(self._asyncio.wait(), timeout)
        except TimeoutError:
            return False
        return True


class AsyncBridge:
    """Where an async client's core runs: in the caller's trio loop (a nursery the client
    owns), or, for asyncio callers, on an I/O thread with results handed back through
    thread-safe futures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.library = ""
        self._io: IOThread | None = None
        self._nursery_manager: Any = None
        self._nursery: trio.Nursery | None = None
        self.in_context = False  # started by `async with`: the nursery ends with the block
        self._calls: set[trio.CancelScope] = set()  # calls under trio, cut short by stop()

    @property
    def io(self) -> IOThread | None:
        return self._io

    async def start(self, service: Service) -> None:
        self.library = current_library()
        if self.library == "trio":
            self._nursery_manager = trio.open_nursery()
            self._nursery = await self._nursery_manager.__aenter__()
            try:
                await self._nursery.start(service)
            except BaseException as exc:
                await self._nursery_manager.__aexit__(type(exc), exc, exc.__traceback__)
                raise
        else:
            self._io = IOThread(self.name)
            await asyncio.get_running_loop().run_in_executor(None, self._io.start, service)

    async def stop(self, *, leaving_context: bool = False) -> None:
        """Stop the core. Under trio, a client used as `async with` keeps its nursery open
        until the block ends (closing it inside the block must not unwind scopes the block
        opened since): the nursery is cancelled now and left at `__aexit__`."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
            for scope in self._calls:
                scope.cancel()
            if self.in_context and not leaving_context:
                return
            manager, self._nursery, self._nursery_manager = self._nursery_manager, None, None
            await manager.__aexit__(None, None, None)
        if self._io is not None:
            io, self._io = self._io, None
            await asyncio.get_running_loop().run_in_executor(None, io.stop)

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run a core coroutine where the core lives, and return its result here."""
        if self._io is not None:
            return await self._io.call_async(fn, *args)
        if self._nursery is None or self._nursery.cancel_scope.cancel_called:
            raise ClientClosedError(f"{self.name} is not running (use `async with`)")
        # The call runs in the caller's task, not in the nursery: stop() cancels it too,
        # since what it waits for (connections, the fetcher) stops with the nursery.
        with trio.CancelScope() as scope:
            self._calls.add(scope)
            try:
                return await fn(*args)
            finally:
                self._calls.discard(scope)
        raise ClientClosedError(f"{self.name} stopped during the call")

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Start a core coroutine in the background (fire and forget)."""
        if self._io is not None:
            self._io.spawn(fn, *args)
        elif self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    def signal(self) -> Signal:
        return Signal(self.library)


class AsyncClient:
    """Starting and closing, shared by the async clients. Subclasses set `_bridge` and
    `_service` (their core's `run`), and extend `_started` and `close`."""

    _bridge: AsyncBridge
    _service: Service

    async def start(self) -> None:
        await self._bridge.start(self._service)
        self._started()

    def _started(self) -> None:
        """Runs on the caller's loop once the core is up."""

    async def close(self) -> None:
        await self._bridge.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        self._bridge.in_context = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.close()
        finally:
            await self._bridge.stop(leaving_context=True)


class AsyncFacade(Protocol):
    """An async wrapper: a core whose async methods run through an AsyncBridge."""

    _bridge: AsyncBridge
    _core: Any


def awaiting(
    method: Callable[Concatenate[C, P], Awaitable[T]],
) -> Callable[Concatenate[Any, P], Awaitable[T]]:
    """The async form of a core's method, for trio and asyncio callers alike."""

    async def call(self: AsyncFacade, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._bridge.call(functools.partial(method, self._core, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call
