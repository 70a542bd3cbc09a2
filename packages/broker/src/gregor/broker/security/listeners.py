"""Each listener's security, built once from the configuration (and so checked at startup).

Every `ssl.*` and `sasl.*` setting may be given for one listener alone as
`listener.name.<listener>.<setting>` (Kafka's per-listener prefix, the listener's name in
lower case), which wins over the broker-wide value. A SASL mechanism's JAAS config is only
ever per listener and mechanism: `listener.name.<listener>.<mechanism>.sasl.jaas.config`.

TLS keys and certificates are PEM (`ssl.keystore.type=PEM`): files (`ssl.keystore.location`
holding the key and its chain, `ssl.truststore.location` the trusted certificates) or the PEM
text itself (`ssl.keystore.certificate.chain` with `ssl.keystore.key`,
`ssl.truststore.certificates`).
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from gregor.broker.security.principal import PrincipalMapper
from gregor.client.security import (
    SASL_MECHANISMS,
    ClientSecurity,
    JaasEntry,
    SaslCredentials,
    parse_jaas,
)
from gregor.storage.settings import config_error

log = logging.getLogger(__name__)

PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_TLS_VERSIONS: Final = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

# A listener's value of a setting: its `listener.name.<l>.` override, else the broker's.
Lookup = Callable[[str], Any]


@attrs.frozen(eq=False)
class ListenerSecurity:
    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: PrincipalMapper = attrs.field(factory=lambda: PrincipalMapper.parse(""))
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = attrs.field(default=MappingProxyType({}), repr=False)
    jaas: Mapping[str, JaasEntry] = attrs.field(default=MappingProxyType({}), repr=False)
    failed_authentication_delay_s: float = 0.1
    sasl_max_receive_size: int = 524288
    # connections.max.reauth.ms of each mechanism (0: sessions do not expire)
    max_reauth_ms: Mapping[str, int] = attrs.field(default=MappingProxyType({}))

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


class InterBrokerSecurity:
    """How this broker connects to the others now (a gregor-client `SecuritySettings`):
    the fetchers, the controller's channels and the marker transport read it at each
    connect, so a rotated inter-broker truststore or keystore (KIP-226) serves every new
    connection; open ones keep their TLS session."""

    def __init__(self, current: ClientSecurity) -> None:
        self.current = current

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.current.ssl_context

    @property
    def sasl(self) -> SaslCredentials | None:
        return self.current.sasl


def listener_security(
    listener: str, protocol: str, lookup: Lookup, for_mechanism: Callable[[str, str], Any]
) -> ListenerSecurity:
    """The security of one listener; InvalidConfigError naming the setting that is wrong.
    `for_mechanism(mechanism, key)` is a SASL mechanism's own value of a setting."""
    tls = protocol in ("SSL", "SASL_SSL")
    mechanisms: tuple[str, ...] = ()
    jaas: dict[str, JaasEntry] = {}
    plain_users: dict[str, str] = {}
    max_reauth_ms: dict[str, int] = {}
    if protocol.startswith("SASL_"):
        mechanisms = _mechanisms(listener, lookup("sasl.enabled.mechanisms"))
        for mechanism in mechanisms:
            jaas[mechanism] = _jaas(
                listener, mechanism, for_mechanism(mechanism, "sasl.jaas.config")
            )
            max_reauth_ms[mechanism] = for_mechanism(mechanism, "connections.max.reauth.ms")
        if "PLAIN" in jaas:
            plain_users = {
                key[len("user_") :]: value
                for key, value in jaas["PLAIN"].options.items()
                if key.startswith("user_")
            }
    rules = lookup("ssl.principal.mapping.rules")
    try:
        mapper = PrincipalMapper.parse(rules)
    except ValueError as exc:
        raise config_error("ssl.principal.mapping.rules", rules, str(exc)) from None
    return ListenerSecurity(
        listener,
        protocol,
        ssl_context=_server_context(listener, lookup) if tls else None,
        principal_mapper=mapper,
        sasl_mechanisms=mechanisms,
        plain_users=MappingProxyType(plain_users),
        jaas=MappingProxyType(jaas),
        failed_authentication_delay_s=lookup("connection.failed.authentication.delay.ms") / 1000,
        sasl_max_receive_size=lookup("sasl.server.max.receive.size"),
        max_reauth_ms=MappingProxyType(max_reauth_ms),
    )


def inter_broker_security(
    security: ListenerSecurity, lookup: Lookup, mechanism: str
) -> ClientSecurity:
    """How this broker connects to the others' inter-broker listener: that listener's
    truststore and keystore, and the credentials of its JAAS config for `mechanism`
    (`sasl.mechanism.inter.broker.protocol`)."""
    context = None
    if security.ssl_context is not None:
        context = _client_context(lookup)
    sasl = None
    if security.sasl:
        entry = security.jaas.get(mechanism)
        if entry is None:
            raise config_error(
                "sasl.mechanism.inter.broker.protocol",
                mechanism,
                f"must be one of the inter-broker listener's sasl.enabled.mechanisms "
                f"{list(security.sasl_mechanisms)}",
            )
        username, password = entry.options.get("username"), entry.options.get("password")
        if username is None or password is None:
            raise config_error(
                _jaas_key(security.listener, mechanism),
                "(hidden)",
                "the inter-broker listener's login module needs username and password",
            )
        sasl = SaslCredentials(mechanism, username, password)
    return ClientSecurity(context, sasl)


