"""What TLS and SASL tests need, made in the test: a CA and certificates (trustme), the
server properties of brokers with every kind of listener, PLAIN users in the listeners'
JAAS configs, SCRAM credentials written to ZooKeeper in Kafka's format.

Listeners (`LISTENERS`, besides the launcher's PLAINTEXT): SSL with client certificates
required (mTLS; the principal comes from the certificate's DN), SASL_PLAINTEXT and SASL_SSL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). Brokers replicate over SASL_SSL as the user `broker`
(PLAIN), so every follower fetch, LeaderAndIsr and UpdateMetadata goes through TLS and SASL.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
import trustme
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaError as CkError
from confluent_kafka import Producer as CkProducer

from gregor.broker.security.scram_credentials import SCRAM_MECHANISMS, ScramCredential
from gregor.broker.zk import znodes
from gregor.devcluster import LocalCluster, ZooKeeper
from gregor.protocol.apis.api_versions import ApiVersionsRequest
from gregor.protocol.apis.describe_acls import DescribeAclsRequest
from gregor_testing.cluster import (
    WireClient,
    log_mark,
    start_cluster,
    stop_cluster,
    wait_for,
    wait_for_log,
)
from gregor_testing.processes import zookeeper_client

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
BROKER_USER = ("broker", "broker-secret")
LISTENERS = {"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}
MODE = "SASL_PLAINTEXT"  # how the ACL tests' clients connect (PLAIN)


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


@contextmanager
def running_secure_cluster(
    request: pytest.FixtureRequest,
    directory: Path,
    zookeeper: ZooKeeper,
    pki: Pki,
    brokers: int,
    extra: Mapping[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """`brokers` brokers with every kind of listener (`security_properties` and `extra`)
    and the SCRAM users of `USERS`; stopped after, with their logs shown if a test failed."""
    properties = {**security_properties(pki), **(extra or {})}
    cluster = start_cluster(directory, zookeeper, brokers, properties, LISTENERS)
    try:
        add_scram_users(cluster.zookeeper_connect, USERS)
        yield cluster
    finally:
        stop_cluster(cluster, request.session.testsfailed > 0)


def mtls_context(pki: Pki) -> ssl.SSLContext:
    """A client's TLS context that trusts the brokers' CA and presents alice's certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.client_certificate), str(pki.client_key))
    return context


@contextmanager
def wrong_ca_refused(cluster: LocalCluster, pki: Pki) -> Iterator[str]:
    """Broker 0's SSL address, for a client that trusts only `pki.other_ca`. Afterwards the
    broker has logged the handshake the client broke off (with its alert, unknown CA, or as
    an EOF where the client hung up without one) and still serves a client that trusts the
    right CA."""
    broker = cluster.broker(0)
    mark = log_mark(broker)
    yield f"{broker.host}:{broker.ports['SSL']}"
    logged = wait_for_log(broker, "TLS handshake with SSL-", mark)
    assert "TLSV1_ALERT_UNKNOWN_CA" in logged or "the client closed the connection" in logged, (
        logged
    )
    with WireClient(broker, listener="SSL", ssl_context=mtls_context(pki)) as conn:
        assert conn.request(ApiVersionsRequest(), 2).error_code == 0


def pki_fixture(scope: Literal["module", "package"] = "package") -> Any:
    """The `pki` fixture: one CA and its certificates for the scope. Assign it to `pki` in a
    conftest."""

    @pytest.fixture(scope=scope, name="pki")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Pki:
        return make_pki(tmp_path_factory.mktemp("pki"))

    return fixture


# Kafka's AclAuthorizer with no access without an ACL; the brokers' own principal
# (User:broker, replicating over SASL_SSL) and the PLAINTEXT listener's (User:ANONYMOUS, the
# harness's) are super users.
ACL_PROPERTIES = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:broker;User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
}


def acl_cluster_fixture(name: str, scope: Literal["module", "package"]) -> Any:
    """A fixture called `name`: two brokers with every listener (`security_properties`) and
    `ACL_PROPERTIES`, for the scope. It needs the `pki` fixture (`pki_fixture`)."""

    @pytest.fixture(scope=scope, name=name)
    def fixture(
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
        zookeeper: ZooKeeper,
        pki: Pki,
    ) -> Iterator[LocalCluster]:
        directory = tmp_path_factory.mktemp(name)
        with running_secure_cluster(request, directory, zookeeper, pki, 2, ACL_PROPERTIES) as c:
            yield c

    return fixture


# -- clients of an ACL cluster ----------------------------------------------------------


def sasl(user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": MODE,
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def ck_conf(cluster: LocalCluster, user: str = "alice") -> dict[str, Any]:
    password = BROKER_USER[1] if user == BROKER_USER[0] else USERS[user]
    return {"bootstrap.servers": cluster.bootstrap_servers_of(MODE), **sasl(user, password)}


def describe_acls(
    resource_type: int = 1, name: str | None = None, pattern_type: int = 1
) -> DescribeAclsRequest:
    """DescribeAcls of every principal, host, operation and permission (1: ANY)."""
    return DescribeAclsRequest(
        resource_type_filter=resource_type,
        resource_name_filter=name,
        pattern_type_filter=pattern_type,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )


def settled(cluster: LocalCluster) -> None:
    """Wait until every broker has the same ACLs: the one that made a change has it at once,
    the others once their watch of /kafka-acl-changes fired (Kafka's tests wait alike)."""

    def everywhere() -> bool:
        seen = []
        for broker in cluster.brokers:
            with WireClient(broker) as wire:
                found = wire.request(describe_acls(), 3)
            seen.append(
                sorted(
                    (r.resource_type, r.resource_name, a.principal, a.operation, a.permission_type)
                    for r in found.resources
                    for a in r.acls
                )
            )
        return all(acls == seen[0] for acls in seen)

    wait_for(everywhere, 10, "every broker to have the same ACLs")


def ck_produce(
    cluster: LocalCluster, topic: str, count: int = 5, user: str = "alice", **extra: Any
) -> list[int]:
    """Error codes of each delivery of `user`'s records (0 for success)."""
    producer = CkProducer(
        {**ck_conf(cluster, user), "message.timeout.ms": 15_000, "linger.ms": 0, **extra}
    )
    codes: list[int] = []
    try:
        for i in range(count):
            producer.produce(
                topic,
                b"v%d" % i,
                on_delivery=lambda err, msg: codes.append(err.code() if err else 0),
            )
        assert producer.flush(30) == 0
    finally:
        producer.close()
    return codes


def ck_consume(
    cluster: LocalCluster, topic: str, group: str, wanted: int, user: str = "alice"
) -> list[bytes] | int:
    """The values `user` reads from the start, or the first error code the consumer reports."""
    consumer = CkConsumer(
        {
            **ck_conf(cluster, user),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == CkError._PARTITION_EOF:
                    continue
                return int(msg.error().code())
            values.append(msg.value())
            if len(values) == wanted:
                return values
    finally:
        consumer.close()
    return values
