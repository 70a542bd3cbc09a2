"""Dynamic listener settings (KIP-226) set with confluent-kafka's AdminClient, as
`kafka-configs --alter --entity-type brokers --entity-name 0` does: a broker's SSL keystore
rotated live serves new connections at once while open ones go on, and a listener's PLAIN
users changed live let a new user in. A keystore that does not load, or a listener setting
for the cluster-wide default, is refused with INVALID_CONFIG and nothing changes.

A CA rotation on the inter-broker listener keeps replication going: new inter-broker
connections use the reloaded truststore and keystore.

Passwords (JAAS configs, keys) are stored in ZooKeeper encrypted with
password.encoder.secret, refused without one, and never described: DescribeConfigs lists
the listener keys with their source and synonyms, a password as sensitive with no value."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaError as CkError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient as CkAdmin
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient

from gregor.broker.zk import znodes
from gregor.devcluster import LocalCluster, ZooKeeper
from gregor.protocol.apis.api_versions import ApiVersionsRequest
from gregor.protocol.apis.incremental_alter_configs import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from gregor.protocol.apis.sasl_authenticate import SaslAuthenticateRequest
from gregor.protocol.apis.sasl_handshake import SaslHandshakeRequest
from gregor_testing.cluster import (
    WireClient,
    create_topic,
    entity_config,
    log_mark,
    unique_topic,
    wait_for,
    wait_for_log,
)
from gregor_testing.security import USERS, Pki, jaas_plain, mtls_context, running_secure_cluster

KEYSTORE = "listener.name.ssl.ssl.keystore.location"
PLAIN_JAAS = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
SCRAM_JAAS = "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
ENCODER_SECRET = "the encoder secret"


@pytest.fixture(scope="module")
def dynamic_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeper,
    pki: Pki,
) -> Iterator[LocalCluster]:
    directory = tmp_path_factory.mktemp("dynamic")
    extra = {"password.encoder.secret": ENCODER_SECRET}
    with running_secure_cluster(request, directory, zookeeper, pki, 2, extra) as cluster:
        yield cluster


def set_broker_configs(cluster: LocalCluster, entity: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on a broker, through the harness's PLAINTEXT listener."""
    admin = CkAdmin({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(
        ResourceType.BROKER,
        entity,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def refusal(cluster: LocalCluster, entity: str, configs: dict[str, str]) -> CkError:
    try:
        set_broker_configs(cluster, entity, configs)
    except KafkaException as exc:
        error: CkError = exc.args[0]
        return error
    raise AssertionError("the change was accepted")


def handshake_with(cluster: LocalCluster, context: ssl.SSLContext) -> bool:
    """Whether a TLS client trusting `context`'s CAs accepts the broker's certificate now."""
    broker = cluster.broker(0)
    with socket.create_connection((broker.host, broker.ports["SSL"]), timeout=10) as sock:
        try:
            with context.wrap_socket(sock, server_hostname=broker.host):
                return True
        except ssl.SSLCertVerificationError:
            return False


def new_keystore(directory: Path) -> tuple[Path, Path]:
    """A new CA, and a keystore for 127.0.0.1 that it signed: (the CA, the keystore)."""
    ca = trustme.CA()
    ca_path, keystore = directory / "new-ca.pem", directory / "new-broker.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    return ca_path, keystore


def test_a_rotated_keystore_serves_new_connections(
    dynamic_cluster: LocalCluster, pki: Pki, tmp_path: Path
) -> None:
    new_ca, keystore = new_keystore(tmp_path)
    broker = dynamic_cluster.broker(0)
    trusts_old = mtls_context(pki)
    trusts_new = ssl.create_default_context(cafile=str(new_ca))
    trusts_new.load_cert_chain(str(pki.client_certificate), str(pki.client_key))
    assert handshake_with(dynamic_cluster, trusts_old)
    assert not handshake_with(dynamic_cluster, trusts_new)

    # Refused, and nothing changes: a keystore that does not load; the cluster default.
    missing = refusal(dynamic_cluster, "0", {KEYSTORE: str(tmp_path / "missing.pem")})
    assert missing.code() == CkError.INVALID_CONFIG, missing
    assert "cannot load the key and certificate" in missing.str(), missing
    # (confluent-kafka cannot name the default broker entity: on the wire.)
    with WireClient(broker) as wire:
        default = wire.request(
            IncrementalAlterConfigsRequest(
                resources=[AlterConfigsResource(4, "", [AlterableConfig(KEYSTORE, 0, "x")])]
            ),
            1,
        ).responses[0]
    assert default.error_code == CkError.INVALID_CONFIG, default
    assert "broker id must be specified" in default.error_message, default
    assert handshake_with(dynamic_cluster, trusts_old)

    with WireClient(broker, listener="SSL", ssl_context=trusts_old) as opened_before:
        set_broker_configs(dynamic_cluster, "0", {KEYSTORE: str(keystore)})
        wait_for(
            lambda: handshake_with(dynamic_cluster, trusts_new), 30, "the new certificate served"
        )
        assert not handshake_with(dynamic_cluster, trusts_old)
        # The connection made with the old certificate is not dropped.
        assert opened_before.request(ApiVersionsRequest(), 2).error_code == 0

    # A real client that trusts only the new CA produces and consumes.
    topic = unique_topic("rotated")
    create_topic(dynamic_cluster, topic)
    conf = {
        "bootstrap.servers": dynamic_cluster.bootstrap_servers_of("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(new_ca),
        "ssl.certificate.location": str(pki.client_certificate),
        "ssl.key.location": str(pki.client_key),
    }
    producer = CkProducer(conf)
    try:
        for i in range(10):
            producer.produce(topic, b"v%d" % i)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    consumer = CkConsumer({**conf, "group.id": unique_topic("g")})
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while len(values) < 10:
            message = consumer.poll(10)
            assert message is not None and message.error() is None, message
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(10)]


def plain_login(cluster: LocalCluster, user: str, password: str) -> int:
    """The error code of a PLAIN authentication on a new SASL_PLAINTEXT connection."""
    with WireClient(cluster.broker(0), listener="SASL_PLAINTEXT", timeout=10) as conn:
        assert conn.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return int(conn.request(SaslAuthenticateRequest(token), 2).error_code)


def test_plain_users_changed_live(dynamic_cluster: LocalCluster) -> None:
    """(The users are stored encrypted: carol gets in once the broker decrypted them.)"""
    assert plain_login(dynamic_cluster, "carol", "carol-secret") != 0
    set_broker_configs(
        dynamic_cluster, "0", {PLAIN_JAAS: jaas_plain({**USERS, "carol": "carol-secret"})}
    )
    wait_for(
        lambda: plain_login(dynamic_cluster, "carol", "carol-secret") == 0,
        30,
        "carol to be let in",
    )
    assert plain_login(dynamic_cluster, "alice", USERS["alice"]) == 0
    assert plain_login(dynamic_cluster, "carol", "wrong") != 0


def test_passwords_are_refused_without_an_encoder_secret(secure_cluster: LocalCluster) -> None:
    refused = refusal(secure_cluster, "0", {SCRAM_JAAS: SCRAM_MODULE})
    assert refused.code() == CkError.INVALID_CONFIG, refused
    assert "Password encoder secret not configured" in refused.str(), refused


def test_passwords_are_stored_encrypted_and_never_described(
    dynamic_cluster: LocalCluster, pki: Pki
) -> None:
    truststore = "listener.name.ssl.ssl.truststore.location"  # the static CA again
    set_broker_configs(dynamic_cluster, "0", {SCRAM_JAAS: SCRAM_MODULE, truststore: str(pki.ca)})
    stored = entity_config(dynamic_cluster, znodes.CONFIG_BROKERS, "0")
    assert stored[truststore] == str(pki.ca)
    assert "ScramLoginModule" not in stored[SCRAM_JAAS]
    assert "encryptedPassword:" in stored[SCRAM_JAAS]
    # An incremental change decodes what is stored, and stores it encrypted again.
    set_broker_configs(dynamic_cluster, "0", {truststore: str(pki.ca)})
    stored = entity_config(dynamic_cluster, znodes.CONFIG_BROKERS, "0")
    assert "encryptedPassword:" in stored[SCRAM_JAAS]

    admin = CkAdmin({"bootstrap.servers": dynamic_cluster.bootstrap_servers})
    resource = ConfigResource(ResourceType.BROKER, "0")
    described = admin.describe_configs([resource])[resource].result(30)  # with synonyms
    jaas = described[SCRAM_JAAS]
    assert (jaas.value, jaas.is_sensitive, jaas.is_read_only) == (None, True, False)
    assert jaas.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert [(s.name, s.value, s.source) for s in jaas.synonyms.values()] == [
        (SCRAM_JAAS, None, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    ]
    static_jaas = described["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert (static_jaas.value, static_jaas.is_sensitive) == (None, True)
    assert static_jaas.source == ConfigSource.STATIC_BROKER_CONFIG.value
    trust = described[truststore]
    assert (trust.value, trust.is_sensitive, trust.is_read_only) == (str(pki.ca), False, False)
    assert trust.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert [(s.name, s.value, s.source) for s in trust.synonyms.values()] == [
        (truststore, str(pki.ca), ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("ssl.truststore.location", str(pki.ca), ConfigSource.STATIC_BROKER_CONFIG.value),
    ]
    client_auth = described["listener.name.ssl.ssl.client.auth"]
    assert (client_auth.value, client_auth.is_read_only) == ("required", True)
    assert client_auth.source == ConfigSource.STATIC_BROKER_CONFIG.value
    secret = described["password.encoder.secret"]
    assert (secret.value, secret.is_sensitive) == (None, True)
    assert secret.source == ConfigSource.STATIC_BROKER_CONFIG.value

    # kafka-python reads the same.
    kp_admin = KafkaAdminClient(bootstrap_servers=dynamic_cluster.bootstrap_servers)
    try:
        found = kp_admin.describe_configs(
            [KpConfigResource(KpConfigResourceType.BROKER, "0")],
            include_synonyms=True,
            config_filter="all",
        )["broker"]["0"]
    finally:
        kp_admin.close()
    print(found[SCRAM_JAAS], found[truststore])
    assert found[SCRAM_JAAS]["value"] is None
    assert found[SCRAM_JAAS]["is_sensitive"] is True
    assert found[truststore]["value"] == str(pki.ca)
    assert ENCODER_SECRET not in repr(found) and "ScramLoginModule" not in repr(found)


def test_replication_goes_on_after_an_inter_broker_ca_rotation(
    dynamic_cluster: LocalCluster, pki: Pki, tmp_path: Path
) -> None:
    """As operators rotate a CA with KIP-226, broker by broker: trust both CAs, serve
    certificates of the new one, trust only the new one. Then broker 1 restarts, so every
    inter-broker connection to or from it is new: broker 0 (never restarted) makes them with
    its reloaded truststore, broker 1 with the dynamic settings it read at start."""
    new_ca = trustme.CA()
    new_ca_path, both_cas = tmp_path / "new-ca.pem", tmp_path / "both-cas.pem"
    new_ca.cert_pem.write_to_path(str(new_ca_path))
    both_cas.write_bytes(pki.ca.read_bytes() + new_ca.cert_pem.bytes())
    keystore = tmp_path / "new-broker.pem"
    new_ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(keystore)
    )
    truststore = "listener.name.sasl_ssl.ssl.truststore.location"
    for step in (
        {truststore: str(both_cas)},
        {"listener.name.sasl_ssl.ssl.keystore.location": str(keystore)},
        {truststore: str(new_ca_path)},
    ):
        for broker in dynamic_cluster.brokers:
            mark = log_mark(broker)
            set_broker_configs(dynamic_cluster, str(broker.broker_id), step)
            wait_for_log(broker, "listener security reloaded", mark)

    restarted = dynamic_cluster.broker(1)
    restarted.terminate()
    restarted.wait(60)
    restarted.start()
    values = [b"v%d" % i for i in range(20)]
    for leader, follower in ((1, 0), (0, 1)):
        topic = unique_topic(f"rotated-{leader}")
        create_topic(
            dynamic_cluster,
            topic,
            1,
            2,
            assignment={0: [leader, follower]},
            configs={"min.insync.replicas": "2"},
        )
        # acks=all with min.insync.replicas=2: only once the follower replicates.
        producer = CkProducer(
            {
                "bootstrap.servers": dynamic_cluster.bootstrap_servers,
                "acks": "all",
                "message.timeout.ms": 60_000,
            }
        )
        errors: list[object] = []
        try:
            for value in values:
                producer.produce(
                    topic, value, on_delivery=lambda err, _msg, out=errors: out.append(err)
                )
            assert producer.flush(90) == 0
        finally:
            producer.close()
        assert errors == [None] * len(values), errors
        consumer = CkConsumer(
            {"bootstrap.servers": dynamic_cluster.bootstrap_servers, "group.id": unique_topic("g")}
        )
        try:
            consumer.assign([CkTopicPartition(topic, 0, 0)])
            read: list[bytes] = []
            while len(read) < len(values):
                message = consumer.poll(10)
                assert message is not None and message.error() is None, message
                read.append(message.value())
        finally:
            consumer.close()
        assert read == values
