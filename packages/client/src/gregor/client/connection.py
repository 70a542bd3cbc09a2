"""One TCP connection to one Kafka broker, on trio.

- On open, ApiVersions is negotiated: the highest ApiVersions version both sides support
  (a broker that does not support ours answers error 35 with its own range, and we retry),
  and the broker's range for every API is kept for `version_for`.
- Requests are pipelined up to `max_in_flight`: each is written whole under a send lock and
  registered in order; one reader task matches responses to requests by correlation id
  (with `caller_reads`, for one user sending one request at a time, the requesting task
  reads instead). Kafka answers in request order on a connection, so a response that is not
  for the oldest outstanding request means the stream is corrupt and the connection is
  closed.
- A request that is not answered within its timeout closes the connection (as the Java
  client does: the stream's state is unknown) and raises RequestTimedOutError; everything
  else in flight fails with NetworkError, which is retriable.
- A SASL session with a lifetime (KIP-368) is renewed before the first request after 90% of
  it: SaslHandshake and SaslAuthenticate again on this connection, other requests held back
  until that is done.

The connection's reader runs in a nursery the caller owns, so its lifetime is structured:
cancelling that nursery closes the connection.
"""

from __future__ import annotations

import itertools
import logging
import math
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import ClassVar, TypeVar

import attrs
import trio

from gregor.client.frames import FrameReceiver
from gregor.client.security import (
    ClientSecurity,
    SaslCredentials,
    SecuritySettings,
    SslAuthenticationError,
    sasl_client,
)
from gregor.client.sockets import send_all
from gregor.client.timeouts import call_at
from gregor.protocol.apis import api_name
from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from gregor.protocol.apis.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from gregor.protocol.errors import (
    ErrorCode,
    NetworkError,
    ProtocolError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
    raise_for_code,
)
from gregor.protocol.framing import FrameReader, decode_response, encode_request
from gregor.protocol.schema import Request, Response

log = logging.getLogger(__name__)

SOFTWARE_NAME = "gregor-client"
SOFTWARE_VERSION = "0.1.0"

R = TypeVar("R", bound=Response)


@attrs.frozen
class ConnectionConfig:
    """Settings of one connection, named after the client configs they come from."""

    client_id: str | None = "gregor"
    request_timeout: float = 30.0  # request.timeout.ms
    connect_timeout: float = 10.0  # socket.connection.setup.timeout.ms
    max_in_flight: int = 5  # max.in.flight.requests.per.connection
    # A ceiling on one response frame, so a corrupt size prefix cannot exhaust memory.
    max_response_size: int = 1 << 30
    security: SecuritySettings = attrs.field(factory=ClientSecurity)  # TLS and SASL
    receive_size: int = 1 << 20
    # SO_SNDBUF / SO_RCVBUF (send.buffer.bytes, receive.buffer.bytes); -1: the OS default.
    send_buffer: int = -1
    receive_buffer: int = -1
    # The task that sends a request reads its response, with no reader task in between: for
    # a connection with one user and one request at a time (a broker's replica fetcher),
    # which then wakes once a response, not twice. The connection learns that the broker
    # closed it only at its next request.
    caller_reads: bool = False


class _Pending:
    """A request waiting for its response."""

    __slots__ = ("api_key", "correlation_id", "done", "error", "frame", "version")

    def __init__(self, correlation_id: int, api_key: int, version: int) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.done = trio.Event()
        self.frame: bytes | None = None
        self.error: Exception | None = None


# A caller's read that ran out of time closed the connection with this (caller_reads).
_TIMED_OUT = NetworkError("no response within the request timeout")

RENEW_AT = 0.9  # of a SASL session's lifetime (Kafka's Java client: 85-95%)


