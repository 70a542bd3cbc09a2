"""kazoo underneath trio: blocking calls in worker threads, watches and session events as
callbacks in the trio thread.

kazoo runs its own threads. Every call here goes through `ZkSession.run` (one worker-thread
hop per call, whatever the number of znodes it touches: batches are issued with kazoo's async
API and collected in that one thread) and is retried while the connection is down, as Kafka's
`retryRequestUntilConnected` does. A session expiry is not retried: it surfaces as
`SessionExpiredError` and the session listeners hear of it.

Watches are one-shot in ZooKeeper and kazoo drops them all when the connection drops, so
watch handlers are level-triggered: a handler is a plain callback that says "this path may
have changed", and whoever registered it re-reads the path with a watch. After every
reconnection all handlers fire once, so every watch gets re-armed.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[], None]

ZK_THREADS = 16
# kazoo waits up to a whole session timeout (with one host) for the answer to its
# handshake. A ZooKeeper that is starting up can accept a connection and never read it
# (3.8 does, right after a restart): waiting that long on it lets the session expire
# although the server is up. A handshake gets this share of the session timeout instead,
# so the next attempt reaches the server while the session is still alive.
HANDSHAKE_SHARE = 1 / 3
# Between connection attempts, as Kafka's ZooKeeper client (up to 1 s): kazoo's default
# backoff grows without bound, so after a long outage it would reconnect about as late as
# the outage lasted, often past the session timeout.
RECONNECT_DELAY = 0.1
RECONNECT_MAX_DELAY = 1.0
# Failures worth retrying once the connection is back; anything else is an answer.
_RETRIABLE = (ConnectionLoss, OperationTimeoutError)


class ZooKeeperError(Exception):
    """A ZooKeeper operation failed in a way its caller has to handle."""


class ZooKeeperClosedError(ZooKeeperError):
    """The client was closed while an operation waited for the connection."""


class ZooKeeperSessionExpiredError(ZooKeeperError):
    """The session expired during the call: its ephemeral znodes and watches are gone.

    The client starts a new session by itself and tells the session listeners; the call
    may be made again then.
    """


class SessionListener(Protocol):
    """Told, in the trio thread, when the session expires and when a new one starts."""

    def session_expired(self) -> None: ...

    def session_established(self) -> None: ...


def split_chroot(connect: str) -> tuple[str, str]:
    """Split `host:port,host:port/chroot` into the hosts and the chroot ("" if none)."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


