"""How a connection proves who it is: TLS contexts from PEM files, SASL credentials and the
client side of the SASL mechanisms (PLAIN, SCRAM-SHA-256/512), and Kafka's JAAS syntax.

SCRAM is scramp's (a small, well-kept implementation of RFC 5802/7677): the mechanism's
nonces, salted proofs and server signature check are not code to write again.

The broker uses the same pieces for its own connections to other brokers, and parses its
listeners' JAAS configs with `parse_jaas`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from typing import Protocol

import attrs

from gregor.protocol.errors import (
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SslAuthenticationError(KafkaError):
    """The TLS handshake failed on the peer's certificate (the Java client's
    SslAuthenticationException; it has no error code on the wire). Not retriable."""


# Failures that trying again will not fix: the client reports them instead of retrying.
AUTHENTICATION_ERRORS = (
    SslAuthenticationError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)


@attrs.frozen
class SaslCredentials:
    mechanism: str  # one of SASL_MECHANISMS
    username: str
    password: str = attrs.field(repr=False)


class SecuritySettings(Protocol):
    """What a connection reads of its security each time it connects (or re-authenticates):
    a `ClientSecurity`, or something that changes, as a broker's inter-broker security does
    when its listener's certificates are rotated."""

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...
    @property
    def sasl(self) -> SaslCredentials | None: ...


@attrs.frozen
class ClientSecurity:
    """What a connection does after TCP connects: TLS, then SASL (either, both or none)."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None


def client_ssl_context(
    ca_location: str | None = None,
    certificate_location: str | None = None,
    key_location: str | None = None,
    key_password: str | None = None,
    *,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client TLS context: trust `ca_location` (PEM; the system's CAs without it), present
    the certificate (and key, if in a file of its own) for mutual TLS."""
    context = ssl.create_default_context(cafile=ca_location)
    context.check_hostname = check_hostname
    if certificate_location is not None:
        context.load_cert_chain(certificate_location, key_location, key_password)
    return context


class SaslClient:
    """One client-side exchange: `first()`, then `respond(challenge)` until it gives None."""

    def first(self) -> bytes:
        raise NotImplementedError

    def respond(self, challenge: bytes) -> bytes | None:
        raise NotImplementedError


class PlainClient(SaslClient):
    """RFC 4616: one message, `authzid NUL authcid NUL password` (no authzid, as Kafka's)."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self.credentials = credentials

    def first(self) -> bytes:
        c = self.credentials
        return b"\0" + c.username.encode() + b"\0" + c.password.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        return None


class ScramClient(SaslClient):
    """client-first, client-final, then the server's signature is checked (a wrong one, from
    a broker that does not know the password, is SaslAuthenticationFailedError)."""

    def __init__(self, credentials: SaslCredentials) -> None:
        import scramp  # here: it pulls in asn1crypto, 40 ms of every client's import

        self._scram = scramp.ScramClient(
            [credentials.mechanism], credentials.username, credentials.password
        )
        self._step = 0

    def first(self) -> bytes:
        message: str = self._scram.get_client_first()
        return message.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        """SaslAuthenticationFailedError if the server's answer is wrong (a bad signature)."""
        import scramp

        self._step += 1
        try:
            if self._step == 1:
                self._scram.set_server_first(challenge.decode())
                final: str = self._scram.get_client_final()
                return final.encode()
            if self._step == 2:
                self._scram.set_server_final(challenge.decode())
        except scramp.ScramException as exc:
            raise SaslAuthenticationFailedError(str(exc)) from None
        return None


def sasl_client(credentials: SaslCredentials) -> SaslClient:
    factory: Callable[[SaslCredentials], SaslClient] = (
        PlainClient if credentials.mechanism == "PLAIN" else ScramClient
    )
    return factory(credentials)


# -- JAAS ------------------------------------------------------------------------------------


@attrs.frozen
class JaasEntry:
    """`<LoginModule class> <flag> key=value ...;` (Kafka's `sasl.jaas.config`)."""

    login_module: str
    flag: str
    options: dict[str, str]


_JAAS_HEAD = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b", re.I)
_JAAS_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> JaasEntry:
    """One login module entry; ValueError naming what is wrong (never the passwords)."""
    head = _JAAS_HEAD.match(text)
    if head is None:
        raise ValueError("must start with a LoginModule class and a control flag (required)")
    options: dict[str, str] = {}
    pos = head.end()
    while True:
        option = _JAAS_OPTION.match(text, pos)
        if option is None:
            break
        quoted, bare = option[2], option[3]
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        options[option[1]] = value
        pos = option.end()
    rest = text[pos:].strip()
    if rest != ";":
        raise ValueError(f"expected key=value options ending with ';' at {rest[:20]!r}")
    return JaasEntry(head[1], head[2].lower(), options)
