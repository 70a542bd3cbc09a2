"""The broker's security pieces without processes: listener configs, JAAS, principal mapping
from a real client certificate (a TLS handshake in memory), SCRAM credentials in Kafka's
format, and the SASL mechanisms against gregor-client's side of them."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import scramp
import trio
import trio.testing
import trustme

from gregor.broker.config import BrokerConfig
from gregor.broker.security.principal import PrincipalMapper, distinguished_name
from gregor.broker.security.sasl import AuthenticationFailed, PlainServer
from gregor.broker.security.scram_credentials import ScramCredential, user_entity
from gregor.client.security import (
    SaslCredentials,
    client_ssl_context,
    parse_jaas,
    sasl_client,
)
from gregor.protocol.errors import InvalidConfigError

PLAIN = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice \\"quoted\\" secret";'
)


def config(**properties: str) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181", **properties}
    )


@pytest.fixture
def pems(tmp_path: Path) -> dict[str, Any]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("alice@example.com", common_name="Alice")
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "keystore", "cert", "key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["keystore"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    return {"paths": paths, "server": server, "ca": ca}


def test_jaas_parses_kafka_syntax() -> None:
    entry = parse_jaas(PLAIN)
    assert entry.login_module.endswith("PlainLoginModule")
    assert entry.flag == "required"
    assert entry.options == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": 'alice "quoted" secret',
    }
    with pytest.raises(ValueError, match="ending with ';'"):
        parse_jaas(PLAIN.rstrip(";"))
    with pytest.raises(ValueError, match="control flag"):
        parse_jaas('username="x";')


def test_principal_mapping_rules_as_kafka_writes_them() -> None:
    dn = "CN=Alice,OU=ServiceUsers,O=Example,C=US"
    rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U, DEFAULT"
    mapper = PrincipalMapper.parse(rules)
    assert mapper.principal(dn) == "User:alice"
    assert mapper.principal("CN=Bob,OU=Ops,O=Example") == "User:BOB@OPS"
    assert mapper.principal("O=Nobody") == "User:O=Nobody"  # DEFAULT
    only = PrincipalMapper.parse("RULE:^CN=(.*)$/$1/")
    with pytest.raises(ValueError, match="rule matches"):
        only.principal("O=Nobody")
    with pytest.raises(ValueError, match="invalid rule"):
        PrincipalMapper.parse("RULE:broken")


async def test_client_certificate_gives_the_principal(pems: dict[str, Any]) -> None:
    """A real TLS handshake (in memory) against the context the broker builds for an SSL
    listener with ssl.client.auth=required: the client's DN, mapped by the rules."""
    paths = pems["paths"]
    broker = config(
        **{
            "listeners": "PLAINTEXT://:9092,SSL://:9093",
            "ssl.keystore.location": str(paths["keystore"]),
            "ssl.truststore.location": str(paths["ca"]),
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L",
        }
    )
    security = broker.listener_security["SSL"]
    assert security.ssl_context is not None
    client_context = client_ssl_context(str(paths["ca"]), str(paths["cert"]), str(paths["key"]))
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(left, security.ssl_context, server_side=True)
    client = trio.SSLStream(right, client_context, server_hostname="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        await server.do_handshake()
    dn = distinguished_name(server.getpeercert())
    assert dn.startswith("CN=Alice,OU=")
    assert security.principal_mapper.principal(dn) == "User:alice"


def test_listener_settings_are_checked_at_load(pems: dict[str, Any]) -> None:
    paths = pems["paths"]
    base = {"listeners": "PLAINTEXT://:9092,SSL://:9093"}
    with pytest.raises(InvalidConfigError, match="needs a truststore"):
        config(
            **base,
            **{"ssl.keystore.location": str(paths["keystore"]), "ssl.client.auth": "required"},
        )
    with pytest.raises(InvalidConfigError, match="cannot load the key and certificate"):
        config(**base, **{"ssl.keystore.location": str(paths["ca"])})
    with pytest.raises(InvalidConfigError, match="must list only"):
        config(
            **base,
            **{"ssl.keystore.location": str(paths["keystore"]), "ssl.enabled.protocols": "SSLv3"},
        )
    # The PEM text instead of files, as ssl.keystore.certificate.chain / ssl.keystore.key.
    server = pems["server"]
    inline = config(
        **base,
        **{
            "ssl.keystore.certificate.chain": b"".join(
                blob.bytes() for blob in server.cert_chain_pems
            ).decode(),
            "ssl.keystore.key": server.private_key_pem.bytes().decode(),
        },
    )
    assert inline.listener_security["SSL"].ssl_context is not None
    assert "PLAINTEXT" not in inline.listener_security  # the plain listener pays nothing


def test_sasl_listener_and_inter_broker_credentials() -> None:
    sasl = config(
        **{
            "listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "GSSAPI,PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": PLAIN,
        }
    )
    security = sasl.listener_security["INTERNAL"]
    assert security.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-512")  # GSSAPI: not supported
    assert dict(security.plain_users) == {"admin": "admin-secret", "alice": 'alice "quoted" secret'}
    assert sasl.inter_broker_security.sasl == SaslCredentials("PLAIN", "admin", "admin-secret")
    assert sasl.inter_broker_security.ssl_context is None
    with pytest.raises(InvalidConfigError, match="its users go here"):
        config(
            **{
                "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "PLAIN",
            }
        )


def test_scram_credential_in_kafkas_format() -> None:
    credential = ScramCredential.create("SCRAM-SHA-512", "secret", iterations=4096)
    text = credential.encode()
    assert text.startswith("salt=") and text.endswith(",iterations=4096")
    assert ScramCredential.decode(text) == credential
    with pytest.raises(ValueError, match="not a SCRAM credential"):
        ScramCredential.decode("salt=x")
    assert user_entity("CN=a b*") == "CN%3Da%20b%2A"


def scram_exchange(mechanism: str, stored: str, given: str) -> None:
    """gregor-client's SCRAM client against scramp's server with a stored credential."""
    credential = ScramCredential.create(mechanism, stored)
    info = (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
    server = scramp.ScramMechanism(mechanism).make_server(lambda _: info)
    client = sasl_client(SaslCredentials(mechanism, "alice", given))
    server.set_client_first(client.first().decode())
    final = client.respond(server.get_server_first().encode())
    assert final is not None
    server.set_client_final(final.decode())
    assert client.respond(server.get_server_final().encode()) is None


def test_scram_round_trip_and_wrong_password() -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        scram_exchange(mechanism, "secret", "secret")
        with pytest.raises(scramp.ScramException):
            scram_exchange(mechanism, "secret", "wrong")


async def test_plain_mechanism_messages_are_kafkas() -> None:
    server = PlainServer({"alice": "secret"})
    assert await server.evaluate(b"\0alice\0secret") == b""
    assert server.complete and server.user == "alice"
    cases = {
        b"\0alice\0wrong": "Authentication failed: Invalid username or password",
        b"\0nobody\0secret": "Authentication failed: Invalid username or password",
        b"\0\0secret": "Authentication failed: username not specified",
        b"\0alice\0": "Authentication failed: password not specified",
        b"bob\0alice\0secret": "authorization id that is different from username",
        b"alice": "expected 3 tokens",
    }
    for token, message in cases.items():
        with pytest.raises(AuthenticationFailed, match=message):
            await PlainServer({"alice": "secret"}).evaluate(token)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_credential_from_a_salted_password(mechanism: str) -> None:
    """What AlterUserScramCredentials stores from the client's salted password is what
    scramp derives from the password itself."""
    salt, iterations = b"0123456789abcdef", 4096
    digest = mechanism.removeprefix("SCRAM-").replace("-", "").lower()
    salted = hashlib.pbkdf2_hmac(digest, b"secret", salt, iterations)
    expected = scramp.ScramMechanism(mechanism).make_auth_info("secret", iterations, salt)
    found = ScramCredential.from_salted_password(mechanism, salt, salted, iterations)
    assert (found.salt, found.stored_key, found.server_key, found.iterations) == expected
