"""What TLS and SASL tests need, made in the test: a CA and certificates (trustme), the
server properties of brokers with every kind of listener, PLAIN users in the listeners'
JAAS configs, SCRAM credentials written to ZooKeeper in Kafka's format.

Listeners (`LISTENERS`, besides the launcher's PLAINTEXT): SSL with client certificates
required (mTLS; the principal comes from the certificate's DN), SASL_PLAINTEXT and SASL_SSL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). Brokers replicate over SASL_SSL as the user `broker`
(PLAIN), so every follower fetch, LeaderAndIsr and UpdateMetadata goes through TLS and SASL.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import trustme

from gregor.broker.security.scram_credentials import SCRAM_MECHANISMS, ScramCredential
from gregor.broker.zk import znodes
from gregor_testing.processes import zookeeper_client

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
BROKER_USER = ("broker", "broker-secret")
LISTENERS = {"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}


@attrs.frozen
class Pki:
    """PEM files: the CA, the brokers' key and chain, a client's certificate and key, and a
    CA nobody uses (for the wrong-CA tests)."""

    ca: Path
    keystore: Path
    client_certificate: Path
    client_key: Path
    other_ca: Path


def make_pki(directory: Path) -> Pki:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("alice@example.com", common_name="alice")
    pki = Pki(
        ca=directory / "ca.pem",
        keystore=directory / "broker.pem",
        client_certificate=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )
    ca.cert_pem.write_to_path(str(pki.ca))
    server.private_key_and_cert_chain_pem.write_to_path(str(pki.keystore))
    client.cert_chain_pems[0].write_to_path(str(pki.client_certificate))
    client.private_key_pem.write_to_path(str(pki.client_key))
    trustme.CA().cert_pem.write_to_path(str(pki.other_ca))
    return pki


def jaas_plain(users: dict[str, str], login: tuple[str, str] | None = None) -> str:
    options = [f'user_{name}="{password}"' for name, password in users.items()]
    if login is not None:
        options[:0] = [f'username="{login[0]}"', f'password="{login[1]}"']
    return "org.apache.kafka.common.security.plain.PlainLoginModule required " + (
        " ".join(options) + ";"
    )


def security_properties(pki: Pki) -> dict[str, str]:
    plain_users = {**USERS, BROKER_USER[0]: BROKER_USER[1]}
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_plain(plain_users),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas_plain(plain_users, BROKER_USER),
        "connection.failed.authentication.delay.ms": "100",
    }


def add_scram_users(zookeeper_connect: str, users: dict[str, str]) -> None:
    """As `kafka-configs.sh --alter --add-config SCRAM-SHA-512=[password=...]` does."""
    with zookeeper_client(zookeeper_connect) as client:
        for user, password in users.items():
            config = {m: ScramCredential.create(m, password).encode() for m in SCRAM_MECHANISMS}
            path = znodes.config_entity_path(znodes.CONFIG_USERS, user)
            client.create(path, znodes.encode_entity_config(config), makepath=True)
