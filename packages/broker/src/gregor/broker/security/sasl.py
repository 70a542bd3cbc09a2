"""The server side of SASL on a connection, before any other request is served.

The state machine is Kafka's (SaslServerAuthenticator):

- first, ApiVersions (at most once) and then SaslHandshake. Any other request closes the
  connection without an answer; a mechanism the listener does not enable is answered
  UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection closes;
- SaslHandshake v0: the mechanism's tokens then travel as bare size-prefixed frames (the
  pre-KIP-152 exchange); v1: inside SaslAuthenticate requests and responses. A request other
  than SaslAuthenticate then closes the connection (with ILLEGAL_SASL_STATE where the answer
  can carry it);
- a failed authentication is answered SASL_AUTHENTICATION_FAILED with Kafka's message
  (v1; v0 has no way to say it), after `connection.failed.authentication.delay.ms`, and the
  connection closes once the client has closed its side (or a second has passed).

Until authentication completes, frames above `sasl.server.max.receive.size` close the
connection. PLAIN checks the listener's JAAS users; SCRAM the credentials in ZooKeeper
(`/config/users/<user>`), through scramp.

Re-authentication (KIP-368): with `connections.max.reauth.ms` set for the mechanism, the
final SaslAuthenticate answer carries that session lifetime. A client re-authenticates by
sending SaslHandshake again on its live connection; the exchange runs from the handshake on
(no ApiVersions), must use the same mechanism (else it fails at the next token, as Kafka's
REAUTH_BAD_MECHANISM) and prove the same principal ("Cannot change principals during
re-authentication"). The network layer enforces the lifetime.
"""

from __future__ import annotations

import enum
import hmac
import logging
from collections.abc import Awaitable, Callable

import attrs
import scramp
import trio

from gregor.broker.apis import CloseConnection
from gregor.broker.security.listeners import ListenerSecurity
from gregor.broker.security.scram_credentials import ScramCredential, user_entity
from gregor.broker.zk import KafkaZkClient, znodes
from gregor.protocol.apis import REQUESTS, ApiKey, api_name
from gregor.protocol.apis.api_versions import ApiVersionsResponse
from gregor.protocol.apis.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from gregor.protocol.apis.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from gregor.protocol.errors import DecodeError, ErrorCode, ProtocolError
from gregor.protocol.framing import decode_request_header, encode_response, peek_request

log = logging.getLogger(__name__)


@attrs.frozen
class Session:
    """An authenticated SASL session: who, by which mechanism, and for how long (0: it
    never expires)."""

    principal: str
    mechanism: str
    lifetime_ms: int


class AuthenticationFailed(Exception):
    """The peer failed to authenticate; the message is Kafka's, for the peer."""


class _State(enum.Enum):
    INITIAL = enum.auto()
    HANDSHAKE_OR_VERSIONS = enum.auto()
    HANDSHAKE = enum.auto()
    AUTHENTICATE = enum.auto()
    REAUTH_BAD_MECHANISM = enum.auto()


class Mechanism:
    """One server-side exchange: `evaluate(token)` until `complete`."""

    complete = False
    user = ""

    async def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError


class PlainServer(Mechanism):
    """RFC 4616 against the listener's JAAS `user_<name>="<password>"` options."""

    def __init__(self, users: dict[str, str] | None) -> None:
        self.users = users or {}

    async def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(
                "Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts))
            )
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self.user = user
        self.complete = True
        return b""


class ScramServer(Mechanism):
    """RFC 5802 with scramp; the user's credential is read from ZooKeeper when the
    client-first message names the user."""

    def __init__(self, mechanism: str, zk: KafkaZkClient) -> None:
        self.mechanism = mechanism
        self.zk = zk
        self._server: scramp.core.ScramServer | None = None

    async def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode()
            if self._server is None:
                return await self._first(message)
            self._accept_prefixed_nonce(message)
            self._server.set_client_final(message)
            final: str = self._server.get_server_final()
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            log.debug("SCRAM failed: %s", exc)
            raise AuthenticationFailed(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ) from None
        self.complete = True
        return final.encode()

    def _accept_prefixed_nonce(self, client_final: str) -> None:
        """Older librdkafka (kcat as Debian ships it) sends its own nonce again before the
        combined one in client-final. Kafka accepts a nonce that ends with the server's
        (ScramSaslServer), and so do we: the proof is still checked over the message as
        sent, and the server's fresh nonce must be there, so a replay still fails."""
        assert self._server is not None
        expected = self._server.nonce  # a str, or scramp's Nonce wrapping one
        for attribute in client_final.split(","):
            if attribute.startswith("r="):
                nonce = attribute[2:]
                if nonce != str(expected) and nonce.endswith(str(expected)):
                    self._server.nonce = type(expected)(nonce)
                return

    async def _first(self, message: str) -> bytes:
        user = _scram_user(message)
        credential = await self._credential(user)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        auth_info = (
            credential.salt,
            credential.stored_key,
            credential.server_key,
            credential.iterations,
        )
        self._server = scramp.ScramMechanism(self.mechanism).make_server(lambda _: auth_info)
        self._server.set_client_first(message)
        self.user = user
        first: str = self._server.get_server_first()
        return first.encode()

    async def _credential(self, user: str) -> ScramCredential | None:
        path = znodes.config_entity_path(znodes.CONFIG_USERS, user_entity(user))
        found = await self.zk.get_data(path)
        if found is None:
            return None
        text = znodes.decode_entity_config(path, found[0]).get(self.mechanism)
        if text is None:
            return None
        try:
            return ScramCredential.decode(text)
        except ValueError:
            log.warning(
                "%s of user %r in ZooKeeper is not a SCRAM credential", self.mechanism, user
            )
            return None