async def _take(lock: trio.Semaphore | trio.Lock) -> None:
    """Acquire `lock`, through trio's scheduler only when it must wait. trio's `acquire`
    yields even when free, which cost each request two more turns of the run loop; the
    request still reaches a checkpoint where it waits for its answer."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


class BrokerConnection:
    """A connection to one broker; open it with `BrokerConnection.open`."""

    # Bytes after a response's fields are ignored, as Kafka's clients ignore them; the test
    # suites turn this on (conftest.py) so that a response we encode wrongly fails loudly.
    strict_responses: ClassVar[bool] = False

    def __init__(self, stream: trio.abc.Stream, host: str, port: int, config: ConnectionConfig):
        self.host = host
        self.port = port
        self.config = config
        self._stream = stream
        self._frames = FrameReader(config.max_response_size)
        # A plain socket: each frame read straight into a buffer of its size.
        self._receiver = (
            FrameReceiver(stream.socket, config.max_response_size)
            if isinstance(stream, trio.SocketStream)
            else None
        )
        self._send_lock = trio.Lock()
        self._slots = trio.Semaphore(config.max_in_flight)
        self._pending: deque[_Pending] = deque()
        self._correlation_ids = itertools.count()
        self._closed: Exception | None = None
        self.broker_versions: dict[int, tuple[int, int]] = {}
        # The trio clock when a request last went out or a response came in, or a user took
        # the connection: what connections.max.idle.ms is counted from.
        self.last_used = trio.current_time()
        # KIP-368: when the SASL session is renewed (trio clock), and the renewal under way,
        # which other requests wait for: none may go between its SaslHandshake and the end
        # of its SaslAuthenticate exchange.
        self._renew_at = math.inf
        self._renewing: trio.Event | None = None
        self._renewer: trio.lowlevel.Task | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.host}:{self.port}>"

    @classmethod
    async def open(
        cls,
        nursery: trio.Nursery,
        host: str,
        port: int,
        config: ConnectionConfig | None = None,
    ) -> BrokerConnection:
        """Connect, start the reader in `nursery` (unless the caller reads), and negotiate
        API versions."""
        config = config or ConnectionConfig()
        try:
            with trio.fail_after(config.connect_timeout):
                tcp = await trio.open_tcp_stream(host, port)
                for option, size in (
                    (socket.SO_SNDBUF, config.send_buffer),
                    (socket.SO_RCVBUF, config.receive_buffer),
                ):
                    if size > 0:
                        tcp.setsockopt(socket.SOL_SOCKET, option, size)
                stream: trio.abc.Stream = tcp
                ssl_context = config.security.ssl_context
                if ssl_context is not None:
                    tls = trio.SSLStream(stream, ssl_context, server_hostname=host)
                    try:
                        await tls.do_handshake()
                    except BaseException:
                        # A broken SSLStream does not close its socket: the broker would
                        # wait on it for as long as this object lives.
                        await trio.aclose_forcefully(tcp)
                        raise
                    stream = tls
        except trio.TooSlowError:
            raise NetworkError(f"connecting to {host}:{port} timed out") from None
        except trio.BrokenResourceError as exc:  # trio's wrapping of the ssl module's errors
            message = f"SSL handshake with {host}:{port} failed: {exc.__cause__ or exc}"
            if isinstance(exc.__cause__, ssl.SSLCertVerificationError):
                # Not retriable: the broker's certificate will not change by trying again.
                raise SslAuthenticationError(message) from exc
            raise NetworkError(message) from exc
        except OSError as exc:
            raise NetworkError(f"cannot connect to {host}:{port}: {exc}") from exc
        connection = cls(stream, host, port, config)
        if not config.caller_reads:
            nursery.start_soon(connection._read_responses)
        try:
            await connection._negotiate_versions()
            if config.security.sasl is not None:
                await connection._authenticate(config.security.sasl)
        except BaseException:
            await connection.aclose()
            raise
        return connection

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    # -- versions --------------------------------------------------------------------------

    async def _negotiate_versions(self) -> None:
        ours = ApiVersionsRequest.valid_versions.hi
        request = ApiVersionsRequest(SOFTWARE_NAME, SOFTWARE_VERSION)
        response = await self.request(request, ours, response_type=ApiVersionsResponse)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            theirs = next((k.max_version for k in response.api_keys if k.api_key == 18), 0)
            version = min(theirs, ours)
            response = await self.request(request, version, response_type=ApiVersionsResponse)
        raise_for_code(response.error_code, f"ApiVersions from {self.host}:{self.port}")
        self.broker_versions = {
            k.api_key: (k.min_version, k.max_version) for k in response.api_keys
        }

    async def _authenticate(self, credentials: SaslCredentials) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done (KIP-152).
        A session lifetime in the last answer (KIP-368) sets when it is renewed."""
        where = f"{self.host}:{self.port}"
        version = self.version_for(SaslHandshakeRequest, min_version=1)
        handshake = await self.request(
            SaslHandshakeRequest(credentials.mechanism),
            version,
            response_type=SaslHandshakeResponse,
        )
        if handshake.error_code:
            raise UnsupportedSaslMechanismError(
                f"{where} does not enable SASL mechanism {credentials.mechanism}; "
                f"it enables {handshake.mechanisms}"
            )
        client = sasl_client(credentials)
        token: bytes | None = client.first()
        version = self.version_for(SaslAuthenticateRequest)
        lifetime_ms = 0
        while token is not None:
            answer = await self.request(
                SaslAuthenticateRequest(token), version, response_type=SaslAuthenticateResponse
            )
            raise_for_code(answer.error_code, answer.error_message or f"SASL with {where}")
            lifetime_ms = answer.session_lifetime_ms
            try:
                token = client.respond(answer.auth_bytes)
            except SaslAuthenticationFailedError as exc:  # the server's answer was wrong
                raise SaslAuthenticationFailedError(f"{where}: {exc}") from None
        lifetime = lifetime_ms / 1000
        self._renew_at = trio.current_time() + lifetime * RENEW_AT if lifetime > 0 else math.inf

    async def _renew_session(self) -> None:
        """Before a request: renew the SASL session once most of its lifetime has passed,
        on this connection (the broker answers what is in flight first); while that runs,
        other requests wait. Without it the broker would close the connection at expiry."""
        if self._renewer is trio.lowlevel.current_task():
            return  # the renewal's own requests
        while self._renewing is not None:
            await self._renewing.wait()
        credentials = self.config.security.sasl
        if credentials is None or trio.current_time() < self._renew_at:
            return
        self._renewing = renewing = trio.Event()
        self._renewer = trio.lowlevel.current_task()
        try:
            await self._authenticate(credentials)
            log.debug("re-authenticated with %s:%s", self.host, self.port)
        except (NetworkError, ProtocolError) as exc:
            self._close(exc)
            raise
        finally:
            self._renewing = self._renewer = None
            renewing.set()

    def version_for(
        self, request: type[Request], max_version: int | None = None, min_version: int = 0
    ) -> int:
        """The highest version of `request` both sides support (within the given bounds)."""
        theirs = self.broker_versions.get(request.api_key)
        if theirs is None:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} does not support {api_name(request.api_key)}"
            )
        lo = max(theirs[0], request.valid_versions.lo, min_version)
        hi = min(theirs[1], request.valid_versions.hi)
        if max_version is not None:
            hi = min(hi, max_version)
        if lo > hi:
            raise UnsupportedVersionError(
                f"no common version of {api_name(request.api_key)} with {self.host}:{self.port}: "
                f"broker has {theirs[0]}-{theirs[1]}, we need {lo}-{hi}"
            )
        return hi

    # -- requests --------------------------------------------------------------------------

    async def request(
        self,
        body: Request,
        version: int | None = None,
        *,
        timeout: float | None = None,
        response_type: type[R] | None = None,
        written: Callable[[], object] | None = None,
    ) -> R:
        """Send `body` and wait for its response (decoded at the same version).

        `response_type` only narrows the static type; the response class comes from the API.
        `written` is called once the request is on the wire, before its response comes.
        """
        await self._renew_session()
        version = self.version_for(type(body)) if version is None else version
        pending = await self._send(body, version, expect_response=True, written=written)
        assert pending is not None
        limit = self.config.request_timeout if timeout is None else timeout
        if self.config.caller_reads:
            # Its timeout closes the connection, which wakes the read: cheaper than a cancel
            # scope around every request.
            expiry = call_at(trio.current_time() + limit, self._read_timed_out)
            try:
                await self._read_responses(until=pending.done)
            except BaseException:
                # No one else would read the response still on its way.
                self._close(NetworkError("a request was cancelled while awaiting its response"))
                raise
            finally:
                expiry.cancel()
        else:
            expiry = call_at(trio.current_time() + limit, pending.done.set)
            try:
                await pending.done.wait()
            finally:
                expiry.cancel()
        if pending.frame is None and (pending.error is None or pending.error is _TIMED_OUT):
            error = RequestTimedOutError(
                f"{api_name(body.api_key)} v{version} to {self.host}:{self.port} "
                f"got no response within {limit:.1f}s"
            )
            self._close(error)
            raise error
        if pending.error is not None:
            raise pending.error
        assert pending.frame is not None
        _, response = decode_response(
            pending.frame, body.api_key, version, strict=self.strict_responses
        )
        return response  # type: ignore[return-value]

    async def send(self, body: Request, version: int | None = None) -> None:
        """Send a request the broker will not answer (Produce with acks=0)."""
        await self._renew_session()
        version = self.version_for(type(body)) if version is None else version
        await self._send(body, version, expect_response=False)
        # Nothing here waited (a request waits for its answer): let the other tasks run.
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def _send(
        self,
        body: Request,
        version: int,
        *,
        expect_response: bool,
        written: Callable[[], object] | None = None,
    ) -> _Pending | None:
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller sends nothing
        self._check_open()
        await _take(self._slots)
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        try:
            frame = encode_request(body, version, correlation_id, self.config.client_id)
        except BaseException:
            self._slots.release()
            raise
        pending = _Pending(correlation_id, body.api_key, version) if expect_response else None
        try:
            await _take(self._send_lock)
        except BaseException:  # cancelled while another request was being written
            self._slots.release()
            raise
        try:
            try:
                self._check_open()  # it may have closed while we waited for the lock
            except NetworkError:
                self._slots.release()
                raise
            if pending is not None:
                self._pending.append(pending)
            self.last_used = trio.current_time()
            try:
                if isinstance(self._stream, trio.SocketStream):
                    await send_all(self._stream.socket, frame)
                else:
                    await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                error = NetworkError(f"sending to {self.host}:{self.port} failed: {exc}")
                self._close(error)
                raise error from exc
            except trio.Cancelled:
                # A frame may be half written: the stream can no longer be trusted.
                self._close(NetworkError("a request was cancelled while being sent"))
                raise
            if written is not None:
                written()
        finally:
            self._send_lock.release()
        if pending is None:
            self._slots.release()
        return pending

    def _read_timed_out(self) -> None:
        self._close(_TIMED_OUT)

    def _check_open(self) -> None:
        if self._closed is not None:
            raise NetworkError(f"connection to {self.host}:{self.port} is closed: {self._closed}")

    async def _read_responses(self, until: trio.Event | None = None) -> None:
        """Dispatch the responses read, until `until` is set (None: until the connection
        closes); a failure closes the connection."""
        try:
            while until is None or not until.is_set():
                self._dispatch(await self._next_frame())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close(NetworkError(f"connection to {self.host}:{self.port} broke: {exc}"))
        except (NetworkError, ProtocolError) as exc:
            self._close(exc)

    async def _next_frame(self) -> bytes:
        """The next response frame: on a plain socket read straight, on any other stream
        (TLS) from chunks fed to a sans-IO FrameReader."""
        if self._receiver is not None:
            frame = await self._receiver.receive()
        else:
            while (frame := self._frames.next_frame()) is None:
                data = await self._stream.receive_some(self.config.receive_size)
                if not data:
                    break
                self._frames.feed(data)
        if frame is None:
            raise NetworkError(f"{self.host}:{self.port} closed the connection")
        return frame

    def _dispatch(self, frame: bytes) -> None:
        if len(frame) < 4:
            raise ProtocolError(f"response of {len(frame)} bytes from {self.host}:{self.port}")
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        if not self._pending or self._pending[0].correlation_id != correlation_id:
            expected = self._pending[0].correlation_id if self._pending else None
            raise ProtocolError(
                f"{self.host}:{self.port} answered correlation id {correlation_id}, "
                f"expected {expected}"
            )
        pending = self._pending.popleft()
        pending.frame = frame
        pending.done.set()
        self._slots.release()
        self.last_used = trio.current_time()

    # -- closing ---------------------------------------------------------------------------

    def _close(self, reason: Exception) -> None:
        """Fail everything in flight and close the stream (idempotent, never blocks)."""
        if self._closed is not None:
            return
        self._closed = reason
        if not isinstance(reason, NetworkError):
            log.warning("closing connection to %s:%s: %s", self.host, self.port, reason)
        while self._pending:
            pending = self._pending.popleft()
            pending.error = (
                reason if isinstance(reason, NetworkError) else NetworkError(str(reason))
            )
            pending.done.set()
            self._slots.release()
        # Closing a trio stream is async; aborting the socket underneath is not, and it makes
        # the reader's receive_some fail at once.
        socket_stream = self._stream
        if isinstance(socket_stream, trio.SSLStream):
            socket_stream = socket_stream.transport_stream
        if isinstance(socket_stream, trio.SocketStream):
            socket_stream.socket.close()

    async def aclose(self) -> None:
        self._close(NetworkError(f"connection to {self.host}:{self.port} was closed"))
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self._stream)
