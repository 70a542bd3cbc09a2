"""Real clients over TLS and SASL: confluent-kafka (librdkafka) and gregor-client produce and
consume over SSL with client certificates, SASL_PLAINTEXT with PLAIN and SASL_SSL with
SCRAM-SHA-512, on a three-broker cluster that replicates over SASL_SSL. A wrong password and
a CA that did not sign the brokers are each refused with the client's usual error (and the
broker logs the broken handshake and serves on). Metadata
answers each client with the brokers' endpoints on the listener it connected to."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaError as CkError
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTopicPartition

from gregor.client import Consumer, Producer, TopicPartition
from gregor.client.security import SslAuthenticationError
from gregor.devcluster import LocalCluster
from gregor.protocol.errors import SaslAuthenticationFailedError
from gregor_testing.cluster import create_topic, partitions_of, unique_topic
from gregor_testing.security import USERS, Pki, wrong_ca_refused

COUNT = 200


def security(pki: Pki, mode: str, password: str = USERS["alice"]) -> dict[str, Any]:
    """librdkafka's names, which gregor-client reads too."""
    if mode == "SSL":
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_certificate),
            "ssl.key.location": str(pki.client_key),
        }
    mechanism = "PLAIN" if mode == "SASL_PLAINTEXT" else "SCRAM-SHA-512"
    conf = {
        "security.protocol": mode,
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }
    if mode == "SASL_SSL":
        conf["ssl.ca.location"] = str(pki.ca)
    return conf


def records(count: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, b"value %d " % i + bytes(range(256))) for i in range(count)]


def replicated_topic(cluster: LocalCluster) -> str:
    topic = unique_topic("sec")
    create_topic(cluster, topic, partitions=2, replication_factor=3)
    return topic


def wait_in_sync(cluster: LocalCluster, topic: str) -> None:
    """Every replica in sync: the followers fetched everything over SASL_SSL."""
    deadline = time.monotonic() + 30
    while True:
        seen = partitions_of(cluster, topic)
        if all(sorted(p.isr_nodes) == [0, 1, 2] for p in seen.values()):
            return
        assert time.monotonic() < deadline, f"ISR not full: {seen}"
        time.sleep(0.1)


# -- confluent-kafka -------------------------------------------------------------------------

MODES = ["SSL", "SASL_PLAINTEXT", "SASL_SSL"]


@pytest.mark.parametrize("mode", MODES)
def test_confluent_kafka_produces_and_consumes(
    secure_cluster: LocalCluster, pki: Pki, mode: str
) -> None:
    topic = replicated_topic(secure_cluster)
    conf = {"bootstrap.servers": secure_cluster.bootstrap_servers_of(mode), **security(pki, mode)}
    sent = records(COUNT)
    producer = CkProducer({**conf, "acks": "all"})
    reports: list[Any] = []
    try:
        for key, value in sent:
            producer.produce(topic, value, key, on_delivery=lambda err, msg: reports.append(msg))
            producer.poll(0)
        assert producer.flush(60) == 0
        # Metadata named the brokers on this listener's ports, not the PLAINTEXT ones.
        brokers = producer.list_topics(topic, timeout=10).brokers
    finally:
        producer.close()
    assert [r.error() for r in reports if r.error()] == []
    assert sorted(f"{b.host}:{b.port}" for b in brokers.values()) == sorted(
        secure_cluster.bootstrap_servers_of(mode).split(",")
    )

    consumer = CkConsumer({**conf, "group.id": unique_topic("g"), "enable.partition.eof": True})
    try:
        consumer.assign([CkTopicPartition(topic, p, 0) for p in range(2)])
        got: list[tuple[bytes, bytes]] = []
        eof: set[int] = set()
        while len(got) < COUNT or len(eof) < 2:
            message = consumer.poll(10)
            assert message is not None, f"nothing after {len(got)} records"
            if message.error() is not None:
                assert message.error().code() == CkError._PARTITION_EOF, message.error()
                eof.add(message.partition())
                continue
            got.append((message.key(), message.value()))
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    wait_in_sync(secure_cluster, topic)


def first_error(conf: dict[str, Any], timeout: float = 30) -> CkError:
    """The first error librdkafka reports to error_cb while connecting."""
    errors: list[CkError] = []
    producer = CkProducer({**conf, "error_cb": errors.append})
    try:
        deadline = time.monotonic() + timeout
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
    finally:
        producer.close()  # else it goes on reconnecting and logging for the whole session
    assert errors, "no error reported"
    return errors[0]