def _scram_user(client_first: str) -> str:
    """The `n=` attribute after the GS2 header, unescaped (RFC 5802 5.1)."""
    bare = client_first.split(",", 2)[-1] if client_first.count(",") >= 2 else ""
    for attribute in bare.split(","):
        if attribute.startswith("n="):
            return attribute[2:].replace("=2C", ",").replace("=3D", "=")
    raise scramp.ScramException("the client-first message names no user")


FAILURE_LINGER = 1.0  # seconds a failed authentication's connection waits for the client

Send = Callable[[bytes], Awaitable[None]]
Receive = Callable[[], Awaitable[bytes | None]]
# Answers an ApiVersions frame as the broker always does (the network layer's own path).
AnswerVersions = Callable[[bytes], Awaitable[bytes]]


class SaslAuthenticator:
    """Runs one connection's authentication, or its re-authentication when `previous` is
    the session it had; `run` returns the session, or None when the connection must close
    (the reason is logged)."""

    def __init__(
        self,
        security: ListenerSecurity,
        zk: KafkaZkClient,
        receive: Receive,
        send: Send,
        answer_versions: AnswerVersions,
        peer: str,
        previous: Session | None = None,
    ) -> None:
        self.security = security
        self.zk = zk
        self.receive = receive
        self.send = send
        self.answer_versions = answer_versions
        self.peer = peer
        self.previous = previous
        # Re-authentication starts at the SaslHandshake, without ApiVersions.
        self.state = _State.INITIAL if previous is None else _State.HANDSHAKE
        self.headers = False  # SaslHandshake v1+: tokens travel in SaslAuthenticate
        self.mechanism: Mechanism | None = None
        self.mechanism_name = ""
        self.what = "authentication" if previous is None else "re-authentication"

    async def run(self) -> Session | None:
        try:
            while True:
                frame = await self.receive()
                if frame is None:
                    return None
                if self.state is _State.REAUTH_BAD_MECHANISM:
                    assert self.previous is not None
                    raise _Failed(
                        f"SASL mechanism '{self.mechanism_name}' requested by client is not "
                        "supported for re-authentication of mechanism "
                        f"'{self.previous.mechanism}'",
                        None,
                    )
                if self.state is _State.AUTHENTICATE:
                    done = await self._authenticate(frame)
                    if done:
                        assert self.session is not None
                        log.debug("%s: %s as %s", self.peer, self.what, self.session.principal)
                        return self.session
                else:
                    await self._handshake(frame)
        except _Refused as refused:
            log.info("closing connection %s during SASL: %s", self.peer, refused)
            return None
        except _Failed as failed:
            log.info("%s of %s failed: %s", self.what, self.peer, failed)
            await trio.sleep(self.security.failed_authentication_delay_s)
            if failed.answer is not None:
                await self.send(failed.answer)
                if self.previous is None:
                    await self._linger()
            return None

    async def _linger(self) -> None:
        """Let the client read the failure before the connection closes, until it closes
        (what it sends is dropped) or FAILURE_LINGER seconds pass. A close right behind the
        answer can reach the client in the same read, and some drop the answer then
        (kafka-python 3.0 reports only the lost connection)."""
        with trio.move_on_after(FAILURE_LINGER):
            while await self.receive() is not None:
                pass

    async def _handshake(self, frame: bytes) -> None:
        try:
            peek = peek_request(frame)
        except DecodeError as exc:
            raise _Refused(f"not a Kafka request: {exc}") from None
        if peek.api_key not in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE):
            if self.state is _State.INITIAL:
                raise _Refused(
                    "Invalid request, potential reasons: kafka client configured with the "
                    "wrong security protocol, it does not support KIP-43 or it is not a kafka "
                    "client."
                )
            raise _Refused(
                f"Unexpected Kafka request of type {api_name(peek.api_key)} during SASL handshake."
            )
        if self.state is _State.INITIAL:
            self.state = _State.HANDSHAKE_OR_VERSIONS
        if peek.api_key == ApiKey.API_VERSIONS:
            if self.state is not _State.HANDSHAKE_OR_VERSIONS:
                raise _Refused(f"Unexpected ApiVersions request in SASL state {self.state.name}")
            try:
                answer = await self.answer_versions(frame)
            except CloseConnection as exc:  # malformed
                raise _Refused(str(exc)) from None
            if _api_versions_error(answer) == ErrorCode.NONE:
                self.state = _State.HANDSHAKE  # else the client may try another version
            await self.send(answer)
            return
        version = peek.api_version
        versions = SaslHandshakeRequest.valid_versions
        if not versions.lo <= version <= versions.hi:
            raise _Refused(f"SaslHandshake v{version} is not supported")
        request = _decode(frame, ApiKey.SASL_HANDSHAKE, version)
        assert isinstance(request, SaslHandshakeRequest)
        enabled = list(self.security.sasl_mechanisms)
        mechanism = request.mechanism
        if mechanism not in enabled:
            response = SaslHandshakeResponse(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled)
            raise _Failed(
                f"Unsupported SASL mechanism {mechanism}",
                encode_response(response, version, peek.correlation_id),
            )
        self.headers = version >= 1
        self.mechanism_name = mechanism
        self.mechanism = (
            PlainServer(dict(self.security.plain_users))
            if mechanism == "PLAIN"
            else ScramServer(mechanism, self.zk)
        )
        self.state = _State.AUTHENTICATE
        if self.previous is not None and mechanism != self.previous.mechanism:
            self.state = _State.REAUTH_BAD_MECHANISM  # answered, and refused at the next frame
        await self.send(
            encode_response(SaslHandshakeResponse(0, enabled), version, peek.correlation_id)
        )

    @property
    def session(self) -> Session | None:
        """The session once the mechanism completed."""
        mechanism = self.mechanism
        if mechanism is None or not mechanism.complete:
            return None
        name = self.mechanism_name
        return Session(f"User:{mechanism.user}", name, self.security.max_reauth_ms.get(name, 0))

    def _check_principal(self) -> None:
        """A re-authentication must prove the principal the connection had."""
        session, previous = self.session, self.previous
        if session is None or previous is None or session.principal == previous.principal:
            return
        raise AuthenticationFailed(
            "Cannot change principals during re-authentication from "
            f"{previous.principal.replace(':', '.', 1)}: {session.principal.replace(':', '.', 1)}"
        )

    async def _authenticate(self, frame: bytes) -> bool:
        """One token; True once the mechanism completed."""
        mechanism = self.mechanism
        assert mechanism is not None
        if not self.headers:
            try:
                token = await mechanism.evaluate(frame)
                self._check_principal()
            except AuthenticationFailed as exc:
                raise _Failed(str(exc), None) from None
            await self.send(len(token).to_bytes(4, "big") + token)
            return mechanism.complete
        try:
            peek = peek_request(frame)
        except DecodeError as exc:
            raise _Refused(f"not a Kafka request: {exc}") from None
        if peek.api_key != ApiKey.SASL_AUTHENTICATE:
            raise _Failed(
                f"Unexpected Kafka request of type {api_name(peek.api_key)} during SASL "
                "authentication.",
                _illegal_state_answer(peek.api_key, peek.api_version, peek.correlation_id),
            )
        versions = SaslAuthenticateRequest.valid_versions
        if not versions.lo <= peek.api_version <= versions.hi:
            raise _Refused(f"SaslAuthenticate v{peek.api_version} is not supported")
        request = _decode(frame, ApiKey.SASL_AUTHENTICATE, peek.api_version)
        assert isinstance(request, SaslAuthenticateRequest)
        try:
            token = await mechanism.evaluate(request.auth_bytes)
            self._check_principal()
        except AuthenticationFailed as exc:
            message = str(exc).replace("during authentication", f"during {self.what}")
            response = SaslAuthenticateResponse(ErrorCode.SASL_AUTHENTICATION_FAILED, message)
            raise _Failed(
                message, encode_response(response, peek.api_version, peek.correlation_id)
            ) from None
        session = self.session
        response = SaslAuthenticateResponse(0, None, token, session.lifetime_ms if session else 0)
        await self.send(encode_response(response, peek.api_version, peek.correlation_id))
        return mechanism.complete


