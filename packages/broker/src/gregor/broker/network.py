"""SocketServer: the broker's listeners and connections, on trio.

Each connection has two tasks: a processor that reads the request frames and handles them
one at a time, in arrival order, so a producer's batches reach the log in the order it sent
them; and a writer that sends the answers in that same order, waiting where an answer is a
`Later` (acks=all, a Fetch long poll) while the processor goes on with the next requests.
The processor gives the writer its answers through a `Handover`, which costs no turn of
trio's loop. A `Later` is registered in a purgatory, and the writer is woken for it only
once it is done (Kafka's two-phase delayed operation), not when it is queued; those of a
connection that closes are cancelled out of their purgatories. An answer ready at once,
with nothing queued before it, the processor sends itself: a request read, handled and
answered in one turn of the task, which is most of them. The socket is read and written
straight (`gregor.client.sockets`), going through trio's scheduler only to wait for it.

What Kafka does with bad input, we do:
- a size prefix above `socket.request.max.bytes`, a negative one, a header or body that does
  not parse: the connection is closed, with a log line;
- an API key or version we do not implement: the connection is closed, except ApiVersions,
  which gets UNSUPPORTED_VERSION in a v0 body listing our ApiVersions range.

Responses are encoded once into chunks: bytes, and file regions (log segments slices) which
go out with `os.sendfile` on the non-blocking socket, waiting for it to be writable when the
send buffer is full. A region of at most SMALL_REGION is read instead, and written with the
bytes around it.

On an SSL or SASL_SSL listener the TLS handshake comes first, and responses are encrypted
in user space: file regions are read (`os.pread`) and sent through the `SSLStream`, since
sendfile cannot go through TLS. On a SASL listener, `gregor.broker.security.sasl` runs the
authentication before the two tasks start. A PLAINTEXT connection does neither.

A SASL session with a lifetime (`connections.max.reauth.ms`, KIP-368) is re-authenticated
in place: a SaslHandshake reaching the processor runs the exchange there, reading its
frames and queueing its answers behind those of earlier requests, so nothing in flight is
lost. A request that arrives once the session has expired closes the connection
without an answer (and drops what is in flight), as Kafka's processor does; the client
reconnects and authenticates afresh.

A client over one of its quotas (`gregor.broker.quotas`) gets its response at once, with
`throttle_time_ms` set, and the connection is muted for that long: nothing more is read or
handled from it until then, as Kafka mutes a throttled channel.

An idle connection costs two sleeping tasks and a small buffer.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
import trio

from gregor.broker.apis import (
    ANONYMOUS,
    CloseConnection,
    Later,
    RequestContext,
    api_versions_own_range,
    registration,
)
from gregor.broker.config import BrokerConfig, Endpoint, is_dynamic_listener_setting
from gregor.broker.handover import Handover
from gregor.broker.metrics import Metrics
from gregor.broker.quotas import throttled_response
from gregor.broker.security.listeners import ListenerSecurity
from gregor.broker.security.principal import distinguished_name
from gregor.broker.security.sasl import SaslAuthenticator, Session
from gregor.broker.services import Services
from gregor.client.frames import FrameReceiver, StreamFrameReceiver
from gregor.client.sockets import send_all
from gregor.client.timeouts import NEVER, call_at
from gregor.protocol.apis import REQUESTS, ApiKey, api_name
from gregor.protocol.apis.api_versions import ApiVersionsResponse
from gregor.protocol.apis.fetch import FetchRequest
from gregor.protocol.errors import DecodeError, ErrorCode, InvalidConfigError, ProtocolError
from gregor.protocol.framing import (
    RequestPeek,
    decode_request_header,
    encode_response,
    encode_response_chunks,
    peek_request,
)
from gregor.protocol.primitives import FileRegion
from gregor.protocol.schema import Response

log = logging.getLogger(__name__)

IN_FLIGHT = 16  # answers handled but not yet sent (mostly Later ones waiting)
COPY_PIECE = 256 * 1024  # log bytes read (TLS: and encrypted) this many at a time
SMALL_REGION = 16 * 1024  # a file region up to this size is read, not sent with sendfile
MIN_REAUTH_INTERVAL = 1.0  # Kafka's: a SaslHandshake sooner after the last one is refused


Chunks = list[bytes | FileRegion]


def _failed(api: str, version: int, exc: Exception) -> CloseConnection:
    """What a handler (or a `Later`'s finish) raised: it closes the connection; a bug is
    logged too."""
    if not isinstance(exc, ProtocolError):
        log.exception("handler of %s v%s failed", api, version)
    return CloseConnection(f"{api} v{version} failed: {exc!r}")


@attrs.frozen(slots=True, eq=False)
class _Request:
    """What answering a request needs besides its response: for the frame, the metrics and
    the quotas (`busy`: the loop time its handler took)."""

    api: str
    peek: RequestPeek
    client_id: str
    body: Any
    size: int
    started: float
    busy: float

    def record(self, metrics: Metrics, answered: float) -> None:
        """Its time in the request metrics; a Fetch's also as FetchFollower or FetchConsumer."""
        key = self.peek.api_key
        follower = key == ApiKey.FETCH and _fetch_replica_id(self.body) >= 0
        metrics.record_request(key, answered - self.started, follower)


def _fetch_replica_id(request: FetchRequest) -> int:
    """The replica a Fetch is from (-1: a consumer): a field until v14, in a tag from v15."""
    return max(request.replica_id, request.replica_state.replica_id)


class _Waiting:
    """A `Later` answer in the writer's queue, with what its frame needs once ready."""

    __slots__ = ("later", "request")

    def __init__(self, later: Later, request: _Request) -> None:
        self.later = later
        self.request = request

    def finish(self, connection: Connection) -> Chunks | None:
        request = self.request
        try:
            response = self.later.finish()
        except CloseConnection:
            raise
        except Exception as exc:
            raise _failed(request.api, request.peek.api_version, exc) from exc
        request.record(connection.server.metrics, time.monotonic())
        return connection._respond(request, response)


def _ready(answer: _Answer) -> bool:
    """Whether the writer can send it: a `Later` once its operation is done."""
    return not isinstance(answer, _Waiting) or answer.later.delayed.done


_Answer = Chunks | _Waiting


class Connection:
    """One client connection: read frames ahead, answer them in order."""

    def __init__(self, server: SocketServer, stream: trio.SocketStream, endpoint: Endpoint):
        self.server = server
        self.stream = stream
        self.endpoint = endpoint
        try:
            peer = stream.socket.getpeername()
            self.host, self.port = str(peer[0]), int(peer[1])
        except OSError:
            self.host, self.port = "?", 0
        self.frames: FrameReceiver | StreamFrameReceiver = FrameReceiver(
            stream.socket, server.config.socket_request_max_bytes
        )
        self.in_flight = 0  # requests read and not yet answered
        self.queued = 0  # answers given to the writer and not yet sent
        # TLS and SASL (None on a PLAINTEXT listener), and who the peer proved to be.
        self.security = server.listener_security.get(endpoint.listener)
        self.principal = ANONYMOUS
        self.tls: trio.SSLStream[trio.SocketStream] | None = None
        # The SASL session, when it expires and when it was last re-authenticated (trio clock).
        self.session: Session | None = None
        self.session_expires = math.inf
        self.reauthenticated_at = -math.inf
        self._close_when_answered = False
        # Over a quota, nothing more is read or handled until then (trio clock).
        self.muted_until = 0.0
        # connections.max.idle.ms: since when the connection has waited for its next request
        # (trio clock; None while it reads, handles or answers one), the timeout that checks
        # it, and whether that closed the connection.
        self._waiting_since: float | None = None
        self._idle_expiry = NEVER
        self._idle_closed = False

    def __repr__(self) -> str:
        return f"{self.endpoint.listener}-{self.host}:{self.port}"

    async def run(self) -> None:
        answers = Handover[_Answer](IN_FLIGHT, _ready)
        try:
            if self.security is not None and not await self._establish(self.security):
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._send_answers, answers, nursery.cancel_scope)
                try:
                    await self._process(answers)
                finally:
                    answers.close()
                if not self._close_when_answered:
                    nursery.cancel_scope.cancel()  # the peer is gone, or we close: stop answering
        except Exception:
            # A bug must cost this connection only, never the broker.
            log.exception("connection %s failed", self)
        finally:
            self._idle_expiry.cancel()
            for answer in answers.drain():  # never to be sent: out of the purgatories
                if isinstance(answer, _Waiting):
                    answer.later.delayed.cancel()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.tls or self.stream)

    # -- TLS and SASL ----------------------------------------------------------------------

    async def _establish(self, security: ListenerSecurity) -> bool:
        """The TLS handshake and SASL authentication, within connections.max.idle.ms;
        False when the connection must close (the reason is logged)."""
        idle = self.server.config.connections_max_idle_ms / 1000
        with trio.move_on_after(idle if idle > 0 else math.inf):
            if security.ssl_context is not None and not await self._handshake(security):
                return False
            if not security.sasl:
                return True
            frames = self.frames
            frames.max_frame_size = security.sasl_max_receive_size
            session = await SaslAuthenticator(
                security,
                self.server.services.zk,
                self._receive_during_sasl,
                self._send_bytes,
                self._answer_versions,
                repr(self),
            ).run()
            frames.max_frame_size = self.server.config.socket_request_max_bytes
            if session is None:
                return False
            self._start_session(session)
            return True
        log.info("closing connection %s: no authentication within %.0fs", self, idle)
        return False

    async def _handshake(self, security: ListenerSecurity) -> bool:
        assert security.ssl_context is not None
        tls = trio.SSLStream(self.stream, security.ssl_context, server_side=True)
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            cause = exc.__cause__ or exc
            if isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError):
                # No alert, just a hang-up: OpenSSL versions name it differently (unexpected
                # EOF, or a closed connection), and a client that refuses this broker's
                # certificate often leaves so.
                log.info(
                    "TLS handshake with %s failed: the client closed the connection (%r); "
                    "does it trust this broker's certificate?",
                    self,
                    cause,
                )
            else:
                log.info("TLS handshake with %s failed: %r", self, cause)
            return False
        self.tls = tls
        self.frames = StreamFrameReceiver(tls, self.frames.max_frame_size)
        certificate = tls.getpeercert()
        if certificate:
            try:
                self.principal = security.principal_mapper.principal(
                    distinguished_name(certificate)
                )
            except ValueError as exc:
                log.info("closing connection %s: %s", self, exc)
                return False
        return True

    def _start_session(self, session: Session) -> None:
        self.session = session
        self.principal = session.principal
        lifetime = session.lifetime_ms / 1000
        self.session_expires = trio.current_time() + lifetime if lifetime else math.inf

    def _may_reauthenticate(self, frame: bytes) -> bool:
        """A SaslHandshake on a session that has a lifetime, a second or more after the last
        re-authentication began (else the handler answers ILLEGAL_SASL_STATE, as Kafka's)."""
        if peek_request(frame).api_key != ApiKey.SASL_HANDSHAKE:
            return False
        now = trio.current_time()
        if now - self.reauthenticated_at < MIN_REAUTH_INTERVAL:
            return False
        self.reauthenticated_at = now
        return True

    async def _reauthenticate(self, handshake: bytes, answers: Handover[_Answer]) -> bool:
        """KIP-368 on the live connection: the exchange's answers go behind those already
        queued. False when it failed (its answer queued) and the connection must close."""
        security = self.security
        assert security is not None and self.session is not None
        pending = [handshake]

        async def receive() -> bytes | None:
            if pending:
                return pending.pop()
            frame = await self._receive_during_sasl()
            if frame is not None:
                self.in_flight += 1  # the answer through send() counts it down again
            return frame

        async def send(data: bytes) -> None:
            await self._queue(answers, [data])

        session = await SaslAuthenticator(
            security,
            self.server.services.zk,
            receive,
            send,
            self._answer_versions,
            repr(self),
            previous=self.session,
        ).run()
        if session is None:
            return False
        log.info("re-authenticated %s as %s", self, session.principal)
        self._start_session(session)
        return True

    async def _receive_during_sasl(self) -> bytes | None:
        try:
            return await self.frames.receive()
        except ProtocolError as exc:  # a frame above sasl.server.max.receive.size
            log.info("closing connection %s during SASL: %s", self, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection %s broke during SASL: %s", self, exc)
        return None

    async def _send_bytes(self, data: bytes) -> None:
        await self._write([data])

    async def _answer_versions(self, frame: bytes) -> bytes:
        answer = await self._answer(frame)
        assert isinstance(answer, list)
        return b"".join(c for c in answer if isinstance(c, bytes))

    # -- reading and processing -------------------------------------------------------------

    async def _receive(self) -> bytes | None:
        """The next request frame; None when the connection is to close (the peer went,
        sent a bad size, or stayed idle for connections.max.idle.ms)."""
        idle = self.server.config.connections_max_idle_ms / 1000
        idle = idle if idle > 0 else math.inf
        frames = self.frames
        while True:
            try:
                if self.muted_until:
                    await self._unmuted()
                if not frames.buffered():
                    # Idle means: nothing to read and nothing being answered. The timeout
                    # only ever interrupts this wait, never a frame half read. It is set
                    # once and moved on when it falls due (`_idled`), not set and cancelled
                    # around every wait.
                    self._waiting_since = now = trio.current_time()
                    if not self._idle_expiry.pending:
                        self._idle_expiry = call_at(now + idle, self._idled)
                    try:
                        await frames.wait_readable()
                    finally:
                        self._waiting_since = None
                return await frames.receive()
            except ProtocolError as exc:  # size prefix too large or negative, EOF
                log.warning("closing connection %s: %s", self, exc)
                return None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                if self._idle_closed:
                    log.debug("closing idle connection %s", self)
                else:
                    log.debug("connection %s broke: %s", self, exc)
                return None

    def _idled(self) -> None:
        """The idle timeout fell due: close the connection if it has waited for its next
        request for connections.max.idle.ms with no answer being worked on; else look again
        when that would be."""
        idle = self.server.config.connections_max_idle_ms / 1000
        now = trio.current_time()
        since = self._waiting_since
        if since is None or self.in_flight or since + idle > now:
            start = since if since is not None and not self.in_flight else now
            self._idle_expiry = call_at(max(start + idle, now), self._idled)
            return
        self._idle_closed = True
        # Wakes the wait with ClosedResourceError; the socket is closed on the way out.
        trio.lowlevel.notify_closing(self.stream.socket)

    async def _process(self, answers: Handover[_Answer]) -> None:
        """Read and handle the requests in order until the connection is to close."""
        try:
            while (frame := await self._receive()) is not None:
                self.in_flight += 1
                if self.session_expires != math.inf:
                    if self._may_reauthenticate(frame):
                        if not await self._reauthenticate(frame, answers):
                            self._close_when_answered = True  # the failure is queued
                            return
                        continue
                    if trio.current_time() >= self.session_expires:
                        raise CloseConnection(
                            f"its SASL session expired ({self.principal}, "
                            "connections.max.reauth.ms) and it did not re-authenticate"
                        )
                answer = await self._answer(frame)
                if answer is None:
                    self.in_flight -= 1
                elif self.queued or isinstance(answer, _Waiting):
                    await self._queue(answers, answer)
                else:
                    try:
                        await self._write(answer)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                        log.debug("connection %s broke while answering: %s", self, exc)
                        return
                    self.in_flight -= 1
        except CloseConnection as exc:
            log.warning("closing connection %s: %s", self, exc)

    async def _queue(self, answers: Handover[_Answer], answer: _Answer) -> None:
        """Behind the answers the writer has yet to send. A `Later` wakes the writer when
        its operation is done, if it is at the head of the queue then."""
        self.queued += 1
        if isinstance(answer, _Waiting):
            delayed = answer.later.delayed
            delayed.on_done(answers.wake)
            try:
                await answers.give(answer)
            except BaseException:
                delayed.cancel()  # never queued (the connection is closing)
                raise
        else:
            await answers.give(answer)

    async def _send_answers(self, answers: Handover[_Answer], scope: trio.CancelScope) -> None:
        try:
            while (answer := await answers.take()) is not None:
                chunks = answer.finish(self) if isinstance(answer, _Waiting) else answer
                if chunks is not None:
                    await self._write(chunks)
                self.queued -= 1
                self.in_flight -= 1
            if self._close_when_answered:  # a failed re-authentication, its answer sent
                scope.cancel()
        except CloseConnection as exc:
            log.warning("closing connection %s: %s", self, exc)
            scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection %s broke while answering: %s", self, exc)
            scope.cancel()

    async def _answer(self, frame: bytes) -> _Answer | None:
        started = time.monotonic()
        try:
            peek = peek_request(frame)
        except DecodeError as exc:
            raise CloseConnection(str(exc)) from None
        found = registration(peek.api_key, peek.api_version)
        if found is None:
            if peek.api_key == ApiKey.API_VERSIONS:
                # Kafka answers an ApiVersions version it does not know in a v0 body.
                unsupported = ApiVersionsResponse(
                    error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[api_versions_own_range()]
                )
                return [encode_response(unsupported, 0, peek.correlation_id)]
            raise CloseConnection(
                f"{api_name(peek.api_key)} (key {peek.api_key}) v{peek.api_version} "
                "is not supported by this broker"
            )
        try:
            header, pos = decode_request_header(frame)
            # Bytes after the version's fields are ignored, as Kafka does (librdkafka sends some).
            body = REQUESTS[peek.api_key].decode(frame, peek.api_version, pos, strict=False)
        except ProtocolError as exc:
            raise CloseConnection(
                f"malformed {api_name(peek.api_key)} v{peek.api_version} request: {exc}"
            ) from None
        server = self.server
        ctx = RequestContext(
            header,
            server.services,
            self.host,
            self.port,
            self.endpoint.listener,
            self.endpoint.security_protocol,
            self.principal,
            received_at=started,
        )
        try:
            response = await found.handler(ctx, body, peek.api_version)
        except CloseConnection:
            raise
        except Exception as exc:
            raise _failed(found.name, peek.api_version, exc) from exc
        handled = time.monotonic()
        request = _Request(
            found.name, peek, ctx.client_id, body, len(frame), started, handled - started
        )
        if isinstance(response, Later):
            return _Waiting(response, request)
        request.record(server.metrics, handled)
        return self._respond(request, response)

    # -- quotas ----------------------------------------------------------------------------

    def _respond(self, request: _Request, response: Response | None) -> Chunks | None:
        """The encoded response; over a quota (`gregor.broker.quotas`), with its throttle
        time, and the connection muted for that long."""
        peek = request.peek
        encoding = time.monotonic()
        chunks = (
            None
            if response is None
            else encode_response_chunks(response, peek.api_version, peek.correlation_id)
        )
        quotas = self.server.services.quotas
        if not quotas.enabled:
            return chunks
        throttle, over = quotas.throttle(
            self.principal,
            request.client_id,
            peek.api_key,
            request.body,
            request.size,
            sum(map(len, chunks)) if chunks is not None else 0,
            request.busy + time.monotonic() - encoding,
        )
        if not throttle:
            return chunks
        self.muted_until = max(self.muted_until, trio.current_time() + throttle / 1000)
        if response is None:
            return None
        throttled = throttled_response(response, throttle, over, self.server.metrics)
        return encode_response_chunks(throttled, peek.api_version, peek.correlation_id)

    async def _unmuted(self) -> None:
        if self.muted_until > trio.current_time():
            await trio.sleep_until(self.muted_until)

    # -- writing ---------------------------------------------------------------------------

    async def _write(self, chunks: Chunks) -> None:
        if self.tls is None:
            await send_chunks(self.stream, chunks)
        else:
            await send_chunks_copying(self.tls, chunks)


async def send_chunks(stream: trio.SocketStream, chunks: Chunks) -> None:
    """Send an encoded response: bytes, small file regions read and sent with them, larger
    ones with `os.sendfile`.

    A fetch at low latency returns a few hundred bytes of records between a header and a few
    bytes of trailer. Sent with sendfile they make three writes and three TCP segments, and
    the peer wakes for a frame it cannot finish yet; read (one pread), they go out in one."""
    sock = stream.socket
    if len(chunks) == 1 and isinstance(chunks[0], bytes):  # most answers: no records
        await send_all(sock, chunks[0])
        return
    await _send_chunks(
        chunks, lambda data: send_all(sock, data), lambda region: _sendfile(sock, region)
    )


async def send_chunks_copying(stream: trio.abc.SendStream, chunks: Chunks) -> None:
    """Send an encoded response where sendfile cannot go (TLS encrypts in user space): file
    regions are read (`os.pread`, in pieces) and sent with the bytes around them."""
    await _send_chunks(chunks, stream.send_all, None)


async def _send_chunks(
    chunks: Chunks,
    write: Callable[[bytes], Awaitable[None]],
    sendfile: Callable[[FileRegion], Awaitable[None]] | None,
) -> None:
    """Runs of bytes and read regions joined into writes of at most about COPY_PIECE;
    regions above SMALL_REGION given to `sendfile`, if there is one."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        if isinstance(chunk, bytes):
            pieces: Iterable[bytes] = (chunk,)
        elif sendfile is not None and len(chunk) > SMALL_REGION:
            if parts:
                await write(b"".join(parts))
                parts, size = [], 0
            await sendfile(chunk)
            continue
        else:
            pieces = _read(chunk)
        for piece in pieces:
            parts.append(piece)
            size += len(piece)
            if size >= COPY_PIECE:
                await write(b"".join(parts))
                parts, size = [], 0
    if parts:
        await write(b"".join(parts))


def _read(region: FileRegion) -> Iterator[bytes]:
    """The region's bytes, in pieces of at most COPY_PIECE."""
    offset, remaining = region.position, len(region)
    while remaining:
        piece = os.pread(region.fileno(), min(remaining, COPY_PIECE), offset)
        if not piece:
            raise CloseConnection(f"log file ended {remaining} bytes short of a fetch")
        yield piece
        offset += len(piece)
        remaining -= len(piece)


async def _sendfile(sock: trio.socket.SocketType, region: FileRegion) -> None:
    out = sock.fileno()
    source = region.fileno()
    offset, remaining = region.position, len(region)
    while remaining:
        try:
            sent = os.sendfile(out, source, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            raise
        if sent == 0:
            # The file is shorter than the region (truncated under us): the frame we
            # announced cannot be completed, so the stream is unusable.
            raise CloseConnection(f"log file ended {remaining} bytes short of a fetch")
        offset += sent
        remaining -= sent


class SocketServer:
    """Every listener of the broker; `start` binds them, `serve` accepts until cancelled."""

    def __init__(self, config: BrokerConfig, metrics: Metrics, services: Services) -> None:
        self.config = config
        self.metrics = metrics
        self.services = services
        self._listeners: list[tuple[Endpoint, list[trio.SocketListener]]] = []
        self.bound: dict[str, Endpoint] = {}  # listener name -> endpoint with the real port
        # Each listener's TLS and SASL for new connections (KIP-226 replaces them).
        self.listener_security: Mapping[str, ListenerSecurity] = config.listener_security
        self._dynamic_listener_settings: dict[str, str] = {}

    def reconfigure(self, dynamic: Mapping[str, str]) -> BrokerConfig | None:
        """This broker's dynamic config (/config/brokers/<id>) changed: its listener settings
        (KIP-226) are loaded again, even unchanged, so a keystore rewritten in place is read
        afresh. New connections get the result; open ones keep the TLS session and SASL
        principal they have. Settings that do not load leave the current ones in place.
        The configuration they make (for the inter-broker connections), if reloaded."""
        settings = {k: v for k, v in dynamic.items() if is_dynamic_listener_setting(k)}
        if not settings and not self._dynamic_listener_settings:
            return None
        try:
            reloaded = self.config.with_overrides(settings)
        except InvalidConfigError as exc:
            log.error("dynamic listener settings not applied, the current ones stay: %s", exc)
            return None
        self.listener_security = reloaded.listener_security
        self._dynamic_listener_settings = settings
        log.info("listener security reloaded with dynamic settings %s", sorted(settings))
        return reloaded

    async def bind(self) -> None:
        """Bind every listener (port 0: the kernel picks, and `bound` tells which)."""
        for endpoint in self.config.listeners:
            host = endpoint.host or None
            try:
                listeners = await trio.open_tcp_listeners(endpoint.port, host=host, backlog=1024)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen on {endpoint}: {exc.strerror}") from exc
            port = listeners[0].socket.getsockname()[1]
            self._listeners.append((endpoint, listeners))
            self.bound[endpoint.listener] = Endpoint(
                endpoint.listener, endpoint.host, port, endpoint.security_protocol
            )
            log.info("listening on %s (port %d)", endpoint, port)

    def advertised(self) -> list[Endpoint]:
        """The advertised endpoints, with ports of 0 replaced by the bound ones and an empty
        host by this machine's name, as Kafka registers them."""
        out = []
        for endpoint in self.config.advertised_listeners:
            port = endpoint.port or self.bound[endpoint.listener].port
            host = endpoint.host or socket.getfqdn()
            out.append(Endpoint(endpoint.listener, host, port, endpoint.security_protocol))
        return out

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for endpoint, listeners in self._listeners:
                for listener in listeners:
                    _set_buffers(listener.socket, self.config)
                    nursery.start_soon(self._accept, endpoint, listener, nursery)
            task_status.started()

    async def _accept(
        self, endpoint: Endpoint, listener: trio.SocketListener, nursery: trio.Nursery
    ) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        log.error("cannot accept on %s: %s", endpoint, exc)
                        await trio.sleep(0.1)
                        continue
                    raise
                nursery.start_soon(Connection(self, stream, endpoint).run)


def _set_buffers(sock: trio.socket.SocketType, config: BrokerConfig) -> None:
    send = config.socket_send_buffer_bytes
    receive = config.socket_receive_buffer_bytes
    # Accepted sockets inherit the listening socket's buffer sizes; -1 keeps the OS default.
    if send > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send)
    if receive > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive)