def _mechanisms(listener: str, enabled: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in enabled.split(",") if m.strip())
    unsupported = [m for m in names if m not in SASL_MECHANISMS]
    supported = tuple(m for m in names if m in SASL_MECHANISMS)
    if unsupported:
        log.warning("listener %s: SASL mechanisms %s are not supported", listener, unsupported)
    if not supported:
        raise config_error(
            "sasl.enabled.mechanisms",
            enabled,
            f"listener {listener} needs at least one of {', '.join(SASL_MECHANISMS)}",
        )
    return supported


def _jaas_key(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def _jaas(listener: str, mechanism: str, text: str | None) -> JaasEntry:
    key = _jaas_key(listener, mechanism)
    if text is None:
        if mechanism != "PLAIN":  # SCRAM's users are in ZooKeeper; the module is optional
            return JaasEntry(SCRAM_LOGIN_MODULE, "required", {})
        raise config_error(key, None, f"listener {listener} enables PLAIN: its users go here")
    try:
        entry = parse_jaas(text)
    except ValueError as exc:
        raise config_error(key, "(hidden)", str(exc)) from None
    expected = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    if entry.login_module != expected:
        raise config_error(key, entry.login_module, f"{mechanism} needs {expected}")
    return entry


def _protocols(context: ssl.SSLContext, lookup: Lookup) -> None:
    text = lookup("ssl.enabled.protocols")
    names = [p.strip() for p in text.split(",") if p.strip()]
    versions = [_TLS_VERSIONS[n] for n in names if n in _TLS_VERSIONS]
    if not versions or len(versions) != len(names):
        raise config_error("ssl.enabled.protocols", text, f"must list only {list(_TLS_VERSIONS)}")
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    ciphers = lookup("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))
        except ssl.SSLError as exc:
            raise config_error("ssl.cipher.suites", ciphers, f"OpenSSL refused it: {exc}") from None


def _load_keystore(context: ssl.SSLContext, lookup: Lookup, required: bool) -> None:
    if lookup("ssl.keystore.type") != "PEM":
        raise config_error("ssl.keystore.type", lookup("ssl.keystore.type"), "only PEM")
    location = lookup("ssl.keystore.location")
    password = lookup("ssl.key.password")
    chain, key = lookup("ssl.keystore.certificate.chain"), lookup("ssl.keystore.key")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif chain and key:
            _load_pem_text(context, chain, key, password)
        elif required:
            raise config_error(
                "ssl.keystore.location",
                None,
                "an SSL listener needs it, or ssl.keystore.certificate.chain and ssl.keystore.key",
            )
    except (OSError, ssl.SSLError) as exc:
        raise config_error(
            "ssl.keystore.location" if location else "ssl.keystore.key",
            location or "(PEM text)",
            f"cannot load the key and certificate: {exc}",
        ) from None


def _load_pem_text(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """`load_cert_chain` reads files only: the PEM text goes through a private temporary
    file, removed at once."""
    fd, path = tempfile.mkstemp(prefix="gregor-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _load_truststore(context: ssl.SSLContext, lookup: Lookup) -> bool:
    if lookup("ssl.truststore.type") != "PEM":
        raise config_error("ssl.truststore.type", lookup("ssl.truststore.type"), "only PEM")
    location, certificates = (
        lookup("ssl.truststore.location"),
        lookup("ssl.truststore.certificates"),
    )
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif certificates:
            context.load_verify_locations(cadata=certificates)
        else:
            return False
    except (OSError, ssl.SSLError) as exc:
        raise config_error(
            "ssl.truststore.location" if location else "ssl.truststore.certificates",
            location or "(PEM text)",
            f"cannot load the trusted certificates: {exc}",
        ) from None
    return True


def _server_context(listener: str, lookup: Lookup) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(context, lookup)
    _load_keystore(context, lookup, required=True)
    client_auth = lookup("ssl.client.auth")
    trusted = _load_truststore(context, lookup)
    if client_auth != "none" and not trusted:
        raise config_error(
            "ssl.client.auth",
            client_auth,
            f"listener {listener} checks client certificates: it needs a truststore",
        )
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def _client_context(lookup: Lookup) -> ssl.SSLContext:
    context = ssl.create_default_context()
    _protocols(context, lookup)
    _load_truststore(context, lookup)
    _load_keystore(context, lookup, required=False)
    context.check_hostname = lookup("ssl.endpoint.identification.algorithm").lower() == "https"
    return context