class _Refused(Exception):
    """Close at once, without an answer (not a Kafka request, a request out of order)."""


class _Failed(Exception):
    """Authentication failed: after the delay, send `answer` (if any) and close."""

    def __init__(self, message: str, answer: bytes | None) -> None:
        super().__init__(message)
        self.answer = answer


def _decode(frame: bytes, api_key: int, version: int) -> object:
    try:
        _, pos = decode_request_header(frame)
        return REQUESTS[api_key].decode(frame, version, pos, strict=False)
    except ProtocolError as exc:
        raise _Refused(f"malformed {api_name(api_key)} v{version}: {exc}") from None


def _api_versions_error(answer: bytes) -> int:
    """The error code of an encoded ApiVersions answer (it follows the correlation id)."""
    return int.from_bytes(answer[8:10], "big", signed=True) if len(answer) >= 10 else 0


def _illegal_state_answer(api_key: int, version: int, correlation_id: int) -> bytes | None:
    """ILLEGAL_SASL_STATE in the request's own response, where we can build one."""
    if api_key == ApiKey.SASL_HANDSHAKE:
        response: object = SaslHandshakeResponse(ErrorCode.ILLEGAL_SASL_STATE, [])
    elif api_key == ApiKey.API_VERSIONS:
        response = ApiVersionsResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)
        version = 0
    else:
        return None
    try:
        return encode_response(response, version, correlation_id)  # type: ignore[arg-type]
    except ProtocolError:
        return None