def test_confluent_kafka_wrong_password_is_refused(secure_cluster: LocalCluster, pki: Pki) -> None:
    for mode in ("SASL_PLAINTEXT", "SASL_SSL"):
        error = first_error(
            {
                "bootstrap.servers": secure_cluster.bootstrap_servers_of(mode),
                **security(pki, mode, password="wrong"),
            }
        )
        assert error.code() == CkError._AUTHENTICATION, error
        expected = (
            "Invalid username or password"
            if mode == "SASL_PLAINTEXT"
            else "invalid credentials with SASL mechanism SCRAM-SHA-512"
        )
        assert expected in error.str(), error


def test_confluent_kafka_wrong_ca_is_refused(secure_cluster: LocalCluster, pki: Pki) -> None:
    with wrong_ca_refused(secure_cluster, pki) as address:
        conf = {
            "bootstrap.servers": address,
            **security(pki, "SSL"),
            "ssl.ca.location": str(pki.other_ca),
        }
        error = first_error(conf)
    # librdkafka reports it as an SSL or a transport error, by the state it was in.
    assert error.code() in (CkError._SSL, CkError._TRANSPORT), error
    assert "certificate verify failed" in error.str(), error


def test_confluent_kafka_without_a_client_certificate_is_refused(
    secure_cluster: LocalCluster, pki: Pki
) -> None:
    """ssl.client.auth=required on the SSL listener."""
    conf = {
        "bootstrap.servers": secure_cluster.bootstrap_servers_of("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    error = first_error(conf)
    # The refusal comes as a TLS alert after librdkafka's side of the handshake: reported as
    # an SSL or transport error, or only as every broker being down.
    assert error.code() in (CkError._SSL, CkError._TRANSPORT, CkError._ALL_BROKERS_DOWN), error


# -- gregor-client ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_gregor_client_produces_and_consumes(
    secure_cluster: LocalCluster, pki: Pki, mode: str
) -> None:
    topic = replicated_topic(secure_cluster)
    conf = {"bootstrap.servers": secure_cluster.bootstrap_servers_of(mode), **security(pki, mode)}
    sent = records(COUNT)
    with Producer({**conf, "acks": "all"}) as producer:
        futures = [producer.produce(topic, value, key=key) for key, value in sent]
        assert producer.flush(60) == 0
        placed = [f.result() for f in futures]
    assert len({(m.partition, m.offset) for m in placed}) == COUNT
    with Consumer({**conf, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while len(got) < COUNT and time.monotonic() < deadline:
            got += [(r.key, r.value) for r in consumer.consume(COUNT, timeout=1)]
    assert sorted(got) == sorted(sent)  # type: ignore[arg-type]


def test_gregor_client_java_names(secure_cluster: LocalCluster, pki: Pki) -> None:
    """The Java client's names: ssl.truststore.location, sasl.jaas.config."""
    topic = replicated_topic(secure_cluster)
    conf = {
        "bootstrap.servers": secure_cluster.bootstrap_servers_of("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.truststore.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="bob" password="{USERS["bob"]}";',
    }
    with Producer(conf) as producer:
        meta = producer.produce(topic, b"v", key=b"k").result(60)
    assert meta.offset == 0


def test_gregor_client_wrong_password_is_refused(secure_cluster: LocalCluster, pki: Pki) -> None:
    for mode in ("SASL_PLAINTEXT", "SASL_SSL"):
        conf = {
            "bootstrap.servers": secure_cluster.bootstrap_servers_of(mode),
            **security(pki, mode, password="wrong"),
            "max.block.ms": 10_000,
        }
        with (
            Producer(conf) as producer,
            pytest.raises(SaslAuthenticationFailedError, match="Authentication failed"),
        ):
            producer.produce(unique_topic(), b"v").result(30)


def test_gregor_client_wrong_ca_is_refused(secure_cluster: LocalCluster, pki: Pki) -> None:
    with wrong_ca_refused(secure_cluster, pki) as address:
        conf = {
            "bootstrap.servers": address,
            **security(pki, "SSL"),
            "ssl.ca.location": str(pki.other_ca),
            "max.block.ms": 10_000,
        }
        with (
            Producer(conf) as producer,
            pytest.raises(SslAuthenticationError, match="certificate verify failed"),
        ):
            producer.produce(unique_topic(), b"v").result(30)