class ZkSession:
    """One kazoo client, its session state, and the bridge into trio."""

    def __init__(self, connect: str, session_timeout: float, connection_timeout: float) -> None:
        self.connect = connect
        self.session_timeout = session_timeout
        self.connection_timeout = connection_timeout
        self._zk: KazooClient | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._live = threading.Event()  # set while connected
        self._closing = False
        self._expired = False
        self._node_handlers: dict[str, Handler] = {}
        self._child_handlers: dict[str, Handler] = {}
        self._session_listeners: list[SessionListener] = []
        # Calls wait in their thread while ZooKeeper is unreachable: they get threads of
        # their own, so that storage I/O (trio's default limiter) never waits behind them.
        self._threads = trio.CapacityLimiter(ZK_THREADS)

    @property
    def kazoo(self) -> KazooClient:
        if self._zk is None:
            raise ZooKeeperClosedError("the ZooKeeper client is not started")
        return self._zk

    @property
    def session_id(self) -> int:
        client_id = self._zk.client_id if self._zk is not None else None
        return int(client_id[0]) if client_id else -1

    @property
    def connected(self) -> bool:
        return self._live.is_set()

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (creating the chroot if it is missing, as Kafka does)."""
        self._token = trio.lowlevel.current_trio_token()
        hosts, chroot = split_chroot(self.connect)
        if chroot:
            await trio.to_thread.run_sync(self._ensure_chroot, hosts, chroot)
        zk = KazooClient(
            hosts + chroot,
            timeout=self.session_timeout,
            handler=_HandshakeLimit(self.session_timeout * HANDSHAKE_SHARE, self._live),
            connection_retry=KazooRetry(
                max_tries=-1, delay=RECONNECT_DELAY, max_delay=RECONNECT_MAX_DELAY
            ),
        )
        zk.add_listener(self._on_state)
        self._zk = zk
        try:
            await trio.to_thread.run_sync(self._start_kazoo, zk, abandon_on_cancel=True)
        except BaseException:
            await self.close()
            raise

    def _ensure_chroot(self, hosts: str, chroot: str) -> None:
        zk = KazooClient(hosts, timeout=self.session_timeout)
        try:
            self._start_kazoo(zk)
            zk.ensure_path(chroot)
        finally:
            zk.stop()
            zk.close()

    def _start_kazoo(self, zk: KazooClient) -> None:
        try:
            zk.start(timeout=self.connection_timeout)
        except Exception as exc:  # kazoo raises its own timeout class, not TimeoutError
            zk.stop()
            raise ZooKeeperError(
                f"cannot connect to ZooKeeper at {self.connect} within "
                f"{self.connection_timeout:.0f}s: {exc}"
            ) from exc
        self._live.set()

    async def close(self) -> None:
        self._closing = True
        self._live.set()  # wake waiters so they see the client is closing
        zk, self._zk = self._zk, None
        if zk is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_stop_kazoo, zk)

    # -- running operations ------------------------------------------------------------

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` (blocking kazoo calls) in a worker thread, retried while disconnected."""
        return await trio.to_thread.run_sync(
            self._until_connected, fn, abandon_on_cancel=True, limiter=self._threads
        )

    def _until_connected(self, fn: Callable[[], T]) -> T:
        while True:
            self._check_open()
            try:
                return fn()
            except _RETRIABLE:
                self._wait_connected()
            except SessionExpiredError as exc:
                raise ZooKeeperSessionExpiredError("the ZooKeeper session expired") from exc
            except ConnectionClosedError as exc:
                if self._closing:
                    raise ZooKeeperClosedError("the ZooKeeper client was closed") from exc
                self._wait_connected()

    def _check_open(self) -> None:
        if self._closing:
            raise ZooKeeperClosedError("the ZooKeeper client was closed")

    def _wait_connected(self) -> None:
        while not self._live.wait(1.0):
            self._check_open()
        self._check_open()

    def batch(self, submit: Sequence[Callable[[], Any]]) -> list[Any]:
        """In a worker thread: issue every async call, then collect each result or exception.

        Calls that fail for a lost connection are issued again once it is back.
        """
        results: list[Any] = [None] * len(submit)
        pending = list(range(len(submit)))
        while pending:
            self._check_open()
            issued = [(i, submit[i]()) for i in pending]
            pending = []
            for i, handle in issued:
                try:
                    results[i] = handle.get()
                except _RETRIABLE:
                    pending.append(i)
                except SessionExpiredError as exc:
                    raise ZooKeeperSessionExpiredError("the ZooKeeper session expired") from exc
                except KazooException as exc:
                    results[i] = exc
            if pending:
                self._wait_connected()
        return results

    # -- watches -----------------------------------------------------------------------

    def watcher(self, event: WatchedEvent) -> None:
        """The kazoo watch callback every watched read uses (called in a kazoo thread)."""
        if event.type == EventType.NONE or event.path is None:
            return  # a connection state change; the state listener re-arms everything
        self._to_trio(self._dispatch_watch, event.type, event.path)

    def _dispatch_watch(self, kind: str, path: str) -> None:
        handlers = self._child_handlers if kind == EventType.CHILD else self._node_handlers
        handler = handlers.get(path)
        if handler is not None:
            handler()

    def set_node_handler(self, path: str, handler: Handler | None) -> None:
        """Call `handler` when the node at `path` is created, deleted or changed (None: stop)."""
        _set_or_remove(self._node_handlers, path, handler)

    def set_child_handler(self, path: str, handler: Handler | None) -> None:
        """Call `handler` when the children of `path` change (None: stop)."""
        _set_or_remove(self._child_handlers, path, handler)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._session_listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        if listener in self._session_listeners:
            self._session_listeners.remove(listener)

    # -- session state -----------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        # Called by kazoo in its connection thread: record, then hand over to trio.
        if state == KazooState.CONNECTED:
            self._live.set()
        elif not self._closing:
            self._live.clear()
        self._to_trio(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        if self._closing:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session %#x expired", self.session_id)
            self._expired = True
            for listener in list(self._session_listeners):
                listener.session_expired()
        elif state == KazooState.SUSPENDED:
            log.info("connection to ZooKeeper lost; reconnecting")
        elif state == KazooState.CONNECTED:
            if self._expired:
                self._expired = False
                log.info("new ZooKeeper session %#x established", self.session_id)
                for listener in list(self._session_listeners):
                    listener.session_established()
            # kazoo forgot every watch when the connection dropped: have them all re-read.
            for handler in [*self._node_handlers.values(), *self._child_handlers.values()]:
                handler()

    def _to_trio(self, fn: Callable[..., None], *args: Any) -> None:
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass


class _HandshakeLimit(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's handler, shutting down a new connection on which no session was established
    within `limit` seconds: kazoo sees it dropped and tries again."""

    def __init__(self, limit: float, connected: threading.Event) -> None:
        super().__init__()
        self.limit = limit
        self.connected = connected

    def create_connection(self, *args: Any, **kwargs: Any) -> socket.socket:
        sock: socket.socket = super().create_connection(*args, **kwargs)
        timer = threading.Timer(self.limit, self._give_up, (sock,))
        timer.daemon = True
        timer.start()
        return sock

    def _give_up(self, sock: socket.socket) -> None:
        # Not connected now: this socket never established the session, or has been
        # dropped already (shutting down a closed socket raises, harmlessly).
        if not self.connected.is_set():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _set_or_remove(handlers: dict[str, Handler], path: str, handler: Handler | None) -> None:
    if handler is None:
        handlers.pop(path, None)
    else:
        handlers[path] = handler


def _stop_kazoo(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


__all__ = [
    "SessionListener",
    "ZkSession",
    "ZooKeeperClosedError",
    "ZooKeeperError",
    "ZooKeeperSessionExpiredError",
    "split_chroot",
]
